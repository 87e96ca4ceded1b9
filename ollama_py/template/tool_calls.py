"""Tool calls in a model's answer: the tag a template opens them with, and splitting a streamed answer into the
text to show now and the calls it makes.

Ollama's rules (tools/tools.go), which the parser follows:
  * A call is JSON naming one of the request's tools: {"name": ..., "arguments": {...}} (or "parameters", or
    wrapped in {"function": ...}), or a list of those. A name the request did not declare is not a call: the JSON
    is text.
  * A tagged call (the template's tag, e.g. `<tool_call>`, `[TOOL_CALLS]`) may come anywhere in the answer; the
    text before it is content. A bare JSON call only counts where the answer (or the part after an earlier call)
    starts with `{` or `[`.
  * Only what may still become a call is held back: the end of the text while it could be the start of the tag,
    a JSON value until it is complete. The moment it cannot be a call any more it is released as text.
Without a template to ask (a GGUF's own chat template) the tag is `<tool_call>`, the most common one.

After the tag, a call may also be Qwen3-Coder's XML, which Qwen 3.5 and later write too (Ollama's qwen3-coder and
qwen3.5 PARSERs): `<function=NAME>` then `<parameter=P>VALUE</parameter>` for each argument, then `</function>`.
Each value is text, read as the tool's JSON schema types that parameter (an integer, a number, a boolean, an object
or an array as JSON; a string, or a value that does not read as its type, as the text it is).

Or GLM's (GLM 4.6 and 4.7, Laguna, Ling 3 and Hunyuan 3 write it; Ollama's glm-4.7 parser): the tool's name right after
the tag, then `<arg_key>K</arg_key><arg_value>V</arg_value>` for each argument, up to the closing tag; its values read
as the XML form's are. Or Mistral's (Mistral Small 3.2, Devstral, Magistral, Ministral 3): `[TOOL_CALLS]NAME[ARGS]{...}`
(`[CALL_ID]ID` may come before `[ARGS]`; Ministral 3 writes several calls after one tag). Either is taken for a call
only while the text after the tag is (so far) a declared tool's name.

Or DeepSeek's (V3.1 and later, R1 and its distills; Ollama's deepseek3 parser): `<｜tool▁calls▁begin｜>`, then each
call in `<｜tool▁call▁begin｜>...<｜tool▁call▁end｜>` as `NAME<｜tool▁sep｜>{...}` or `function<｜tool▁sep｜>NAME` with
its JSON in a fence, then `<｜tool▁calls▁end｜>`. Or LFM2's and OLMo 3's (Ollama's lfm2 and olmo3 parsers):
Python-style calls between `<|tool_call_start|>` and `<|tool_call_end|>` (`[NAME(key=value, ...), ...]`) or
`<function_calls>` and `</function_calls>` (one a line), read with Python's parser and never run (keyword
arguments of literal values only). Or FunctionGemma's (Ollama's functiongemma parser): `<start_function_call>`,
`call:NAME{key:VALUE,...}` with a string between `<escape>` tokens, then `<end_function_call>`. Each is held whole
up to its closing tag: calls if every call in it reads as one of a declared tool, else text.
"""

from __future__ import annotations

import ast
import enum
import json
import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ollama_py.api.wire import ToolCall
from ollama_py.errors import OllamaError
from ollama_py.memo import Memo
from ollama_py.template.prompt import render_prompt
from ollama_py.template.thinking import partial_suffix

DEFAULT_TAG = "<tool_call>"
MISTRAL_TAG = "[TOOL_CALLS]"
LFM2_TAG = "<|tool_call_start|>"  # LFM2: Python-style calls, `[NAME(key=value, ...), ...]`
OLMO_TAG = "<function_calls>"  # OLMo 3: Python-style calls, one a line
_PYTHONIC_ENDS = {LFM2_TAG: "<|tool_call_end|>", OLMO_TAG: "</function_calls>"}
DEEPSEEK_TAG = "<｜tool▁calls▁begin｜>"
FUNCTIONGEMMA_TAG = "<start_function_call>"  # FunctionGemma: `call:NAME{key:<escape>text<escape>,key:1}`
_FUNCTIONGEMMA_END, _ESCAPE = "<end_function_call>", "<escape>"
_FUNCTIONGEMMA_CALL = re.compile(r"call:([^{]+)\{(.*)\}")
_DEEPSEEK_END = "<｜tool▁calls▁end｜>"
_DEEPSEEK_CALL, _DEEPSEEK_CALL_END, _DEEPSEEK_SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
_MISTRAL_ARGS, _MISTRAL_ID = "[ARGS]", "[CALL_ID]"
_XML_FUNCTION, _XML_END = "<function=", "</function>"
_XML_PARAMETER = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.DOTALL)
_GLM_KEY = "<arg_key>"
_GLM_TAGS = ["<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]
_GLM_ARGUMENT = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)
_NAME = re.compile(r"[^\s<\[]*")
JSON_TAG = "{"  # the template writes the call's JSON with nothing before it
_PROBE_NAME = "zz_probe_tool_zz"
_PROBE_TEXT = "zz_probe_text_zz"


