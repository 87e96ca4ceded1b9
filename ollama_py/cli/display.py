"""Printing a streamed answer: word wrap at the terminal's edge, the "Thinking..." block, and Ctrl-C.

`WordWrapper` is Ollama's displayResponse: characters are printed as they come; when a line reaches the edge the
word being typed is erased and reprinted on the next line. `show_reply` drives one streamed response through it,
stopping the spinner at the first text and closing the HTTP stream when the user presses Ctrl-C.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TextIO

from rich.cells import cell_len

from ollama_py.cli.progress import Spinner

GREY, BOLD, RESET = "\x1b[90m", "\x1b[1m", "\x1b[0m"


def terminal_width(stream: TextIO) -> int:
    """Columns of the terminal behind `stream`; 0 when it is not a terminal (no wrapping then)."""
    try:
        if not stream.isatty():
            return 0
        return os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 0


def thinking_open(plain: bool) -> str:
    return "Thinking...\n" if plain else f"{GREY}{BOLD}Thinking...\n{RESET}{GREY}"


def thinking_close(plain: bool) -> str:
    return "...done thinking.\n\n" if plain else f"{GREY}{BOLD}...done thinking.\n\n{RESET}"


class WordWrapper:
    """Writes streamed text to `out`, moving a word that would cross the right margin to the next line."""

    def __init__(self, out: TextIO, width: int, wrap: bool = True) -> None:
        self.out = out
        self.width = width
        self.wrap = wrap and width >= 10
        self.line_length = 0
        self.word = ""

    def write(self, content: str) -> None:
        if not self.wrap:
            self.out.write(content)
            self.out.flush()
            return
        for ch in content:
            w = cell_len(ch)
            if self.line_length + 1 > self.width - 5 and ch not in "\r\n":
                if ch in " \t":  # the word fits: the blank becomes the line break
                    self.out.write("\n")
                    self.line_length, self.word = 0, ""
                    continue
                if cell_len(self.word) > self.width - 10:
                    # A word longer than the line cannot move; break it where it is.
                    self.out.write("\n")
                    self.line_length = 0
                else:
                    back = cell_len(self.word)
                    if back:
                        self.out.write(f"\x1b[{back}D")
                    self.out.write("\x1b[K\n" + self.word)
                    self.line_length = back
            self.out.write(ch)
            self.line_length += w
            if w >= 2 or ch in " \t":
                self.word = ""
            elif ch in "\r\n":
                self.line_length = 0
                self.word = ""
            else:
                self.word += ch
        self.out.flush()

    def reset(self) -> None:
        self.line_length = 0
        self.word = ""


@dataclass
class Reply:
    """What one streamed answer produced."""

    content: str = ""
    thinking: str = ""
    role: str = "assistant"
    final: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False


def show_reply(stream: Iterable[dict[str, Any]], pick: Callable[[dict[str, Any]], tuple[str, str]], out: TextIO, *,
               wordwrap: bool, hide_thinking: bool, plain: bool, spinner: Spinner | None = None,
               close: Callable[[], None] | None = None) -> Reply:
    """Print a streamed answer; `pick(chunk)` gives (thinking, content) of a chunk.

    Ctrl-C stops the answer: the stream is closed (the server cancels) and the partial reply is returned with
    `interrupted` set.
    """
    reply = Reply()
    wrapper = WordWrapper(out, terminal_width(out), wordwrap)
    thinking_open_now = False
    try:
        for chunk in stream:
            thinking, content = pick(chunk)
            if spinner is not None and (content or not hide_thinking):
                spinner.stop()
            if isinstance(chunk.get("message"), dict) and chunk["message"].get("role"):
                reply.role = chunk["message"]["role"]
            if thinking and not hide_thinking:
                if not thinking_open_now:
                    out.write(thinking_open(plain))
                    thinking_open_now = True
                wrapper.write(thinking)
            reply.thinking += thinking
            if thinking_open_now and content:
                if not reply.thinking.endswith("\n"):
                    out.write("\n")
                out.write(thinking_close(plain))
                thinking_open_now = False
                wrapper.reset()
            reply.content += content
            if content:
                wrapper.write(content)
            if chunk.get("done"):
                reply.final = chunk
    except KeyboardInterrupt:
        reply.interrupted = True
        if close is not None:
            close()
    finally:
        if spinner is not None:
            spinner.stop()
        if thinking_open_now and not plain:
            out.write(RESET)
        out.flush()
    return reply
