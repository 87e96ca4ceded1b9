"""The Anthropic-compatible /v1/messages through the official `anthropic` client, against the real runner and
SmolLM2."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anthropic
import pytest

from tests.helpers.serve import create_from_file
from tests.helpers.tool_calls import TOOLS_TEMPLATE

pytestmark = pytest.mark.integration

HI = [{"role": "user", "content": "Say hi"}]
# This SDK no longer has temperature/top_p/top_k parameters; the API still takes them as body fields.
GREEDY = {"extra_body": {"temperature": 0}}


@pytest.fixture(scope="module")
def client(live_server: Any) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=live_server.url, api_key="ollama", max_retries=0, timeout=300)


def test_message(client: anthropic.Anthropic, live_server: Any) -> None:
    msg = client.messages.create(model=live_server.model, max_tokens=16, **GREEDY, messages=HI)
    assert msg.id.startswith("msg_")
    assert (msg.type, msg.role, msg.model) == ("message", "assistant", live_server.model)
    assert [b.type for b in msg.content] == ["text"]
    assert msg.content[0].text
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert msg.usage.output_tokens <= 16


def test_usage_and_text_equal_native_chat(client: anthropic.Anthropic, live_server: Any) -> None:
    # Native first, from a cold runner, so its prompt_eval_count is the whole prompt (no cached prefix).
    live_server.unload()
    r = live_server.api("POST", "/api/chat", json={
        "model": live_server.model, "stream": False,
        "messages": [{"role": "system", "content": "You are terse, for the usage test."}, *HI],
        "options": {"temperature": 0, "top_p": 1.0, "num_predict": 16}})
    native = r.json()
    msg = client.messages.create(model=live_server.model, max_tokens=16, extra_body={"temperature": 0, "top_p": 1.0},
                                 system="You are terse, for the usage test.", messages=HI)
    assert msg.usage.input_tokens == native["prompt_eval_count"]
    assert msg.usage.output_tokens == native["eval_count"]
    assert msg.content[0].text == native["message"]["content"]
    assert msg.stop_reason == ("max_tokens" if native["done_reason"] == "length" else "end_turn")


def test_stream_matches_non_stream(client: anthropic.Anthropic, live_server: Any) -> None:
    whole = client.messages.create(model=live_server.model, max_tokens=8, **GREEDY, messages=HI)
    with client.messages.stream(model=live_server.model, max_tokens=8, **GREEDY, messages=HI) as stream:
        kinds = [event.type for event in stream]
        streamed = stream.get_final_message()
    assert kinds[0] == "message_start"
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert "content_block_start" in kinds and "content_block_delta" in kinds
    assert streamed.content[0].text == whole.content[0].text
    assert streamed.stop_reason == whole.stop_reason == "max_tokens"
    assert streamed.usage.output_tokens == 8
    assert streamed.usage.input_tokens == whole.usage.input_tokens


def test_stop_sequence(client: anthropic.Anthropic, live_server: Any) -> None:
    free = client.messages.create(model=live_server.model, max_tokens=16, **GREEDY, messages=HI)
    text = free.content[0].text
    stop = text.split()[2]
    msg = client.messages.create(model=live_server.model, max_tokens=16, **GREEDY, messages=HI,
                                 stop_sequences=[stop])
    assert msg.content[0].text == text[:text.index(stop)]
    assert (msg.stop_reason, msg.stop_sequence) == ("stop_sequence", stop)


def test_unknown_model_is_not_found(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as e:
        client.messages.create(model="no-such-model:1b", max_tokens=4, messages=HI)
    assert e.value.body == {"type": "error",
                            "error": {"type": "not_found_error", "message": "model 'no-such-model:1b' not found"}}


def test_missing_max_tokens_is_a_bad_request(live_server: Any) -> None:
    r = live_server.api("POST", "/v1/messages", json={"model": live_server.model, "messages": HI})
    assert r.status_code == 400
    assert r.json() == {"type": "error", "error": {"type": "invalid_request_error",
                                                   "message": "max_tokens is required and must be positive"}}


def test_a_named_tool_choice_is_a_tool_use_block(client: anthropic.Anthropic, live_server: Any) -> None:
    """tool_choice {"type": "tool"} (as agents use it to have a model fill a form): the answer is that tool's
    call, its input valid for the tool's schema (SmolLM2 under a template that offers tools)."""
    create_from_file(live_server.url, "smollm2-tools", Path(os.environ["OLLAMA_PY_TEST_MODEL"]),
                     template=TOOLS_TEMPLATE)
    tools: Any = [{"name": "save_person", "description": "Save a person's name and age",
                   "input_schema": {"type": "object", "properties": {"name": {"type": "string"},
                                                                     "age": {"type": "integer"}},
                                    "required": ["name", "age"]}}]
    msg = client.messages.create(model="smollm2-tools", max_tokens=48, **GREEDY, tools=tools,
                                 tool_choice={"type": "tool", "name": "save_person"},
                                 messages=[{"role": "user", "content": "Ann is 30 years old. Save her."}])
    assert [b.type for b in msg.content] == ["tool_use"] and msg.stop_reason == "tool_use"
    block: Any = msg.content[0]
    assert block.name == "save_person" and set(block.input) == {"name", "age"}
    assert isinstance(block.input["age"], int)