def known_tool_tag(template: str | None) -> str | None:
    """infer_tool_tag's answer if it is known already (a lookup, for the event loop), else None."""
    return _TAGS.known(template)


def infer_tool_tag(template: str | None) -> str:
    """The text the template writes before a past tool call's JSON that it does not write before a past answer's
    text ("<tool_call>", "[TOOL_CALLS]"); JSON_TAG when the JSON comes first; DEFAULT_TAG without a template (or
    one that does not render calls). Renders the template twice the first time (blocking), remembered after."""
    return _TAGS(template)


def _infer_tool_tag(template: str | None) -> str:
    if not template:
        return DEFAULT_TAG
    tools = [{"type": "function", "function": {"name": _PROBE_NAME, "description": "",
                                               "parameters": {"type": "object", "properties": {}}}}]
    ask, after = {"role": "user", "content": "q"}, {"role": "user", "content": "r"}
    try:
        with_call = render_prompt(template, tools=tools, messages=[
            ask, {"role": "assistant", "content": "", "tool_calls": [
                {"function": {"name": _PROBE_NAME, "arguments": {}}}]}, after])
        with_text = render_prompt(template, tools=tools, messages=[
            ask, {"role": "assistant", "content": _PROBE_TEXT}, after])
    # A template that cannot render this conversation: no better guess than the default.
    except (OllamaError, ValueError, TypeError):
        return DEFAULT_TAG
    text_at = with_text.rfind(_PROBE_TEXT)
    common = 0  # where the two renderings part: the start of the assistant's turn's own text
    for a, b in zip(with_call, with_text[:text_at]):
        if a != b:
            break
        common += 1
    at = with_call.find(_PROBE_NAME, common)
    if at < 0 or text_at < 0:
        return DEFAULT_TAG
    start = with_call.rfind("{", common, at)  # the call's JSON object
    if start < 0:  # the name before any JSON: Mistral's `[TOOL_CALLS]NAME[ARGS]{...}`, GLM's `<tool_call>NAME<arg_key>`
        return with_call[common:at].strip() or DEFAULT_TAG
    tag = with_call[common:start].strip().rstrip("[").strip()
    return tag or JSON_TAG


def gguf_tool_tag(chat_template: str | None) -> str:
    """The tag for a model whose GGUF chat template renders its prompts (Jinja, not rendered here to find it): the
    first of the known tags the template writes (Mistral's, DeepSeek's, LFM2's, Granite 3's `<|tool_call|>`,
    Nemotron Nano 2's `<TOOLCALL>`, Apriel's `<tool_calls>`, OLMo 3's `<function_calls>`, FunctionGemma's
    `<start_function_call>`), else DEFAULT_TAG."""
    for tag in _GGUF_TAGS:
        if chat_template and tag in chat_template:
            return tag
    return DEFAULT_TAG


_GGUF_TAGS = (MISTRAL_TAG, DEEPSEEK_TAG, LFM2_TAG, OLMO_TAG, FUNCTIONGEMMA_TAG, "<|tool_call|>", "<TOOLCALL>",
              "<tool_calls>")
_TAGS: Memo[str | None, str] = Memo(_infer_tool_tag, 64)  # infer_tool_tag's answers by template


def _closing(tag: str) -> str:
    """`<tool_call>` -> `</tool_call>`, `<|tool_call|>` -> `<|/tool_call|>`; tags of another shape have no
    closing tag to drop."""
    for left, right in (("<|", "|>"), ("<", ">")):
        if tag.startswith(left) and tag.endswith(right) and len(tag) > len(left) + len(right):
            inner = tag[len(left):-len(right)]
            return "" if inner.startswith("/") else f"{left}/{inner}{right}"
    return ""


