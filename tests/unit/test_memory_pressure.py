"""The scheduler under memory pressure, CPU threads shared between runners, and a runner's memory limit (issue 36
items 3 and 4, issue 34 item 4), with the fake runner and the scheduler's memory probe seam."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from ollama_py.config import Settings
from ollama_py.errors import InsufficientMemory, RunnerError
from ollama_py.runner.argv import LaunchSpec, build_argv
from ollama_py.runner.process import RunnerProcess, exceeded_limit
from ollama_py.scheduler.policy import Resident, cpu_threads, never_fits
from ollama_py.scheduler.scheduler import LoadPlan, Scheduler
from tests.helpers.paths import FAKE_SERVER

MiB = 1 << 20


@dataclass(frozen=True)
class FakeModel:
    name: str
    model_path: Path


def model(tmp_path: Path, name: str) -> FakeModel:
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(b"GGUF")
    return FakeModel(name, path)


def scheduler(tmp_path: Path, *, sizes: dict[str, int] | None = None,
              free_memory: Callable[[LoadPlan], int | None] = lambda p: None,
              on_start: Callable[[LoadPlan, RunnerProcess], None] = lambda plan, runner: None,
              on_exit: Callable[[RunnerProcess], None] = lambda runner: None,
              fake_env: dict[str, str] | None = None, memory_limit: int | None = None,
              vram: tuple[int, int] | None = None, **kw: Any) -> Scheduler:
    settings = Settings.from_env({"OLLAMA_MODELS": str(tmp_path)}, **kw.pop("settings", {}))

    def plan(m: FakeModel, options: dict, embedding: bool) -> LoadPlan:
        spec = LaunchSpec(model=m.model_path, num_ctx=512, num_thread=options.get("num_thread"))
        size_vram, vram_need = vram or (0, 0)  # a GPU plan: what it reads as (Ollama's size_vram), what it needs
        return LoadPlan(key=str(m.model_path), spec=spec, load_options={"num_thread": options.get("num_thread")},
                        size=(sizes or {}).get(m.name, 1000 * MiB), size_vram=size_vram, vram_need=vram_need)

    def factory(plan: LoadPlan, name: str, scheduler_on_exit: Callable[[RunnerProcess], None]) -> RunnerProcess:
        def exited(runner: RunnerProcess) -> None:
            on_exit(runner)
            scheduler_on_exit(runner)

        runner = RunnerProcess(lambda port: [sys.executable, str(FAKE_SERVER), *build_argv(plan.spec, "x", port)[1:]],
                               name=name, env={**os.environ, **(fake_env or {})}, on_exit=exited,
                               memory_limit=memory_limit)
        on_start(plan, runner)
        return runner

    return Scheduler(settings, plan=plan, runner_factory=factory, free_memory=free_memory, **kw)


async def generate(loaded: Any) -> str:
    text = ""
    async for ev in loaded.client.stream("/completion", {"prompt": "hi", "n_predict": 2, "stream": True}):
        text += ev.get("content", "")
    return text


# -- pure decisions --------------------------------------------------------------------------------------------------

def res(name: str, size: int, size_vram: int = 0, busy: bool = False) -> Resident:
    return Resident(name, name, busy, 300.0, size, size_vram)


@pytest.mark.parametrize(("loaded", "need", "free", "vram", "want"), [
    pytest.param([], 1000, None, False, False, id="no-probe-never-refuses"),
    pytest.param([], 1000, 999, False, True, id="alone-too-big"),
    pytest.param([], 1000, 1000, False, False, id="alone-exactly"),
    pytest.param([res("a", 600, busy=True)], 1000, 500, False, False, id="fits-once-a-busy-one-is-idle"),
    pytest.param([res("a", 400), res("b", 400)], 1000, 100, False, True, id="not-even-with-all-gone"),
    pytest.param([res("gpu", 900, size_vram=800)], 1000, 500, False, True, id="a-gpu-runner-holds-little-ram"),
    pytest.param([res("gpu", 900, size_vram=800)], 1000, 500, True, False, id="its-vram-counts-for-a-gpu-load"),
])
def test_never_fits(loaded: list[Resident], need: int, free: int | None, vram: bool, want: bool) -> None:
    assert never_fits(loaded, need, free, vram=vram) is want


@pytest.mark.parametrize(("cores", "runners", "want"), [
    pytest.param(8, 1, 8, id="alone-every-core"),
    pytest.param(8, 2, 4, id="two-share"),
    pytest.param(8, 3, 2, id="three-share-rounding-down"),
    pytest.param(2, 3, 1, id="at-least-one"),
])
def test_cpu_threads(cores: int, runners: int, want: int) -> None:
    assert cpu_threads(cores, runners) == want


@pytest.mark.parametrize(("code", "lines", "want"), [
    pytest.param(-6, ["terminate called after throwing an instance of 'std::bad_alloc'"], True, id="bad-alloc"),
    pytest.param(1, ["E ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer"], True, id="ggml"),
    pytest.param(-9, [], False, id="sigkill-is-not-the-rlimit"),
    pytest.param(-11, ["segmentation fault"], False, id="a-plain-crash"),
])
def test_exceeded_limit(code: int, lines: list[str], want: bool) -> None:
    assert exceeded_limit(code, lines) is want


# -- the scheduler ---------------------------------------------------------------------------------------------------

async def test_a_model_that_cannot_fit_even_alone_fails_at_once_naming_the_numbers(tmp_path: Path) -> None:
    started: list[LoadPlan] = []
    sched = scheduler(tmp_path, free_memory=lambda plan: 600 * MiB, on_start=lambda plan, r: started.append(plan))
    try:
        with pytest.raises(InsufficientMemory) as e:
            await asyncio.wait_for(sched.load(model(tmp_path, "big"), {}, None), 10)
        assert str(e.value) == "model 'big' requires more system memory (1000.0 MiB) than is available (600.0 MiB free)"
        assert not started and not sched.loaded and sched.pending == 0
    finally:
        await sched.shutdown()


async def test_a_fully_offloaded_model_is_judged_by_what_it_puts_on_the_gpus(tmp_path: Path) -> None:
    # "100% GPU" reads as size_vram == size, host-held input embeddings included; the GPUs' free memory (220 MiB:
    # two 110 MiB devices) need only hold what the plan really puts there (200 MiB)
    sched = scheduler(tmp_path, sizes={"split": 250 * MiB}, vram=(250 * MiB, 200 * MiB),
                      free_memory=lambda plan: 220 * MiB)
    try:
        loaded = await asyncio.wait_for(sched.load(model(tmp_path, "split"), {}, None), 30)
        assert loaded.plan.size_vram == loaded.plan.size == 250 * MiB
    finally:
        await sched.shutdown()


async def test_a_partly_offloaded_model_must_fit_its_host_part_in_ram_too(tmp_path: Path) -> None:
    """1000 MiB of which 400 on the GPU: 600 stay in host memory. The GPU has room; RAM has 500 MiB: refused at
    once, as Ollama refuses it, before the kernel has to kill something."""
    started: list[LoadPlan] = []
    sched = scheduler(tmp_path, vram=(400 * MiB, 400 * MiB), free_memory=lambda plan: 8000 * MiB,
                      free_host=lambda: 500 * MiB, on_start=lambda plan, r: started.append(plan))
    try:
        with pytest.raises(InsufficientMemory) as e:
            await asyncio.wait_for(sched.load(model(tmp_path, "big"), {}, None), 10)
        assert str(e.value) == "model 'big' requires more system memory (600.0 MiB) than is available (500.0 MiB free)"
        assert not started and not sched.loaded and sched.pending == 0
    finally:
        await sched.shutdown()


async def test_a_partly_offloaded_model_evicts_an_idle_runner_holding_ram_and_loads(tmp_path: Path) -> None:
    runners: list[RunnerProcess] = []
    plans: dict[int, LoadPlan] = {}

    def on_start(plan: LoadPlan, runner: RunnerProcess) -> None:
        runners.append(runner)
        plans[id(runner)] = plan

    def free_host() -> int:  # 1500 MiB of RAM, less what each live runner keeps in host memory
        return 1500 * MiB - sum(plans[id(r)].size - plans[id(r)].size_vram for r in runners
                                if r.pid and r.returncode is None)

    sched = scheduler(tmp_path, vram=(400 * MiB, 400 * MiB), free_memory=lambda plan: 8000 * MiB,
                      free_host=free_host, on_start=on_start, settings={"max_loaded_models": 3})
    try:
        await asyncio.wait_for(sched.load(model(tmp_path, "a"), {}, 600.0), 30)  # 600 MiB of RAM
        await asyncio.wait_for(sched.load(model(tmp_path, "b"), {}, 600.0), 30)  # 600 more: 1200 of 1500
        loaded = await asyncio.wait_for(sched.load(model(tmp_path, "c"), {}, 600.0), 30)  # one of them goes first
        assert loaded.name == "c" and len(sched.loaded) == 2 and "c" in [e.name for e in sched.loaded.values()]
    finally:
        await sched.shutdown()


async def test_a_load_that_needs_a_busy_runners_memory_waits_and_one_that_never_fits_fails_at_once(
        tmp_path: Path) -> None:
    runners: list[RunnerProcess] = []

    def free_memory(plan: LoadPlan) -> int:  # 1500 MiB, less 1000 per runner whose process is alive
        return 1500 * MiB - 1000 * MiB * sum(1 for r in runners if r.pid and r.returncode is None)

    sched = scheduler(tmp_path, free_memory=free_memory, on_start=lambda plan, r: runners.append(r),
                      sizes={"huge": 3000 * MiB})
    try:
        async with sched.use(model(tmp_path, "a"), {}, 600.0):
            waiting = asyncio.ensure_future(sched.load(model(tmp_path, "b"), {}, 600.0))
            await asyncio.sleep(0.3)
            assert not waiting.done()  # 1000 fits once a (busy) is gone: it waits for a to be idle
            with pytest.raises(InsufficientMemory, match=r"^model 'huge' requires more system memory \(2.9 GiB\) "
                                                         r"than is available \(500.0 MiB free, 1000.0 MiB more held "
                                                         r"by the other loaded models\)$"):
                await asyncio.wait_for(sched.load(model(tmp_path, "huge"), {}, 600.0), 10)
        loaded_b = await asyncio.wait_for(waiting, 30)
        assert [entry.name for entry in sched.loaded.values()] == ["b"] and loaded_b.name == "b"
    finally:
        await sched.shutdown()


async def test_the_next_runner_starts_only_once_the_evicted_ones_memory_is_back(tmp_path: Path) -> None:
    """Memory shows as free only some time after a runner has exited (a driver, the kernel): the next runner
    must not start before, and no second runner may be evicted for it meanwhile."""
    exited: dict[int, float] = {}
    runners: list[RunnerProcess] = []

    def free_memory(plan: LoadPlan) -> int:
        held = sum(1 for r in runners if r.pid is not None and time.monotonic() - exited.get(r.pid, 1e18) < 0.5)
        return 1500 * MiB - 1000 * MiB * held

    started_with_room: list[bool] = []

    def on_start(plan: LoadPlan, runner: RunnerProcess) -> None:
        started_with_room.append(free_memory(plan) >= plan.size)
        runners.append(runner)

    def on_exit(runner: RunnerProcess) -> None:  # the moment the process is gone (before the scheduler hears it)
        exited[runner.pid or 0] = time.monotonic()

    sched = scheduler(tmp_path, free_memory=free_memory, on_start=on_start, on_exit=on_exit,
                      settings={"max_loaded_models": 3})
    events: list[str] = []
    sched.listeners.append(lambda event, loaded: events.append(f"{event} {loaded.name}"))
    try:
        await sched.load(model(tmp_path, "a"), {}, 600.0)
        await sched.load(model(tmp_path, "b"), {}, 600.0)
        assert events == ["loaded a", "evicted a", "loaded b"]
        assert started_with_room == [True, True]
    finally:
        await sched.shutdown()


async def test_cpu_runners_share_the_cores_and_a_users_num_thread_wins(tmp_path: Path) -> None:
    sched = scheduler(tmp_path, cpu_cores=4)
    try:
        first = await sched.load(model(tmp_path, "a"), {}, 600.0)
        second = await sched.load(model(tmp_path, "b"), {}, 600.0)
        own = await sched.load(model(tmp_path, "c"), {"num_thread": 3}, 600.0)
        threads = [cmd[cmd.index("-t") + 1] for cmd in
                   (psutil.Process(x.runner.pid).cmdline() for x in (first, second, own))]
        assert threads == ["4", "2", "3"]
    finally:
        await sched.shutdown()


# -- a runner's memory limit -----------------------------------------------------------------------------------------

async def test_a_runner_past_its_memory_limit_is_reaped_and_says_so(tmp_path: Path) -> None:
    limit = 1024 * MiB
    sched = scheduler(tmp_path, memory_limit=limit, fake_env={"FAKE_ALLOCATE_MIB": "2048"})
    a = model(tmp_path, "a")
    try:
        async with sched.use(a, {}, 600.0) as loaded:
            runner = loaded.runner
            with pytest.raises(Exception):  # noqa: B017 - the connection breaks as the runner dies
                await generate(loaded)
        for _ in range(500):
            if not sched.loaded:
                break
            await asyncio.sleep(0.02)
        assert not sched.loaded  # forgotten: the next request starts a fresh runner
        assert runner.returncode == -signal.SIGABRT and runner.pid is not None
        assert not psutil.pid_exists(runner.pid) or psutil.Process(runner.pid).status() == psutil.STATUS_ZOMBIE
        error = runner.error()
        assert isinstance(error, RunnerError)
        assert str(error).startswith("model 'a' exceeded its memory limit of 1.0 GiB"), str(error)
    finally:
        await sched.shutdown()


async def test_without_a_limit_the_same_runner_keeps_going(tmp_path: Path) -> None:
    sched = scheduler(tmp_path, fake_env={"FAKE_ALLOCATE_MIB": "16"})
    try:
        async with sched.use(model(tmp_path, "a"), {}, 600.0) as loaded:
            assert await generate(loaded) == "The quick"
    finally:
        await sched.shutdown()


async def test_a_client_is_told_which_model_exceeded_which_limit(tmp_path: Path, tiny_gguf: Path, aiohttp_client: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The real runner factory (a CPU build: the fake as runners/cpu) sizes the limit from the plan."""
    from ollama_py.scheduler.factory import plan_load, runner_factory
    from ollama_py.server.app import create_app
    from tests.helpers.app import create_tiny_model, make_settings
    from tests.helpers.processes import fake_runners_dir

    monkeypatch.setenv("FAKE_ALLOCATE_MIB", "8192")  # address space only: harmless where no limit applies
    statuses = []
    for limited in (False, True):
        settings = make_settings(tmp_path / str(limited), runners_dir=fake_runners_dir(tmp_path),
                                 runner_memory_limit=limited)
        create_tiny_model(settings, tiny_gguf)
        sched = Scheduler(settings, plan=lambda m, o, e, s=settings: plan_load(s, [], 1 << 40, m, o, e),
                          runner_factory=runner_factory(settings))
        client = await aiohttp_client(create_app(settings, scheduler=sched))
        resp = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False})
        statuses.append(resp.status)
    assert statuses == [200, 500]  # OLLAMA_PY_RUNNER_MEMORY_LIMIT=false: no limit
    error = (await resp.json())["error"]
    assert re.match(r"model 'tiny:latest' exceeded its memory limit of \d+\.\d GiB: .*bad_alloc", error), error
