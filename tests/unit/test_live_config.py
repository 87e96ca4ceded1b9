"""The config file in a running server (the real app and scheduler over the fake llama-server): aliases answer and
are listed, a model's default options and keep-alive apply, preloaded models are loaded at start, and a reload
restarts a runner only after its current request ends, while a broken edit keeps the old settings."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pytest

from ollama_py.scheduler.factory import plan_load
from ollama_py.scheduler.model_settings import plan_with_settings
from ollama_py.scheduler.scheduler import Scheduler
from ollama_py.server.app import create_app
from ollama_py.server.appkeys import CONFIG, SCHEDULER
from ollama_py.server.live_config import LiveConfig
from tests.helpers.app import create_tiny_model, fake_runner_factory, make_settings


@pytest.fixture
def served(tmp_path: Path, tiny_gguf: Path, aiohttp_client):
    """Start the app with this config file text (and fake runner env); returns (client, config path)."""

    async def start(text: str, fake_env: dict[str, str] | None = None, template: str | None = None) -> tuple[Any, Path]:
        path = tmp_path / "config.toml"
        path.write_text(text)
        settings = make_settings(tmp_path, config_file=path)
        create_tiny_model(settings, tiny_gguf, template=template)
        live = LiveConfig(settings)

        def plan(model: Any, options: dict[str, Any], embedding: bool):
            return plan_with_settings(live.for_model(model), settings, options,
                                      lambda s, o, r: plan_load(s, [], 1 << 40, model, o, embedding, runner=r))

        scheduler = Scheduler(settings, plan=plan, runner_factory=fake_runner_factory(settings, fake_env),
                              default_keep_alive=live.keep_alive)
        return await aiohttp_client(create_app(settings, scheduler=scheduler, live_config=live)), path

    return start


def cmdline(client: Any) -> list[str]:
    """The command line of the one runner the server has (as `ps` shows it)."""
    (loaded,) = client.app[SCHEDULER].loaded.values()
    return Path(f"/proc/{loaded.runner.pid}/cmdline").read_bytes().decode().split("\0")


async def generate(client: Any, model: str = "tiny", **body: Any) -> dict[str, Any]:
    r = await client.post("/api/generate", json={"model": model, "prompt": "hi", "stream": False, **body})
    assert r.status == 200, await r.text()
    return await r.json()


async def test_an_alias_answers_and_is_listed_as_a_copy(served) -> None:
    client, _ = await served('[models."tiny"]\naliases = ["small", "team/tiny:v2"]\n')
    assert (await generate(client, "small"))["model"] == "small"
    assert (await generate(client, "team/tiny:v2"))["response"]
    tags = {m["name"]: m for m in (await (await client.get("/api/tags")).json())["models"]}
    assert set(tags) == {"tiny:latest", "small:latest", "team/tiny:v2"}
    assert tags["small:latest"]["digest"] == tags["tiny:latest"]["digest"]
    ids = {m["id"] for m in (await (await client.get("/v1/models")).json())["data"]}
    assert {"tiny:latest", "small:latest", "team/tiny:v2"} <= ids
    shown = await client.post("/api/show", json={"model": "small"})
    assert shown.status == 200
    r = await client.post("/api/generate", json={"model": "smal", "prompt": "x"})
    assert r.status == 404 and (await r.json())["error"] == "model 'smal' not found"


async def test_default_options_reach_the_runner(served, tmp_path: Path) -> None:
    log_file = tmp_path / "requests.jsonl"
    client, _ = await served('[models."ti*"]\noptions = { temperature = 0.25, top_k = 7 }\n',
                             {"FAKE_LOG_FILE": str(log_file)})
    await generate(client, options={"top_k": 3})
    body = [json.loads(line) for line in log_file.read_text().splitlines() if '"prompt"' in line][-1]
    assert body["temperature"] == 0.25  # the file's default
    assert body["top_k"] == 3  # the request's own value wins


async def test_a_models_reasoning_budget_is_its_default(served, tmp_path: Path) -> None:
    log_file = tmp_path / "requests.jsonl"
    thinking = "{{ .Prompt }}{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}"
    client, _ = await served('[models."tiny"]\nreasoning_budget = 50\n', {"FAKE_LOG_FILE": str(log_file)}, thinking)
    await generate(client)
    await generate(client, options={"reasoning_budget": 9})
    sent = [json.loads(line) for line in log_file.read_text().splitlines() if '"prompt"' in line]
    assert [b.get("reasoning_budget_tokens") for b in sent] == [50, 9]  # the file's default, then the request's
    assert "--reasoning-budget" not in cmdline(client)


async def test_a_models_keep_alive_is_its_default(served) -> None:
    client, _ = await served('[models."tiny"]\nkeep_alive = "3h"\n')
    await generate(client)
    (entry,) = (await (await client.get("/api/ps")).json())["models"]
    expires = dt.datetime.fromisoformat(entry["expires_at"])
    assert expires - dt.datetime.now(dt.UTC) > dt.timedelta(hours=2)


async def test_a_preloaded_model_is_loaded_at_start(served) -> None:
    client, _ = await served('[models."tiny"]\npreload = true\nkv_cache_type = "q8_0"\n')
    models = (await (await client.get("/api/ps")).json())["models"]
    assert [m["name"] for m in models] == ["tiny:latest"]
    assert "q8_0" in cmdline(client)


async def test_a_changed_runner_setting_waits_for_the_request_to_end(served) -> None:
    client, path = await served('[models."tiny"]\nkv_cache_type = "q8_0"\n',
                                {"FAKE_TOKEN_DELAY": "0.05", "FAKE_TOKENS": "20"})
    await generate(client)
    before = cmdline(client)
    assert "q8_0" in before
    streaming = asyncio.ensure_future(generate(client, options={"num_predict": 20}))
    while not any(entry.refcount for entry in client.app[SCHEDULER].loaded.values()):
        await asyncio.sleep(0.01)
    path.write_text('[models."tiny"]\nkv_cache_type = "q4_0"\n')
    os.utime(path, ns=(1, 1))  # a new stamp even within the file system's time resolution
    assert await client.app[CONFIG].check()
    assert cmdline(client) == before  # mid-request: the runner is the same one
    answer = await streaming
    assert answer["eval_count"] == 20 and answer["done_reason"] == "length"  # not cut short
    for _ in range(500):  # the restart, once idle
        runners = [e for e in client.app[SCHEDULER].loaded.values() if e.client.base_url and not e.unloading]
        if runners and "q4_0" in cmdline(client):
            break
        await asyncio.sleep(0.02)
    assert "q4_0" in cmdline(client)
    assert (await generate(client))["response"]


async def test_a_broken_edit_keeps_serving_with_the_old_settings(served, caplog) -> None:
    client, path = await served('[models."tiny"]\naliases = ["small"]\n')
    path.write_text('[models."tiny"]\naliases = ["small"]\nkv_cache_type = "q9"\n')
    os.utime(path, ns=(1, 1))
    assert not await client.app[CONFIG].check()
    assert not await client.app[CONFIG].check()  # the same bad file is not re-read on every stat
    errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert errors == [(f"config reload failed, keeping the previous settings: {path}:3: models.\"tiny\".kv_cache_type "
                       "must be one of f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1")]
    assert (await generate(client, "small"))["response"]
    metrics = await (await client.get("/metrics")).text()
    assert 'ollama_config_reloads_total{result="error"} 1.0' in metrics
    path.write_text('[models."tiny"]\naliases = ["tiny2"]\n')
    os.utime(path, ns=(2, 2))
    assert await client.app[CONFIG].check()
    assert (await client.post("/api/generate", json={"model": "small", "prompt": "x"})).status == 404
    assert (await generate(client, "tiny2"))["response"]
    metrics = await (await client.get("/metrics")).text()
    assert 'ollama_config_reloads_total{result="ok"} 1.0' in metrics


async def test_a_config_file_replaced_by_a_fifo_is_refused_at_once_and_the_next_edit_still_applies(served,
                                                                                                 caplog) -> None:
    """Issue 34: the reload opened the FIFO and waited for a writer forever, holding a thread and the reload lock."""
    client, path = await served('[models."tiny"]\naliases = ["small"]\n')
    live = client.app[CONFIG]
    path.unlink()
    os.mkfifo(path)
    async with asyncio.timeout(30):  # a hang guard: before, this never returned
        assert not await live.reload("test")
    assert "not a regular file" in caplog.text
    assert (await generate(client, "small"))["response"]  # the previous settings stay
    path.unlink()
    path.write_text('[models."tiny"]\naliases = ["tiny2"]\n')
    async with asyncio.timeout(30):
        assert await live.reload("test")  # the lock is free
    assert (await generate(client, "tiny2"))["response"]


async def test_aliases_in_a_circle_are_one_log_line_and_resolve_one_step(served, caplog) -> None:
    client, _ = await served('[models."tiny"]\naliases = ["a"]\n[models."a"]\naliases = ["b"]\n'
                             '[models."b"]\naliases = ["a2"]\n[models."a2"]\naliases = ["tiny2"]\n'
                             '[models."x"]\naliases = ["y"]\n[models."y"]\naliases = ["x"]\n')
    cycles = [r.getMessage() for r in caplog.records if "go round in a circle" in r.getMessage()]
    assert len(cycles) == 1, cycles
    assert "x:latest -> y:latest -> x:latest" in cycles[0] or "y:latest -> x:latest -> y:latest" in cycles[0]
    assert (await generate(client, "a"))["response"]  # a is tiny's alias
    r = await client.post("/api/generate", json={"model": "x", "prompt": "hi"})
    assert r.status == 404
    assert (await r.json())["error"] == "model 'x' not found (an alias of 'y:latest', which is not in the store)"


async def test_preloading_a_missing_model_is_one_log_line_and_serve_goes_on(served, caplog) -> None:
    client, _ = await served('[models."nope"]\npreload = true\n[models."tiny"]\npreload = true\n')
    assert "preloading nope:latest failed: model 'nope:latest' not found" in caplog.text
    models = (await (await client.get("/api/ps")).json())["models"]
    assert [m["name"] for m in models] == ["tiny:latest"]
