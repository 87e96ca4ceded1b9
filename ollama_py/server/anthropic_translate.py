"""Anthropic Messages wire format <-> the shared inference path: pure translation, no I/O.

A /v1/messages request becomes native messages (the `system` field first; a `system`-role message inside
`messages` stays where it stands, as Ollama renders it, so a prompt cached up to it is reused on the next turn;
text and image blocks joined into one message; tool_use blocks -> tool_calls; tool_result blocks -> `tool`
messages, placed before the user's text) and Ollama options (max_tokens -> num_predict, stop_sequences -> stop,
temperature, top_p, top_k). Thinking, as Ollama maps it: `thinking` {"type": "enabled"} (budget_tokens -> the
reasoning_budget option) or "disabled" decides; "adaptive" or none lets `output_config.effort` pick a think level
(low, medium, high, max; xhigh -> high as Ollama; minimal -> low), which becomes a thinking budget
(template/thinking.py); `thinking.display` "omitted" sends the thinking blocks empty, as Anthropic does. Fields
Ollama ignores are ignored (metadata, cache_control, service_tier, ...), with a debug log for those that ask for
something: `context_management`'s clear_thinking edit is applied, its other edits are not. Delta/Final events
become a Message object or the SSE event sequence:

    message_start, ping, [content_block_start, content_block_delta*, content_block_stop]*,
    message_delta (stop_reason, usage), message_stop

stop_reason: tool_use when tools were called, max_tokens when the limit was hit, stop_sequence (with the
matched sequence) when a stop sequence ended the text, end_turn otherwise.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from ollama_py.api.wire import Message, Tool, ToolCall
from ollama_py.errors import BadRequest
from ollama_py.server.bodies import base64_data
from ollama_py.server.bodies import field as typed_field
from ollama_py.server.completion import Final
from ollama_py.template.forced_calls import ForcedCall, forced
from ollama_py.template.gojson import marshal_arguments

Event = tuple[str, dict[str, Any]]

log = logging.getLogger(__name__)

# output_config.effort -> Ollama's think level. Ollama's Anthropic route folds xhigh into high (its OpenAI routes
# take xhigh to max); minimal, which OpenAI clients send, is low as on the OpenAI routes.
_EFFORTS = {"low": "low", "medium": "medium", "high": "high", "max": "max", "xhigh": "high", "minimal": "low"}


@dataclass(frozen=True, slots=True)
class MessagesParams:
    messages: list[Message]
    options: dict[str, Any]
    tools: list[Tool] | None
    stream: bool
    estimated_input_tokens: int  # for message_start; the real count comes with message_delta
    think: bool | str | None = None  # thinking enabled/disabled, or an effort's level (budget_tokens: an option)
    show_thinking: bool = True  # thinking.display "omitted": thinking blocks go out empty (the model still thinks)
    forced: ForcedCall | None = None  # tool_choice {"type": "any"} or {"type": "tool", "name": ...}: a call
    single_call: bool = False  # tool_choice's disable_parallel_tool_use: at most one tool_use block


def new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


# -- requests ---------------------------------------------------------------------------------------


def _image(source: Any) -> str:
    if not isinstance(source, dict):
        raise BadRequest("invalid image source")
    if source.get("type") != "base64":
        raise BadRequest(f"invalid image source type: {source.get('type')}. Only base64 images are supported.")
    return base64_data(source.get("data"), "invalid base64 image data: data must be a string",
                       "invalid base64 image data")


def _tool_result(block: dict[str, Any]) -> Message:
    content = block.get("content")
    text, images = "", []
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for item in content:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "text" and isinstance(item.get("text"), str):
                parts.append(item["text"])
            elif item.get("type") == "image":
                images.append(_image(item.get("source")))
        text = "".join(parts)
    msg: Message = {"role": "tool", "content": text}
    if images:
        msg["images"] = images
    if isinstance(block.get("tool_use_id"), str):
        msg["tool_call_id"] = block["tool_use_id"]
    return msg


def _convert_message(i: int, msg: Any) -> list[Message]:
    if not isinstance(msg, dict):
        raise BadRequest(f"messages[{i}] must be an object")
    role = msg.get("role")
    role = role.lower() if isinstance(role, str) else role  # as Ollama's api.Message does
    if role not in ("user", "assistant", "system"):
        raise BadRequest(f"messages[{i}].role must be \"user\", \"assistant\" or \"system\"")
    content = msg.get("content")
    if role == "system":  # a mid-conversation system message (Claude Code's reminders): rendered where it stands
        text = _system(content, f"messages[{i}].content")
        return [{"role": "system", "content": text}] if text else []
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        raise BadRequest(f"messages[{i}].content must be a string or an array of content blocks")
    texts: list[str] = []
    images: list[str] = []
    calls: list[ToolCall] = []
    results: list[Message] = []
    thoughts: list[str] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text":
            if isinstance(block.get("text"), str):
                texts.append(block["text"])
        elif kind == "image":
            images.append(_image(block.get("source")))
        elif kind == "tool_use":
            if not block.get("id"):
                raise BadRequest("tool_use block missing required 'id' field")
            if not block.get("name"):
                raise BadRequest("tool_use block missing required 'name' field")
            args = block.get("input")
            calls.append({"id": block["id"],
                          "function": {"name": block["name"], "arguments": args if isinstance(args, dict) else {}}})
        elif kind == "tool_result":
            results.append(_tool_result(block))
        elif kind == "server_tool_use" and isinstance(block.get("name"), str):  # a past server tool call, as Ollama
            args = block.get("input")
            calls.append({"id": str(block.get("id") or ""),
                          "function": {"name": block["name"], "arguments": args if isinstance(args, dict) else {}}})
        elif kind == "web_search_tool_result":
            results.append({"role": "tool", "content": _search_results(block.get("content")),
                            "tool_call_id": str(block.get("tool_use_id") or "")})
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thoughts.append(block["thinking"])
        # redacted thinking, documents, ...: not supported; dropped as Ollama drops unknown blocks
    out: list[Message] = []
    if role == "user":
        out.extend(results)  # the answers to the previous turn's calls come before what the user adds
    text = "".join(texts)
    if text or images or calls or (thoughts and role == "assistant"):
        m: Message = {"role": role, "content": text}
        if thoughts and role == "assistant":
            m["thinking"] = "".join(thoughts)
        if images:
            m["images"] = images
        if calls:
            m["tool_calls"] = calls
        out.append(m)
    if role != "user":
        out.extend(results)
    return out


def _search_results(content: Any) -> str:
    """A past web_search_tool_result as the text the model saw: one "- title: url" line a result, or the error."""
    if isinstance(content, str):
        return content
    items = content if isinstance(content, list) else [content]
    lines = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "web_search_tool_result_error":
            code = item.get("error_code")
            return f"web_search_tool_result_error: {code}" if code else "web_search_tool_result_error"
        if item.get("type") == "web_search_result":
            lines.append(f"- {item.get('title') or ''}: {item.get('url') or ''}\n")
    return "".join(lines)


def _system(value: Any, where: str = "system") -> str:
    """A system prompt: a string, or text blocks (their cache_control marks are for Anthropic's cache)."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(b["text"] for b in value
                       if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))
    raise BadRequest(f"{where} must be a string or an array of text blocks")