def _leading_special(tag: str) -> str:
    """The bracketed token a tag starts with (`[TOOL_CALLS][` -> `[TOOL_CALLS]`), "" if it does not."""
    pairs = {"[": "]", "<": ">"}
    close = pairs.get(tag[:1])
    end = tag.find(close) if close else -1
    return tag[:end + 1] if end > 0 else ""


class _JsonEnd:
    """Finds where the JSON value at the start of a growing text ends, looking at each character once."""

    def __init__(self) -> None:
        self.pos = 0
        self.depth = 0
        self.in_string = False
        self.escaped = False

    def scan(self, text: str) -> int:
        """The end of the value in `text` (the text so far, always from the value's first character), or -1."""
        i = self.pos
        while i < len(text):
            c = text[i]
            i += 1
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif c == "\\":
                    self.escaped = True
                elif c == '"':
                    self.in_string = False
            elif c == '"':
                self.in_string = True
            elif c in "{[":
                self.depth += 1
            elif c in "}]":
                self.depth -= 1
                if self.depth <= 0:
                    self.pos = i
                    return i
        self.pos = i
        return -1


class _State(enum.Enum):
    TEXT = 0  # looking for the tag (or, at a start, a JSON value)
    CALL = 1  # inside a possible call: waiting for its JSON value to end
    AFTER = 2  # just past a call: dropping whitespace and the closing tag


