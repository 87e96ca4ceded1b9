"""The lane (server/streaming.py, step 5) ends a plain stream's body too: the runner's stop event becomes the
route's last chunk (with Ollama's counts, OpenAI's finish_reason and usage, the [DONE] marker) and the end of the
chunked body, written from the runner stream's protocol callback in one write, without waking the handler. The
client must see exactly what the ordinary way writes, in a body framed right (the connection is used again).
Fake runner."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from ollama_py.server.streaming import Lane

ASK = [{"role": "user", "content": "hi"}]
SLOW = {"FAKE_TOKENS": "6", "FAKE_TOKEN_DELAY": "0.05"}  # time enough for /api/generate's prompt ids to be in


def _ended() -> int:
    return Lane.totals["ended"]


async def _ndjson(client: Any, route: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = await client.post(route, json=body)
    assert r.status == 200
    return [json.loads(line) for line in (await r.text()).splitlines()]


@pytest.mark.parametrize("body", [
    {"model": "tiny", "prompt": "hi", "raw": True},
    {"model": "tiny", "prompt": "hi"},  # with its context: the prompt's ids, asked for beside the decode
])
async def test_the_lane_ends_a_generate_stream_with_ollamas_last_chunk(fake_app: Any, aiohttp_client: Any,
                                                                       body: dict[str, Any]) -> None:
    _, app = fake_app(fake_env=SLOW)
    client = await aiohttp_client(app)
    before = _ended()
    lines = await _ndjson(client, "/api/generate", body)
    assert _ended() - before == 1
    *tokens, final = lines
    assert "".join(x["response"] for x in tokens) and all(x["done"] is False for x in tokens)
    assert final["done"] is True and final["done_reason"] == "stop" and final["response"] == ""
    assert final["prompt_eval_count"] >= 1 and final["total_duration"] >= final["eval_duration"] > 0
    whole = await (await client.post("/api/generate", json={**body, "stream": False})).json()  # the ordinary way
    assert whole["response"] == "".join(x["response"] for x in tokens)
    assert final["eval_count"] == whole["eval_count"] >= 6
    if "raw" in body:
        assert "context" not in final
    else:  # the prompt's ids, then the answer's
        assert final["context"] == whole["context"] and len(final["context"]) > 6


async def test_an_answer_cut_at_num_predict_ends_with_length(fake_app: Any, aiohttp_client: Any) -> None:
    _, app = fake_app(fake_env=SLOW)
    client = await aiohttp_client(app)
    before = _ended()
    lines = await _ndjson(client, "/api/chat", {"model": "tiny", "messages": ASK, "options": {"num_predict": 3}})
    assert _ended() - before == 1
    final = lines[-1]
    assert final["done"] is True and final["done_reason"] == "length" and final["eval_count"] == 3
    assert final["message"] == {"role": "assistant", "content": ""}
    assert sum(1 for x in lines[:-1] if x["message"]["content"]) == 3


@pytest.mark.parametrize("usage", [False, True])
async def test_the_lane_ends_an_openai_stream_with_finish_reason_usage_and_done(fake_app: Any, aiohttp_client: Any,
                                                                                usage: bool) -> None:
    _, app = fake_app(fake_env=SLOW)
    client = await aiohttp_client(app)
    body: dict[str, Any] = {"model": "tiny", "messages": ASK, "stream": True}
    if usage:
        body["stream_options"] = {"include_usage": True}
    before = _ended()
    r = await client.post("/v1/chat/completions", json=body)
    assert r.status == 200
    text = await r.text()
    assert _ended() - before == 1
    assert text.endswith("data: [DONE]\n\n") and text.count("data: [DONE]") == 1
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    finish = [e for e in events if e["choices"] and e["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and finish[0]["choices"][0]["finish_reason"] == "stop"
    assert len({e["id"] for e in events}) == 1
    if usage:
        last = events[-1]
        whole = await (await client.post("/v1/chat/completions", json={**body, "stream": False})).json()
        assert last["choices"] == [] and last["usage"] == whole["usage"]
        assert last["usage"]["completion_tokens"] >= 6
        assert all(e.get("usage") is None for e in events[:-1])
    else:
        assert events[-1] is finish[0] and "usage" not in events[-1]


@pytest.mark.parametrize("usage", [False, True])
async def test_an_openai_text_completion_stream_takes_the_lane_start_to_end(fake_app: Any, aiohttp_client: Any,
                                                                            usage: bool) -> None:
    _, app = fake_app(fake_env=SLOW)
    client = await aiohttp_client(app)
    body: dict[str, Any] = {"model": "tiny", "prompt": "hi", "stream": True}
    if usage:
        body["stream_options"] = {"include_usage": True}
    before, tokens = _ended(), Lane.totals["unparsed"] + Lane.totals["parsed"]
    r = await client.post("/v1/completions", json=body)
    assert r.status == 200
    text = await r.text()
    assert _ended() - before == 1 and Lane.totals["unparsed"] + Lane.totals["parsed"] - tokens == 6
    assert text.endswith("data: [DONE]\n\n")
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    assert all(e["object"] == "text_completion" and e["id"].startswith("cmpl-") for e in events)
    texts = [e["choices"][0]["text"] for e in events if e["choices"] and e["choices"][0]["text"]]
    whole = await (await client.post("/v1/completions", json={**body, "stream": False})).json()
    assert "".join(texts) == whole["choices"][0]["text"] and len(texts) == 6
    finish = [e for e in events if e["choices"] and e["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and finish[0]["choices"][0]["finish_reason"] == "stop"
    if usage:
        assert events[-1]["choices"] == [] and events[-1]["usage"] == whole["usage"]
    else:
        assert events[-1] is finish[0]


async def _response(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One chunked HTTP response read by hand: (head, de-chunked body); the reader is left at the next byte."""
    head = await reader.readuntil(b"\r\n\r\n")
    assert b"transfer-encoding: chunked" in head.lower(), head
    body = b""
    while True:
        size = int((await reader.readuntil(b"\r\n"))[:-2], 16)
        data = await reader.readexactly(size + 2)
        assert data.endswith(b"\r\n")
        if size == 0:
            return head, body
        body += data[:-2]


async def test_a_body_the_lane_ended_is_framed_right_and_its_connection_is_used_again(fake_app: Any,
                                                                                       aiohttp_client: Any) -> None:
    """Two requests on one keep-alive connection, read by hand: each body ends with one last chunk, and the
    second response starts right after the first's end (an end written twice would be read as garbage)."""
    _, app = fake_app(fake_env=SLOW)
    client = await aiohttp_client(app)
    reader, writer = await asyncio.open_connection(client.host, client.port)
    try:
        before = _ended()
        for route, body in (("/api/chat", {"model": "tiny", "messages": ASK}),
                            ("/v1/chat/completions", {"model": "tiny", "messages": ASK, "stream": True})):
            data = json.dumps(body).encode()
            writer.write(b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (route.encode(), client.port, len(data), data))
            await writer.drain()
            head, payload = await asyncio.wait_for(_response(reader), 30)
            assert head.startswith(b"HTTP/1.1 200"), head
            text = payload.decode()
            if route == "/api/chat":
                assert json.loads(text.splitlines()[-1])["done"] is True
            else:
                assert text.endswith("data: [DONE]\n\n")
        assert _ended() - before == 2
        await asyncio.sleep(0.2)
        assert not reader.at_eof() and reader._buffer == b""  # nothing after the second end; still open
    finally:
        writer.close()
