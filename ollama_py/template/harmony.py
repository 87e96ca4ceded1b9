"""gpt-oss's harmony format: an answer streamed as messages, split into thinking, content and tool calls.

gpt-oss answers in messages, each `<|start|>ROLE<|channel|>CHANNEL[ to=RECIPIENT][<|constrain|>json]<|message|>TEXT`
and an end (`<|end|>`; `<|call|>` after a tool call and `<|return|>` after the last message end generation, and
llama-server stops at them without printing them). The prompt ends `<|start|>assistant`, so the answer starts at the
channel. The channel says what the text is (Ollama's harmony parser reads it the same way):

  analysis                    the model's reasoning: thinking
  final, commentary           the answer (commentary: a preamble before a tool call): content
  a recipient (`to=functions.NAME`, in either channel)   a tool call; its text is the arguments' JSON

Its markers are control tokens, which llama-server leaves out of the text unless the request names them
(`preserved_tokens`, PRESERVED_TOKENS here). Nothing the model writes is lost: text outside any message, a call to a
function the request did not declare, or arguments that are not a JSON object come out as content.

Tool names are TypeScript identifiers in harmony (the prompt declares each tool as `type NAME = ...` in a namespace):
a client's `get-weather` or `web.search` is shown to the model as `get_weather` / `web_search` (FunctionNames, as
Ollama's FunctionNameMap renames them) and its calls are read back under the client's own name.

Pure: no server; `is_harmony` says which models answer so (Ollama's shouldUseHarmony, and `PARSER harmony`).
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ollama_py.api.wire import ToolCall

START, END, MESSAGE, CHANNEL, CONSTRAIN = "<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>"
CALL, RETURN = "<|call|>", "<|return|>"
# what llama-server must print for the parser to see the structure; <|call|> and <|return|> end generation
PRESERVED_TOKENS = (START, END, MESSAGE, CHANNEL, CONSTRAIN)
_ENDINGS = (END, CALL, RETURN)
_FAMILIES = frozenset({"gptoss", "gpt-oss"})
# harmony's reasoning levels (the template's `reasoning_effort`); Ollama maps "max" to "high"
LEVELS = ("low", "medium", "high")


# gpt-oss's built-in tools keep their names (the model was trained on them)
_BUILTIN_TOOLS = frozenset({"browser.open", "browser.search", "browser.find", "python"})


class FunctionNames:
    """A request's tool names as harmony shows them, and back (Ollama's FunctionNameMap): spaces, `-` and `.` become
    `_`, other characters that are neither letters, digits, `_` nor `$` are dropped, a leading digit gets a `_`, an
    empty result is `unnamed`, and a name taken already (by an earlier tool) gets `_2`, `_3`... The same tools give
    the same names, so the prompt's renderer and the answer's parser each make their own."""

    def __init__(self, tools: Sequence[Mapping[str, Any]] | None) -> None:
        self._tools = list(tools or ())
        self.user: dict[str, str] = {}  # the prompt's name -> the client's
        self._shown: list[str | None] = []  # per tool, the name the prompt shows (None: a tool without a name)
        for tool in self._tools:
            name = _name_of(tool)
            if name is None:
                self._shown.append(None)
                continue
            shown = self._derive(name) if name not in _BUILTIN_TOOLS else name
            self.user[shown] = name
            self._shown.append(shown)

    def _derive(self, name: str) -> str:
        base = "".join("_" if c in " -." else c for c in name if c in " -._$" or c.isalpha() or c.isdecimal())
        base = base or "unnamed"
        if base[0] in "0123456789":
            base = "_" + base
        candidate, n = base, 2
        while candidate in self.user:
            candidate, n = f"{base}_{n}", n + 1
        return candidate

    def tools(self) -> list[Any]:
        """The tools as the prompt shows them: renamed copies where a name changes, the rest as they are."""
        out: list[Any] = []
        for tool, shown in zip(self._tools, self._shown, strict=True):
            function = tool.get("function") if isinstance(tool, Mapping) else None
            if isinstance(function, Mapping) and shown is not None and shown != function.get("name"):
                out.append({**tool, "function": {**function, "name": shown}})
            else:
                out.append(tool)
        return out

    def original(self, shown: str) -> str:
        """The client's name for a name the model wrote (as written when the prompt showed no such name)."""
        return self.user.get(shown, shown)


def _name_of(tool: Any) -> str | None:
    function = tool.get("function") if isinstance(tool, Mapping) else None
    name = function.get("name") if isinstance(function, Mapping) else None
    return name if isinstance(name, str) and name else None


