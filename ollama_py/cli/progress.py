"""Progress on stderr: Ollama's pull/push/create display (rich on a terminal) and the bare waiting spinner.

`ProgressView.handle(resp)` does what the `fn(resp)` callbacks in Ollama's cmd.go do with each streamed
ProgressResponse: a line with a digest becomes (or moves) a bar for that layer, and a new status text becomes a
new line with a spinner after it, the previous status line keeping its text. On a terminal each line is drawn
like Ollama's progress.Bar — `pulling 8eeb52dfb3bb:  45% ▕████      ▏ 2.1 GB/4.7 GB   25 MB/s   1m43s` — and
updated live by rich. Anywhere else (a pipe, a log file) each line is printed once, when it is final.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any, cast

from rich.console import Console
from rich.progress import Progress, ProgressColumn, Task, TaskID
from rich.spinner import Spinner as RichSpinner
from rich.status import Status
from rich.table import Column
from rich.text import Text

from ollama_py.cli.render import go_duration, human_bytes

_KIND = "kind"
_STATUS, _BAR = "status", "bar"


def stderr_console() -> Console:
    return Console(file=sys.stderr, highlight=False)


def is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def bar_line(description: str, completed: int, total: int, *, rate: float | None = None, width: int = 80,
             done: bool = False) -> str:
    """One layer's line as Ollama's progress.Bar draws it, `width` columns wide (0: plain text, no bar)."""
    percent = min(100, int(completed * 100 / total)) if total else 0
    pre = f"{description}: {percent:3d}%"
    if done:
        suffix = f"{human_bytes(total):>6}" + " " * 7
    else:
        suffix = f"{human_bytes(completed):>6}/{human_bytes(total):<6}"
    if width <= 0:  # not a terminal: no bar, no rate
        return f"{pre} {suffix.strip()}"
    if rate and not done:
        remaining = int((total - completed) / rate) if rate > 0 else 0
        suffix += f"  {human_bytes(int(rate)):>6}/s  {go_duration(remaining * 10**9):>6}"
    fill = max(width - len(pre) - len(suffix) - 5, 10)
    n = int(fill * percent / 100)
    return f"{pre} ▕{'█' * n}{' ' * (fill - n)}▏ {suffix}".rstrip()


class _Line(ProgressColumn):
    """The whole line of a task in one column, so lines do not align with each other (as in Ollama)."""

    def __init__(self, console: Console) -> None:
        super().__init__(table_column=Column(no_wrap=True, overflow="ellipsis"))
        self._console = console
        self._spinner = RichSpinner("dots")

    def render(self, task: Task) -> Text:
        if task.fields.get(_KIND) == _BAR:
            return Text(bar_line(task.description, int(task.completed), int(task.total or 0), rate=task.speed,
                                 width=self._console.width - 1, done=task.finished))
        if task.finished:
            return Text(task.description)
        return Text.assemble(task.description, " ", cast(Text, self._spinner.render(task.get_time())))


@dataclass
class _PlainBar:
    description: str
    total: int
    completed: int = 0
    printed: bool = False


class ProgressView:
    """Ollama's progress display for pull, push and create. Use as a context manager."""

    def __init__(self, console: Console | None = None, status: str | None = None, verb: str = "pulling") -> None:
        self.console = console or stderr_console()
        self.verb = verb
        self.live = self.console.is_terminal
        self._progress = Progress(_Line(self.console), console=self.console, transient=False, expand=False)
        self._tasks: dict[str, TaskID] = {}
        self._plain: dict[str, _PlainBar] = {}
        self._status = ""
        self._status_task: TaskID | None = None
        self._quantize = ""
        self._quantize_task: TaskID | None = None
        if status:
            self.status(status)

    def __enter__(self) -> ProgressView:
        if self.live:
            self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _print(self, line: str) -> None:
        out: IO[str] = self.console.file
        out.write(line + "\n")
        out.flush()

    def stop(self) -> None:
        self._stop_spinner()
        if self.live:
            if self._quantize_task is not None:
                self._progress.update(self._quantize_task, total=1, completed=1)
            self._progress.stop()
            return
        if self._quantize:
            self._print(self._quantize)
            self._quantize = ""
        for bar in self._plain.values():
            if not bar.printed:
                bar.printed = True
                self._print(bar_line(bar.description, bar.completed, bar.total, width=0))

    def _stop_spinner(self) -> None:
        if self._status_task is not None:
            self._progress.update(self._status_task, total=1, completed=1)
            self._status_task = None

    def status(self, text: str) -> None:
        """A new status line with a spinner; the previous one stays, without its spinner."""
        self._stop_spinner()
        self._status = text
        if self.live:
            self._status_task = self._progress.add_task(text, total=None, kind=_STATUS)
        else:
            self._print(text)

    def bar(self, key: str, description: str, total: int, completed: int = 0) -> None:
        """A byte bar for `key` (a layer digest): created on first use, then moved to `completed`."""
        if self.live:
            if key not in self._tasks:
                self._stop_spinner()
                self._tasks[key] = self._progress.add_task(description, total=total or None, completed=completed,
                                                           kind=_BAR)
            else:
                self._progress.update(self._tasks[key], total=total or None, completed=completed)
            return
        bar = self._plain.setdefault(key, _PlainBar(description, total))
        bar.total, bar.completed = total or bar.total, completed
        if bar.total and bar.completed >= bar.total and not bar.printed:
            bar.printed = True
            self._print(bar_line(bar.description, bar.completed, bar.total, width=0, done=True))

    def advance(self, key: str, n: int) -> None:
        if self.live:
            self._progress.advance(self._tasks[key], n)
        else:
            bar = self._plain[key]
            self.bar(key, bar.description, bar.total, bar.completed + n)

    def handle(self, resp: dict[str, Any]) -> None:
        """One ProgressResponse ({status, digest, total, completed}) from pull, push or create."""
        status = str(resp.get("status") or "")
        digest = str(resp.get("digest") or "")
        if digest:
            label = status or f"{self.verb} {digest.removeprefix('sha256:')[:12]}..."
            self.bar(digest, label, int(resp.get("total") or 0), int(resp.get("completed") or 0))
        elif "quantizing" in status:
            self._stop_spinner()
            self._quantize = status
            if not self.live:
                return
            if self._quantize_task is None:
                self._quantize_task = self._progress.add_task(status, total=None, kind=_STATUS)
            else:
                self._progress.update(self._quantize_task, description=status)
        elif status and status != self._status:
            self.status(status)


class Spinner:
    """Ollama's bare spinner on stderr while waiting for something; shown only when stderr is a terminal."""

    def __init__(self, message: str = "", enabled: bool | None = None) -> None:
        self.enabled = is_tty(sys.stderr) if enabled is None else enabled
        self._status = Status(message, spinner="dots", console=stderr_console()) if self.enabled else None
        self._running = False

    def start(self) -> Spinner:
        if self._status is not None and not self._running:
            self._status.start()
            self._running = True
        return self

    def stop(self) -> None:
        if self._status is not None and self._running:
            self._running = False
            self._status.stop()

    def update(self, message: str) -> None:
        """The text beside the spinner (from any thread: rich redraws it on its own)."""
        if self._status is not None:
            self._status.update(message)

    def __enter__(self) -> Spinner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
