"""The real scheduler's plan seam (scheduler/factory.Planner): a plan is estimated once per model, config-file
settings and load options, and estimated again when any of them changes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from ollama_py.api.names import parse_name
from ollama_py.config_file import ModelSettings
from ollama_py.errors import ModelNotFound
from ollama_py.scheduler.factory import Planner, plan_load
from ollama_py.scheduler.model_settings import plan_with_settings
from ollama_py.scheduler.scheduler import Scheduler
from ollama_py.store.models import ModelStore
from tests.helpers.app import create_tiny_model, fake_runner_factory, make_settings

FREE = 1 << 40


async def no_workers(servers: tuple[str, ...]) -> dict[str, int]:
    return {}


@pytest.fixture
def stored(tmp_path: Path, tiny_gguf: Path) -> tuple[Any, ModelStore]:
    settings = make_settings(tmp_path)
    create_tiny_model(settings, tiny_gguf)
    return settings, ModelStore(settings.models)


async def test_a_second_request_for_the_same_runner_reuses_its_plan(stored) -> None:
    settings, store = stored
    planner = Planner(settings, [], FREE, no_workers)
    model = store.load(parse_name("tiny"))
    first = await planner(model, {"num_ctx": 2048, "temperature": 0.1}, False)
    # sampling options, and the same model read from the store again, are the same runner's plan
    again = await planner(store.load(parse_name("tiny")), {"num_ctx": 2048, "temperature": 0.9, "seed": 7}, False)
    assert again is first
    assert first == plan_load(settings, [], FREE, model, {"num_ctx": 2048}, False)


async def test_load_options_and_the_kind_of_runner_plan_anew(stored) -> None:
    settings, store = stored
    planner = Planner(settings, [], FREE, no_workers)
    model = store.load(parse_name("tiny"))
    first = await planner(model, {"num_ctx": 512}, False)
    bigger = await planner(model, {"num_ctx": 1024}, False)
    assert bigger.context_length == 1024 and first.context_length == 512
    assert (await planner(model, {"num_ctx": 512, "num_batch": 64}, False)).spec.num_batch == 64
    assert (await planner(model, {"num_ctx": 512}, True)).spec.embedding
    assert await planner(model, {"num_ctx": 512}, False) is first


async def test_a_config_reload_that_changes_the_models_settings_plans_anew(stored) -> None:
    settings, store = stored
    current = [ModelSettings(pattern="tiny")]
    planner = Planner(settings, [], FREE, no_workers, lambda model: current[0])
    model = store.load(parse_name("tiny"))
    first = await planner(model, {}, False)
    current[0] = ModelSettings(pattern="tiny")  # a reload with the same settings: the same plan
    assert await planner(model, {}, False) is first
    current[0] = ModelSettings(pattern="tiny", kv_cache_type="q8_0", num_parallel=2)
    changed = await planner(model, {}, False)
    assert changed.spec.kv_cache_type == "q8_0" and changed.spec.parallel == 2 and changed.key != first.key
    assert changed == plan_with_settings(current[0], settings, {},
                                         lambda s, o, r: plan_load(s, [], FREE, model, o, False, runner=r))


async def test_a_model_created_again_under_its_name_plans_anew(stored, tiny_gguf: Path) -> None:
    settings, store = stored
    planner = Planner(settings, [], FREE, no_workers)
    first = await planner(store.load(parse_name("tiny")), {}, False)
    create_tiny_model(settings, tiny_gguf, parameters={"num_ctx": 1024})
    model = store.load(parse_name("tiny"))
    assert await planner(model, {}, False) is not first


async def test_a_remembered_plan_still_finds_a_blob_deleted_from_disk(stored) -> None:
    settings, store = stored
    planner = Planner(settings, [], FREE, no_workers)
    model = store.load(parse_name("tiny"))
    await planner(model, {}, False)
    assert model.model_path is not None
    model.model_path.unlink()
    with pytest.raises(ModelNotFound, match="model 'tiny:latest' is missing sha256-"):
        await planner(model, {}, False)


async def test_requests_through_the_scheduler_share_one_plan_and_runner(stored) -> None:
    settings, store = stored
    planner = Planner(settings, [], FREE, no_workers)
    sched = Scheduler(settings, plan=planner, runner_factory=fake_runner_factory(settings))
    model = store.load(parse_name("tiny"))
    try:
        async with sched.use(model, {"num_ctx": 512, "temperature": 0.2}, None) as first:
            pass
        async with sched.use(model, {"num_ctx": 512, "top_k": 3}, None) as second:
            assert second is first
            assert second.plan.context_length == 512
        assert len(sched.loaded) == 1
    finally:
        await sched.shutdown()


async def test_rpc_workers_are_asked_only_when_the_load_has_some(stored) -> None:
    """A request's plan asks the RPC workers' free memory (a probe, remembered) only when the operator named
    workers: without any, the plan is found without that await."""
    settings, store = stored
    asked: list[tuple[str, ...]] = []

    async def workers(servers: tuple[str, ...]) -> dict[str, int]:
        asked.append(servers)
        return {}

    model = store.load(parse_name("tiny"))
    planner = Planner(settings, [], FREE, workers)
    first = await planner(model, {}, False)
    assert await planner(model, {"temperature": 0.3}, False) is first
    assert asked == []
    with_workers = dataclasses.replace(settings, rpc_servers=("127.0.0.1:50052",))
    await Planner(with_workers, [], FREE, workers)(model, {}, False)
    assert asked == [("127.0.0.1:50052",)]
