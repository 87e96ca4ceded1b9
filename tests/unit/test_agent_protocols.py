"""What coding agents (Claude Code on /v1/messages, Codex on /v1/responses and --oss) see of the protocol
around their requests (issue 37): the version they gate features on, and errors in their own envelope --
including a full queue, which they must retry rather than give up on. Fake runner."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from ollama_py import OLLAMA_API_VERSION, __version__
from ollama_py.server.appkeys import SCHEDULER
from ollama_py.server.errors import error_body

ASK_ANTHROPIC = {"model": "tiny", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
ASK_RESPONSES = {"model": "tiny", "input": "hi"}
ASK_CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}


async def test_version_is_the_ollama_api_implemented_and_ours_beside_it(fake_app, aiohttp_client):
    _, app = fake_app()
    client = await aiohttp_client(app)
    body = await (await client.get("/api/version")).json()
    assert body == {"version": OLLAMA_API_VERSION, "ollama_py": __version__}
    # Codex --oss needs Ollama >= 0.13.4 for /v1/responses (semver, as its check parses it)
    assert tuple(int(p) for p in body["version"].split(".")) >= (0, 13, 4)


@pytest.mark.parametrize("env", [False, True])
async def test_cloud_status_says_disabled(fake_app, aiohttp_client, tmp_path, monkeypatch, env):
    """Ollama's CLI and app ask /api/status before offering cloud models (`ollama launch`'s model list, web
    search): here there are none, and it says so rather than a 404 they would read as "unknown"; the source names
    who else turned them off, as Ollama's does (OLLAMA_NO_CLOUD, Ollama's ~/.ollama/server.json, both)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config = tmp_path / "home" / ".ollama" / "server.json"
    _, app = fake_app(no_cloud=env)
    client = await aiohttp_client(app)

    async def source() -> str:
        resp = await client.get("/api/status")
        assert resp.status == 200
        body = await resp.json()
        assert body["cloud"]["disabled"] is True and set(body) == {"cloud"}
        return body["cloud"]["source"]

    assert await source() == ("env" if env else "none")
    config.parent.mkdir(parents=True)
    config.write_text('{"disable_ollama_cloud": true}')  # read on each call
    assert await source() == ("both" if env else "config")
    config.write_text('{"disable_ollama_cloud": false}')
    assert await source() == ("env" if env else "none")
    for unreadable in ("not json", "[" * 100_000):  # it says nothing, as Ollama reads it
        config.write_text(unreadable)
        assert await source() == ("env" if env else "none")


def test_no_cloud_is_read_as_ollama_reads_it():
    from ollama_py.config import Settings
    assert Settings.from_env({"OLLAMA_NO_CLOUD": "1"}).no_cloud
    assert Settings.from_env({"OLLAMA_NO_CLOUD": "yes"}).no_cloud  # unparsable: true, as Go's envconfig.Bool
    assert not Settings.from_env({"OLLAMA_NO_CLOUD": "false"}).no_cloud
    assert not Settings.from_env({}).no_cloud


async def test_model_recommendations_are_ollamas_own(fake_app, aiohttp_client):
    """Ollama's `launch` and app ask for the models to offer first; an Ollama with its cloud disabled answers its
    built-in list (cloud models and all: the client hides those after /api/status), in this shape."""
    _, app = fake_app()
    client = await aiohttp_client(app)
    resp = await client.get("/api/experimental/model-recommendations")
    assert resp.status == 200
    recs = (await resp.json())["recommendations"]
    assert [r["model"] for r in recs] == ["kimi-k2.6:cloud", "glm-5.1:cloud", "qwen3.5:cloud", "minimax-m2.7:cloud",
                                          "gemma4", "qwen3.5"]
    assert all(r["description"] for r in recs)
    # a cloud model carries its limits (Ollama's launcher skips one without them), a local one its memory need
    assert all(r["context_length"] > 0 and r["max_output_tokens"] > 0 for r in recs if r["model"].endswith(":cloud"))
    assert {r["model"]: r["vram_bytes"] for r in recs if "vram_bytes" in r} == {"gemma4": 12 * 10**9,
                                                                                 "qwen3.5": 14 * 10**9}


@pytest.mark.parametrize(("path", "body", "what"), [
    ("/api/experimental/web_search", {"query": "ollama"}, "web search"),
    ("/api/experimental/web_fetch", {"url": "https://ollama.com"}, "web fetch"),
])
async def test_web_tools_say_cloud_is_disabled(fake_app, aiohttp_client, path, body, what):
    """Ollama proxies its web tools to ollama.com and, with cloud features disabled, answers as here: nothing is
    fetched from anywhere."""
    _, app = fake_app()
    client = await aiohttp_client(app)
    resp = await client.post(path, json=body)
    assert resp.status == 403
    assert await resp.json() == {"error": f"ollama cloud is disabled: {what} is unavailable"}
    empty = await client.post(path, data=b"")
    assert empty.status == 400 and (await empty.json())["error"] == "missing request body"


async def test_errors_come_in_each_protocols_envelope(fake_app, aiohttp_client):
    _, app = fake_app()
    client = await aiohttp_client(app)
    missing = await client.post("/v1/messages", json={**ASK_ANTHROPIC, "model": "nope"})
    assert missing.status == 404
    body = await missing.json()
    assert body["type"] == "error" and body["error"]["type"] == "not_found_error"
    assert "nope" in body["error"]["message"]
    bad = await client.post("/v1/messages", json={**ASK_ANTHROPIC, "thinking": {"type": "sometimes"}})
    assert bad.status == 400 and (await bad.json())["error"]["type"] == "invalid_request_error"
    for path, ask in (("/v1/responses", ASK_RESPONSES), ("/v1/chat/completions", ASK_CHAT)):
        r = await client.post(path, json={**ask, "model": "nope"})
        assert r.status == 404
        err = (await r.json())["error"]
        assert err["type"] == "not_found_error" and set(err) == {"message", "type", "param", "code"}


