"""Each runner requires its own random API key, which only the gateway knows (issue 22.8): a local user who
finds the runner's port in the process list cannot bypass OLLAMA_API_KEYS by calling it directly.

The real app over the fake llama-server, which enforces the key as llama-server does (--api-key / LLAMA_API_KEY)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import aiohttp
import psutil
import pytest

from ollama_py.server.appkeys import SCHEDULER

BODY = {"prompt": "hi", "n_predict": 2}


async def loaded_runner(client: Any, app: Any, **request: Any) -> Any:
    resp = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False,
                                                     "options": {"num_predict": 2}, **request})
    assert resp.status == 200, await resp.text()
    [loaded] = app[SCHEDULER].loaded.values()
    return loaded.runner


async def test_the_gateway_answers_while_the_runner_refuses_callers_without_its_key(
        fake_app: Any, aiohttp_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    _, app = fake_app(api_keys=("client-secret",))
    client = await aiohttp_client(app)
    auth = {"Authorization": "Bearer client-secret"}
    resp = await client.post("/api/generate", headers=auth, json={
        "model": "tiny", "prompt": "hi", "stream": False, "options": {"num_predict": 3}})
    assert resp.status == 200 and (await resp.json())["response"] == "The quick brown"
    [loaded] = app[SCHEDULER].loaded.values()
    runner = loaded.runner
    async with aiohttp.ClientSession() as session:
        for headers in ({}, {"Authorization": "Bearer client-secret"}, {"X-Api-Key": "guess"}):
            async with session.post(runner.base_url + "/completion", json=BODY, headers=headers) as direct:
                assert direct.status == 401
                assert (await direct.json())["error"]["message"] == "Invalid API Key"
        async with session.post(runner.base_url + "/completion", json=BODY, headers=runner.auth_headers) as direct:
            assert direct.status == 200
    # the key is on no command line, in no log line and not in /api/ps
    assert runner.api_key not in " ".join(psutil.Process(runner.pid).cmdline())
    assert runner.api_key not in caplog.text
    ps = await client.get("/api/ps", headers=auth)
    assert runner.api_key not in await ps.text()


async def test_every_runner_gets_a_key_of_its_own(fake_app: Any, aiohttp_client: Any) -> None:
    _, app = fake_app()
    client = await aiohttp_client(app)
    first = await loaded_runner(client, app, keep_alive=0)
    while app[SCHEDULER].loaded:
        await asyncio.sleep(0.02)
    second = await loaded_runner(client, app)
    assert first.api_key != second.api_key and len(second.api_key) >= 32


@pytest.mark.parametrize(("path", "body"), [
    pytest.param("/api/chat", {"messages": [{"role": "user", "content": "hi"}], "stream": True}, id="chat-stream"),
    pytest.param("/api/embed", {"input": "hi"}, id="embed"),
    pytest.param("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}, id="openai"),
])
async def test_every_route_reaches_a_runner_that_requires_the_key(
        path: str, body: dict[str, Any], fake_app: Any, aiohttp_client: Any) -> None:
    _, app = fake_app()
    client = await aiohttp_client(app)
    resp = await client.post(path, json={"model": "tiny", **body})
    assert resp.status == 200, await resp.text()
    assert "error" not in await resp.text()