def _tools(raw: Any, choice: Any) -> list[Tool] | None:
    """Client tools as functions (Anthropic's schema-less text_editor, bash and memory tools with the input they
    take: _schema_less). Anthropic's server-side web search (type web_search_*) is run by Ollama on ollama.com;
    ollama-py makes no connection its operator did not choose, so the tool is not offered to the model (which
    answers from what it has, or with the client's own tools). tool_choice {"type": "none"}: no tools."""
    if not raw:
        return None
    if not isinstance(raw, list):
        raise BadRequest("tools must be an array")
    if isinstance(choice, dict) and choice.get("type") == "none":
        return None
    out: list[Tool] = []
    for t in raw:
        if isinstance(t, dict) and str(t.get("type") or "").startswith("web_search"):
            log.debug("anthropic: server tool %s not offered: web search is not available", t.get("type"))
            continue
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise BadRequest("each tool needs a name")
        schema = t.get("input_schema")
        if schema is not None and not isinstance(schema, dict):
            raise BadRequest(f"invalid input_schema for tool {json.dumps(t['name'])}")
        described = _schema_less(str(t.get("type") or "")) if schema is None else None
        description, schema = described or (t.get("description") or "", schema)
        out.append({"type": "function", "function": {"name": t["name"], "description": description,
                                                     "parameters": schema or {"type": "object", "properties": {}}}})
    return out or None


def _forced(choice: Any, tools: list[Tool] | None) -> ForcedCall | None:
    """tool_choice {"type": "any"} (a call of any tool) or {"type": "tool", "name": ...} (that one): the answer is
    generated as the call (template/forced_calls.py). "auto", "none": None."""
    if not isinstance(choice, dict):
        return None
    if choice.get("type") == "any":
        return forced(tools, None)
    if choice.get("type") == "tool":
        if not isinstance(choice.get("name"), str):
            raise BadRequest("tool_choice.name: Field required")
        return forced(tools, choice["name"])
    return None


