"""A standing fuzz over request bodies (issue 22, "How to keep it fixed"): random JSON where the API expects its
fields -- wrong types, huge numbers, deep nesting, odd unicode, and the right shapes with random insides (messages,
content parts and blocks, tools, options, formats, templates) -- sent to the app over the fake runner. The server
never answers a 5xx, and a 4xx is always JSON carrying the API's error envelope (`{"error": "..."}` natively,
`{"error": {"message": ...}}` on /v1, `{"type": "error", "error": {...}}` on /v1/messages).

test_openapi.py fuzzes from the schema against `serve`; this one reaches the fields' insides, in process.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("OLLAMA_PY_FUZZ_EXAMPLES", "60"))  # per endpoint; raise it for a longer hunt

# -- values ------------------------------------------------------------------------------------------------------
odd_text = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", " ", "\u0000", "\ud800", "\udfff x", "\u202e\u200b", "\U0001f600" * 3, "é" * 40, "%s%n%d",
                     "{{ .Prompt }}", "{{", "../../etc/passwd", "tiny", "tiny:latest", "sha256:" + "a" * 64,
                     "[img]", "<think>", "\r\n", "null", "5m", "-1", "1e309"]),
)
numbers = st.one_of(
    st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 1, 2**31, 2**63, -(2**63), 10**30, 10**400]),
    st.floats(allow_nan=False, allow_infinity=False), st.sampled_from([1e308, -1e308, 5e-324, 0.5, -0.0]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, odd_text)
json_values = st.recursive(
    scalars, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(odd_text, inner, max_size=3)),
    max_leaves=10)


@st.composite
def deep(draw: Any) -> Any:
    """One value under many levels of lists or objects: past what a recursive walk of ours survives, and (1200)
    past what the JSON decoder takes."""
    depth = draw(st.sampled_from([30, 200, 600, 900, 1200]))
    shape = draw(st.sampled_from(["list", "object", "both"]))
    key = draw(st.sampled_from(["a", "properties", "items", "type", "content", "function"]))
    value: Any = draw(scalars)
    for level in range(depth):
        as_list = shape == "list" or (shape == "both" and level % 2 == 0)
        value = [value] if as_list else {key: value}
    return value


anything = st.one_of(json_values, json_values, deep())


def record(required: dict[str, Any], optional: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries(required, optional=optional)


@st.composite
def mutated(draw: Any, shaped: st.SearchStrategy[dict[str, Any]]) -> dict[str, Any]:
    """A body of the right shape with up to three places in it (a field, or anything inside one) replaced by any
    JSON value: most of a request is right, so the checks behind the first one are reached too."""
    body = draw(shaped)
    for _ in range(draw(st.integers(0, 3))):
        node: Any = body
        for level in range(8):
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = draw(st.sampled_from(keys))
            if level < 7 and isinstance(node[key], (dict, list)) and node[key] and draw(st.booleans()):
                node = node[key]
                continue
            node[key] = draw(anything)
            break
    return body


model = st.sampled_from(["tiny", "tiny", "tiny", "tiny:latest", "nope", "tiny@sha256:" + "b" * 64])
roles = st.sampled_from(["user", "user", "assistant", "system", "tool", "USER", "System", "robot", ""])
unit = st.floats(0, 1)  # a well-formed value for the shaped bodies; `mutated` brings the wild ones
small = st.integers(1, 8)
IMAGE = "iVBORw0KGgo="  # not an image; base64 all the same
OPTION_NAMES = ["temperature", "top_k", "top_p", "min_p", "num_predict", "seed", "stop", "num_keep", "repeat_penalty",
                "repeat_last_n", "presence_penalty", "frequency_penalty", "typical_p", "num_thread", "use_mmap",
                "mirostat", "tfs_z", "bogus"]
# Options that change how a model loads (num_ctx, num_gpu, num_batch...) restart the fake runner: left to
# test_bad_input.py, so this fuzz runs in seconds.
options = st.dictionaries(st.sampled_from(OPTION_NAMES), st.one_of(unit, small, st.lists(odd_text, max_size=2)),
                          max_size=3)
schema = st.one_of(st.sampled_from(["json", "", "xml"]), st.recursive(
    st.fixed_dictionaries({"type": st.sampled_from(["string", "integer", "object", "array", "bogus", 5])}),
    lambda inner: st.fixed_dictionaries({"type": st.just("object")}, optional={
        "properties": st.dictionaries(st.text(max_size=4), inner, max_size=3),
        "items": inner, "required": st.lists(st.text(max_size=4), max_size=2),
        "enum": st.lists(scalars, max_size=3), "$ref": odd_text, "anyOf": st.lists(inner, max_size=2)}),
    max_leaves=6), deep())
tool = st.fixed_dictionaries({"type": st.just("function"), "function": record(
    {"name": odd_text}, {"description": odd_text, "parameters": schema})})
tool_call = st.fixed_dictionaries({"function": record({"name": odd_text}, {"arguments": st.dictionaries(
    st.text(max_size=3), json_values, max_size=2), "index": small})},
                                  optional={"id": odd_text, "type": st.just("function")})
native_message = record({"role": roles}, {"content": odd_text, "images": st.lists(st.sampled_from([IMAGE, "!!", ""]),
                                                                                          max_size=2),
                                          "tool_calls": st.lists(tool_call, max_size=2), "thinking": odd_text,
                                          "tool_name": odd_text, "tool_call_id": odd_text})
oai_part = st.one_of(
    record({"type": st.just("text")}, {"text": odd_text}),
    record({"type": st.just("image_url")}, {"image_url": st.one_of(
        st.fixed_dictionaries({"url": st.sampled_from([f"data:image/png;base64,{IMAGE}", "data:,", "http://x/y.png",
                                                        "data:image/png;base64,!!"])}), odd_text)}),
    record({"type": odd_text}, {}),
)
oai_message = record({"role": roles, "content": st.one_of(odd_text, st.lists(oai_part, max_size=3))}, {
                                       "tool_calls": st.lists(st.fixed_dictionaries({
                                           "id": odd_text, "type": st.just("function"),
                                           "function": record({"name": odd_text}, {"arguments": odd_text})}),
                                           max_size=2),
                                       "tool_call_id": odd_text, "name": odd_text, "reasoning": odd_text})
anthropic_block = st.one_of(
    record({"type": st.just("text"), "text": odd_text}, {}),
    record({"type": st.just("image"), "source": record(
        {"type": st.sampled_from(["base64", "url"])},
        {"media_type": st.sampled_from(["image/png", "text/plain"]), "data": st.sampled_from([IMAGE, "!!"]),
         "url": odd_text})}, {}),
    record({"type": st.just("tool_use"), "id": odd_text, "name": odd_text, "input": json_values}, {}),
    record({"type": st.just("tool_result"), "tool_use_id": odd_text},
           {"content": st.one_of(odd_text, st.lists(record({"type": st.just("text"), "text": odd_text}, {}),
                                                    max_size=2)), "is_error": st.booleans()}),
    record({"type": st.just("thinking"), "thinking": odd_text}, {"signature": odd_text}),
    record({"type": odd_text}, {}),
)
anthropic_message = record({"role": st.sampled_from(["user", "user", "assistant"]),
                            "content": st.one_of(odd_text, st.lists(anthropic_block, max_size=3))}, {})
keep_alive = st.one_of(st.sampled_from(["5m", "1h", "-1", "0.5s", "1e3h", "9999999999h", 300, -1, 1e12]), scalars)
tokens_ints = st.lists(st.one_of(st.integers(-5, 40), st.sampled_from([2**31, 2**64])), max_size=4)

BODIES: dict[str, tuple[str, st.SearchStrategy[dict[str, Any]]]] = {
    "generate": ("/api/generate", record({"model": model}, {
        "prompt": odd_text, "suffix": odd_text, "system": odd_text, "template": odd_text, "context": tokens_ints,
        "stream": st.booleans(), "raw": st.booleans(), "format": schema, "images": st.lists(st.just(IMAGE), max_size=2),
        "options": options, "keep_alive": keep_alive, "think": st.one_of(st.booleans(), odd_text),
        "logprobs": st.booleans(), "top_logprobs": st.integers(0, 20), "truncate": st.booleans(),
        "shift": st.booleans()})),
    "chat": ("/api/chat", record({"model": model, "messages": st.lists(native_message, max_size=3)}, {
        "tools": st.lists(tool, max_size=2), "format": schema, "options": options, "stream": st.booleans(),
        "keep_alive": keep_alive, "think": st.one_of(st.booleans(), odd_text), "logprobs": st.booleans(),
        "top_logprobs": st.integers(0, 20), "truncate": st.booleans()})),
    "embed": ("/api/embed", record({"model": model, "input": st.one_of(odd_text, st.lists(odd_text, max_size=3))}, {
        "truncate": st.booleans(), "options": options, "keep_alive": keep_alive, "dimensions": small})),
    "show": ("/api/show", record({"model": model}, {"verbose": st.booleans(), "system": odd_text,
                                                    "template": odd_text, "options": options})),
    "create": ("/api/create", record({"model": st.sampled_from(["made", "made:v1", "../x", ""])}, {
        "from": model, "template": st.one_of(odd_text, st.sampled_from(['{{define "a"}}x{{end}}{{template "a" .}}',
                                                                        "{{ range 10000000 }}{{ end }}"])),
        "system": odd_text, "license": st.one_of(odd_text, st.lists(odd_text, max_size=2)),
        "parameters": options, "messages": st.lists(native_message, max_size=2), "stream": st.booleans(),
        "quantize": st.sampled_from(["q4_K_M", "q8_0", "bogus", ""]),
        "files": st.dictionaries(odd_text, odd_text, max_size=2), "adapters": st.dictionaries(odd_text, odd_text,
                                                                                             max_size=1)})),
    "oai_chat": ("/v1/chat/completions", record({"model": model, "messages": st.lists(oai_message, max_size=3)}, {
        "stream": st.booleans(), "stream_options": record({}, {"include_usage": st.booleans()}),
        "temperature": unit, "top_p": unit, "max_tokens": small, "max_completion_tokens": small,
        "stop": st.one_of(odd_text, st.lists(odd_text, max_size=2)), "seed": small, "frequency_penalty": unit,
        "presence_penalty": unit, "response_format": record({"type": st.sampled_from(
            ["json_object", "json_schema", "text", "x"])}, {"json_schema": record({"name": odd_text},
                                                                                 {"schema": schema})}),
        "tools": st.lists(tool, max_size=2), "tool_choice": st.one_of(st.sampled_from(["auto", "none", "required"]),
                                                                      json_values),
        "logprobs": st.booleans(), "top_logprobs": st.integers(0, 20), "n": st.just(1),
        "reasoning_effort": st.sampled_from(["low", "high", "none", "x"]), "user": odd_text})),
    "anthropic": ("/v1/messages", record({"model": model, "max_tokens": small,
                                          "messages": st.lists(anthropic_message, max_size=3)}, {
        "system": st.one_of(odd_text, st.lists(anthropic_block, max_size=2)), "stream": st.booleans(),
        "temperature": unit, "top_p": unit, "top_k": small, "stop_sequences": st.lists(odd_text, max_size=2),
        "tools": st.lists(record({"name": odd_text}, {"description": odd_text, "input_schema": schema}), max_size=2),
        "tool_choice": record({"type": st.sampled_from(["auto", "any", "tool", "none", "x"])}, {"name": odd_text}),
        "thinking": record({"type": st.sampled_from(["enabled", "disabled"])}, {"budget_tokens": small}),
        "metadata": json_values})),
}


def error_message(path: str, data: Any) -> Any:
    """The message in the error envelope the path's API uses."""
    if path.startswith("/v1/messages"):
        assert data["type"] == "error", data
        return data["error"]["message"]
    if path.startswith("/v1/"):
        return data["error"]["message"]
    return data["error"]


