"""Cloud model references, as an Ollama with its cloud disabled answers them: `name:cloud` and `name:tag-cloud`
are 403s that say the cloud is disabled (nothing is fetched from anywhere), `name:local` is the local model, a
stored stub of a remote model (pulled by Ollama into a shared store) is listed with where it points and refused
the same way, and a pull or delete of `name:tag:cloud` finds the stub under its stored name. Fake runner."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aiohttp import web

from ollama_py.api.names import parse_name
from ollama_py.server.appkeys import STORE
from ollama_py.store.manifests import CONFIG_V1, Layer, Manifest

UNAVAILABLE = "ollama cloud is disabled: remote model is unavailable"
NO_DETAILS = "ollama cloud is disabled: remote model details are unavailable"
CHAT = [{"role": "user", "content": "hi"}]

# every route that runs a model, with a body naming `model`
INFERENCE = [
    ("/api/generate", {"prompt": "hi"}),
    ("/api/chat", {"messages": CHAT}),
    ("/api/embed", {"input": "hi"}),
    ("/api/embeddings", {"prompt": "hi"}),
    ("/v1/chat/completions", {"messages": CHAT}),
    ("/v1/completions", {"prompt": "hi"}),
    ("/v1/embeddings", {"input": "hi"}),
    ("/v1/responses", {"input": "hi"}),
    ("/v1/messages", {"max_tokens": 8, "messages": CHAT}),
]


def _message(path: str, body: dict[str, Any]) -> str:
    """The error text in the route's own envelope (Ollama's, OpenAI's or Anthropic's)."""
    err = body["error"]
    return err if isinstance(err, str) else err["message"]


def _store_stub(app: Any, name: str, remote_model: str = "gpt-oss:20b",
                remote_host: str = "https://ollama.com:443") -> None:
    """A stub as Ollama pulls one for a cloud model: a config naming the remote model, no weights."""
    store = app[STORE]
    config = json.dumps({"model_format": "", "model_family": "gptoss", "remote_host": remote_host,
                         "remote_model": remote_model, "capabilities": ["completion", "tools", "thinking"]})
    digest, size = store.blobs.write_bytes(config.encode())
    store.manifests.put(parse_name(name), Manifest.build(Layer(CONFIG_V1, digest, size), []))


@pytest.mark.parametrize(("path", "extra"), INFERENCE)
@pytest.mark.parametrize("model", ["gpt-oss:20b:cloud", "gpt-oss:20b-cloud", "qwen3-coder:CLOUD"])
async def test_a_cloud_model_is_refused_on_every_inference_route(fake_app, aiohttp_client, path, extra, model):
    """In Ollama's own envelope on every route, the OpenAI and Anthropic ones too: its cloud check runs before
    their translation (a cloud name never reaches the OpenAI or Anthropic middleware)."""
    _, app = fake_app()
    client = await aiohttp_client(app)
    resp = await client.post(path, json={"model": model, **extra})
    assert resp.status == 403
    assert await resp.json() == {"error": UNAVAILABLE}


async def test_a_cloud_models_details_are_refused(fake_app, aiohttp_client):
    _, app = fake_app()
    client = await aiohttp_client(app)
    show = await client.post("/api/show", json={"model": "gpt-oss:20b:cloud"})
    assert show.status == 403 and await show.json() == {"error": NO_DETAILS}
    retrieve = await client.get("/v1/models/gpt-oss:120b-cloud")
    assert retrieve.status == 403 and await retrieve.json() == {"error": NO_DETAILS}


async def test_local_names_the_local_model(fake_app, aiohttp_client):
    _, app = fake_app()
    client = await aiohttp_client(app)
    resp = await client.post("/api/chat", json={"model": "tiny:local", "messages": CHAT, "stream": False})
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["message"]["role"] == "assistant"
    show = await client.post("/api/show", json={"model": "tiny:latest:local"})
    assert show.status == 200 and "completion" in (await show.json())["capabilities"]
    missing = await client.post("/api/chat", json={"model": "nope:local", "messages": CHAT})
    assert missing.status == 404 and await missing.json() == {"error": "model 'nope:local' not found"}


@pytest.mark.parametrize("model", ["tiny:cloud:local", "tiny:local:cloud", "tiny:8b-cloud:local"])
async def test_both_sources_at_once_is_a_bad_request(fake_app, aiohttp_client, model):
    _, app = fake_app()
    client = await aiohttp_client(app)
    resp = await client.post("/api/generate", json={"model": model, "prompt": "hi"})
    assert resp.status == 400
    assert await resp.json() == {"error": f'use either :local or :cloud, not both: "{model}"'}


async def test_a_stored_stub_is_listed_with_its_remote_and_refused(fake_app, aiohttp_client):
    _, app = fake_app()
    _store_stub(app, "team-box", remote_model="llama3.2:3b", remote_host="http://10.0.0.5:11434")
    client = await aiohttp_client(app)
    entries = {m["name"]: m for m in (await (await client.get("/api/tags")).json())["models"]}
    assert entries["team-box:latest"]["remote_model"] == "llama3.2:3b"
    assert entries["team-box:latest"]["remote_host"] == "http://10.0.0.5:11434"
    assert "remote_host" not in entries["tiny:latest"]  # omitted for a model of our own, as Ollama's omitempty
    for path, extra in INFERENCE:  # found by the handler: in the route's envelope, as Ollama's middleware wraps it
        resp = await client.post(path, json={"model": "team-box", **extra})
        assert resp.status == 403, path
        body = await resp.json()
        assert _message(path, body) == UNAVAILABLE, path
        assert isinstance(body["error"], str) == path.startswith("/api/"), path
    show = await client.post("/api/show", json={"model": "team-box"})
    assert show.status == 403 and await show.json() == {"error": NO_DETAILS}
    # asked for as the local model, the stub is not one
    local = await client.post("/api/chat", json={"model": "team-box:local", "messages": CHAT})
    assert local.status == 404 and await local.json() == {"error": "model 'team-box:local' not found"}


async def test_a_cloud_stub_is_deleted_by_its_cloud_name(fake_app, aiohttp_client):
    _, app = fake_app()
    _store_stub(app, "gpt-oss:20b-cloud")
    client = await aiohttp_client(app)
    names = [m["name"] for m in (await (await client.get("/api/tags")).json())["models"]]
    assert "gpt-oss:20b-cloud" in names
    resp = await client.delete("/api/delete", json={"model": "gpt-oss:20b:cloud"})
    assert resp.status == 200, await resp.text()
    names = [m["name"] for m in (await (await client.get("/api/tags")).json())["models"]]
    assert "gpt-oss:20b-cloud" not in names and "tiny:latest" in names
    again = await client.delete("/api/delete", json={"model": "gpt-oss:20b:cloud"})
    assert again.status == 404


@pytest.mark.parametrize(("asked", "tag"), [("gpt-oss:20b:cloud", "20b-cloud"), ("gpt-oss:cloud", "cloud"),
                                            ("gpt-oss:20b-cloud", "20b-cloud"), ("gpt-oss:20b:local", "20b")])
async def test_a_pull_asks_the_registry_for_the_stored_name(fake_app, aiohttp_client, aiohttp_server, asked, tag):
    """Ollama pulls a cloud model's stub under the older suffix (`name:tag-cloud`); the registry is asked for
    that manifest, and `:local` is dropped."""
    seen: list[str] = []

    async def registry_handler(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({"errors": [{"code": "MANIFEST_UNKNOWN", "message": "no"}]}, status=404)

    registry_app = web.Application()
    registry_app.router.add_route("*", "/{tail:.*}", registry_handler)
    registry = await aiohttp_server(registry_app)
    _, app = fake_app()
    client = await aiohttp_client(app)
    resp = await client.post("/api/pull", json={"model": f"127.0.0.1:{registry.port}/library/{asked}",
                                                "insecure": True, "stream": False})
    assert resp.status == 404, await resp.text()
    assert f"/v2/library/gpt-oss/manifests/{tag}" in seen
