"""The OpenAI-compatible API through the official `openai` client, against the real runner and SmolLM2."""

from __future__ import annotations

import base64
import json
import os
import struct
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.helpers.serve import create_from_file
from tests.helpers.tool_calls import TOOLS_TEMPLATE

pytestmark = pytest.mark.integration

HI = [{"role": "user", "content": "Say hi"}]


@pytest.fixture(scope="module")
def client(live_server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=live_server.url + "/v1", api_key="ollama", max_retries=0, timeout=300)


def native_chat(live_server: Any, messages: list[dict[str, Any]], num_predict: int) -> dict[str, Any]:
    r = live_server.api("POST", "/api/chat", json={
        "model": live_server.model, "messages": messages, "stream": False,
        "options": {"temperature": 0, "top_p": 1.0, "seed": 7, "num_predict": num_predict}})
    assert r.status_code == 200, r.text
    return r.json()


def test_chat_completion(client: openai.OpenAI, live_server: Any) -> None:
    resp = client.chat.completions.create(model=live_server.model, messages=HI, max_tokens=16, temperature=0, seed=7)
    assert resp.id.startswith("chatcmpl-")
    assert resp.object == "chat.completion"
    assert resp.system_fingerprint == "fp_ollama"
    assert resp.model == live_server.model
    choice = resp.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content
    assert choice.finish_reason in ("stop", "length")
    assert resp.usage.total_tokens == resp.usage.prompt_tokens + resp.usage.completion_tokens


def test_usage_and_text_equal_native_chat(client: openai.OpenAI, live_server: Any) -> None:
    # Native first, from a cold runner: its prompt_eval_count is then the whole prompt (a cached prefix is left
    # out of the native count, as Ollama's runner does; OpenAI usage always counts the whole prompt).
    messages = [{"role": "user", "content": "Say hello to the usage test."}]
    live_server.unload()
    native = native_chat(live_server, messages, 16)
    resp = client.chat.completions.create(model=live_server.model, messages=messages, max_tokens=16, temperature=0,
                                          seed=7)
    assert resp.usage.prompt_tokens == native["prompt_eval_count"]
    assert resp.usage.completion_tokens == native["eval_count"]
    assert resp.choices[0].message.content == native["message"]["content"]


