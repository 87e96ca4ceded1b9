"""The console's data routes (server/routes_ui.py) over the fake runner, without a browser."""

from __future__ import annotations

import json
from typing import Any

import pytest


@pytest.fixture
async def client(fake_app: Any, aiohttp_client: Any) -> Any:
    _, app = fake_app()
    return await aiohttp_client(app)


async def test_a_modelfile_becomes_the_create_request_it_stands_for(client: Any) -> None:
    r = await client.post("/ui/api/modelfile", json={"modelfile": 'FROM tiny\nSYSTEM """Be brief."""\n'
                                                                   "PARAMETER temperature 0.2\nPARAMETER stop <end>\n"})
    assert r.status == 200
    assert await r.json() == {"from": "tiny", "system": "Be brief.",
                              "parameters": {"temperature": 0.2, "stop": ["<end>"]}}


@pytest.mark.parametrize(("text", "error"), [
    pytest.param("SYSTEM hi\n", "no FROM line", id="no-from"),
    pytest.param("FROM ./weights.gguf\n", "for a local file use `ollama-py create", id="local-file"),
    pytest.param("FROM tiny\nBOGUS x\n", "(line 2)", id="bad-command"),
])
async def test_a_modelfile_the_console_cannot_use_is_a_400_saying_why(client: Any, text: str, error: str) -> None:
    r = await client.post("/ui/api/modelfile", json={"modelfile": text})
    assert r.status == 400
    assert error in (await r.json())["error"]


async def test_the_live_stream_starts_with_what_happened_before(client: Any) -> None:
    assert (await client.get("/api/tags")).status == 200
    r = await client.get("/ui/api/events")
    assert r.headers["Content-Type"].startswith("text/event-stream")
    head = b""
    while b"\n\n" not in head:
        head += await r.content.readany()
    event, data = head.split(b"\n\n", 1)[0].decode().split("\n")
    assert event == "event: hello"
    hello = json.loads(data.removeprefix("data: "))
    assert [q["path"] for q in hello["requests"]] == ["/api/tags"]  # the console's own requests are not listed
    assert len(hello["series"]) > 0
    r.close()


async def test_server_facts_hide_the_api_keys(fake_app: Any, aiohttp_client: Any) -> None:
    _, app = fake_app(api_keys=("k1", "k2"))
    c = await aiohttp_client(app)
    r = await c.get("/ui/api/server", headers={"Authorization": "Bearer k1"})
    info = await r.json()
    assert info["settings"]["OLLAMA_API_KEYS"] == "2 set"
    assert "k1" not in json.dumps(info)


async def read_event(r: Any, buffer: list[bytes]) -> tuple[str, Any]:
    """The next SSE event of a stream (comments skipped); `buffer` holds what was read past it."""
    while True:
        while b"\n\n" not in buffer[0]:
            buffer[0] += await r.content.readany()
        block, buffer[0] = buffer[0].split(b"\n\n", 1)
        if block.startswith(b":"):
            continue
        event, data = block.decode().split("\n", 1)
        return event.removeprefix("event: "), json.loads(data.removeprefix("data: "))


async def test_idle_viewers_share_one_ticker_and_all_see_a_model_load(client: Any) -> None:
    """Issue 34: each viewer polled /api/ps itself every second (500 idle viewers took 85 % of a core). Now one
    task per server does it for all of them, and a viewer only waits on its queue."""
    import asyncio

    streams = [await client.get("/ui/api/events") for _ in range(20)]
    buffers = [[b""] for _ in streams]
    for r, buf in zip(streams, buffers, strict=True):
        assert (await read_event(r, buf))[0] == "hello"
        assert await read_event(r, buf) == ("ps", {"models": []})
    assert [t.get_name() for t in asyncio.all_tasks() if t.get_name() == "console-ticker"] == ["console-ticker"]
    r = await client.post("/api/generate", json={"model": "tiny"})  # loads it
    assert r.status == 200
    for stream, buf in zip(streams, buffers, strict=True):
        async with asyncio.timeout(30):
            while (got := await read_event(stream, buf))[0] != "ps":
                pass
        assert [m["name"] for m in got[1]["models"]] == ["tiny:latest"]
        stream.close()


async def test_a_viewer_writes_a_burst_of_events_in_a_few_writes(client: Any) -> None:
    """Issue 34: every event woke every viewer and was its own write (500 viewers beside a busy server: a third of
    a core). A viewer now writes what arrived at most every FLUSH_SECONDS: 40 requests, a handful of writes."""
    import asyncio

    from ollama_py.server.routes_ui import FLUSH_SECONDS

    stream = await client.get("/ui/api/events")
    buf = [b""]
    assert (await read_event(stream, buf))[0] == "hello"
    assert (await read_event(stream, buf))[0] == "ps"
    for _ in range(40):
        assert (await client.get("/api/version")).status == 200
    writes, seen = 0, b""
    async with asyncio.timeout(30):
        while seen.count(b"event: request") < 40:
            data, _end = await stream.content.readchunk()
            writes += b"event: request" in data
            seen += data
    assert writes <= 4 + 40 * 0.05 / FLUSH_SECONDS, writes  # 40 requests take well under 2 s here
    stream.close()
