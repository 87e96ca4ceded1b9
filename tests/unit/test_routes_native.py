"""Native routes over the fake runner: request checks and response shapes a client sees."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
async def client(fake_app, aiohttp_client):
    _, app = fake_app()
    return await aiohttp_client(app)


async def test_generate_stream_shapes(client):
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": "hello there", "options": {"num_predict": 3}})
    assert r.status == 200 and r.headers["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(x) for x in (await r.text()).splitlines()]
    assert "".join(x["response"] for x in lines) == "The quick brown"
    assert lines[-1]["done"] is True and lines[-1]["done_reason"] == "length" and lines[-1]["eval_count"] == 3
    assert isinstance(lines[-1]["context"], list)


async def test_chat_non_stream(client):
    r = await client.post("/api/chat", json={"model": "tiny", "stream": False,
                                              "messages": [{"role": "user", "content": "hi"}]})
    body = await r.json()
    assert body["message"] == {"role": "assistant", "content": "The quick brown fox jumps over the lazy"}
    assert body["done_reason"] == "stop"


@pytest.mark.parametrize("body,status,error", [
    ({"model": "tiny", "prompt": "x", "think": True}, 400, '"tiny" does not support thinking'),
    ({"model": "tiny", "prompt": "x", "think": "loud"}, 400,
     'think must be a boolean or one of "low", "medium", "high", "max"'),
    ({"model": "tiny", "prompt": "x", "raw": True, "system": "s"}, 400,
     "raw mode does not support template, system, or context"),
    ({"model": "tiny", "prompt": "x", "keep_alive": "soon"}, 400, 'time: invalid duration "soon"'),
    ({"model": "tiny", "prompt": "x", "options": {"temperature": "hot"}}, 400, None),
    ({"model": "nope", "prompt": "x"}, 404, "model 'nope' not found"),
    ({"prompt": "x"}, 400, "model is required"),
], ids=["think-unsupported", "think-bad-level", "raw-with-system", "bad-keep-alive", "bad-option-type",
        "unknown-model", "no-model"])
async def test_generate_refuses_bad_requests(client, body, status, error):
    r = await client.post("/api/generate", json=body)
    assert r.status == status
    got = (await r.json())["error"]
    if error is not None:
        assert got == error
    else:
        assert got.startswith('option "temperature" must be of type')


async def test_chat_think_false_is_fine(client):
    r = await client.post("/api/chat", json={"model": "tiny", "stream": False, "think": False,
                                              "messages": [{"role": "user", "content": "hi"}],
                                              "options": {"num_predict": 1}})
    assert r.status == 200 and (await r.json())["message"]["content"] == "The"


async def test_load_and_unload_with_empty_prompt(client):
    load = await (await client.post("/api/generate", json={"model": "tiny"})).json()
    assert load["done_reason"] == "load" and load["response"] == ""
    ps = await (await client.get("/api/ps")).json()
    assert [m["name"] for m in ps["models"]] == ["tiny:latest"]
    unload = await (await client.post("/api/chat", json={"model": "tiny", "keep_alive": 0})).json()
    assert unload["done_reason"] == "unload" and unload["message"] == {"role": "assistant", "content": ""}


async def test_an_http_1_0_client_gets_the_whole_stream_unchunked(fake_app, aiohttp_server):
    """HTTP/1.0 has no chunked encoding: the stream is the body up to the close (no direct chunk writes)."""
    import asyncio

    _, app = fake_app(fake_env={"FAKE_TOKEN_DELAY": "0.005"})
    server = await aiohttp_server(app)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    body = json.dumps({"model": "tiny", "prompt": "hello", "options": {"num_predict": 6}}).encode()
    writer.write(b"POST /api/generate HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(body), body))
    raw = await reader.read()
    writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and b"chunked" not in head.lower()
    lines = [json.loads(x) for x in payload.splitlines()]
    assert "".join(x["response"] for x in lines) == "The quick brown fox jumps over"
    assert lines[-1]["done"] is True