def test_chat_stream_with_usage_matches_non_stream(client: openai.OpenAI, live_server: Any) -> None:
    whole = client.chat.completions.create(model=live_server.model, messages=HI, max_tokens=8, temperature=0)
    chunks = list(client.chat.completions.create(model=live_server.model, messages=HI, max_tokens=8, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert len({c.id for c in chunks}) == 1 and chunks[0].id.startswith("chatcmpl-")
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].choices == []
    assert chunks[-1].usage.completion_tokens == 8
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens


def test_stream_without_include_usage_has_no_usage_chunk(client: openai.OpenAI, live_server: Any) -> None:
    chunks = list(client.chat.completions.create(model=live_server.model, messages=HI, max_tokens=4, temperature=0,
                                                 stream=True))
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


def test_stop_sequence_ends_the_text_before_it(client: openai.OpenAI, live_server: Any) -> None:
    free = client.chat.completions.create(model=live_server.model, messages=HI, max_tokens=16, temperature=0)
    text = free.choices[0].message.content
    stop = text.split()[2]  # a word from the middle of what the model says anyway
    stopped = client.chat.completions.create(model=live_server.model, messages=HI, max_tokens=16, temperature=0,
                                             stop=[stop])
    assert stopped.choices[0].message.content == text[:text.index(stop)]
    assert stopped.choices[0].finish_reason == "stop"


def test_json_schema_output(client: openai.OpenAI, live_server: Any) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    resp = client.chat.completions.create(
        model=live_server.model, max_tokens=32, temperature=0,
        messages=[{"role": "user", "content": "Ann is 30 years old. Reply with her name and age as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}})
    person = json.loads(resp.choices[0].message.content)
    assert set(person) == {"name", "age"}
    assert isinstance(person["name"], str) and isinstance(person["age"], int)


PERSON_TOOLS: Any = [
    {"type": "function", "function": {"name": "save_person", "description": "Save a person's name and age",
                                      "parameters": {"type": "object", "properties": {
                                          "name": {"type": "string"}, "age": {"type": "integer"}},
                                          "required": ["name", "age"]}}},
    {"type": "function", "function": {"name": "get_time", "description": "The time now"}}]
ANN = [{"role": "user", "content": "Ann is 30 years old. Save her."}]


@pytest.fixture(scope="module")
def tools_model(live_server: Any) -> str:
    """SmolLM2 under a ChatML TEMPLATE that offers tools (so the model has the tools capability); the 135M model
    rarely writes a well-formed call by itself."""
    create_from_file(live_server.url, "smollm2-tools", Path(os.environ["OLLAMA_PY_TEST_MODEL"]),
                     template=TOOLS_TEMPLATE)
    return "smollm2-tools"


def test_a_named_tool_choice_is_answered_by_that_call(client: openai.OpenAI, tools_model: str) -> None:
    """A named tool_choice comes back as that call, its arguments valid for the function's parameters
    (generated under them)."""
    resp = client.chat.completions.create(
        model=tools_model, max_tokens=48, temperature=0, messages=ANN, tools=PERSON_TOOLS,
        tool_choice={"type": "function", "function": {"name": "save_person"}})
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    [call] = choice.message.tool_calls or []
    args = json.loads(call.function.arguments)
    assert call.function.name == "save_person" and set(args) == {"name", "age"}
    assert isinstance(args["name"], str) and isinstance(args["age"], int)


def test_required_streams_a_call_of_an_offered_tool(client: openai.OpenAI, tools_model: str) -> None:
    stream = client.chat.completions.create(model=tools_model, max_tokens=48, temperature=0, messages=ANN,
                                            tools=PERSON_TOOLS, tool_choice="required", stream=True)
    chunks = list(stream)
    calls = [tc for c in chunks for tc in c.choices[0].delta.tool_calls or []]
    assert len(calls) == 1 and calls[0].function.name in ("save_person", "get_time")
    assert isinstance(json.loads(calls[0].function.arguments), dict)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_logprobs(client: openai.OpenAI, live_server: Any) -> None:
    resp = client.chat.completions.create(model=live_server.model, messages=HI, max_tokens=4, temperature=0,
                                          logprobs=True, top_logprobs=2)
    entries = resp.choices[0].logprobs.content
    assert len(entries) == resp.usage.completion_tokens == 4
    assert "".join(e.token for e in entries) == resp.choices[0].message.content
    for e in entries:
        assert e.logprob <= 0
        assert len(e.top_logprobs) == 2
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob


def test_completions(client: openai.OpenAI, live_server: Any) -> None:
    kw: dict[str, Any] = dict(model=live_server.model, prompt="The capital of France is", max_tokens=8, temperature=0)
    resp = client.completions.create(**kw)
    assert resp.id.startswith("cmpl-")
    assert resp.object == "text_completion"
    assert resp.choices[0].text
    assert resp.choices[0].finish_reason == "length"
    assert resp.usage.completion_tokens == 8
    streamed = list(client.completions.create(**kw, stream=True))
    assert "".join(c.choices[0].text for c in streamed) == resp.choices[0].text
    assert streamed[-1].choices[0].finish_reason == "length"


def test_embeddings_float_and_base64_are_the_same_vector(client: openai.OpenAI, live_server: Any) -> None:
    floats = client.embeddings.create(model=live_server.model, input=["hello", "world"], encoding_format="float")
    assert [d.index for d in floats.data] == [0, 1]
    assert floats.usage.prompt_tokens > 0
    vec = floats.data[0].embedding
    assert len(vec) > 0
    raw = client.embeddings.with_raw_response.create(model=live_server.model, input="hello",
                                                     encoding_format="base64")
    b64 = json.loads(raw.text)["data"][0]["embedding"]
    decoded = struct.unpack(f"<{len(vec)}f", base64.b64decode(b64))
    assert decoded == pytest.approx(vec, abs=1e-6)
    default = client.embeddings.create(model=live_server.model, input="hello")  # the client asks for base64
    assert default.data[0].embedding == pytest.approx(vec, abs=1e-6)


def test_models_list_and_retrieve(client: openai.OpenAI, live_server: Any) -> None:
    listed = {m.id: m for m in client.models.list()}
    assert live_server.model in listed
    entry = listed[live_server.model]
    assert (entry.object, entry.owned_by) == ("model", "library")
    assert entry.created > 0
    one = client.models.retrieve(live_server.model)
    assert (one.id, one.owned_by, one.created) == (live_server.model, "library", entry.created)


def test_unknown_model_is_not_found(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="no-such-model:1b", messages=HI, max_tokens=4)
    assert e.value.body["message"] == "model 'no-such-model:1b' not found"
    assert e.value.body["type"] == "not_found_error"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model:1b")


def test_empty_messages_is_a_bad_request(client: openai.OpenAI, live_server: Any) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=live_server.model, messages=[])
    assert e.value.body["message"] == "[] is too short - 'messages'"
    assert e.value.body["type"] == "invalid_request_error"


def test_responses_match_chat_completions(client: openai.OpenAI, live_server: Any) -> None:
    chat = client.chat.completions.create(model=live_server.model, messages=HI, max_tokens=12, temperature=0,
                                          top_p=1.0)
    resp = client.responses.create(model=live_server.model, input="Say hi", max_output_tokens=12, temperature=0,
                                   top_p=1.0)
    assert resp.status == "completed" and resp.model == live_server.model
    assert resp.output_text == chat.choices[0].message.content
    assert resp.usage.input_tokens == chat.usage.prompt_tokens
    assert resp.usage.output_tokens == chat.usage.completion_tokens

    with client.responses.stream(model=live_server.model, input="Say hi", max_output_tokens=12, temperature=0,
                                 top_p=1.0) as stream:
        deltas = [ev.delta for ev in stream if ev.type == "response.output_text.delta"]
        streamed = stream.get_final_response()
    assert "".join(deltas) == streamed.output_text == resp.output_text