async def test_a_runner_that_fails_to_load_is_an_api_error_in_anthropics_envelope(fake_app, aiohttp_client):
    _, app = fake_app({"FAKE_LOAD_FAIL": "out of luck"})
    client = await aiohttp_client(app)
    r = await client.post("/v1/messages", json=ASK_ANTHROPIC)
    assert r.status == 500
    body = await r.json()
    assert body["type"] == "error" and body["error"]["type"] == "api_error" and body["error"]["message"]


async def test_a_full_queue_asks_every_client_to_retry(fake_app, aiohttp_client):
    """One slot busy, one request waiting (OLLAMA_MAX_QUEUE=1): the next is refused on every route family
    with Retry-After; /v1 says 429, which the OpenAI and Anthropic SDKs retry, the native API Ollama's 503."""
    _, app = fake_app({"FAKE_TOKEN_DELAY": "0.05", "FAKE_TOKENS": "400"}, max_queue=1, num_parallel=1)
    client = await aiohttp_client(app)
    running = await client.post("/api/generate", json={"model": "tiny", "prompt": "a long answer"})
    assert running.status == 200 and await running.content.readline()  # holds the one slot
    waiting = asyncio.create_task(client.post("/api/generate", json={"model": "tiny", "prompt": "x", "stream": False,
                                                                     "options": {"num_predict": 1}}))
    scheduler = app[SCHEDULER]
    for _ in range(400):
        if scheduler.pending == 1:
            break
        await asyncio.sleep(0.01)
    assert scheduler.pending == 1

    async def refused(path: str, ask: dict[str, Any]) -> tuple[int, str | None, Any]:
        r = await client.post(path, json=ask)
        return r.status, r.headers.get("Retry-After"), await r.json()

    status, retry, body = await refused("/v1/messages", ASK_ANTHROPIC)
    assert (status, retry, body["type"], body["error"]["type"]) == (429, "1", "error", "rate_limit_error")
    status, retry, body = await refused("/v1/messages", {**ASK_ANTHROPIC, "stream": True})
    assert (status, retry, body["error"]["type"]) == (429, "1", "rate_limit_error")
    for path, ask in (("/v1/responses", ASK_RESPONSES), ("/v1/chat/completions", {**ASK_CHAT, "stream": True})):
        status, retry, body = await refused(path, ask)
        assert (status, retry, body["error"]["type"], body["error"]["code"]) == (
            429, "1", "rate_limit_error", "rate_limit_exceeded")
    status, retry, body = await refused("/api/chat", {**ASK_CHAT, "stream": False})
    assert (status, retry) == (503, "1")
    assert body == {"error": "server busy, please try again.  maximum pending requests exceeded"}
    metrics = await (await client.get("/metrics")).text()
    rejected = [line for line in metrics.splitlines() if line.startswith("ollama_requests_rejected_total{")]
    assert any('endpoint="/v1/messages"' in line and line.endswith(" 2.0") for line in rejected), rejected
    running.close()
    assert (await waiting).status == 200


@pytest.mark.parametrize("status, anthropic, openai", [
    (400, "invalid_request_error", "invalid_request_error"), (401, "authentication_error", "api_error"),
    (403, "permission_error", "api_error"), (404, "not_found_error", "not_found_error"),
    (413, "request_too_large", "api_error"), (429, "rate_limit_error", "rate_limit_error"),
    (500, "api_error", "api_error"), (503, "overloaded_error", "api_error"), (529, "overloaded_error", "api_error"),
], ids=lambda v: str(v))
def test_error_types_per_protocol(status: int, anthropic: str, openai: str):
    assert error_body("/v1/messages", status, "m") == {"type": "error", "error": {"type": anthropic, "message": "m"}}
    assert error_body("/v1/responses", status, "m")["error"]["type"] == openai
    assert error_body("/api/chat", status, "m") == {"error": "m"}


async def test_a_runner_lost_mid_stream_ends_each_stream_with_its_protocols_error(fake_app, aiohttp_client):
    _, app = fake_app({"FAKE_CRASH_AFTER_TOKENS": "2", "FAKE_TOKEN_DELAY": "0.01"})
    client = await aiohttp_client(app)

    async def last_event(path: str, ask: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        r = await client.post(path, json={**ask, "stream": True})
        assert r.status == 200
        block = (await r.text()).strip().split("\n\n")[-1]
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        return lines.get("event", ""), json.loads(lines["data"])

    name, data = await last_event("/v1/messages", ASK_ANTHROPIC)
    assert name == "error" and data["type"] == "error" and data["error"]["type"] == "api_error"
    name, data = await last_event("/v1/responses", ASK_RESPONSES)
    assert name == "error" and data["type"] == "error" and data["code"] == "api_error" and data["message"]


async def test_copilot_chat_sees_the_name_the_user_picked_as_the_basename(fake_app, aiohttp_client):
    """VS Code's Copilot Chat lists an Ollama model by model_info's general.basename; Ollama answers its
    User-Agent with the requested name there (a GGUF's own basename is seldom one the user knows)."""
    _, app = fake_app()
    client = await aiohttp_client(app)
    copilot = await client.post("/api/show", json={"model": "tiny"},
                                headers={"User-Agent": "GitHubCopilotChat/0.31.2"})
    assert copilot.status == 200
    assert (await copilot.json())["model_info"]["general.basename"] == "tiny"
    other = await (await client.post("/api/show", json={"model": "tiny"},
                                     headers={"User-Agent": "ollama-python/0.6.1"})).json()
    assert other["model_info"].get("general.basename") != "tiny"
