"""What `run` does against the server: the session's options, loading a model, one chat turn, a one-shot answer,
and pulling a model that is not there yet. Shared by the `run` command and the REPL.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from typing import Any, TextIO

from ollama_py.cli.display import Reply, show_reply
from ollama_py.cli.progress import ProgressView, Spinner, is_tty
from ollama_py.cli.render import metrics_summary
from ollama_py.client import Client
from ollama_py.errors import NotFound


@dataclass
class RunOptions:
    """The state of a `run` session. Mutable on purpose: the REPL's /set, /load and /clear change it."""

    model: str
    prompt: str = ""
    images: list[str] = field(default_factory=list)  # base64, for the one-shot prompt of a vision model
    messages: list[dict[str, Any]] = field(default_factory=list)
    system: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    format: str = ""
    keep_alive: str | None = None
    think: bool | str | None = None
    hide_thinking: bool = False
    wordwrap: bool = True
    verbose: bool = False
    insecure: bool = False

    def request_fields(self) -> dict[str, Any]:
        return {
            "format": self.format or None,
            "options": dict(self.options) or None,
            "keep_alive": self.keep_alive,
            "think": self.think,
        }


def pull(client: Client, model: str, *, insecure: bool = False) -> None:
    """Pull with Ollama's progress display on stderr."""
    stream = client.pull(model, insecure=insecure)
    with ProgressView(verb="pulling") as view:
        try:
            for resp in stream:
                view.handle(resp)
        finally:
            stream.close()


def show_or_pull(client: Client, model: str, *, insecure: bool = False) -> dict[str, Any]:
    """The model's /api/show answer, pulling the model first when the server does not have it."""
    try:
        return client.show(model)
    except NotFound:
        pull(client, model, insecure=insecure)
        return client.show(model)


LOAD_TEXT_AFTER = 1.0  # seconds of a load before the spinner says what is happening


def load_text(model: str, event: dict[str, Any]) -> str:
    """What the spinner says about one /api/load line: "loading smollm2:135m 45 %", "warming up smollm2:135m"."""
    status = event.get("status")
    if status == "warming up":
        return f"warming up {model}"
    completed, total = event.get("completed"), event.get("total")
    if status == "loading model" and isinstance(completed, int) and isinstance(total, int) and total > 0:
        return f"loading {model} {min(completed * 100 // total, 100)} %"
    return f"loading {model}"


class LoadView:
    """A spinner on stderr while a model loads; once the load has taken LOAD_TEXT_AFTER, it also says what is
    happening (a quick load shows the bare spinner only, as Ollama's does)."""

    def __init__(self, model: str, spinner: Spinner) -> None:
        self.model, self.spinner = model, spinner
        self.text = f"loading {model}"
        self._shown = False
        self._timer = threading.Timer(LOAD_TEXT_AFTER, self._show)
        self._timer.daemon = True

    def __enter__(self) -> LoadView:
        self.spinner.start()
        if self.spinner.enabled:
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        self.spinner.stop()

    def handle(self, event: dict[str, Any]) -> None:
        self.text = load_text(self.model, event)
        if self._shown:
            self.spinner.update(self.text)

    def _show(self) -> None:
        self._shown = True
        self.spinner.update(self.text)


def load_model(client: Client, opts: RunOptions, spinner: bool = True) -> dict[str, Any]:
    """Load the model before the chat with /api/load, its progress on a spinner (LoadView). A server without
    /api/load (Ollama's) gets Ollama's way: an empty chat (done_reason "load"). The last line: /api/load's is
    the model's /api/ps entry (its context_length, ...)."""
    last: dict[str, Any] = {}
    with LoadView(opts.model, Spinner(enabled=None if spinner else False)) as view:
        try:
            stream = client.load(opts.model, keep_alive=opts.keep_alive)
        except NotFound:  # no such route (or no such model: the chat below says so in Ollama's words)
            stream = client.chat(opts.model, [], keep_alive=opts.keep_alive, think=opts.think)
        try:
            for event in stream:
                view.handle(event)
                last = event
        finally:
            stream.close()
    return last


def _chat_text(chunk: dict[str, Any]) -> tuple[str, str]:
    message = chunk.get("message") or {}
    return str(message.get("thinking") or ""), str(message.get("content") or "")


def _generate_text(chunk: dict[str, Any]) -> tuple[str, str]:
    return str(chunk.get("thinking") or ""), str(chunk.get("response") or "")


def chat(client: Client, opts: RunOptions, out: TextIO | None = None) -> Reply:
    """One interactive turn: send the session's messages, stream the answer, print --verbose timings."""
    out = out or sys.stdout
    spinner = Spinner(enabled=is_tty(out) and is_tty(sys.stderr)).start()
    try:
        stream = client.chat(opts.model, opts.messages, **opts.request_fields())
    except KeyboardInterrupt:  # before the first byte came back (loading, prompt processing)
        reply = Reply(interrupted=True)
    else:
        reply = show_reply(stream, _chat_text, out, wordwrap=opts.wordwrap, hide_thinking=opts.hide_thinking,
                           plain=False, spinner=spinner, close=stream.close)
    finally:
        spinner.stop()
    return _finish(reply, out, bool(opts.messages), opts.verbose)


def generate(client: Client, opts: RunOptions, out: TextIO | None = None) -> Reply:
    """The one-shot answer to `run MODEL PROMPT` (or piped stdin)."""
    out = out or sys.stdout
    tty = is_tty(out)
    spinner = Spinner(enabled=tty and is_tty(sys.stderr)).start()
    try:
        stream = client.generate(opts.model, opts.prompt, system=opts.system or None, images=opts.images or None,
                                 **opts.request_fields())
    except KeyboardInterrupt:
        reply = Reply(interrupted=True)
    else:
        reply = show_reply(stream, _generate_text, out, wordwrap=opts.wordwrap and tty,
                           hide_thinking=opts.hide_thinking, plain=not tty, spinner=spinner, close=stream.close)
    finally:
        spinner.stop()
    return _finish(reply, out, bool(opts.prompt), opts.verbose)


def _finish(reply: Reply, out: TextIO, asked: bool, verbose: bool) -> Reply:
    """After an answer: a newline (two after a complete answer), then --verbose's timing lines."""
    if reply.interrupted:
        out.write("\n")
        out.flush()
        return reply
    if asked:
        out.write("\n\n")
        out.flush()
    if verbose and reply.final:
        sys.stderr.write(metrics_summary(reply.final))
        sys.stderr.flush()
    return reply