@pytest.fixture(scope="module")
def fuzz_client(tmp_path_factory: pytest.TempPathFactory, tiny_gguf: Any) -> Iterator[tuple[asyncio.AbstractEventLoop,
                                                                                            TestClient]]:
    """The app over the fake runner on a loop of its own (Hypothesis drives the examples from plain functions)."""
    from ollama_py.server.app import create_app
    from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings

    settings_ = make_settings(tmp_path_factory.mktemp("request-fuzz"))
    create_tiny_model(settings_, tiny_gguf)
    loop = asyncio.new_event_loop()
    app = create_app(settings_, scheduler=fake_scheduler(settings_, {"FAKE_TOKENS": "3"}))
    client = TestClient(TestServer(app, loop=loop), loop=loop)
    loop.run_until_complete(client.start_server())
    try:
        yield loop, client
    finally:
        loop.run_until_complete(client.close())
        loop.close()


def encode(body: Any) -> bytes:
    """The body as JSON text, deep nesting included (the encoder counts levels against the recursion limit, which
    is raised for it alone: no server code runs meanwhile)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        return json.dumps(body).encode()
    finally:
        sys.setrecursionlimit(limit)


async def send(client: TestClient, path: str, body: Any) -> None:
    data = encode(body)
    resp = await client.post(path, data=data, headers={"Content-Type": "application/json"})
    text = await resp.text()  # the whole answer, streams included
    where = (path, resp.status, text[:400], data[:600])
    assert resp.status < 500, where
    assert "Traceback" not in text, where
    if resp.status >= 400:
        assert resp.content_type == "application/json", where
        message = error_message(path, json.loads(text))
        assert isinstance(message, str) and message, where


@pytest.mark.parametrize("endpoint", list(BODIES))
def test_random_bodies_never_get_a_5xx_and_every_4xx_is_an_error_envelope(
        endpoint: str, fuzz_client: tuple[asyncio.AbstractEventLoop, TestClient]) -> None:
    loop, client = fuzz_client
    path, bodies = BODIES[endpoint]

    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example])
    @given(body=st.one_of(mutated(bodies), mutated(bodies), mutated(bodies), mutated(bodies), anything))
    def run(body: Any) -> None:
        loop.run_until_complete(send(client, path, body))

    run()
