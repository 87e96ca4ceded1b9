"""Who may talk to the server: Host checks against DNS rebinding, the CORS allow-list, bearer-token auth,
server-side FROM paths only for local clients, and runners that listen on loopback only.

The real app over the fake llama-server; requests go over a real loopback socket (aiohttp_client).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psutil
import pytest
from aiohttp import web

from ollama_py.config import Settings, parse_host
from ollama_py.server.appkeys import SETTINGS
from tests.helpers.paths import FAKE_SERVER
from tests.helpers.ports import free_port

LOOPBACK_HOST = f"127.0.0.1:{free_port()}"


async def _client(fake_app: Any, aiohttp_client: Any, **overrides: Any) -> Any:
    _, app = fake_app(**overrides)
    return await aiohttp_client(app)


# -- Host header (DNS rebinding) -------------------------------------------------------------------------------

ALLOWED_HOSTS = [
    pytest.param("localhost", id="localhost"),
    pytest.param("localhost:11434", id="localhost-port"),
    pytest.param("127.0.0.1:11434", id="loopback-ip"),
    pytest.param("[::1]:11434", id="loopback-ipv6"),
    pytest.param("app.localhost", id="dot-localhost"),
    pytest.param("printer.local", id="dot-local"),
    pytest.param("svc.internal", id="dot-internal"),
    pytest.param("192.168.1.20:11434", id="private-ip"),
    pytest.param("10.0.0.5", id="private-ip-10"),
    pytest.param("0.0.0.0:11434", id="unspecified"),
]
REFUSED_HOSTS = [
    pytest.param("evil.example.com", id="public-name"),
    pytest.param("attacker.example:11434", id="public-name-port"),
    pytest.param("8.8.8.8", id="public-ip"),
    pytest.param("localhost.evil.com", id="localhost-prefix"),
    pytest.param("127.0.0.1.nip.io", id="rebinding-service"),
]


@pytest.mark.parametrize("host", ALLOWED_HOSTS)
async def test_loopback_server_accepts_local_host_headers(host: str, fake_app: Any, aiohttp_client: Any) -> None:
    client = await _client(fake_app, aiohttp_client)
    resp = await client.get("/api/tags", headers={"Host": host})
    assert resp.status == 200


@pytest.mark.parametrize("host", REFUSED_HOSTS)
async def test_loopback_server_refuses_foreign_host_headers(host: str, fake_app: Any, aiohttp_client: Any) -> None:
    client = await _client(fake_app, aiohttp_client)
    for method, path in (("GET", "/api/tags"), ("POST", "/api/generate"), ("GET", "/"), ("OPTIONS", "/api/chat")):
        resp = await client.request(method, path, headers={"Host": host})
        assert resp.status == 403, (method, path)


async def test_server_bound_beyond_loopback_does_not_check_host(fake_app: Any, aiohttp_client: Any) -> None:
    """Bound to 0.0.0.0 the server is meant to be reached by name; rebinding protection is for loopback."""
    client = await _client(fake_app, aiohttp_client, host=parse_host(f"0.0.0.0:{free_port()}"))
    assert (await client.get("/api/tags", headers={"Host": "ollama.example.com"})).status == 200


# -- CORS -----------------------------------------------------------------------------------------------------

async def test_cors_allowed_origin_is_echoed_on_plain_and_streamed_responses(fake_app: Any,
                                                                              aiohttp_client: Any) -> None:
    client = await _client(fake_app, aiohttp_client)
    origin = "http://localhost:3000"
    plain = await client.get("/api/tags", headers={"Origin": origin})
    assert plain.status == 200
    assert plain.headers["Access-Control-Allow-Origin"] == origin
    streamed = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi"}, headers={"Origin": origin})
    assert streamed.status == 200
    assert streamed.headers["Content-Type"].startswith("application/x-ndjson")
    assert streamed.headers["Access-Control-Allow-Origin"] == origin
    lines = [json.loads(line) for line in (await streamed.text()).splitlines()]
    assert lines[-1]["done"] is True
    sse = await client.post("/v1/chat/completions", headers={"Origin": origin}, json={
        "model": "tiny", "messages": [{"role": "user", "content": "hi"}], "stream": True})
    assert sse.status == 200
    assert sse.headers["Access-Control-Allow-Origin"] == origin
    assert (await sse.text()).endswith("data: [DONE]\n\n")


@pytest.mark.parametrize("origin", [
    pytest.param("https://127.0.0.1:8080", id="loopback-https"),
    pytest.param("app://obsidian.md", id="app-scheme"),
    pytest.param("vscode-webview://abc", id="vscode"),
    pytest.param("chrome-extension://abcdef", id="browser-extension"),
])
async def test_cors_default_origins_are_allowed(origin: str, fake_app: Any, aiohttp_client: Any) -> None:
    client = await _client(fake_app, aiohttp_client)
    resp = await client.get("/api/version", headers={"Origin": origin})
    assert resp.status == 200
    assert resp.headers["Access-Control-Allow-Origin"] == origin


async def test_cors_foreign_origin_is_refused(fake_app: Any, aiohttp_client: Any) -> None:
    client = await _client(fake_app, aiohttp_client)
    resp = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi"},
                             headers={"Origin": "https://evil.example.com"})
    assert resp.status == 403
    assert "Access-Control-Allow-Origin" not in resp.headers


async def test_ollama_origins_extends_the_allow_list(fake_app: Any, aiohttp_client: Any) -> None:
    settings = Settings.from_env({"OLLAMA_ORIGINS": "https://chat.example.com, https://*.example.org"})
    client = await _client(fake_app, aiohttp_client, origins=settings.origins)
    for origin in ("https://chat.example.com", "https://ui.example.org", "http://localhost"):
        resp = await client.get("/api/tags", headers={"Origin": origin})
        assert resp.status == 200, origin
        assert resp.headers["Access-Control-Allow-Origin"] == origin
    assert (await client.get("/api/tags", headers={"Origin": "https://example.net"})).status == 403


async def test_cors_preflight_answers_204_with_allowed_methods_and_headers(fake_app: Any,
                                                                          aiohttp_client: Any) -> None:
    client = await _client(fake_app, aiohttp_client, api_keys=("s3cret",))
    resp = await client.options("/v1/chat/completions", headers={
        "Origin": "http://localhost:5173", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    assert resp.status == 204  # preflights carry no credentials: they pass without the key
    assert resp.headers["Access-Control-Allow-Origin"] == "http://localhost:5173"
    assert "POST" in resp.headers["Access-Control-Allow-Methods"]
    allowed = {h.strip().lower() for h in resp.headers["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "content-type"} <= allowed
    refused = await client.options("/api/chat", headers={"Origin": "https://evil.example.com",
                                                         "Access-Control-Request-Method": "POST"})
    assert refused.status == 403


# -- bearer-token auth ----------------------------------------------------------------------------------------

def test_api_keys_come_from_the_environment() -> None:
    assert Settings.from_env({"OLLAMA_API_KEYS": " k1 , k2,"}).api_keys == ("k1", "k2")
    assert Settings.from_env({}).api_keys == ()


async def test_api_keys_require_a_bearer_token(fake_app: Any, aiohttp_client: Any) -> None:
    keys = Settings.from_env({"OLLAMA_API_KEYS": "k1,k2"}).api_keys
    client = await _client(fake_app, aiohttp_client, api_keys=keys)
    missing = await client.get("/api/tags")
    assert missing.status == 401
    assert await missing.json() == {"error": "unauthorized"}
    wrong = await client.get("/api/tags", headers={"Authorization": "Bearer k3"})
    assert wrong.status == 401
    for key in ("k1", "k2"):
        assert (await client.get("/api/tags", headers={"Authorization": f"Bearer {key}"})).status == 200
    streamed = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi"},
                                 headers={"Authorization": "Bearer k1"})
    assert streamed.status == 200
    assert json.loads((await streamed.text()).splitlines()[-1])["done"] is True
    oai = await client.post("/v1/chat/completions", json={"model": "tiny", "messages": []})
    assert oai.status == 401
    assert (await oai.json())["error"]["message"] == "unauthorized"
    anthropic = await client.post("/v1/messages", headers={"x-api-key": "k2"}, json={
        "model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]})
    assert anthropic.status == 200


@pytest.mark.parametrize("method,path", [
    pytest.param("GET", "/", id="root"),
    pytest.param("HEAD", "/", id="root-head"),
    pytest.param("GET", "/api/version", id="version"),
])
async def test_health_checks_stay_open_with_api_keys(method: str, path: str, fake_app: Any,
                                                     aiohttp_client: Any) -> None:
    client = await _client(fake_app, aiohttp_client, api_keys=("s3cret",))
    assert (await client.request(method, path)).status == 200


@pytest.mark.parametrize("method,path", [
    pytest.param("GET", "/api/ps", id="ps"),
    pytest.param("POST", "/api/show", id="show"),
    pytest.param("DELETE", "/api/delete", id="delete"),
    pytest.param("POST", "/api/create", id="create"),
    pytest.param("POST", f"/api/blobs/sha256:{'a' * 64}", id="blob-upload"),
    pytest.param("GET", "/v1/models", id="oai-models"),
    pytest.param("GET", "/metrics", id="metrics"),
    pytest.param("GET", "/openapi.json", id="openapi"),
])
async def test_every_other_route_needs_the_key(method: str, path: str, fake_app: Any, aiohttp_client: Any) -> None:
    client = await _client(fake_app, aiohttp_client, api_keys=("s3cret",))
    models = client.app[SETTINGS].models
    before = sorted(p for p in models.rglob("*"))
    resp = await client.request(method, path, json={"model": "tiny"})
    assert resp.status == 401
    assert sorted(p for p in models.rglob("*")) == before


# -- server-side FROM paths -----------------------------------------------------------------------------------

def _as_remote(address: str):
    """Present every request as coming from `address`, as a reverse proxy's forwarded-for middleware does;
    the request itself still travels over loopback."""

    @web.middleware
    async def middleware(request: web.Request, handler: Any) -> web.StreamResponse:
        return await handler(request.clone(remote=address))

    return middleware


@pytest.mark.parametrize("remote", [
    pytest.param("203.0.113.7", id="internet-client"),
    pytest.param("192.168.1.50", id="lan-client"),
    pytest.param("127.0.0.1", id="loopback-client"),  # also every client of a reverse proxy on this host
    pytest.param("::1", id="loopback-ipv6-client"),
])
async def test_create_from_a_server_path_is_refused_by_default(remote: str, fake_app: Any, aiohttp_client: Any,
                                                               tiny_gguf: Path) -> None:
    """Issue 34 item 7: as Ollama's server, /api/create takes blobs; a server path only inside the directories
    OLLAMA_PY_IMPORT_DIRS names (none by default), whoever asks."""
    _, app = fake_app()
    app.middlewares.insert(0, _as_remote(remote))
    client = await aiohttp_client(app)
    models = client.app[SETTINGS].models
    blobs_before = sorted(p.name for p in (models / "blobs").iterdir())
    resp = await client.post("/api/create", json={"model": "fromdisk", "from": str(tiny_gguf), "stream": False})
    assert resp.status == 400
    assert (await resp.json())["error"].startswith(
        f"from: {str(tiny_gguf)!r} is a path on the server, and none are allowed here (OLLAMA_PY_IMPORT_DIRS)")
    tags = [m["name"] for m in (await (await client.get("/api/tags")).json())["models"]]
    assert "fromdisk:latest" not in tags
    assert sorted(p.name for p in (models / "blobs").iterdir()) == blobs_before


async def test_create_from_a_path_in_an_import_dir(fake_app: Any, aiohttp_client: Any, tiny_gguf: Path) -> None:
    _, app = fake_app(import_dirs=(tiny_gguf.parent,))
    client = await aiohttp_client(app)
    resp = await client.post("/api/create", json={"model": "fromdisk", "from": str(tiny_gguf), "stream": False})
    assert resp.status == 200, await resp.text()
    tags = [m["name"] for m in (await (await client.get("/api/tags")).json())["models"]]
    assert "fromdisk:latest" in tags


# -- runners listen on loopback only --------------------------------------------------------------------------

def _runner_children() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True)
            if any(str(FAKE_SERVER) in part for part in p.cmdline())]


async def test_runner_listens_on_loopback_only(fake_app: Any, aiohttp_client: Any) -> None:
    client = await _client(fake_app, aiohttp_client)
    resp = await client.post("/api/generate", json={"model": "tiny"})  # empty prompt: load only
    assert (await resp.json())["done_reason"] == "load"
    [runner] = _runner_children()
    listening = [c for c in runner.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    assert listening
    assert {c.laddr.ip for c in listening} == {"127.0.0.1"}
