"""Gemma 4's answers: thinking on its channel, tool calls in its own syntax.

Gemma 4 thinks in `<|channel>thought\\n...<channel|>` (when its template was told `enable_thinking`; without it the
template closes an empty channel in the prompt, and a channel the model opens anyway is dropped, as `think: false`
asks) and calls a tool as `<|tool_call>call:NAME{key:VALUE,...}<tool_call|>`: keys bare, a string between `<|"|>`
marks (its text as written: quotes and backslashes are the text's own), numbers, booleans, null, lists and objects as
in JSON (a JSON "string" too). After a call it may write `<|tool_response>` (the template's boundary before a tool's
answer) or a stray `<tool_call|>`: both dropped. Its markers are control tokens, which llama-server prints only when
the request names them (MARKERS).

The rules are Ollama's gemma4 parser's: text before a channel or a call is content (its trailing whitespace
dropped), the thought's trailing whitespace and the content's leading whitespace after it are dropped, a call the
answer ends inside of is still read. Nothing the model writes is lost otherwise: a call that does not read, or
that names a function the request did not declare, comes out as content as written.

Pure: no server; `is_gemma4` says which models answer so.
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ollama_py.api.wire import ToolCall
from ollama_py.template.thinking import partial_suffix

CHANNEL_OPEN, CHANNEL_CLOSE = "<|channel>", "<channel|>"
CALL_OPEN, CALL_CLOSE = "<|tool_call>", "<tool_call|>"
RESPONSE = "<|tool_response>"
QUOTE = '<|"|>'
MARKERS = (CHANNEL_OPEN, CHANNEL_CLOSE, CALL_OPEN, CALL_CLOSE, RESPONSE, QUOTE)
PARSERS = ("gemma4", "gemma4-no-thinking")  # Ollama's PARSER names for it
_CHANNEL_NAME = "thought\n"
_CALL_PREFIX = "call:"


def is_gemma4(chat_template: str | None, parser: str | None = None) -> bool:
    """Whether a model answers in Gemma 4's format: it says so (`PARSER gemma4`), or its chat template writes both
    Gemma 4's channel and its tool calls."""
    if parser in PARSERS:
        return True
    return bool(chat_template) and CHANNEL_OPEN in chat_template and CALL_OPEN in chat_template  # type: ignore[operator]


def gemma4_thinks(chat_template: str | None, parser: str | None = None) -> bool:
    """Whether it can think: its template takes `enable_thinking` (Ollama's gemma4 parser: yes;
    gemma4-no-thinking: no)."""
    if parser in PARSERS:
        return parser == "gemma4"
    return bool(chat_template) and "enable_thinking" in chat_template  # type: ignore[operator]


class _State(enum.Enum):
    CONTENT = 0
    THINKING = 1
    CALL = 2
    AFTER_CALL = 3  # just past a call: a stray closing tag or the tool-response boundary is dropped


def _trailing_space(text: str) -> int:
    return len(text) - len(text.rstrip())


