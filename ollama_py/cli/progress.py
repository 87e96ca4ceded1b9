"""Progress on stderr with rich: Ollama's pull/push/create display and the bare spinner shown while waiting.

`ProgressView.handle(resp)` does what the `fn(resp)` callbacks in Ollama's cmd.go do with each streamed
ProgressResponse: a line with a digest becomes (or moves) a bar for that layer — percentage, bar, bytes, speed,
time left — and a new status text becomes a new line with a spinner, the previous status line keeping its text.
On a terminal that is not interactive rich draws the final state once, when the view stops.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TaskID
from rich.spinner import Spinner as RichSpinner
from rich.status import Status
from rich.text import Text

from ollama_py.cli.render import go_duration, human_bytes

_KIND = "kind"
_STATUS, _BAR = "status", "bar"


def stderr_console() -> Console:
    return Console(file=sys.stderr, highlight=False, soft_wrap=False)


def is_tty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class _Description(ProgressColumn):
    def render(self, task: Task) -> Text:
        return Text(f"{task.description}:" if task.fields.get(_KIND) == _BAR else task.description)


class _Percent(ProgressColumn):
    def render(self, task: Task) -> Text:
        if task.fields.get(_KIND) != _BAR or not task.total:
            return Text("")
        return Text(f"{int(task.percentage):3d}%")


class _Bar(BarColumn):
    def render(self, task: Task) -> Any:
        if task.fields.get(_KIND) != _BAR:
            return Text("")
        return super().render(task)


class _Bytes(ProgressColumn):
    def render(self, task: Task) -> Text:
        if task.fields.get(_KIND) != _BAR:
            return Text("")
        total = int(task.total or 0)
        if task.finished:
            return Text(human_bytes(total))
        return Text(f"{human_bytes(int(task.completed))}/{human_bytes(total)}")


class _Rate(ProgressColumn):
    def render(self, task: Task) -> Text:
        if task.fields.get(_KIND) != _BAR or task.finished or not task.speed:
            return Text("")
        return Text(f"{human_bytes(int(task.speed))}/s")


class _Remaining(ProgressColumn):
    max_refresh = 0.5

    def render(self, task: Task) -> Text:
        remaining = task.time_remaining
        if task.fields.get(_KIND) != _BAR or task.finished or remaining is None:
            return Text("")
        return Text(go_duration(int(remaining) * 10**9))


class _StatusSpinner(ProgressColumn):
    """Ollama puts its spinner after the message, and drops it once the status is no longer current."""

    def __init__(self) -> None:
        super().__init__()
        self._spinner = RichSpinner("dots")

    def render(self, task: Task) -> Any:
        if task.fields.get(_KIND) != _STATUS or task.finished:
            return Text("")
        return self._spinner.render(task.get_time())


class ProgressView:
    """Ollama's progress display for pull, push and create. Use as a context manager."""

    def __init__(self, console: Console | None = None, status: str | None = None, verb: str = "pulling") -> None:
        self.console = console or stderr_console()
        self.verb = verb
        self._progress = Progress(
            _Description(), _Percent(), _Bar(bar_width=30), _Bytes(), _Rate(), _Remaining(),
            _StatusSpinner(), console=self.console, transient=False, expand=False,
        )
        self._bars: dict[str, TaskID] = {}
        self._status = ""
        self._status_task: TaskID | None = None
        self._quantize_task: TaskID | None = None
        if status:
            self.status(status)

    def __enter__(self) -> ProgressView:
        self._progress.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        self._stop_spinner()
        if self._quantize_task is not None:
            self._progress.update(self._quantize_task, total=1, completed=1)
        self._progress.stop()

    def _stop_spinner(self) -> None:
        if self._status_task is not None:
            self._progress.update(self._status_task, total=1, completed=1)
            self._status_task = None

    def status(self, text: str) -> None:
        """A new status line with a spinner; the previous one stays, without its spinner."""
        self._stop_spinner()
        self._status = text
        self._status_task = self._progress.add_task(text, total=None, **{_KIND: _STATUS})

    def bar(self, key: str, description: str, total: int, completed: int = 0) -> None:
        """A byte bar for `key` (a digest), created on first use."""
        if key not in self._bars:
            self._stop_spinner()
            self._bars[key] = self._progress.add_task(description, total=total or None, completed=completed,
                                                      **{_KIND: _BAR})
        else:
            self._progress.update(self._bars[key], total=total or None, completed=completed)

    def advance(self, key: str, n: int) -> None:
        self._progress.advance(self._bars[key], n)

    def handle(self, resp: dict[str, Any]) -> None:
        """One ProgressResponse ({status, digest, total, completed}) from pull, push or create."""
        status = str(resp.get("status") or "")
        digest = str(resp.get("digest") or "")
        if digest:
            if digest not in self._bars:
                label = status or f"{self.verb} {digest.removeprefix('sha256:')[:12]}..."
                self.bar(digest, label, int(resp.get("total") or 0), int(resp.get("completed") or 0))
            else:
                self.bar(digest, "", int(resp.get("total") or 0), int(resp.get("completed") or 0))
        elif "quantizing" in status:
            self._stop_spinner()
            if self._quantize_task is None:
                self._quantize_task = self._progress.add_task(status, total=None, **{_KIND: _STATUS})
            else:
                self._progress.update(self._quantize_task, description=status)
        elif status and status != self._status:
            self.status(status)


class Spinner:
    """Ollama's bare spinner (no text) on stderr while waiting for something; shown only on a terminal."""

    def __init__(self, message: str = "", enabled: bool | None = None) -> None:
        console = stderr_console()
        self.enabled = is_tty(sys.stderr) if enabled is None else enabled
        self._status = Status(message, spinner="dots", console=console) if self.enabled else None
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

    def __enter__(self) -> Spinner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
