"""DELETE /api/delete on a loaded model, with the fake runner: a copy's deletion leaves the original loaded, the
last name's deletion lets the runner go once idle, and neither waits for a stream in progress."""

from __future__ import annotations

import asyncio
import json

from ollama_py.api.names import parse_name
from ollama_py.store.models import ModelStore


async def loaded_names(client) -> list[str]:
    return [m["name"] for m in (await (await client.get("/api/ps")).json())["models"]]


async def until_unloaded(client) -> list[str]:
    for _ in range(400):  # the runner stops in the background
        names = await loaded_names(client)
        if not names:
            return names
        await asyncio.sleep(0.025)
    return await loaded_names(client)


async def test_deleting_a_copy_leaves_the_original_loaded(fake_app, aiohttp_client):
    _, app = fake_app()
    client = await aiohttp_client(app)
    assert (await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False})).status == 200
    assert (await client.post("/api/copy", json={"source": "tiny", "destination": "tiny-copy"})).status == 200
    assert (await client.delete("/api/delete", json={"model": "tiny-copy"})).status == 200
    assert await loaded_names(client) == ["tiny:latest"]
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False})
    assert (await r.json())["load_duration"] == 0  # the same runner answered: nothing was loaded again


async def test_deleting_the_last_name_unloads_after_the_stream_in_progress(fake_app, aiohttp_client):
    settings, app = fake_app(fake_env={"FAKE_TOKEN_DELAY": "0.02", "FAKE_TOKENS": "150"})
    client = await aiohttp_client(app)
    stream = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi"})
    first = json.loads(await stream.content.readline())
    assert first["done"] is False
    deleted = await client.delete("/api/delete", json={"model": "tiny"})
    assert deleted.status == 200
    assert await loaded_names(client) == ["tiny:latest"]  # answered while the stream still holds its runner
    lines = [json.loads(line) async for line in stream.content if line.strip()]
    assert lines[-1]["done"] is True and lines[-1]["done_reason"] == "stop"
    assert len(lines) == 150  # the first chunk was read above; the stream was not cut short
    assert await until_unloaded(client) == []
    assert ModelStore(settings.models).manifests.resolve(parse_name("tiny")) is None
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi"})
    assert r.status == 404 and (await r.json())["error"] == "model 'tiny' not found"