class Gemma4Parser:
    """One answer's text as it streams: add() returns (thinking, content, tool calls) ready now; finish() the rest.
    `thinking`: the request asked for thoughts (else a channel's text is dropped)."""

    def __init__(self, tools: Sequence[Mapping[str, Any]] | None = None, *, thinking: bool = False) -> None:
        self.names = {str((t.get("function") or {}).get("name")) for t in tools or () if isinstance(t, Mapping)}
        self.thinking = thinking
        self._buf = ""
        self._state = _State.CONTENT
        self._named = False  # past the channel's name ("thought\n"), or found without one
        self._after_thought = False  # just past a channel's close: the content's leading whitespace is dropped
        self._count = 0

    @property
    def markers(self) -> list[str]:
        return list(MARKERS)

    def answer_prefix(self, raw: str) -> str | None:
        """What of `raw` (the answer as the runner wrote it) comes before the content: up to the channel's close."""
        at = raw.find(CHANNEL_CLOSE)
        return None if at < 0 else raw[:at + len(CHANNEL_CLOSE)]

    def add(self, text: str) -> tuple[str, str, list[ToolCall]]:
        self._buf += text
        return self._run(done=False)

    def finish(self) -> tuple[str, str, list[ToolCall]]:
        return self._run(done=True)

    def _run(self, done: bool) -> tuple[str, str, list[ToolCall]]:
        thinking: list[str] = []
        content: list[str] = []
        calls: list[ToolCall] = []
        while self._step(done, thinking, content, calls):
            pass
        return "".join(thinking) if self.thinking else "", "".join(content), calls

    def _step(self, done: bool, thinking: list[str], content: list[str], calls: list[ToolCall]) -> bool:
        """One step over the buffer; True while there may be more to do now."""
        buf = self._buf
        if not buf:
            return False
        if self._state is _State.CONTENT:
            return self._content(buf, done, content)
        if self._state is _State.THINKING:
            return self._thought(buf, done, thinking)
        if self._state is _State.CALL:
            return self._call(buf, done, content, calls)
        return self._after_call(buf, done)

    def _content(self, buf: str, done: bool, content: list[str]) -> bool:
        if self._after_thought:  # however the answer was cut into pieces
            buf = buf.lstrip()
            self._buf = buf
            if not buf:
                return False
            self._after_thought = False
        found = [(at, tag) for tag in (CHANNEL_OPEN, CALL_OPEN) if (at := buf.find(tag)) >= 0]
        if found:
            at, tag = min(found)
            content.append(buf[:at].rstrip())
            self._buf = buf[at + len(tag):]
            self._state = _State.THINKING if tag == CHANNEL_OPEN else _State.CALL
            self._named = False
            return True
        keep = 0 if done else max(partial_suffix(buf, CHANNEL_OPEN), partial_suffix(buf, CALL_OPEN))
        if keep:  # a tag may be starting: hold it and the whitespace before it
            keep += _trailing_space(buf[:len(buf) - keep])
        content.append(buf[:len(buf) - keep])
        self._buf = buf[len(buf) - keep:]
        return False

    def _thought(self, buf: str, done: bool, thinking: list[str]) -> bool:
        if not self._named:
            if buf.startswith(_CHANNEL_NAME):
                buf = buf[len(_CHANNEL_NAME):]
            elif _CHANNEL_NAME.startswith(buf) and not done:
                self._buf = buf
                return False
            self._named = True
        at = buf.find(CHANNEL_CLOSE)
        if at >= 0:
            thinking.append(buf[:at].rstrip())
            self._buf = buf[at + len(CHANNEL_CLOSE):]
            self._state, self._after_thought = _State.CONTENT, True
            return True
        keep = 0 if done else partial_suffix(buf, CHANNEL_CLOSE)
        if not done:
            keep += _trailing_space(buf[:len(buf) - keep])
        thinking.append(buf[:len(buf) - keep])
        self._buf = buf[len(buf) - keep:]
        return False

    def _call(self, buf: str, done: bool, content: list[str], calls: list[ToolCall]) -> bool:
        at = buf.find(CALL_CLOSE)
        if at < 0 and not done:
            return False
        body = buf if at < 0 else buf[:at]
        call = self._call_of(body)
        if call is None:  # not a call after all: the text as the model wrote it
            content.append(CALL_OPEN + body + ("" if at < 0 else CALL_CLOSE))
        else:
            call["function"]["index"] = self._count
            self._count += 1
            calls.append(call)
        self._buf = "" if at < 0 else buf[at + len(CALL_CLOSE):]
        self._state = _State.AFTER_CALL if call is not None and at >= 0 else _State.CONTENT
        return True

    def _after_call(self, buf: str, done: bool) -> bool:
        body = buf.lstrip()
        while True:
            for noise in (CALL_CLOSE, RESPONSE):
                if body.startswith(noise):
                    body = body[len(noise):].lstrip()
                    break
            else:
                break
        self._buf = body
        if not body:
            return False
        if not done and (CALL_CLOSE.startswith(body) or RESPONSE.startswith(body)):
            return False
        self._state = _State.CONTENT
        return True

    def _call_of(self, body: str) -> ToolCall | None:
        """`call:NAME{...}` as a call of a declared function, else None."""
        body = body.strip()
        if not body.startswith(_CALL_PREFIX):
            return None
        brace = body.find("{")
        if brace < 0:
            return None
        name = body[len(_CALL_PREFIX):brace].strip()
        if name not in self.names:
            return None
        arguments = arguments_of(body[brace:])
        if arguments is None:
            return None
        return {"id": f"call_{uuid.uuid4().hex[:8]}", "function": {"index": 0, "name": name, "arguments": arguments}}


def arguments_of(text: str) -> dict[str, Any] | None:
    """Gemma 4's `{key:VALUE,...}` as a dict, None if it does not read; an answer cut short inside its last string
    or before its last brace is closed first (Ollama's repairs of the same)."""
    for candidate in (text, _closed(text)):
        try:
            value = json.loads(_as_json(candidate))
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            return value
    return None


def _closed(text: str) -> str:
    """The arguments with an unclosed `<|"|>` string closed (before a final brace) and a missing final brace added."""
    text = text.rstrip()
    if text.count(QUOTE) % 2:
        at = len(text) - 1 if text.endswith(("}", "]")) else len(text)
        text = text[:at] + QUOTE + text[at:]
    if not text.endswith("}"):
        text += "}"
    return text


def _as_json(text: str) -> str:
    """Gemma 4's argument syntax as JSON: `<|"|>` strings quoted (their text as written), bare keys quoted; JSON's own
    strings and everything else as they are."""
    out: list[str] = []
    i, n = 0, len(text)
    key_may_start = False  # just after `{` or `,`: a bare word before `:` is a key
    while i < n:
        if text.startswith(QUOTE, i):
            end = text.find(QUOTE, i + len(QUOTE))
            if end < 0:
                raise ValueError("an unclosed string")
            out.append(json.dumps(text[i + len(QUOTE):end], ensure_ascii=False))
            i = end + len(QUOTE)
            key_may_start = False
            continue
        ch = text[i]
        if ch == '"':
            end = _json_string_end(text, i)
            out.append(text[i:end])
            i = end
            key_may_start = False
            continue
        if key_may_start and (ch.isalnum() or ch == "_"):
            end = i
            while end < n and (text[end].isalnum() or text[end] == "_"):
                end += 1
            if end < n and text[end] == ":":
                out.append(f'"{text[i:end]}":')
                i = end + 1
                key_may_start = False
                continue
        out.append(ch)
        if not ch.isspace():
            key_may_start = ch in "{,"
        i += 1
    return "".join(out)


def _json_string_end(text: str, start: int) -> int:
    """The index after the JSON string opening at `start` (its end of text if it never closes)."""
    i = start + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            return i + 1
        i += 1
    return len(text)