class ToolCallParser:
    """Feed streamed text with add(); each call returns (text that is certain to be text, finished calls) in
    Ollama's message.tool_calls shape ({"id", "function": {"index", "name", "arguments"}}). finish() at the end
    returns what was still held back."""

    def __init__(self, tools: Sequence[Mapping[str, Any]], tag: str = DEFAULT_TAG) -> None:
        # each declared tool by its name, the calls allowed; its parameter types (an XML call's values are read as
        # them) only once such a call comes (an agent's twenty tools took ~80 us a request to read them all)
        self._functions = {t["function"]["name"]: t["function"] for t in tools
                           if isinstance(t.get("function"), Mapping) and isinstance(t["function"].get("name"), str)}
        self._types: dict[str, dict[str, str]] = {}
        self.names = set(self._functions)
        self._form = "json"  # the open call's form: JSON, Qwen3-Coder's XML (<function=...>), GLM's (NAME<arg_key>)
        if tag.startswith(DEEPSEEK_TAG):  # a Go template's tag runs on into the first call's own markers
            tag = DEEPSEEK_TAG
        self.tag = "" if tag in ("{", "[") else tag  # JSON tags: a call only where the JSON starts the answer
        self.closing = {DEEPSEEK_TAG: _DEEPSEEK_END, FUNCTIONGEMMA_TAG: _FUNCTIONGEMMA_END,
                        **_PYTHONIC_ENDS}.get(tag) or _closing(self.tag)
        self._state = _State.TEXT
        self._at_start = True  # nothing but whitespace since the start or the last call
        self._held = ""
        self._opening = ""  # the tag (with what followed it) that opened the possible call, text if it is none
        self._scan = _JsonEnd()
        self._checked = False
        self._count = 0

    def _types_of(self, name: str) -> dict[str, str]:
        """The parameter types of the declared tool `name` (read once)."""
        types = self._types.get(name)
        if types is None:
            types = self._types[name] = _parameter_types(self._functions[name])
        return types

    @property
    def markers(self) -> list[str]:
        """The pieces of text this parser finds calls by: the tag (and the special token it starts with, as in
        `[TOOL_CALLS][`), its closing tag, and the markers inside a call of the forms that tag opens (Mistral's
        `[ARGS]`, `[CALL_ID]`; GLM's argument tags). A vocabulary may hold them as control tokens, which
        llama-server leaves out of its text unless the request names them (`preserved_tokens`; strings that are
        not one token are ignored there)."""
        if not self.tag:
            return []
        found = [self.tag, _leading_special(self.tag), self.closing]
        if self.tag.startswith(MISTRAL_TAG):
            found += [_MISTRAL_ARGS, _MISTRAL_ID]
        elif self.tag == DEEPSEEK_TAG:
            found += [_DEEPSEEK_CALL, _DEEPSEEK_CALL_END, _DEEPSEEK_SEP]
        elif self.tag == FUNCTIONGEMMA_TAG:
            found.append(_ESCAPE)
        elif self.tag == DEFAULT_TAG:
            found += _GLM_TAGS
        return list(dict.fromkeys(m for m in found if m))

    def plain(self, text: str) -> bool:
        """Whether add(text) would give (text, []) and change nothing: past the answer's start, nothing held back,
        and no tag, or the beginning of one, in `text`. (The lane asks, to write such a text itself.)"""
        if self._state is not _State.TEXT or self._held or self._at_start:
            return False
        tag = self.tag
        return not tag or (tag not in text and not partial_suffix(text, tag))

    def add(self, text: str) -> tuple[str, list[ToolCall]]:
        out: list[str] = []
        calls: list[ToolCall] = []
        buf, self._held = self._held + text, ""
        while buf:
            if self._state is _State.TEXT:
                buf = self._text(buf, out)
            elif self._state is _State.CALL:
                buf = self._call(buf, out, calls)
            else:
                buf = self._after(buf)
        return "".join(out), calls

    def finish(self) -> tuple[str, list[ToolCall]]:
        """The end of the answer: a partial tag, an unfinished call or whitespace alone are text after all
        (a JSON value that was complete enough to parse still becomes a call); a partial closing tag is dropped."""
        held, self._held = self._held, ""
        state, self._state = self._state, _State.TEXT
        if state is _State.CALL and self._form == "deepseek":  # the calls that were finished, if all were
            self._form = "json"
            found = self._deepseek_calls(held, closed=False)
            for call in found:
                self._made(call, [], "")
            self._state = _State.TEXT
            return ("", found) if found else (self._opening + held, [])
        if state is _State.CALL and self._form != "json":  # never closed: not a call
            self._form = "json"
            return self._opening + held, []
        if state is _State.AFTER:
            return "", []
        if state is _State.CALL:
            calls = self._calls(held.strip().removesuffix("```").strip())
            if calls:
                return "", calls
            return self._opening + held, []
        return held, []

    # -- states -------------------------------------------------------------------------------------------------

    def _text(self, buf: str, out: list[str]) -> str:
        if self._at_start:
            body = buf.lstrip()
            if not body:  # whitespace alone: shown before text, dropped before a call
                self._held = buf
                return ""
            if self.tag and body.startswith(self.tag):
                self._open(self.tag)
                return body[len(self.tag):]
            if self.tag.startswith(body) or "```".startswith(body):  # perhaps the tag or a fence: wait and see
                self._held = buf
                return ""
            if body[0] in "{[" or body.startswith("```"):  # bare JSON, perhaps in a ```json fence
                self._open("")
                return body
            self._at_start = False
        at = buf.find(self.tag) if self.tag else -1
        if at >= 0:
            out.append(buf[:at])
            self._open(self.tag)
            return buf[at + len(self.tag):]
        keep = partial_suffix(buf, self.tag) if self.tag else 0
        out.append(buf[: len(buf) - keep])
        self._held = buf[len(buf) - keep:]
        return ""

    def _open(self, tag: str) -> None:
        self._state = _State.CALL
        self._opening = tag
        self._scan = _JsonEnd()
        self._checked = False
        self._form = "json"

    def _call(self, buf: str, out: list[str], calls: list[ToolCall]) -> str:
        """`buf`: everything since the tag (or the JSON's first character)."""
        if self._form != "json":
            return self._closed_call(buf, out, calls)
        if self._scan.pos == 0:  # the value has not started: skip whitespace and a ```json fence
            body = buf.lstrip()
            if self._opening and (self.tag in (DEEPSEEK_TAG, FUNCTIONGEMMA_TAG) or self.tag in _PYTHONIC_ENDS):
                # held to the closing tag
                self._form = {DEEPSEEK_TAG: "deepseek", FUNCTIONGEMMA_TAG: "functiongemma"}.get(self.tag, "pythonic")
                return self._closed_call(buf, out, calls)
            if self._opening and body and body[0] == "<":  # after the tag: perhaps <function=... (XML)
                if body.startswith(_XML_FUNCTION):
                    self._opening += buf[: len(buf) - len(body)]
                    self._form = "xml"
                    return self._closed_call(body, out, calls)
                if _XML_FUNCTION.startswith(body):
                    self._held = buf
                    return ""
            if self._opening and body and body[0] not in "{[<`" and self._may_name(body):
                # the tool's name after the tag: GLM's form (up to the closing tag) or Mistral's ([ARGS] and JSON)
                self._opening += buf[: len(buf) - len(body)]
                self._form = "glm" if self.closing else "mistral"
                self._scan = _JsonEnd()
                return self._closed_call(body, out, calls)
            if body.startswith("```"):
                fence_end = body.find("\n")
                if fence_end < 0:
                    self._held = buf
                    return ""
                body = body[fence_end + 1:].lstrip()
            if not body or (body[0] not in "{[" and "```".startswith(body)):
                self._held = buf
                return ""
            self._opening += buf[: len(buf) - len(body)]
            buf = body
            if buf[0] not in "{[":  # the tag, but no JSON after it: text
                return self._not_a_call(buf, out)
        if not self._checked:  # a call is {"... or [{...: anything else is text at once
            second = buf[1:].lstrip()[:1]
            if second:
                self._checked = True
                if second != ('"' if buf[0] == "{" else "{"):
                    return self._not_a_call(buf, out)
        end = self._scan.scan(buf)
        if end < 0:
            self._held = buf
            return ""
        found = self._calls(buf[:end])
        if not found:
            return self._not_a_call(buf, out, end)
        calls.extend(found)
        self._state, self._at_start = _State.AFTER, True
        return buf[end:]

    def _may_name(self, body: str) -> bool:
        """Whether text after the tag starts with a declared tool's name (or, so far, a start of one)."""
        word = _NAME.match(body).group(0)  # type: ignore[union-attr]  # matches the empty string at least
        if len(word) == len(body):
            return any(name.startswith(word) for name in self.names)
        return word in self.names

    def _closed_call(self, buf: str, out: list[str], calls: list[ToolCall]) -> str:
        """`buf`: an XML call from `<function=` on, held until `</function>`; a GLM call from its name on, held until
        the closing tag (left for the AFTER state); a Mistral call from its name on (_mistral_call). Then a call, or
        text if it names no tool."""
        if self._form == "deepseek":
            return self._deepseek_block(buf, out, calls)
        if self._form == "pythonic":
            return self._pythonic_block(buf, out, calls)
        if self._form == "functiongemma":
            return self._functiongemma_call(buf, out, calls)
        xml = self._form == "xml"
        if not xml and not self._may_name(buf):  # the name went on into no tool's: the tag was text
            self._form = "json"
            return self._not_a_call(buf, out)
        if self._form == "mistral":
            return self._mistral_call(buf, out, calls)
        end = buf.find(_XML_END if xml else self.closing)
        if end < 0:
            self._held = buf
            return ""
        if xml:
            end += len(_XML_END)
        call = self._xml_of(buf[:end]) if xml else self._glm_of(buf[:end])
        if call is None:
            self._form = "json"
            return self._not_a_call(buf, out, end)
        return self._made(call, calls, buf[end:])

    def _made(self, call: ToolCall, calls: list[ToolCall], rest: str) -> str:
        """A finished call: numbered and kept; `rest` is read as what may follow a call."""
        call["function"]["index"] = self._count
        self._count += 1
        calls.append(call)
        self._state, self._at_start, self._form = _State.AFTER, True, "json"
        return rest

    def _xml_of(self, block: str) -> ToolCall | None:
        head_end = block.find(">")
        name = block[len(_XML_FUNCTION):head_end].strip()
        if name not in self.names:
            return None
        types = self._types_of(name)
        args = {}
        for match in _XML_PARAMETER.finditer(block, head_end):
            key = match.group(1).strip()
            args[key] = _typed(match.group(2).removeprefix("\n").removesuffix("\n"), types.get(key))
        return {"id": f"call_{uuid.uuid4().hex[:8]}", "function": {"index": 0, "name": name, "arguments": args}}

    def _mistral_call(self, buf: str, out: list[str], calls: list[ToolCall]) -> str:
        """`buf`: from the name on: `NAME[ARGS]{...}` (or `NAME[CALL_ID]ID[ARGS]{...}`), held until the JSON ends."""
        args_at = buf.find(_MISTRAL_ARGS)
        if args_at < 0:
            self._held = buf
            return ""
        value_at = args_at + len(_MISTRAL_ARGS)
        end = self._scan.scan(buf[value_at:]) if buf[value_at:].lstrip()[:1] in ("{", "") else 0
        if end < 0:
            self._held = buf
            return ""
        end += value_at
        name = buf[:args_at].split(_MISTRAL_ID)[0].strip()
        call = self._call_of({"name": name, "arguments": buf[value_at:end]}) if end > value_at else None
        if call is None:
            self._form = "json"
            return self._not_a_call(buf, out, max(end, value_at))
        return self._made(call, calls, buf[end:])

    def _deepseek_block(self, buf: str, out: list[str], calls: list[ToolCall]) -> str:
        """`buf`: DeepSeek's calls after the tag, held until `<｜tool▁calls▁end｜>`; calls if every one reads."""
        end = buf.find(_DEEPSEEK_END)
        if end < 0:
            self._held = buf
            return ""
        found = self._deepseek_calls(buf[:end])
        if not found:
            self._form = "json"
            return self._not_a_call(buf, out, end + len(_DEEPSEEK_END))
        for call in found:
            self._made(call, calls, "")
        return buf[end + len(_DEEPSEEK_END):]

    def _pythonic_block(self, buf: str, out: list[str], calls: list[ToolCall]) -> str:
        """`buf`: LFM2's calls after the tag, held until the closing tag: Python-style calls (or JSON ones); calls if
        every one is a call of a declared tool, else the block is text."""
        end = buf.find(self.closing)
        if end < 0:
            self._held = buf
            return ""
        block = buf[:end].strip()
        try:
            value = json.loads(block)
            items = value if isinstance(value, list) else [value]
        except ValueError:
            items = [{"name": name, "arguments": args} for name, args in pythonic_calls(block) or ()]
        found = [self._call_of(item) for item in items]
        if not found or any(call is None for call in found):
            self._form = "json"
            return self._not_a_call(buf, out, end + len(self.closing))
        for call in found:
            self._made(call, calls, "")  # type: ignore[arg-type]  # none is None
        return buf[end + len(self.closing):]

    def _functiongemma_call(self, buf: str, out: list[str], calls: list[ToolCall]) -> str:
        """`buf`: FunctionGemma's call after the tag, held until `<end_function_call>`: `call:NAME{ARGUMENTS}` of a
        declared tool (Ollama's functiongemma parser), else the block is text."""
        end = buf.find(self.closing)
        if end < 0:
            self._held = buf
            return ""
        match = _FUNCTIONGEMMA_CALL.search(buf[:end])
        name = match.group(1).strip() if match else ""
        if match is None or name not in self.names:
            self._form = "json"
            return self._not_a_call(buf, out, end + len(self.closing))
        call: ToolCall = {"id": f"call_{uuid.uuid4().hex[:8]}",
                          "function": {"index": 0, "name": name, "arguments": functiongemma_arguments(match.group(2))}}
        return self._made(call, calls, buf[end + len(self.closing):])

    def _deepseek_calls(self, block: str, closed: bool = True) -> list[ToolCall]:
        """Each `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>` (DeepSeek V3.1 and later) or
        `...begin｜>function<｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>` (R1 and its distills) in a
        block; [] if anything in it is not such a call of a declared tool. `closed`: the block's end was seen (else
        its text after the last finished call is dropped, as the answer stopped there)."""
        head, *parts = block.split(_DEEPSEEK_CALL)
        if head.strip() or not parts:
            return []
        if not closed and _DEEPSEEK_CALL_END not in parts[-1]:
            parts = parts[:-1]
        found: list[ToolCall] = []
        for part in parts:
            body, ended, rest = part.partition(_DEEPSEEK_CALL_END)
            name, sep, args = body.partition(_DEEPSEEK_SEP)
            if not ended or not sep or rest.strip():
                return []
            name = name.strip()
            if name == "function" and name not in self.names:  # R1's form: the type first, the name on its line
                name, _, args = args.partition("\n")
                args = args.strip().removeprefix("```json").removeprefix("```").removesuffix("```")
            call = self._call_of({"name": name.strip(), "arguments": args.strip()})
            if call is None:
                return []
            found.append(call)
        return found

    def _glm_of(self, block: str) -> ToolCall | None:
        """GLM's call (GLM 4.6 and 4.7, Laguna, Ling, Hunyuan write it): the name, then `<arg_key>K</arg_key>` and
        `<arg_value>V</arg_value>` for each argument, each value read as the tool's schema types it."""
        first = block.find(_GLM_KEY)
        name = (block if first < 0 else block[:first]).strip()
        if name not in self.names:
            return None
        types = self._types_of(name)
        args = {}
        for match in _GLM_ARGUMENT.finditer(block, max(first, 0)):
            key = match.group(1).strip()
            args[key] = _typed(match.group(2), types.get(key))
        return {"id": f"call_{uuid.uuid4().hex[:8]}", "function": {"index": 0, "name": name, "arguments": args}}

    def _not_a_call(self, buf: str, out: list[str], end: int = 1) -> str:
        """What looked like a call is text: the tag and the value (or its first character) go out, and the
        search goes on after them."""
        out.append(self._opening + buf[:end])
        self._state, self._at_start, self._opening = _State.TEXT, False, ""
        return buf[end:]

    def _after(self, buf: str) -> str:
        body = buf.lstrip().removeprefix("```").lstrip()
        if not body:
            self._held = buf
            return ""
        if self.closing:
            if body.startswith(self.closing):
                body = body[len(self.closing):]
            elif self.closing.startswith(body):
                self._held = buf
                return ""
        elif self.tag == MISTRAL_TAG and body[0] not in "{[<`" and self._may_name(body):
            # Ministral 3 writes its next call's name right after the last call's JSON, without another tag
            self._state, self._opening, self._form, self._scan = _State.CALL, "", "mistral", _JsonEnd()
            return body
        self._state = _State.TEXT
        return body

    # -- values ---------------------------------------------------------------------------------------------------

    def _calls(self, raw: str) -> list[ToolCall]:
        """The calls a complete JSON value makes, or none when any part of it is not a call to a declared tool."""
        try:
            value = json.loads(raw)
        except ValueError:
            return []
        items = value if isinstance(value, list) else [value]
        calls = []
        for item in items:
            call = self._call_of(item)
            if call is None:
                return []
            calls.append(call)
        if not calls:
            return []
        for call in calls:
            call["function"]["index"] = self._count
            self._count += 1
        return calls

    def _call_of(self, item: Any) -> ToolCall | None:
        if not isinstance(item, dict):
            return None
        fn = item.get("function", item)
        if not isinstance(fn, dict):
            return None
        name = fn.get("name", fn.get("tool_name"))  # tool_name: command-r's Action list
        args = fn.get("arguments", fn.get("parameters", {}))
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return None
        if not isinstance(name, str) or name not in self.names or not isinstance(args, dict):
            return None
        return {"id": f"call_{uuid.uuid4().hex[:8]}", "function": {"index": 0, "name": name, "arguments": args}}


