"""The lane (server/streaming.py) takes a plain stream's first token too: the response is prepared while the runner
computes (its headers held back), and the first token leaves from the runner stream's protocol callback with them,
without waking the handler. An error before anything was sent still gets its own status; one after the lane's
tokens ends the body. Fake runner."""

from __future__ import annotations

import asyncio
import json
import os
import signal
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web

from ollama_py.server.appkeys import SCHEDULER
from ollama_py.server.streaming import Lane, ndjson_line

ASK = [{"role": "user", "content": "hi"}]


def _texts(route: str, body: str) -> list[str]:
    """The text of each chunk the client got, empty ones left out."""
    if route == "/v1/chat/completions":
        events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {")]
        texts = [(e["choices"][0]["delta"].get("content") or "") for e in events if e["choices"]]
    else:
        lines = [json.loads(line) for line in body.splitlines()]
        texts = [x["response"] if "response" in x else x["message"]["content"] for x in lines]
    return [t for t in texts if t]


@pytest.mark.parametrize(("route", "body"), [
    ("/api/generate", {"model": "tiny", "prompt": "hi", "raw": True}),
    ("/api/generate", {"model": "tiny", "prompt": "hi"}),  # its final chunk's context asks for the prompt's ids
    ("/api/chat", {"model": "tiny", "messages": ASK}),
    ("/v1/chat/completions", {"model": "tiny", "messages": ASK, "stream": True}),
])
async def test_every_text_chunk_of_a_plain_stream_takes_the_lane_the_first_too(fake_app: Any, aiohttp_client: Any,
                                                                                route: str, body: dict) -> None:
    _, app = fake_app(fake_env={"FAKE_TOKENS": "6", "FAKE_PROMPT_DELAY": "0.05", "FAKE_TOKEN_DELAY": "0.002"})
    client = await aiohttp_client(app)
    before = Lane.totals["unparsed"] + Lane.totals["parsed"]
    r = await client.post(route, json=body)
    assert r.status == 200
    texts = _texts(route, await r.text())
    assert len(texts) == 6
    assert Lane.totals["unparsed"] + Lane.totals["parsed"] - before == 6  # before: all but the first
    if route == "/api/generate" and "raw" not in body:
        whole = await (await client.post(route, json={**body, "stream": False})).json()
        final = [json.loads(x) for x in (await (await client.post(route, json=body)).text()).splitlines()][-1]
        assert final["context"] == whole["context"] and len(final["context"]) > 6


@pytest.mark.parametrize(("route", "body", "first"), [
    ("/api/generate", {"model": "tiny", "prompt": "hi", "raw": True}, b'"response":"The"'),
    ("/v1/chat/completions", {"model": "tiny", "messages": ASK, "stream": True}, b'"content":"The"'),
    ("/v1/messages", {"model": "tiny", "messages": ASK, "max_tokens": 5, "stream": True}, b"event: message_start"),
])
async def test_the_headers_leave_with_the_first_token_in_one_send(fake_app: Any, aiohttp_client: Any, route: str,
                                                                  body: dict, first: bytes) -> None:
    """aiohttp holds a prepared response's headers back until its body's first write; the lane's first token takes
    them along: one send (one wake-up of the client) where there were two. Every send to the client recorded."""
    _, app = fake_app(fake_env={"FAKE_TOKENS": "4", "FAKE_PROMPT_DELAY": "0.05", "FAKE_TOKEN_DELAY": "0.01"})
    sends: list[bytes] = []
    wrapped: set[int] = set()

    @web.middleware
    async def record(request: web.Request, handler: Any) -> Any:
        transport = request.transport
        if transport is not None and id(transport) not in wrapped:  # (a kept-alive connection: once)
            wrapped.add(id(transport))
            write = transport.write

            def recorded(data: bytes) -> None:
                sends.append(bytes(data))
                write(data)

            transport.write = recorded  # type: ignore[method-assign]
        return await handler(request)

    app.middlewares.append(record)
    client = await aiohttp_client(app)
    assert (await client.post("/api/generate", json={"model": "tiny"})).status == 200  # loaded
    before = Lane.totals["unparsed"] + Lane.totals["parsed"]
    sends.clear()
    r = await client.post(route, json=body)
    assert r.status == 200 and "The" in await r.text()
    assert Lane.totals["unparsed"] + Lane.totals["parsed"] > before  # the lane wrote this stream
    assert sends[0].startswith(b"HTTP/1.1 200 OK\r\n") and b"Transfer-Encoding: chunked" in sends[0]
    assert first in sends[0].partition(b"\r\n\r\n")[2]  # the body's first chunk, in the same send
    assert not any(s.startswith(b"HTTP/1.1") for s in sends[1:])


async def test_a_runner_gone_before_its_first_token_is_an_error_with_its_own_status(fake_app: Any,
                                                                                    aiohttp_client: Any) -> None:
    """The response was prepared while the runner computed; nothing was sent, so it is taken back and the error
    is the answer, with its status, as Ollama answers an error that comes before any output."""
    _, app = fake_app(fake_env={"FAKE_PROMPT_DELAY": "5"})
    client = await aiohttp_client(app)
    assert (await client.post("/api/generate", json={"model": "tiny"})).status == 200  # loaded
    pid = next(iter(app[SCHEDULER].loaded.values())).runner.pid
    asking = asyncio.ensure_future(client.post("/api/generate", json={"model": "tiny", "prompt": "hi"}))
    await asyncio.sleep(0.5)  # the runner has the request and "computes"
    os.kill(pid, signal.SIGKILL)
    r = await asyncio.wait_for(asking, 30)
    assert r.status == 500 and r.headers["Content-Type"].startswith("application/json")
    assert (await r.json())["error"].startswith("llama runner process has terminated: signal: killed")


async def test_a_runner_gone_after_the_lanes_tokens_ends_the_body_with_its_error(fake_app: Any,
                                                                                 aiohttp_client: Any) -> None:
    _, app = fake_app(fake_env={"FAKE_CRASH_AFTER_TOKENS": "3", "FAKE_TOKEN_DELAY": "0.01"})
    client = await aiohttp_client(app)
    r = await client.post("/api/chat", json={"model": "tiny", "messages": ASK})
    assert r.status == 200
    lines = [json.loads(x) for x in (await r.text()).splitlines()]
    assert all(x["message"]["content"] for x in lines[:3])
    assert len(lines) == 4 and lines[-1]["error"].startswith("llama runner process has terminated")


@pytest.mark.parametrize(("queued", "diverted"), [(0, True), (1, False)])
async def test_the_lane_takes_the_stream_early_only_while_the_handler_has_had_no_event(queued: int,
                                                                                       diverted: bool) -> None:
    """Prepared early, the lane diverts the stream only if no event went to the handler before it: such an event is
    the handler's to write first, and the lane's chunks would otherwise overtake it (a busy loop may run the early
    preparation after a fast runner's first token)."""
    class Transport:
        sent: list[bytes] = []

        def write(self, data: bytes) -> None:
            self.sent.append(data)

        def get_write_buffer_size(self) -> int:
            return 0

        def is_closing(self) -> bool:
            return False

    headers_sent: list[bool] = []
    request = SimpleNamespace(transport=Transport(), writer=SimpleNamespace(
        output_size=0, send_headers=lambda: headers_sent.append(True)))
    resp = SimpleNamespace(prepared=True, headers={"Transfer-Encoding": "chunked"}, compression=False)
    sinks: list[Any] = []
    stream = SimpleNamespace(queued=queued, backlog=0, divert=lambda *taken: sinks.append(taken))
    lane = Lane(lambda text, _at: ndjson_line({"response": text}))
    lane.offer(request, resp)  # type: ignore[arg-type]
    firsts: list[bool] = []
    lane.collect([], None, lambda: firsts.append(True))
    lane.tap.connected(stream)  # type: ignore[arg-type]
    await lane.settled()
    assert bool(sinks) is diverted and lane.ready()  # bound either way: the handler's response is the lane's
    if diverted:
        assert sinks[0][1](b"Hi", b"") is True  # a plain token through the lane: the held-back headers first
        assert headers_sent == [True] and firsts == [True] and len(request.transport.sent) == 1
