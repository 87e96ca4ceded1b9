"""The prompt cache (issue 36): llama-server's host cache bounded and counted in the plan (--cache-ram), and a
runner's slots saved at unload and restored at the next load (runner/slot_cache.py), over the fake runner started
by the real runner factory."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest

from ollama_py import config_file as cf
from ollama_py.api.names import parse_name
from ollama_py.estimate.memory import AUTO_CACHE_RAM_MAX, MiB, prompt_cache_bytes
from ollama_py.runner.argv import LaunchSpec, build_argv
from ollama_py.runner.slot_cache import SlotCache, key_for
from ollama_py.scheduler.factory import forget_saved_slots, plan_load, runner_factory
from ollama_py.scheduler.model_settings import plan_with_settings
from ollama_py.scheduler.scheduler import Scheduler
from ollama_py.server.app import create_app
from ollama_py.store.models import ModelStore
from tests.helpers.app import create_tiny_model, make_settings
from tests.helpers.processes import fake_runners_dir

# -- the host cache's cap, in the plan ----------------------------------------------------------------------------


@pytest.mark.parametrize(("setting", "kv", "embedding", "want"), [
    pytest.param(None, 300 * MiB, False, 300 * MiB, id="auto-the-kv-cache-size"),
    pytest.param(None, 8 * AUTO_CACHE_RAM_MAX, False, AUTO_CACHE_RAM_MAX, id="auto-at-most-1-gib"),
    pytest.param(0, 300 * MiB, False, 0, id="zero-turns-it-off"),
    pytest.param(64, 300 * MiB, False, 64 * MiB, id="set-in-mib"),
    pytest.param(64, 300 * MiB, True, 0, id="embedding-runners-cache-nothing"),
])
def test_prompt_cache_bytes(setting: int | None, kv: int, embedding: bool, want: int) -> None:
    assert prompt_cache_bytes(setting, kv, embedding=embedding) == want


def _model(tmp_path: Path, tiny_gguf: Path, **overrides: Any):
    settings = make_settings(tmp_path, **overrides)
    create_tiny_model(settings, tiny_gguf)
    return settings, ModelStore(settings.models).load(parse_name("tiny"))


def test_the_plan_counts_the_prompt_cache_and_the_runner_is_capped_at_it(tmp_path: Path, tiny_gguf: Path) -> None:
    settings, model = _model(tmp_path, tiny_gguf, cache_ram=7)
    plan = plan_load(settings, [], 1 << 40, model, {"num_ctx": 512}, False)
    off = plan_load(make_settings(tmp_path, cache_ram=0), [], 1 << 40, model, {"num_ctx": 512}, False)
    assert plan.cache_ram == 7 * MiB and off.cache_ram == 0
    assert plan.size == off.size + 7 * MiB  # host memory: size, not size_vram
    argv = build_argv(plan.spec, "llama-server", 1)
    assert argv[argv.index("--cache-ram") + 1] == "7"
    argv_off = build_argv(off.spec, "llama-server", 1)
    assert argv_off[argv_off.index("--cache-ram") + 1] == "0"  # never llama-server's uncounted 8 GiB


def test_by_default_the_cap_is_the_runners_kv_cache(tmp_path: Path, tiny_gguf: Path) -> None:
    settings, model = _model(tmp_path, tiny_gguf)
    small = plan_load(settings, [], 1 << 40, model, {"num_ctx": 512}, False)
    large = plan_load(settings, [], 1 << 40, model, {"num_ctx": 4096}, False)
    assert 0 < small.cache_ram < large.cache_ram <= AUTO_CACHE_RAM_MAX
    assert plan_load(settings, [], 1 << 40, model, {"num_ctx": 512}, True).cache_ram == 0  # embeddings


def test_a_models_cache_ram_setting_wins_over_the_servers(tmp_path: Path, tiny_gguf: Path) -> None:
    settings, model = _model(tmp_path, tiny_gguf, cache_ram=64)
    ms = cf.parse_config('[models."tiny"]\ncache_ram = 3\n').models.for_name(model.name)
    plan = plan_with_settings(ms, settings, {"num_ctx": 512},
                              lambda s, o, r: plan_load(s, [], 1 << 40, model, o, False, runner=r))
    assert plan.cache_ram == 3 * MiB and plan.spec.cache_ram_mib == 3


def test_cache_ram_in_extra_args_is_refused_for_the_setting() -> None:
    with pytest.raises(Exception, match="cache_ram = MiB"):
        cf.parse_config('[models."tiny"]\nextra_args = ["--cache-ram", "9000"]\n')


def test_the_environment_sets_the_cap() -> None:
    from ollama_py.config import Settings

    assert Settings.from_env({}).cache_ram is None
    assert Settings.from_env({"OLLAMA_CACHE_RAM": "0"}).cache_ram == 0
    assert Settings.from_env({"OLLAMA_CACHE_RAM": "512"}).cache_ram == 512
    assert Settings.from_env({"OLLAMA_CACHE_RAM": "lots"}).cache_ram is None  # logged, as other variables


# -- slots saved at unload, restored at the next load ---------------------------------------------------------------

LONG_PROMPT = " ".join(f"word{i}" for i in range(600))


@pytest.fixture
def app_with_saved_slots(tmp_path: Path, tiny_gguf: Path):
    """The gateway over the fake runner, started by the real runner factory (so its slot directory and flags)."""

    def build(**overrides: Any):
        settings = make_settings(tmp_path, runners_dir=fake_runners_dir(tmp_path), num_parallel=2, **overrides)
        create_tiny_model(settings, tiny_gguf)
        sched = Scheduler(settings, plan=lambda m, o, e: plan_load(settings, [], 1 << 40, m, o, e),
                          runner_factory=runner_factory(settings), forget_slots=forget_saved_slots(settings))
        return settings, create_app(settings, scheduler=sched)

    return build


async def _generate(client: Any, keep_alive: Any = 0) -> dict[str, Any]:
    resp = await client.post("/api/generate", json={"model": "tiny", "prompt": LONG_PROMPT, "raw": True,
                                                    "stream": False, "keep_alive": keep_alive,
                                                    "options": {"num_predict": 1}})
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def _unloaded(client: Any) -> None:
    for _ in range(500):
        if not (await (await client.get("/api/ps")).json())["models"]:
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the model did not unload")


def _saved(settings: Any) -> list[Path]:
    return sorted((settings.data_dir / "prompt-cache").glob("*/slot-*.bin"))


async def test_after_keep_alive_0_and_a_reload_the_same_prompt_starts_from_its_cached_prefix(
        app_with_saved_slots: Any, aiohttp_client: Any) -> None:
    settings, app = app_with_saved_slots()
    client = await aiohttp_client(app)
    first = await _generate(client)
    assert first["prompt_eval_count"] > 600
    await _unloaded(client)
    assert len(_saved(settings)) == 1  # the one slot that held tokens
    again = await _generate(client)
    assert again["prompt_eval_count"] == 1  # the fake evaluates at least one prompt token, as llama-server does


async def test_slots_saved_when_serve_stops_make_the_next_serves_first_request_warm(
        app_with_saved_slots: Any, aiohttp_client: Any) -> None:
    """Stopping serve (SIGTERM, Ctrl-C: the app's shutdown) saves an idle runner's slots as an unload does."""
    settings, app = app_with_saved_slots()
    client = await aiohttp_client(app)
    assert (await _generate(client, keep_alive="10m"))["prompt_eval_count"] > 600
    assert (await (await client.get("/api/ps")).json())["models"]  # still loaded: no unload saved anything
    await client.close()
    assert len(_saved(settings)) == 1
    settings, app = app_with_saved_slots()
    client = await aiohttp_client(app)
    assert (await _generate(client))["prompt_eval_count"] == 1


async def test_a_saved_slot_the_runner_refuses_is_deleted_and_the_request_still_answers(
        app_with_saved_slots: Any, aiohttp_client: Any, caplog: pytest.LogCaptureFixture) -> None:
    settings, app = app_with_saved_slots()
    client = await aiohttp_client(app)
    await _generate(client)
    await _unloaded(client)
    [saved] = _saved(settings)
    saved.write_text("not a slot")
    with caplog.at_level(logging.WARNING, logger="ollama_py.runner.slot_cache"):
        again = await _generate(client)
    assert again["prompt_eval_count"] > 600 and not saved.exists()
    assert "refused" in caplog.text and saved.name in caplog.text


async def test_a_deleted_model_takes_its_saved_slots_with_it(app_with_saved_slots: Any, aiohttp_client: Any) -> None:
    settings, app = app_with_saved_slots()
    client = await aiohttp_client(app)
    await _generate(client)
    await _unloaded(client)
    await _generate(client, keep_alive="5m")  # loaded again: deleting it must not save it on the way out
    resp = await client.delete("/api/delete", json={"model": "tiny"})
    assert resp.status == 200
    await _unloaded(client)
    assert _saved(settings) == [] and list((settings.data_dir / "prompt-cache").iterdir()) == []


async def test_with_the_disk_cache_off_nothing_is_saved(app_with_saved_slots: Any, aiohttp_client: Any) -> None:
    settings, app = app_with_saved_slots(prompt_cache_disk=0)
    client = await aiohttp_client(app)
    await _generate(client)
    await _unloaded(client)
    assert (await _generate(client))["prompt_eval_count"] > 600
    assert not (settings.data_dir / "prompt-cache").exists()


async def test_ps_shows_the_prompt_cache_cap(app_with_saved_slots: Any, aiohttp_client: Any) -> None:
    _, app = app_with_saved_slots(cache_ram=5)
    client = await aiohttp_client(app)
    await _generate(client, keep_alive="5m")
    [entry] = (await (await client.get("/api/ps")).json())["models"]
    assert entry["cache_ram"] == 5 * MiB  # /metrics: ollama_model_prompt_cache_bytes (test_metrics.py)


def test_the_saved_state_is_keyed_by_the_settings_that_make_it_valid() -> None:
    base = LaunchSpec(model=Path("/blobs/sha256-" + "ab" * 32), num_ctx=2048, parallel=2)
    same = key_for(base, "cpu_avx2")
    assert same == key_for(base, "cpu_avx2") and same.startswith("abababababababab-")
    for changed in (dict(num_ctx=4096), dict(parallel=1), dict(kv_cache_type="q8_0"), dict(flash_attention="off"),
                    dict(adapters=(Path("/a"),)), dict(extra=("--rope-scaling", "yarn")),
                    dict(projectors=(Path("/eye-mmproj"),))):
        assert key_for(dataclasses.replace(base, **changed), "cpu_avx2") != same, changed  # type: ignore[arg-type]
    # two projectors on the same weights: two keys (a saved image's KV is the projector's)
    assert key_for(dataclasses.replace(base, projectors=(Path("/eye"),)), "cpu_avx2") != \
        key_for(dataclasses.replace(base, projectors=(Path("/ear"),)), "cpu_avx2")
    assert key_for(base, "cuda") != same
    assert key_for(dataclasses.replace(base, n_gpu_layers=5), "cpu_avx2") == same  # placement does not matter


def test_the_disk_cache_drops_the_least_recently_used_first(tmp_path: Path) -> None:
    cache = SlotCache(tmp_path, max_bytes=250)
    for age, name in enumerate(["newest", "middle", "oldest"]):
        directory = cache.directory(name)
        (directory / "slot-0.bin").write_bytes(b"x" * 100)
        stamp = time.time() - 100 * age
        os.utime(directory, (stamp, stamp))
    cache.trim()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["middle", "newest"]
    assert cache.forget(Path("/x/sha256-" + "cd" * 32)) == 0
