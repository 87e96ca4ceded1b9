"""OpenAI request/response translation (server/openai_translate.py): pure functions, no server."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import pytest

from ollama_py.errors import BadRequest
from ollama_py.server import openai_translate as oai
from ollama_py.server.completion import Final
from tests.helpers.completions import final

USER = [{"role": "user", "content": "hi"}]
META = oai.ResponseMeta(id="chatcmpl-x", created=1700000000, model="smollm2:135m")


# -- request options ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("extra, expected", [
    ({}, {"temperature": 1.0, "top_p": 1.0}),
    ({"temperature": 0, "top_p": 0.5}, {"temperature": 0, "top_p": 0.5}),
    ({"max_tokens": 16}, {"num_predict": 16, "temperature": 1.0, "top_p": 1.0}),
    ({"max_tokens": 16, "max_completion_tokens": 8}, {"num_predict": 8, "temperature": 1.0, "top_p": 1.0}),
    ({"stop": "\n"}, {"stop": ["\n"], "temperature": 1.0, "top_p": 1.0}),
    ({"stop": ["a", "b"]}, {"stop": ["a", "b"], "temperature": 1.0, "top_p": 1.0}),
    ({"seed": 42, "frequency_penalty": 0.5, "presence_penalty": 0.25},
     {"seed": 42, "frequency_penalty": 0.5, "presence_penalty": 0.25, "temperature": 1.0, "top_p": 1.0}),
], ids=["defaults-like-ollama", "explicit-sampling", "max_tokens", "max_completion_tokens-wins", "stop-string",
        "stop-list", "seed-and-penalties"])
def test_chat_options(extra: dict[str, Any], expected: dict[str, Any]) -> None:
    assert oai.parse_chat({"model": "m", "messages": USER, **extra}).options == expected


@pytest.mark.parametrize("fmt, expected", [
    (None, None),
    ({"type": "text"}, None),
    ({"type": "json_object"}, "json"),
    ({"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object", "properties": {}}}},
     {"type": "object", "properties": {}}),
], ids=["absent", "text", "json_object", "json_schema"])
def test_response_format(fmt: Any, expected: Any) -> None:
    assert oai.parse_chat({"model": "m", "messages": USER, "response_format": fmt}).format == expected


@pytest.mark.parametrize("extra, stream, usage, top", [
    ({}, False, False, None),
    ({"stream": True}, True, False, None),
    ({"stream": True, "stream_options": {"include_usage": True}}, True, True, None),
    ({"logprobs": True}, False, False, 0),
    ({"logprobs": True, "top_logprobs": 3}, False, False, 3),
    ({"logprobs": False, "top_logprobs": 3}, False, False, None),
], ids=["defaults", "stream", "include_usage", "logprobs", "top_logprobs", "top_without_logprobs"])
def test_chat_flags(extra: dict[str, Any], stream: bool, usage: bool, top: int | None) -> None:
    params = oai.parse_chat({"model": "m", "messages": USER, **extra})
    assert (params.stream, params.include_usage, params.top_logprobs) == (stream, usage, top)


@pytest.mark.parametrize("body, message", [
    ({"messages": []}, "[] is too short - 'messages'"),
    ({}, "[] is too short - 'messages'"),
    ({"messages": [{"role": "user", "content": None}]}, "invalid message content type: <nil>"),
    ({"messages": [{"role": "user", "content": 3}]}, "invalid message content type: float64"),
    ({"messages": [{"role": "user", "content": [{"type": "input_video"}]}]}, "invalid message format"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}]},
     "invalid image input"),
    ({"messages": [{"role": "assistant", "content": None,
                    "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": "{nope"}}]}]},
     "invalid tool call arguments"),
    ({"messages": USER, "stop": [1]}, "invalid type for 'stop' field: float64"),
    ({"messages": USER, "temperature": "hot"}, 'json: cannot unmarshal str into field "temperature" of type number'),
    ({"messages": [{"role": "wizard", "content": "x"}]}, "invalid role 'wizard'"),
], ids=["empty-messages", "missing-messages", "null-content", "number-content", "unknown-part", "image-url",
        "bad-arguments", "stop-not-string", "temperature-type", "unknown-role"])
def test_chat_request_errors(body: dict[str, Any], message: str) -> None:
    with pytest.raises(BadRequest) as e:
        oai.parse_chat({"model": "m", **body})
    assert str(e.value).startswith(message)


@pytest.mark.parametrize("arguments, expected", [
    ('{"city": "Paris", "days": 3, "hot": true, "t": -0.5, "tags": ["a"]}',
     {"city": "Paris", "days": 3, "hot": True, "t": -0.5, "tags": ["a"]}),
    ('{"id": 123456789012345678901234567890}', {"id": 123456789012345678901234567890}),  # an integer, exact
    ('{"id": 18446744073709551616}', {"id": 18446744073709551616}),
    ('{"x": 1e400}', {"x": float("inf")}),
    ('{"s": "\\ud800x"}', {"s": "\ud800x"}),
    ('{"a": 1, "a": 2}', {"a": 2}),
    ("  ", {}),
], ids=["plain", "past-64-bits", "2**64", "past-float64", "lone-surrogate", "duplicate-key", "blank"])
def test_tool_call_arguments_decode_to_the_same_values_however_they_are_read(arguments: str, expected: Any) -> None:
    msgs = oai.chat_messages([{"role": "assistant", "content": None,
                               "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": arguments}}]}])
    got = msgs[0]["tool_calls"][0]["function"]["arguments"]
    assert got == expected
    assert [type(v) for v in got.values()] == [type(v) for v in expected.values()]


def test_content_parts_become_one_message_each_with_images_decoded() -> None:
    png = base64.b64encode(b"\x89PNG fake").decode()
    msgs = oai.chat_messages([{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{png}"}},
    ]}])
    assert msgs == [{"role": "user", "content": "what is this?"},
                    {"role": "user", "content": "", "images": [png]}]


def test_tool_round_trip_messages() -> None:
    msgs = oai.chat_messages([
        {"role": "developer", "content": "be brief"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "call_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ])
    assert msgs == [
        {"role": "system", "content": "be brief"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"id": "call_1", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "sunny", "tool_call_id": "call_1", "tool_name": "get_weather"},
    ]


def test_tool_results_are_named_by_the_last_call_of_their_id() -> None:
    """An agent's long conversation: each tool result gets its call's function name; an id used again names the
    later call's function (as Ollama: the last one wins); a result whose id no call has, or that names itself,
    keeps what it has."""
    def call(call_id: str, name: str) -> dict[str, Any]:
        return {"id": call_id, "type": "function", "function": {"name": name, "arguments": "{}"}}

    msgs = oai.chat_messages([
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [call("a", "read"), call("b", "list")]},
        {"role": "tool", "tool_call_id": "a", "content": "1"},
        {"role": "tool", "tool_call_id": "b", "content": "2"},
        {"role": "assistant", "content": None, "tool_calls": [call("a", "write"), call("a", "ignored")]},
        {"role": "tool", "tool_call_id": "a", "content": "3"},
        {"role": "tool", "tool_call_id": "zz", "content": "4"},
        {"role": "tool", "tool_call_id": "b", "name": "own", "content": "5"},
    ])
    assert [(m.get("tool_call_id"), m.get("tool_name")) for m in msgs if m["role"] == "tool"] == [
        ("a", "write"), ("b", "list"), ("a", "write"), ("zz", None), ("b", "own")]


# -- completions and embeddings requests ----------------------------------------------------------------------

def test_completion_request_sends_penalties_and_top_p_like_ollama() -> None:
    params = oai.parse_completion({"model": "m", "prompt": "Once", "max_tokens": 8, "suffix": "end", "top_p": 0})
    assert params.options == {"num_predict": 8, "temperature": 1.0, "top_p": 1.0, "frequency_penalty": 0.0,
                              "presence_penalty": 0.0}
    assert (params.prompt, params.suffix) == ("Once", "end")


@pytest.mark.parametrize("body, inputs, fmt", [
    ({"input": "a"}, ["a"], "float"),
    ({"input": ""}, [""], "float"),
    ({"input": ["a", "b"], "encoding_format": "BASE64"}, ["a", "b"], "base64"),
], ids=["string", "empty-string", "list-base64"])
def test_embedding_request(body: dict[str, Any], inputs: list[str], fmt: str) -> None:
    params = oai.parse_embedding(body)
    assert (params.inputs, params.encoding_format) == (inputs, fmt)


@pytest.mark.parametrize("body, message", [
    ({"input": "a", "encoding_format": "int8"},
     "Invalid value for 'encoding_format' = int8. Supported values: ['float', 'base64']."),
    ({"input": []}, "invalid input"),
    ({}, "invalid input"),
    ({"input": [[1, 2, 3]]}, "invalid input type"),
    ({"input": "a", "dimensions": 0}, "dimensions must be a positive integer"),
], ids=["encoding-format", "empty-list", "missing", "token-arrays", "zero-dimensions"])
def test_embedding_request_errors(body: dict[str, Any], message: str) -> None:
    with pytest.raises(BadRequest) as e:
        oai.parse_embedding(body)
    assert str(e.value) == message


# -- responses ------------------------------------------------------------------------------------------------

CALL = {"id": "call_ab", "function": {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}}


@pytest.mark.parametrize("fin, reason", [
    (final(), "stop"),
    (final(done_reason="length"), "length"),
    (final(tool_calls=[CALL]), "tool_calls"),
], ids=["stop", "length", "tool_calls"])
def test_finish_reason(fin: Final, reason: str) -> None:
    assert oai.finish_reason(fin) == reason


def test_chat_completion_object() -> None:
    body = oai.chat_completion(META, final(), None)
    assert body == {
        "id": "chatcmpl-x", "object": "chat.completion", "created": 1700000000, "model": "smollm2:135m",
        "system_fingerprint": "fp_ollama",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
    }


def test_chat_completion_tool_calls_carry_arguments_as_json_strings() -> None:
    """Compact, as Go marshals Ollama's arguments."""
    body = oai.chat_completion(META, final(text="", tool_calls=[CALL]), None)
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == ""
    assert choice["message"]["tool_calls"] == [{"id": "call_ab", "index": 0, "type": "function",
                                                "function": {"name": "get_weather",
                                                             "arguments": '{"city":"Paris"}'}}]
    ordered = {"function": {"name": "f", "arguments": {"z": 1, "a": "<&>", "n": {"y": 1.5, "b": [True, None]}}}}
    body = oai.chat_completion(META, final(text="", tool_calls=[ordered]), None)
    # in the model's order (nested maps sorted, as Go's maps are), HTML characters escaped as Go escapes them
    assert body["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == \
        '{"z":1,"a":"\\u003c\\u0026\\u003e","n":{"b":[true,null],"y":1.5}}'


def test_chat_completion_keeps_the_text_before_a_tool_call() -> None:
    body = oai.chat_completion(META, final(text="Sure, let me check. ", tool_calls=[CALL]), None)
    message = body["choices"][0]["message"]
    assert message["content"] == "Sure, let me check. "
    assert [c["function"]["name"] for c in message["tool_calls"]] == ["get_weather"]


def test_chunk_and_usage_chunk_shapes() -> None:
    chunk = oai.chat_chunk(META, {"content": "Hel"})
    assert chunk["object"] == "chat.completion.chunk"
    assert chunk["choices"] == [{"index": 0, "delta": {"role": "assistant", "content": "Hel"}, "finish_reason": None}]
    assert "usage" not in chunk
    last = oai.usage_chunk(META, final())
    assert last["choices"] == []
    assert last["usage"] == {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17}


def test_text_completion_object() -> None:
    meta = oai.ResponseMeta(id="cmpl-x", created=1, model="m")
    body = oai.text_completion(meta, "hello", final(), "stop")
    assert body["object"] == "text_completion"
    assert body["choices"] == [{"text": "hello", "index": 0, "finish_reason": "stop"}]
    assert body["usage"]["total_tokens"] == 17


PROBS = [
    {"id": 314, "token": " is", "bytes": [32, 105, 115], "logprob": -0.01,
     "top_logprobs": [{"id": 314, "token": " is", "bytes": [32, 105, 115], "logprob": -0.01},
                      {"id": 506, "token": "'s", "bytes": [39, 115], "logprob": -5.3}]},
    {"id": 28, "token": ",", "bytes": [44], "logprob": -1.4,
     "top_logprobs": [{"id": 28, "token": ",", "bytes": [44], "logprob": -1.4}]},
]


def test_chat_logprobs_from_llama_server_probabilities() -> None:
    assert oai.chat_logprobs(PROBS, 1) == [
        {"token": " is", "logprob": -0.01, "bytes": [32, 105, 115],
         "top_logprobs": [{"token": " is", "logprob": -0.01, "bytes": [32, 105, 115]}]},
        {"token": ",", "logprob": -1.4, "bytes": [44],
         "top_logprobs": [{"token": ",", "logprob": -1.4, "bytes": [44]}]},
    ]
    assert [e["top_logprobs"] for e in oai.chat_logprobs(PROBS, 0)] == [[], []]


def test_text_logprobs_offsets_continue_from_previous_chunks() -> None:
    assert oai.text_logprobs(PROBS, 2, offset=10) == {
        "tokens": [" is", ","], "token_logprobs": [-0.01, -1.4],
        "top_logprobs": [{" is": -0.01, "'s": -5.3}, {",": -1.4}], "text_offset": [10, 13],
    }


def test_base64_embeddings_decode_to_the_float_vector() -> None:
    vec = [0.5, -0.25, 1e-3]
    body = oai.embedding_list("m", [vec], 3, "base64")
    raw = base64.b64decode(body["data"][0]["embedding"])
    assert list(struct.unpack("<3f", raw)) == pytest.approx(vec)
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 3}
    assert oai.embedding_list("m", [vec], 3, "float")["data"] == [{"object": "embedding", "embedding": vec,
                                                                    "index": 0}]