def functiongemma_arguments(text: str) -> dict[str, Any]:
    """FunctionGemma's `key:VALUE,...` as Ollama's functiongemma parser reads it: split at commas outside brackets
    and `<escape>` strings; each key up to its first colon; a value `<escape>text<escape>` is the text, `true` and
    `false` booleans, a number a number, `[...]` a list and `{...}` an object of such values, anything else the
    text as written."""
    args: dict[str, Any] = {}
    for part in _functiongemma_parts(text):
        key, colon, value = part.partition(":")
        if colon:
            args[key] = _functiongemma_value(value)
    return args


def _functiongemma_parts(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth, in_escape, i = 0, False, 0
    while i < len(text):
        if text.startswith(_ESCAPE, i):
            in_escape = not in_escape
            current.append(_ESCAPE)
            i += len(_ESCAPE)
            continue
        ch = text[i]
        i += 1
        if not in_escape:
            if ch in "{[":
                depth += 1
            elif ch in "}]":
                depth -= 1
            elif ch == "," and depth == 0:
                if current:
                    parts.append("".join(current))
                    current = []
                continue
        current.append(ch)
    if current:
        parts.append("".join(current))
    return parts


_INTEGER = re.compile(r"-?(0|[1-9][0-9]*)")
_FLOAT = re.compile(r"\s*[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _functiongemma_value(value: str) -> Any:
    if value.startswith(_ESCAPE) and value.endswith(_ESCAPE) and len(value) >= 2 * len(_ESCAPE):
        return value[len(_ESCAPE):len(value) - len(_ESCAPE)]
    if value in ("true", "false"):
        return value == "true"
    if _INTEGER.fullmatch(value):
        return int(value)
    if _FLOAT.fullmatch(value):
        return float(value)
    if value.startswith("[") and value.endswith("]"):
        return [_functiongemma_value(part) for part in _functiongemma_parts(value[1:-1])]
    if value.startswith("{") and value.endswith("}"):
        return {key: _functiongemma_value(v) for key, colon, v in
                (part.partition(":") for part in _functiongemma_parts(value[1:-1])) if colon}
    return value


def pythonic_calls(text: str) -> list[tuple[str, dict[str, Any]]] | None:
    """Python-style calls (LFM2's `[get_weather(city='Paris', days=2), now()]`, one call without the list, or OLMo
    3's calls one a line) as (name, arguments); None if the text is anything else. Read with Python's parser,
    never run: only keyword arguments of literal values (strings, numbers, lists, dicts, and true/false/null as
    JSON writes them)."""
    if len(text) > _PYTHONIC_LIMIT:
        return None
    try:
        node = ast.parse(text.strip(), mode="eval").body
        items = node.elts if isinstance(node, ast.List) else [node]
    except SyntaxError:  # calls one a line
        try:
            lines = ast.parse(text.strip(), mode="exec").body
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        if not all(isinstance(line, ast.Expr) for line in lines):
            return None
        items = [line.value for line in lines if isinstance(line, ast.Expr)]
    except (ValueError, RecursionError, MemoryError):
        return None
    found = []
    for item in items:
        if not isinstance(item, ast.Call) or item.args or not isinstance(item.func, (ast.Name, ast.Attribute)):
            return None
        try:
            args = {kw.arg: _literal(kw.value) for kw in item.keywords if kw.arg is not None}
        except (ValueError, RecursionError):
            return None
        if len(args) != len(item.keywords):  # **kwargs
            return None
        found.append((ast.unparse(item.func), args))
    return found or None


_PYTHONIC_LIMIT = 1 << 18
_JSON_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}


def _literal(node: ast.expr) -> Any:
    """A literal's value as JSON has it; ValueError for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
        return node.value
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_literal(e) for e in node.elts]
    if isinstance(node, ast.Dict):
        out = {}
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                raise ValueError("** in a dict")
            name = _literal(key)
            if not isinstance(name, str):
                raise ValueError("a key that is not a string")
            out[name] = _literal(value)
        return out
    raise ValueError("not a literal")


def _parameter_types(function: Mapping[str, Any]) -> dict[str, str]:
    """Each parameter's JSON-schema type (the first named, where a list is given); none where it says none."""
    params = function.get("parameters")
    props = params.get("properties") if isinstance(params, Mapping) else None
    out: dict[str, str] = {}
    for key, schema in (props or {}).items() if isinstance(props, Mapping) else ():
        kind = schema.get("type") if isinstance(schema, Mapping) else None
        if isinstance(kind, list):
            kind = next((k for k in kind if isinstance(k, str) and k != "null"), None)
        if isinstance(kind, str):
            out[str(key)] = kind
    return out


def _typed(text: str, kind: str | None) -> Any:
    """An XML parameter's text as its schema's type says (text where it does not read as that type)."""
    if kind in (None, "string"):
        return text
    value = text.strip()
    if kind == "boolean":
        return {"true": True, "false": False}.get(value.lower(), text)
    try:
        parsed = json.loads(value)
    except ValueError:
        return text
    if kind == "integer" and isinstance(parsed, int) and not isinstance(parsed, bool):
        return parsed
    if kind == "number" and isinstance(parsed, (int, float)) and not isinstance(parsed, bool):
        return parsed
    if (kind == "object" and isinstance(parsed, dict)) or (kind == "array" and isinstance(parsed, list)):
        return parsed
    if kind == "null" and parsed is None:
        return None
    return text


def parse_tool_calls(text: str, tools: Sequence[Mapping[str, Any]], tag: str = DEFAULT_TAG
                     ) -> tuple[str, list[ToolCall]]:
    """A whole answer at once: (its text, its calls)."""
    parser = ToolCallParser(tools, tag)
    text_now, calls = parser.add(text)
    text_end, more = parser.finish()
    return text_now + text_end, calls + more
