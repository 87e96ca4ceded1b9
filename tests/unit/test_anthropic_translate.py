"""Anthropic Messages translation (server/anthropic_translate.py): pure functions, no server."""

from __future__ import annotations

import base64
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


def test_system_messages_inside_messages_stay_where_they_stand() -> None:
    params = ant.parse_messages({**BASE, "system": [{"type": "text", "text": "You are Claude Code.",
                                                      "cache_control": {"type": "ephemeral"}}], "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "system", "content": [{"type": "text", "text": "<reminder>be brief</reminder>"}]},
        {"role": "user", "content": "again"},
        {"role": "system", "content": ""},  # nothing to say: no message, as Ollama
    ]})
    assert params.messages == [
        {"role": "system", "content": "You are Claude Code."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "system", "content": "<reminder>be brief</reminder>"},
        {"role": "user", "content": "again"},
    ]


@pytest.mark.parametrize("extra, think, budget", [
    ({}, None, None),
    ({"thinking": {"type": "adaptive"}, "output_config": {"effort": "high"}}, "high", None),
    ({"thinking": {"type": "adaptive"}}, None, None),
    ({"output_config": {"effort": "Medium "}}, "medium", None),
    ({"output_config": {"effort": "xhigh"}}, "high", None),  # Ollama's Anthropic route folds xhigh into high
    ({"output_config": {"effort": "max"}}, "max", None),
    ({"output_config": {"effort": "minimal"}}, "low", None),
    ({"thinking": {"type": "enabled", "budget_tokens": 2048}, "output_config": {"effort": "low"}}, True, 2048),
    ({"thinking": {"type": "enabled"}, "output_config": {"effort": "low"}}, "low", None),
    ({"thinking": {"type": "enabled"}}, True, None),
    ({"thinking": {"type": "disabled"}, "output_config": {"effort": "high"}}, False, None),
], ids=["none", "adaptive-high", "adaptive-alone", "effort-alone", "xhigh", "max", "minimal", "enabled-budget",
        "enabled-effort", "enabled", "disabled-wins"])
def test_thinking_and_effort(extra: dict[str, Any], think: Any, budget: int | None) -> None:
    params = ant.parse_messages({**BASE, "messages": [{"role": "user", "content": "hi"}], **extra})
    assert params.think == think
    assert params.options.get("reasoning_budget") == budget


