"""Anthropic Messages translation (server/anthropic_translate.py): pure functions, no server."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from ollama_py.errors import BadRequest
from ollama_py.server import anthropic_translate as ant
from ollama_py.server.completion import Final
from tests.helpers.completions import final

BASE = {"model": "smollm2:135m", "max_tokens": 16}
CALL = {"id": "call_ab", "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}}


@pytest.mark.parametrize("body, message", [
    ({"max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}, "model is required"),
    ({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "max_tokens is required and must be positive"),
    ({"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "hi"}]},
     "max_tokens is required and must be positive"),
    ({**BASE, "messages": []}, "messages is required"),
    ({**BASE, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}]}]},
     "invalid image source type: url. Only base64 images are supported."),
    ({**BASE, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "f", "input": {}}]}]},
     "tool_use block missing required 'id' field"),
], ids=["no-model", "no-max_tokens", "zero-max_tokens", "no-messages", "url-image", "tool_use-without-id"])
def test_request_errors(body: dict[str, Any], message: str) -> None:
    with pytest.raises(BadRequest) as e:
        ant.parse_messages(body)
    assert str(e.value) == message


@pytest.mark.parametrize("extra, options", [
    ({}, {"num_predict": 16}),
    ({"temperature": 0, "top_p": 0.9, "top_k": 20}, {"num_predict": 16, "temperature": 0, "top_p": 0.9, "top_k": 20}),
    ({"stop_sequences": ["\n\n"]}, {"num_predict": 16, "stop": ["\n\n"]}),
], ids=["max_tokens", "sampling", "stop_sequences"])
def test_options(extra: dict[str, Any], options: dict[str, Any]) -> None:
    params = ant.parse_messages({**BASE, "messages": [{"role": "user", "content": "hi"}], **extra})
    assert params.options == options


@pytest.mark.parametrize("system", ["be brief", [{"type": "text", "text": "be "}, {"type": "text", "text": "brief"}]],
                         ids=["string", "blocks"])
def test_system_comes_first(system: Any) -> None:
    params = ant.parse_messages({**BASE, "system": system, "messages": [{"role": "user", "content": "hi"}]})
    assert params.messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]


def test_blocks_tool_use_and_tool_result() -> None:
    img = base64.b64encode(b"fake image").decode()
    params = ant.parse_messages({**BASE, "tools": [
        {"name": "get_weather", "description": "weather", "input_schema": {"type": "object"}}], "messages": [
        {"role": "user", "content": [{"type": "text", "text": "Look: "},
                                     {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                                  "data": img}}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Checking."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                                           "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "text", "text": "sunny"}]},
                                     {"type": "text", "text": "And tomorrow?"}]},
    ]})
    assert params.messages == [
        {"role": "user", "content": "Look: ", "images": [img]},
        {"role": "assistant", "content": "Checking.",
         "tool_calls": [{"id": "toolu_1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "toolu_1"},
        {"role": "user", "content": "And tomorrow?"},
    ]
    assert params.tools == [{"type": "function", "function": {"name": "get_weather", "description": "weather",
                                                              "parameters": {"type": "object"}}}]


@pytest.mark.parametrize("fin, reason, sequence", [
    (final(), "end_turn", None),
    (final(done_reason="length"), "max_tokens", None),
    (final(stop_word="\n\n"), "stop_sequence", "\n\n"),
    (final(tool_calls=[CALL]), "tool_use", None),
], ids=["end_turn", "max_tokens", "stop_sequence", "tool_use"])
def test_stop_reason(fin: Final, reason: str, sequence: str | None) -> None:
    assert ant.stop_reason(fin) == (reason, sequence)


def test_message_object() -> None:
    assert ant.message("msg_1", "smollm2:135m", final()) == {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "smollm2:135m",
        "content": [{"type": "text", "text": "hello"}], "stop_reason": "end_turn", "stop_sequence": None,
        "usage": {"input_tokens": 12, "output_tokens": 5},
    }
    with_tool = ant.message("msg_1", "m", final(text="", tool_calls=[CALL]))
    assert with_tool["content"] == [{"type": "tool_use", "id": "call_ab", "name": "get_weather",
                                     "input": {"city": "Paris"}}]
    assert with_tool["stop_reason"] == "tool_use"


def test_message_keeps_the_text_before_a_tool_call_as_a_text_block() -> None:
    out = ant.message("msg_1", "m", final(text="Sure, let me check. ", tool_calls=[CALL]))
    assert [(b["type"], b.get("text") or b.get("name")) for b in out["content"]] == [
        ("text", "Sure, let me check. "), ("tool_use", "get_weather")]
    s = ant.MessageStream("msg_1", "m", input_tokens=3)
    events = s.text("Sure, let me check. ") + s.finish(final(text="Sure, let me check. ", tool_calls=[CALL]))
    starts = [d["content_block"]["type"] for n, d in events if n == "content_block_start"]
    assert starts == ["text", "tool_use"]


def test_stream_events_for_text() -> None:
    s = ant.MessageStream("msg_1", "m", input_tokens=3)
    events = s.text("Hel") + s.text("lo") + s.finish(final(text="Hello"))
    assert [name for name, _ in events] == [
        "message_start", "ping", "content_block_start", "content_block_delta", "content_block_delta",
        "content_block_stop", "message_delta", "message_stop"]
    assert all(data["type"] == name for name, data in events)
    assert events[0][1]["message"]["usage"] == {"input_tokens": 3, "output_tokens": 0}
    assert [d["delta"]["text"] for n, d in events if n == "content_block_delta"] == ["Hel", "lo"]
    assert events[-2][1] == {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                             "usage": {"input_tokens": 12, "output_tokens": 5}}


def test_stream_events_for_tool_use() -> None:
    s = ant.MessageStream("msg_1", "m", input_tokens=3)
    events = s.finish(final(text="", tool_calls=[CALL]))
    assert [name for name, _ in events] == [
        "message_start", "ping", "content_block_start", "content_block_delta", "content_block_stop",
        "message_delta", "message_stop"]
    start, delta = events[2][1], events[3][1]
    assert start["content_block"] == {"type": "tool_use", "id": "call_ab", "name": "get_weather", "input": {}}
    assert delta["delta"]["type"] == "input_json_delta"
    assert json.loads(delta["delta"]["partial_json"]) == {"city": "Paris"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_stream_with_no_output_has_no_content_block() -> None:
    s = ant.MessageStream("msg_1", "m", input_tokens=3)
    events = s.text("") + s.finish(final(text="", done_reason="length"))
    assert [name for name, _ in events] == ["message_start", "ping", "message_delta", "message_stop"]