def _one_tool_use(choice: Any) -> bool:
    """tool_choice's disable_parallel_tool_use (on "auto", "any" and "tool"): at most one tool_use block."""
    if not isinstance(choice, dict) or choice.get("disable_parallel_tool_use") is None:
        return False
    if not isinstance(choice["disable_parallel_tool_use"], bool):
        raise BadRequest("tool_choice.disable_parallel_tool_use: Input should be a valid boolean")
    return choice["disable_parallel_tool_use"]


_EDITOR_COMMANDS = ["view", "create", "str_replace", "insert"]
_FILE_FIELDS = {
    "path": {"type": "string", "description": "Absolute path to the file or directory"},
    "file_text": {"type": "string", "description": "create: the whole content of the new file"},
    "old_str": {"type": "string", "description": "str_replace: the exact text to replace, unique in the file"},
    "new_str": {"type": "string", "description": "str_replace: the text to put in its place; insert: the text"},
    "insert_line": {"type": "integer", "description": "insert: the line after which to insert (0: the start)"},
    "view_range": {"type": "array", "items": {"type": "integer"},
                   "description": "view: [first, last] line, 1-based; -1 as last: to the end"},
}


def _schema_less(kind: str) -> tuple[str, dict[str, Any]] | None:
    """Anthropic's client tools that come without an input_schema (the model behind that API knows them): the
    description and schema a local model needs to call them, as Anthropic documents their input. None for
    another type (offered as declared)."""
    if kind.startswith("text_editor_"):
        commands = _EDITOR_COMMANDS if kind >= "text_editor_20250429" else [*_EDITOR_COMMANDS, "undo_edit"]
        return ("View, create and edit text files: view shows a file with line numbers (or lists a directory), "
                "create writes a new file, str_replace replaces one exact, unique string, insert adds text after "
                "a line.", {"type": "object", "required": ["command", "path"], "properties": {
                    "command": {"type": "string", "enum": commands}, **_FILE_FIELDS}})
    if kind.startswith("bash_"):
        return ("Run a command in a persistent bash shell; its output comes back.", {
            "type": "object", "properties": {
                "command": {"type": "string", "description": "The bash command to run"},
                "restart": {"type": "boolean", "description": "Restart the shell instead of running a command"}}})
    if kind.startswith("memory_"):
        return ("A memory directory (/memories) kept across conversations: view, create, str_replace, insert, "
                "delete or rename its files.", {"type": "object", "required": ["command"], "properties": {
                    "command": {"type": "string",
                                "enum": ["view", "create", "str_replace", "insert", "delete", "rename"]},
                    **_FILE_FIELDS, "insert_text": {"type": "string", "description": "insert: the text"},
                    "old_path": {"type": "string", "description": "rename: the current path"},
                    "new_path": {"type": "string", "description": "rename: the new path"}}})
    return None