@pytest.mark.parametrize("extra, message", [
    ({"thinking": {"type": "sometimes"}}, 'thinking.type must be "enabled", "disabled" or "adaptive"'),
    ({"output_config": {"effort": "extreme"}},
     'invalid output_config.effort: "extreme" (must be "low", "medium", "high", "xhigh" or "max")'),
    ({"messages": [{"role": "tool", "content": "x"}]}, 'messages[0].role must be "user", "assistant" or "system"'),
    ({"messages": [{"role": "system", "content": 3}]}, "messages[0].content must be a string or an array of text "
                                                        "blocks"),
], ids=["thinking-type", "effort", "role", "system-content"])
def test_values_that_cannot_be_honoured(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(BadRequest) as e:
        ant.parse_messages({**BASE, "messages": [{"role": "user", "content": "hi"}], **extra})
    assert str(e.value) == message


def test_unknown_and_informational_fields_are_ignored() -> None:
    plain = ant.parse_messages({**BASE, "messages": [{"role": "user", "content": "hi"}]})
    params = ant.parse_messages({**BASE, "messages": [{"role": "user", "content": "hi"}],
                                 "metadata": {"user_id": "user_abc"}, "service_tier": "auto",
                                 "context_management": {"edits": [{"type": "clear_tool_uses_20250919",
                                                                   "trigger": {"type": "input_tokens", "value": 1}}]},
                                 "a_field_from_next_year": {"x": 1}})
    assert params == plain


def test_context_management_clears_old_thinking() -> None:
    turns = [{"role": "user", "content": "q1"},
             {"role": "assistant", "content": [{"type": "thinking", "thinking": "t1", "signature": "s"},
                                               {"type": "text", "text": "a1"}]},
             {"role": "user", "content": "q2"},
             {"role": "assistant", "content": [{"type": "thinking", "thinking": "t2", "signature": "s"},
                                               {"type": "text", "text": "a2"}]},
             {"role": "user", "content": "q3"}]

    def thoughts(keep: Any) -> list[str]:
        cm = {"edits": [{"type": "clear_thinking_20251015", "keep": keep}]}
        params = ant.parse_messages({**BASE, "messages": turns, "context_management": cm})
        return [m["thinking"] for m in params.messages if m.get("thinking")]

    assert thoughts("all") == ["t1", "t2"]
    assert thoughts({"type": "thinking_turns", "value": 1}) == ["t2"]
    assert thoughts({"type": "thinking_turns", "value": 0}) == []


def test_tool_choice_none_and_server_web_search() -> None:
    tools = [{"name": "Bash", "input_schema": {"type": "object"}},
             {"type": "web_search_20250305", "name": "web_search", "max_uses": 5}]
    params = ant.parse_messages({**BASE, "messages": [{"role": "user", "content": "hi"}], "tools": tools})
    assert [t["function"]["name"] for t in params.tools or []] == ["Bash"]  # no search backend: not offered
    params = ant.parse_messages({**BASE, "messages": [{"role": "user", "content": "hi"}], "tools": tools,
                                 "tool_choice": {"type": "none"}})
    assert params.tools is None


def test_anthropics_schema_less_client_tools_are_offered_with_the_input_they_take() -> None:
    """text_editor, bash and memory come without an input_schema (Anthropic's models know them): a local model is
    told what they take, as Anthropic documents it; a tool of another type goes as declared."""
    tools = [{"type": "text_editor_20250728", "name": "str_replace_based_edit_tool", "max_characters": 10000},
             {"type": "text_editor_20250124", "name": "str_replace_editor"},
             {"type": "bash_20250124", "name": "bash"},
             {"type": "memory_20250818", "name": "memory"},
             {"type": "custom", "name": "lookup", "description": "Looks up", "input_schema": {"type": "object"}}]
    params = ant.parse_messages({**BASE, "messages": [{"role": "user", "content": "hi"}], "tools": tools})
    fns = {t["function"]["name"]: t["function"] for t in params.tools or []}
    editor = fns["str_replace_based_edit_tool"]["parameters"]
    assert editor["required"] == ["command", "path"]
    assert editor["properties"]["command"]["enum"] == ["view", "create", "str_replace", "insert"]
    assert {"old_str", "new_str", "file_text", "insert_line", "view_range"} <= set(editor["properties"])
    assert "undo_edit" in fns["str_replace_editor"]["parameters"]["properties"]["command"]["enum"]
    assert set(fns["bash"]["parameters"]["properties"]) == {"command", "restart"}
    assert "rename" in fns["memory"]["parameters"]["properties"]["command"]["enum"]
    assert all(fns[n]["description"] for n in ("str_replace_based_edit_tool", "bash", "memory"))
    assert fns["lookup"] == {"name": "lookup", "description": "Looks up", "parameters": {"type": "object"}}


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
    assert delta["delta"]["partial_json"] == '{"city":"Paris"}'  # compact, as Go marshals Ollama's
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_stream_with_no_output_has_no_content_block() -> None:
    s = ant.MessageStream("msg_1", "m", input_tokens=3)
    events = s.text("") + s.finish(final(text="", done_reason="length"))
    assert [name for name, _ in events] == ["message_start", "ping", "message_delta", "message_stop"]


def test_thinking_display_omitted_sends_empty_thinking_blocks() -> None:
    params = ant.parse_messages({**BASE, "messages": [{"role": "user", "content": "hi"}],
                                 "thinking": {"type": "adaptive", "display": "omitted"}})
    assert params.show_thinking is False and params.think is None  # the model still thinks as it would
    thought = final(thinking="plan", text="hi")
    assert ant.message("msg_1", "m", thought, params.show_thinking)["content"] == [
        {"type": "thinking", "thinking": "", "signature": ""}, {"type": "text", "text": "hi"}]
    s = ant.MessageStream("msg_1", "m", input_tokens=3, show_thinking=False)
    events = s.thinking("plan") + s.text("hi") + s.finish(thought)
    assert [(n, d.get("delta", {}).get("type")) for n, d in events if n.startswith("content_block")] == [
        ("content_block_start", None), ("content_block_stop", None), ("content_block_start", None),
        ("content_block_delta", "text_delta"), ("content_block_stop", None)]