def _tool_names(tools: Sequence[Mapping[str, Any]] | None) -> list[str]:
    return [name for name in map(_name_of, tools or ()) if name is not None]


def is_harmony(family: str | None, template: str | None, parser: str | None = None) -> bool:
    """Whether a model answers in harmony: it says so (`PARSER harmony`), or it is gpt-oss and its template writes
    harmony's markers (a gpt-oss model given some other template is rendered and read as that template says)."""
    if parser == "harmony":
        return True
    return (family or "").lower() in _FAMILIES and template is not None and START in template and END in template


def reasoning_effort(think: bool | str | None) -> str | None:
    """The template's reasoning level for Ollama's `think`: a level as given ("max" is "high"), else None (the
    template's default, medium: gpt-oss always reasons, so true and false leave it as it is)."""
    if isinstance(think, str):
        level = "high" if think.lower() == "max" else think.lower()
        return level if level in LEVELS else None
    return None


@dataclass(frozen=True, slots=True)
class Header:
    role: str = ""
    channel: str = ""
    recipient: str = ""


def parse_header(raw: str) -> Header:
    """A message's header (what comes between `<|start|>` and `<|message|>`): its role, channel and recipient. The
    recipient (`to=NAME`) may come before or after the channel; `<|constrain|>TYPE` is dropped."""
    constrain = raw.find(CONSTRAIN)
    if constrain >= 0:
        raw = raw[:constrain]
    channel = ""
    at = raw.find(CHANNEL)
    if at >= 0:
        rest = raw[at + len(CHANNEL):]
        words = rest.split(maxsplit=1)
        channel = words[0] if words else ""
        raw = raw[:at] + " " + (words[1] if len(words) > 1 else "")
    words = raw.split()
    role, recipient = "", ""
    for word in words:
        if word.startswith("to="):
            recipient = recipient or word[3:]
        elif not role:
            role = word
    if not role and recipient:
        role = "tool"
    return Header(role, channel, recipient)


class _State(enum.Enum):
    BETWEEN = "between"  # looking for the next message's start
    HEADER = "header"
    TEXT = "text"


class _Kind(enum.Enum):
    THINKING = "thinking"
    CONTENT = "content"
    CALL = "call"


_HEADER_GOES_ON = (CHANNEL, " to=", CONSTRAIN)


def _goes_on_header(text: str) -> bool:
    """Whether an answer's first text can still go on with the prompt's `<|start|>assistant`: with the channel, a
    recipient or a constraint (or a start of one of them, so far)."""
    return any(text.startswith(opener) or opener.startswith(text) for opener in _HEADER_GOES_ON)


def _partial(text: str, markers: Sequence[str]) -> int:
    """How many characters at the end of `text` may be the start of one of `markers` (held back until known)."""
    longest = 0
    for marker in markers:
        for n in range(min(len(marker) - 1, len(text)), longest, -1):
            if text.endswith(marker[:n]):
                longest = n
                break
    return longest