def _estimate_tokens(body: dict[str, Any], size: int | None) -> int:
    """A rough count (4 characters a token) for message_start, before the prompt has been evaluated: of the
    request's JSON, `size` bytes as it came (an agent's 50 KB request encoded again took ~0.1 ms before the runner
    could start), else its system, messages and tools encoded again."""
    if not size:
        size = len(json.dumps(body.get("system") or "")) + len(json.dumps(body.get("messages") or []))
        size += len(json.dumps(body.get("tools") or []))
    return max(size // 4, 1)


def parse_messages(body: dict[str, Any], size: int | None = None) -> MessagesParams:
    """Validate and translate; the texts of errors are Ollama's. `size`: the request body's length in bytes,
    for the estimate of its tokens."""
    if not typed_field(body, "model", str):
        raise BadRequest("model is required")
    max_tokens = typed_field(body, "max_tokens", int, 0)
    if max_tokens <= 0:
        raise BadRequest("max_tokens is required and must be positive")
    raw = body.get("messages")
    if not raw:
        raise BadRequest("messages is required")
    if not isinstance(raw, list):
        raise BadRequest("messages must be an array")
    messages: list[Message] = []
    if system := _system(body.get("system")):
        messages.append({"role": "system", "content": system})
    for i, msg in enumerate(raw):
        messages.extend(_convert_message(i, msg))
    messages = _context_management(body.get("context_management"), messages)
    if body.get("metadata") is not None:
        log.debug("anthropic: metadata ignored (nothing in it changes the answer)")
    options: dict[str, Any] = {"num_predict": max_tokens}
    for key, kind in (("temperature", float), ("top_p", float), ("top_k", int)):
        if (value := typed_field(body, key, kind)) is not None:
            options[key] = value
    stops = typed_field(body, "stop_sequences", list)
    if stops:
        if not all(isinstance(s, str) for s in stops):
            raise BadRequest("stop_sequences must be an array of strings")
        options["stop"] = stops
    if (budget := _budget_tokens(body.get("thinking"))) is not None:
        options["reasoning_budget"] = budget
    tools = _tools(body.get("tools"), body.get("tool_choice"))
    return MessagesParams(messages=messages, options=options, tools=tools,
                          forced=_forced(body.get("tool_choice"), tools),
                          single_call=_one_tool_use(body.get("tool_choice")),
                          stream=typed_field(body, "stream", bool, False),
                          estimated_input_tokens=_estimate_tokens(body, size),
                          think=_thinking(body.get("thinking"), _effort(body.get("output_config"))),
                          show_thinking=not (isinstance(body.get("thinking"), dict)
                                             and body["thinking"].get("display") == "omitted"))


def _budget_tokens(value: Any) -> int | None:
    """thinking.budget_tokens of {"type": "enabled"}: the most tokens the model may think (the reasoning_budget
    option, which llama-server enforces by closing the thinking block)."""
    if not isinstance(value, dict) or value.get("type") != "enabled" or value.get("budget_tokens") is None:
        return None
    budget = value["budget_tokens"]
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise BadRequest("thinking.budget_tokens must be a non-negative integer")
    return budget


def _effort(value: Any) -> str | None:
    """output_config.effort as a think level (None: not given)."""
    if not isinstance(value, dict) or value.get("effort") in (None, ""):
        return None
    effort = value["effort"]
    level = _EFFORTS.get(effort.strip().lower()) if isinstance(effort, str) else None
    if level is None:
        raise BadRequest(f"invalid output_config.effort: {json.dumps(effort)} "
                         '(must be "low", "medium", "high", "xhigh" or "max")')
    return level


def _thinking(value: Any, effort: str | None) -> bool | str | None:
    """The think value: "disabled" -> False; "enabled" -> True, or the effort's level where one is given and
    budget_tokens is not (the level is then the budget); "adaptive" or no thinking field -> the effort's level,
    else None (the model's default: a thinking model thinks)."""
    if value is None:
        return effort
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "disabled":
        return False
    if kind == "enabled":
        return effort if effort is not None and value.get("budget_tokens") is None else True
    if kind == "adaptive":
        return effort
    raise BadRequest('thinking.type must be "enabled", "disabled" or "adaptive"')


def _context_management(value: Any, messages: list[Message]) -> list[Message]:
    """Anthropic's context editing, as far as it can be applied to a prompt: clear_thinking_* drops the thinking
    of all but the last `keep` thinking turns ("all": none dropped). The other edits (clear_tool_uses_*, which
    count tokens against triggers) are ignored with a debug log."""
    edits = value.get("edits") if isinstance(value, dict) else None
    for edit in edits if isinstance(edits, list) else []:
        kind = str(edit.get("type") or "") if isinstance(edit, dict) else ""
        if not kind.startswith("clear_thinking"):
            log.debug("anthropic: context_management edit %r not applied", kind)
            continue
        keep = edit.get("keep", {"type": "thinking_turns", "value": 1})
        if keep == "all":
            continue
        turns = keep.get("value") if isinstance(keep, dict) else None
        if isinstance(turns, bool) or not isinstance(turns, int) or turns < 0:
            raise BadRequest("context_management clear_thinking keep must be \"all\" or "
                             '{"type": "thinking_turns", "value": n}')
        thinking = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and m.get("thinking")]
        cleared = set(thinking[:len(thinking) - turns] if turns else thinking)
        messages = [{k: v for k, v in m.items() if k != "thinking"} if i in cleared else m  # type: ignore[misc]
                    for i, m in enumerate(messages)]
    return messages


# -- responses --------------------------------------------------------------------------------------


def stop_reason(final: Final) -> tuple[str, str | None]:
    """(stop_reason, stop_sequence)."""
    if final.tool_calls:
        return "tool_use", None
    if final.done_reason == "length":
        return "max_tokens", None
    if final.stop_word:
        return "stop_sequence", final.stop_word
    return "end_turn", None


