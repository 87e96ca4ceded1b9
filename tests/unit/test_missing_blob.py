"""A model whose weights blob was deleted from disk behind the server's back (by hand, by another tool):
using it is a 404 that names the model, and it can still be unloaded and deleted."""

from __future__ import annotations

import asyncio

from ollama_py.api.names import parse_name
from ollama_py.store.manifests import MEDIA_MODEL
from ollama_py.store.models import ModelStore


def remove_weights(settings) -> None:
    store = ModelStore(settings.models)
    manifest = store.manifests.get(parse_name("tiny"))
    store.blobs.path(manifest.layers_of(MEDIA_MODEL)[0].digest).unlink()


async def ps(client) -> list[str]:
    return [m["name"] for m in (await (await client.get("/api/ps")).json())["models"]]


async def test_generate_with_a_missing_blob_is_a_404(fake_app, aiohttp_client):
    settings, app = fake_app()
    client = await aiohttp_client(app)
    remove_weights(settings)
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False})
    assert r.status == 404
    error = (await r.json())["error"]
    assert "tiny" in error and "missing" in error and str(settings.models) not in error


async def test_loaded_model_with_a_missing_blob_unloads_and_deletes(fake_app, aiohttp_client):
    settings, app = fake_app()
    client = await aiohttp_client(app)
    assert (await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False})).status == 200
    assert await ps(client) == ["tiny:latest"]
    remove_weights(settings)
    r = await client.post("/api/generate", json={"model": "tiny", "keep_alive": 0})
    assert r.status == 200, await r.text()
    for _ in range(400):
        if not await ps(client):
            break
        await asyncio.sleep(0.025)
    assert await ps(client) == []
    r = await client.delete("/api/delete", json={"model": "tiny"})
    assert r.status == 200, await r.text()
    assert (await client.get("/api/tags")).status == 200
    assert (await (await client.get("/api/tags")).json())["models"] == []


async def test_deleting_a_model_with_a_missing_blob(fake_app, aiohttp_client):
    settings, app = fake_app()
    client = await aiohttp_client(app)
    remove_weights(settings)
    r = await client.delete("/api/delete", json={"model": "tiny"})
    assert r.status == 200, await r.text()
    r = await client.post("/api/show", json={"model": "tiny"})
    assert r.status == 404