def test_ids_have_openai_prefixes() -> None:
    assert oai.new_meta("chatcmpl", "m").id.startswith("chatcmpl-")
    assert json.dumps(oai.model_entry("smollm2:135m", "library", 5)) == (
        '{"id": "smollm2:135m", "object": "model", "created": 5, "owned_by": "library"}')


@pytest.mark.parametrize("extra, think", [
    ({}, None), ({"reasoning_effort": "none"}, False), ({"reasoning_effort": "minimal"}, "low"),
    ({"reasoning_effort": "low"}, "low"), ({"reasoning_effort": "medium"}, "medium"),
    ({"reasoning_effort": "high"}, "high"), ({"reasoning_effort": "xhigh"}, "max"),
    ({"reasoning_effort": "ultra"}, "max"), ({"reasoning_effort": "max"}, "max"),
    ({"reasoning_effort": "low", "reasoning": {"effort": "xhigh"}}, "max"),  # the object wins, as in Ollama
], ids=lambda v: json.dumps(v) if isinstance(v, dict) else str(v))
def test_reasoning_effort_as_ollama_maps_it(extra: dict[str, Any], think: Any) -> None:
    assert oai.parse_chat({"model": "m", "messages": USER, **extra}).think == think


def test_an_effort_nobody_maps_is_refused() -> None:
    with pytest.raises(BadRequest) as e:
        oai.parse_chat({"model": "m", "messages": USER, "reasoning_effort": "extreme"})
    assert str(e.value) == ('invalid reasoning value: "extreme" (must be "minimal", "low", "medium", "high", '
                            '"xhigh", "ultra", "max", or "none")')


def test_tool_choice_none_offers_no_tools() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    ask = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools}
    assert oai.parse_chat(ask).tools and oai.parse_chat({**ask, "tool_choice": "auto"}).tools
    assert oai.parse_chat({**ask, "tool_choice": "none"}).tools is None