def _usage(final: Final) -> dict[str, int]:
    return {"input_tokens": final.prompt_tokens, "output_tokens": final.eval_count}


def _tool_use(call: ToolCall) -> dict[str, Any]:
    fn = call["function"]
    tool_id = call.get("id") or f"toolu_{uuid.uuid4().hex[:24]}"
    return {"type": "tool_use", "id": tool_id, "name": fn["name"], "input": fn.get("arguments") or {}}


def message(msg_id: str, model: str, final: Final, show_thinking: bool = True) -> dict[str, Any]:
    """The non-streaming response."""
    content: list[dict[str, Any]] = []
    if final.thinking:
        content.append({"type": "thinking", "thinking": final.thinking if show_thinking else "", "signature": ""})
    if final.text:  # the text before a call is a block of its own, ahead of the tool_use blocks
        content.append({"type": "text", "text": final.text})
    content.extend(_tool_use(c) for c in final.tool_calls or [])
    reason, sequence = stop_reason(final)
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": sequence, "usage": _usage(final)}


def is_last(event: tuple[str, dict[str, Any]]) -> bool:
    """A message stream's last event (it leaves with the end of the body)."""
    return event[0] == "message_stop"


@dataclass(slots=True)
class MessageStream:
    """Turns Delta texts and thoughts and the Final into Anthropic's named SSE events, keeping the block
    bookkeeping."""

    msg_id: str
    model: str
    input_tokens: int
    show_thinking: bool = True  # False: a thinking block opens and closes with no thinking_delta in it
    _index: int = 0
    _open: str | None = None  # the kind of the open content block: "text", "thinking" or none
    _started: bool = False

    def start(self) -> list[Event]:
        self._started = True
        return [
            ("message_start", {"type": "message_start", "message": {
                "id": self.msg_id, "type": "message", "role": "assistant", "model": self.model, "content": [],
                "stop_reason": None, "stop_sequence": None,
                "usage": {"input_tokens": self.input_tokens, "output_tokens": 0}}}),
            ("ping", {"type": "ping"}),
        ]

    def text(self, text: str) -> list[Event]:
        return self._delta("text", text)

    def thinking(self, text: str) -> list[Event]:
        return self._delta("thinking", text)

    def _delta(self, kind: str, text: str) -> list[Event]:
        """A text or thinking delta, in a block of that kind (closing the other kind's block first)."""
        events: list[Event] = [] if self._started else self.start()
        if not text:
            return events
        if self._open != kind:
            events += self._close_block()
            self._open = kind
            events.append(("content_block_start", {"type": "content_block_start", "index": self._index,
                                                   "content_block": {"type": kind, kind: ""}}))
        if kind == "text" or self.show_thinking:
            events.append(self.delta_event(kind, text, self._index))
        return events

    def delta_event(self, kind: str, text: str, number: int) -> Event:
        """A text or thinking delta in the block numbered `number`."""
        return "content_block_delta", {"type": "content_block_delta", "index": number,
                                       "delta": {"type": f"{kind}_delta", kind: text}}

    def steady_delta(self, kind: str, text: str) -> tuple[str, int] | None:
        """Where `text` (or `thinking`) would give one event, the delta in the open block of its kind: the
        delta's layout (its kind) and number (the block's index), the text taken as `text` takes it; else None,
        nothing taken. (The lane formats such a delta into its layout: streaming._block_putters.)"""
        if self._open == kind and text and (kind == "text" or self.show_thinking):
            return kind, self._index
        return None

    def _close_block(self) -> list[Event]:
        if self._open is None:
            return []
        self._open = None
        self._index += 1
        return [("content_block_stop", {"type": "content_block_stop", "index": self._index - 1})]

    def finish(self, final: Final) -> list[Event]:
        events: list[Event] = [] if self._started else self.start()
        if not final.tool_calls:
            events += self._close_block()
        for call in final.tool_calls or []:
            events += self._close_block()
            block = _tool_use(call)
            args = marshal_arguments(block["input"])
            events += [
                ("content_block_start", {"type": "content_block_start", "index": self._index,
                                         "content_block": {**block, "input": {}}}),
                ("content_block_delta", {"type": "content_block_delta", "index": self._index,
                                         "delta": {"type": "input_json_delta", "partial_json": args}}),
                ("content_block_stop", {"type": "content_block_stop", "index": self._index}),
            ]
            self._index += 1
        reason, sequence = stop_reason(final)
        events += [
            ("message_delta", {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
                               "usage": _usage(final)}),
            ("message_stop", {"type": "message_stop"}),
        ]
        return events
