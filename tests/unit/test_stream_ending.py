"""A stream's last event leaves with the end of the body (streaming.stream_response's `ends`): the client has the
whole response before the event source's own ending (the runner's place given back, its bookkeeping) runs, and
each route's rule for "last" picks exactly the last event it really sends. Fake runner."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from ollama_py.server import anthropic_translate as ant
from ollama_py.server import openai_translate as oai
from ollama_py.server import responses_translate as rt
from ollama_py.server.streaming import ndjson, sse


def _app(events: AsyncIterator[Any], kind: str) -> web.Application:
    async def handler(request: web.Request) -> web.StreamResponse:
        if kind == "ndjson":
            return await ndjson(request, events, ends=lambda ev: ev.get("done") is True)
        return await sse(request, events, ends=lambda ev: ev.get("last") is True)

    app = web.Application()
    app.router.add_post("/", handler)
    return app


@pytest.mark.parametrize("kind", ["ndjson", "sse"])
async def test_the_client_has_the_whole_body_before_the_source_ends(kind, aiohttp_client):
    """The source waits, after its last event, for the test to see the whole body: with the end of the body
    held back until the source ended, this read would never finish."""
    seen_whole, ended = asyncio.Event(), asyncio.Event()

    async def events() -> AsyncIterator[dict[str, Any]]:
        yield {"response": "a", "done": False}
        yield {"response": "b", "done": False}
        yield {"response": "", "done": True, "last": True}
        await seen_whole.wait()  # the source's own ending
        ended.set()

    client = await aiohttp_client(_app(events(), kind))
    resp = await client.post("/")
    text = await asyncio.wait_for(resp.text(), 10)
    assert not ended.is_set()
    seen_whole.set()
    await asyncio.wait_for(ended.wait(), 10)  # and the source still runs to its end
    if kind == "ndjson":
        lines = [json.loads(x) for x in text.splitlines()]
        assert [x["response"] for x in lines] == ["a", "b", ""] and lines[-1]["done"] is True
    else:
        assert text.endswith('"last":true}\n\ndata: [DONE]\n\n') and text.count("data: ") == 4


async def test_an_only_event_that_is_the_last_goes_with_the_headers_and_the_end(aiohttp_client):
    async def events() -> AsyncIterator[dict[str, Any]]:
        yield {"response": "", "done": True}

    client = await aiohttp_client(_app(events(), "ndjson"))
    resp = await client.post("/")
    assert resp.status == 200 and resp.headers["Content-Type"] == "application/x-ndjson"
    assert [json.loads(x) for x in (await resp.text()).splitlines()] == [{"response": "", "done": True}]


async def test_an_event_after_the_last_is_dropped_and_logged_and_the_body_stays_whole(aiohttp_client, caplog):
    async def events() -> AsyncIterator[dict[str, Any]]:
        yield {"response": "a", "done": False}
        yield {"response": "", "done": True}
        yield {"response": "late", "done": False}
        raise RuntimeError("and then it failed")

    client = await aiohttp_client(_app(events(), "ndjson"))
    with caplog.at_level(logging.WARNING, logger="ollama_py.server.streaming"):
        resp = await client.post("/")
        lines = [json.loads(x) for x in (await resp.text()).splitlines()]
        for _ in range(500):  # the source's ending runs after the client has the body: wait for its lines
            if "failed after its last event" in caplog.text:
                break
            await asyncio.sleep(0.01)
    assert lines == [{"response": "a", "done": False}, {"response": "", "done": True}]
    assert "an event after the last one was dropped" in caplog.text and "late" in caplog.text
    assert "failed after its last event: and then it failed" in caplog.text


def _sse_events(text: str) -> list[tuple[str | None, Any]]:
    out: list[tuple[str | None, Any]] = []
    for block in text.split("\n\n"):
        if not block:
            continue
        name, data = None, None
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data = line.removeprefix("data: ")
        out.append((name, data if data == "[DONE]" else json.loads(data or "null")))
    return out


CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True}


@pytest.mark.parametrize("usage", [False, True])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
async def test_openais_last_chunk_is_the_one_the_rule_picks(path, usage, fake_app, aiohttp_client):
    _, app = fake_app({"FAKE_TOKEN_DELAY": "0", "FAKE_TOKENS": "6"})
    client = await aiohttp_client(app)
    body = {**CHAT, "stream_options": {"include_usage": usage}}
    if path == "/v1/completions":
        body = {"model": "tiny", "prompt": "hi", "stream": True, "stream_options": {"include_usage": usage}}
    events = _sse_events(await (await client.post(path, json=body)).text())
    assert events[-1] == (None, "[DONE]")
    chunks = [data for _, data in events[:-1]]
    rule = oai.last_chunk(usage)
    assert [rule(c) for c in chunks] == [False] * (len(chunks) - 1) + [True]
    assert ("usage" in chunks[-1]) is usage


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/responses"])
async def test_anthropics_and_responses_last_event_is_the_one_the_rule_picks(path, fake_app, aiohttp_client):
    _, app = fake_app({"FAKE_TOKEN_DELAY": "0", "FAKE_TOKENS": "6"})
    client = await aiohttp_client(app)
    body = {"model": "tiny", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}], "stream": True}
    if path == "/v1/responses":
        body = {"model": "tiny", "input": "hi", "stream": True}
    events = _sse_events(await (await client.post(path, json=body)).text())
    rule = ant.is_last if path == "/v1/messages" else rt.is_last
    assert [rule((name, data)) for name, data in events] == [False] * (len(events) - 1) + [True]


@pytest.mark.parametrize("path", ["/api/generate", "/api/chat"])
async def test_a_native_stream_ends_with_its_done_line(path, fake_app, aiohttp_client):
    _, app = fake_app({"FAKE_TOKEN_DELAY": "0", "FAKE_TOKENS": "6"})
    client = await aiohttp_client(app)
    body = {"model": "tiny", "prompt": "hi"} if path == "/api/generate" else {**CHAT}
    lines = [json.loads(x) for x in (await (await client.post(path, json=body)).text()).splitlines()]
    assert [x["done"] for x in lines] == [False] * (len(lines) - 1) + [True]
    assert lines[-1]["done_reason"] and lines[-1]["eval_count"] >= 1
