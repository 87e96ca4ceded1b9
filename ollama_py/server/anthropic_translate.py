"""Anthropic Messages wire format <-> the shared inference path: pure translation, no I/O.

A /v1/messages request becomes native messages (system first; text and image blocks joined into one message;
tool_use blocks -> tool_calls; tool_result blocks -> `tool` messages, placed before the user's text) and Ollama
options (max_tokens -> num_predict, stop_sequences -> stop, temperature, top_p, top_k). Delta/Final events
become a Message object or the SSE event sequence:

    message_start, ping, [content_block_start, content_block_delta*, content_block_stop]*,
    message_delta (stop_reason, usage), message_stop

stop_reason: tool_use when tools were called, max_tokens when the limit was hit, stop_sequence (with the
matched sequence) when a stop sequence ended the text, end_turn otherwise.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from dataclasses import dataclass
from typing import Any

from ollama_py.api.wire import Message, Tool, ToolCall
from ollama_py.errors import BadRequest
from ollama_py.server.bodies import field as typed_field
from ollama_py.server.completion import Final

Event = tuple[str, dict[str, Any]]


@dataclass(frozen=True, slots=True)
class MessagesParams:
    messages: list[Message]
    options: dict[str, Any]
    tools: list[Tool] | None
    stream: bool
    estimated_input_tokens: int  # for message_start; the real count comes with message_delta
    think: bool | None = None  # thinking {"type": "enabled"} / {"type": "disabled"} (budget_tokens: an option)


def new_message_id() -> str:
    return f"msg_{uuid.uuid4().hex[:24]}"


# -- requests ---------------------------------------------------------------------------------------


def _image(source: Any) -> str:
    if not isinstance(source, dict):
        raise BadRequest("invalid image source")
    if source.get("type") != "base64":
        raise BadRequest(f"invalid image source type: {source.get('type')}. Only base64 images are supported.")
    data = source.get("data")
    if not isinstance(data, str):
        raise BadRequest("invalid base64 image data: data must be a string")
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as e:
        raise BadRequest(f"invalid base64 image data: {e}") from None
    return data


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
    if role not in ("user", "assistant"):
        raise BadRequest(f"messages[{i}].role must be \"user\" or \"assistant\"")
    content = msg.get("content")
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
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            thoughts.append(block["thinking"])
        # redacted thinking, documents, server tools: not supported; dropped as Ollama drops unknown blocks
    out: list[Message] = []
    if role == "user":
        out.extend(results)  # the answers to the previous turn's calls come before what the user adds
    text = "".join(texts)
    if text or images or calls:
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


def _system(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(b["text"] for b in value
                       if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str))
    raise BadRequest("system must be a string or an array of text blocks")


def _tools(raw: Any) -> list[Tool] | None:
    if not raw:
        return None
    if not isinstance(raw, list):
        raise BadRequest("tools must be an array")
    out: list[Tool] = []
    for t in raw:
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise BadRequest("each tool needs a name")
        schema = t.get("input_schema")
        if schema is not None and not isinstance(schema, dict):
            raise BadRequest(f"invalid input_schema for tool {json.dumps(t['name'])}")
        out.append({"type": "function", "function": {"name": t["name"], "description": t.get("description") or "",
                                                     "parameters": schema or {"type": "object", "properties": {}}}})
    return out


def _estimate_tokens(body: dict[str, Any]) -> int:
    """A rough count (4 characters a token) for message_start, before the prompt has been evaluated."""
    size = len(json.dumps(body.get("system") or "")) + len(json.dumps(body.get("messages") or []))
    size += len(json.dumps(body.get("tools") or []))
    return max(size // 4, 1)


def parse_messages(body: dict[str, Any]) -> MessagesParams:
    """Validate and translate; the texts of errors are Ollama's."""
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
    return MessagesParams(messages=messages, options=options, tools=_tools(body.get("tools")),
                          stream=typed_field(body, "stream", bool, False),
                          estimated_input_tokens=_estimate_tokens(body), think=_thinking(body.get("thinking")))


def _budget_tokens(value: Any) -> int | None:
    """thinking.budget_tokens of {"type": "enabled"}: the most tokens the model may think (the reasoning_budget
    option, which llama-server enforces by closing the thinking block)."""
    if not isinstance(value, dict) or value.get("type") != "enabled" or value.get("budget_tokens") is None:
        return None
    budget = value["budget_tokens"]
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
        raise BadRequest("thinking.budget_tokens must be a non-negative integer")
    return budget


def _thinking(value: Any) -> bool | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind not in ("enabled", "disabled"):
        raise BadRequest('thinking.type must be "enabled" or "disabled"')
    return kind == "enabled"


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


def message(msg_id: str, model: str, final: Final) -> dict[str, Any]:
    """The non-streaming response."""
    content: list[dict[str, Any]] = []
    if final.thinking:
        content.append({"type": "thinking", "thinking": final.thinking, "signature": ""})
    if final.text:  # the text before a call is a block of its own, ahead of the tool_use blocks
        content.append({"type": "text", "text": final.text})
    content.extend(_tool_use(c) for c in final.tool_calls or [])
    reason, sequence = stop_reason(final)
    return {"id": msg_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": sequence, "usage": _usage(final)}


@dataclass(slots=True)
class MessageStream:
    """Turns Delta texts and thoughts and the Final into Anthropic's named SSE events, keeping the block
    bookkeeping."""

    msg_id: str
    model: str
    input_tokens: int
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
        events.append(("content_block_delta", {"type": "content_block_delta", "index": self._index,
                                               "delta": {"type": f"{kind}_delta", kind: text}}))
        return events

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
            args = json.dumps(block["input"])
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