class HarmonyParser:
    """One answer's text as it streams: add() returns (thinking, content, tool calls) ready now; finish() the rest.

    `prefill`: the conversation ended with an assistant message that the answer continues ("final" for one with
    content, "analysis" for one with thinking only; "" for a new message), as Ollama's parser starts."""

    def __init__(self, tools: Sequence[Mapping[str, Any]] | None = None, prefill: str = "") -> None:
        self.names = set(_tool_names(tools))
        self._shown = FunctionNames(tools)  # the names the prompt showed the model
        self._buf = START + "assistant" + (f"{CHANNEL}{prefill}{MESSAGE}" if prefill else "")
        self._state = _State.BETWEEN
        self._first = True  # the prompt's own header (`<|start|>assistant`), which the answer goes on with
        self._kind = _Kind.CONTENT
        self._call_name = ""
        self._call_args: list[str] = []
        self._count = 0

    @property
    def markers(self) -> list[str]:
        """The format's markers, control tokens that llama-server prints only when the request names them."""
        return list(PRESERVED_TOKENS)

    def answer_prefix(self, raw: str) -> str | None:
        """What to continue the prompt with so that the answer is the final message: `raw` (the answer as the
        runner wrote it) up to the end of its analysis, then the final channel's header (as Ollama continues it)."""
        at = raw.find(END)
        return None if at < 0 else raw[:at + len(END)] + START + "assistant" + CHANNEL + "final" + MESSAGE

    def add(self, text: str) -> tuple[str, str, list[ToolCall]]:
        self._buf += text
        thinking: list[str] = []
        content: list[str] = []
        calls: list[ToolCall] = []
        while self._step(thinking, content, calls):
            pass
        return "".join(thinking), "".join(content), calls

    def finish(self) -> tuple[str, str, list[ToolCall]]:
        """The end of the answer: what was held back, and a tool call whose end llama-server did not print."""
        thinking: list[str] = []
        content: list[str] = []
        calls: list[ToolCall] = []
        rest, self._buf = self._buf, ""
        if self._state is _State.TEXT:
            self._emit(rest, thinking, content)
            self._end_message(content, calls)
        elif self._state is _State.HEADER:
            # a header cut short: no text was written in it; only where its start was still unclear (`<|chan`) is
            # it text of the model's
            after = rest[len("assistant"):]
            if self._first and after.strip() and not after.startswith(_HEADER_GOES_ON):
                content.append(after)
        elif rest.strip():
            content.append(rest)
        self._state = _State.BETWEEN
        return "".join(thinking), "".join(content), calls

    # -- the states ---------------------------------------------------------------------------------------------

    def _step(self, thinking: list[str], content: list[str], calls: list[ToolCall]) -> bool:
        """One state's work on the buffer; True when it moved on and there may be more to do."""
        buf = self._buf
        if self._state is _State.BETWEEN:
            at = buf.find(START)
            if at < 0:
                keep = _partial(buf, (START,))
                if buf[:len(buf) - keep].strip():
                    content.append(buf[:len(buf) - keep])
                self._buf = buf[len(buf) - keep:]
                return False
            if buf[:at].strip():
                content.append(buf[:at])
            self._buf = buf[at + len(START):]
            self._state = _State.HEADER
            return True
        if self._state is _State.HEADER:
            if self._first and not _goes_on_header(buf[len("assistant"):]):
                # the answer does not go on with the prompt's header: no harmony (a model that ignores the format,
                # a template that renders another): its text is the content, as it comes
                self._first, self._kind, self._state = False, _Kind.CONTENT, _State.TEXT
                self._buf = buf[len("assistant"):]
                return True
            at = buf.find(MESSAGE)
            if at < 0:
                return False
            self._first = False
            self._begin_message(parse_header(buf[:at]))
            self._buf = buf[at + len(MESSAGE):]
            self._state = _State.TEXT
            return True
        ends = [(i, marker) for marker in _ENDINGS if (i := buf.find(marker)) >= 0]
        if not ends:
            keep = _partial(buf, _ENDINGS)
            self._emit(buf[:len(buf) - keep], thinking, content)
            self._buf = buf[len(buf) - keep:]
            return False
        at, marker = min(ends)
        self._emit(buf[:at], thinking, content)
        self._buf = buf[at + len(marker):]
        self._end_message(content, calls)
        self._state = _State.BETWEEN
        return True

    def _begin_message(self, header: Header) -> None:
        if header.recipient:
            self._kind = _Kind.CALL
            self._call_name, self._call_args = header.recipient, []
        elif header.channel == "analysis":
            self._kind = _Kind.THINKING
        else:
            self._kind = _Kind.CONTENT

    def _emit(self, text: str, thinking: list[str], content: list[str]) -> None:
        if not text:
            return
        if self._kind is _Kind.THINKING:
            thinking.append(text)
        elif self._kind is _Kind.CALL:
            self._call_args.append(text)
        else:
            content.append(text)

    def _end_message(self, content: list[str], calls: list[ToolCall]) -> None:
        if self._kind is not _Kind.CALL:
            return
        raw = "".join(self._call_args)
        call = self._call(self._call_name, raw)
        if call is None:  # not a call to a declared tool, or no JSON object: the model's text, as written
            if raw.strip():
                content.append(raw)
        else:
            calls.append(call)
        self._kind, self._call_name, self._call_args = _Kind.CONTENT, "", []

    def _call(self, recipient: str, raw: str) -> ToolCall | None:
        name = self._shown.original(recipient.removeprefix("functions."))
        if name not in self.names:
            return None
        try:
            args = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return None
        if not isinstance(args, dict):
            return None
        index, self._count = self._count, self._count + 1
        return {"id": f"call_{uuid.uuid4().hex[:8]}", "function": {"index": index, "name": name, "arguments": args}}


def prefill_of(messages: Sequence[Mapping[str, Any]] | None) -> str:
    """The channel a conversation ending with an assistant message leaves the answer in (Ollama's prefill): "final"
    after one with content, "analysis" after one with thinking only, "" otherwise."""
    if not messages:
        return ""
    last = messages[-1]
    if last.get("role") != "assistant":
        return ""
    if last.get("content"):
        return "final"
    if last.get("thinking"):
        return "analysis"
    return ""
