"""Scheduler behaviour with the fake llama-server as the child (fast, deterministic, real processes)."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from ollama_py.config import Settings
from ollama_py.errors import RunnerError, RunnerLoadError, ServerBusy
from ollama_py.runner.argv import LaunchSpec, build_argv
from ollama_py.runner.process import RunnerProcess
from ollama_py.scheduler import policy
from ollama_py.scheduler.scheduler import LoadPlan, Scheduler

FAKE = Path(__file__).resolve().parent.parent / "fakes" / "fake_llama_server.py"


@dataclass(frozen=True)
class FakeModel:
    name: str
    model_path: Path

QUEUE = policy.runner_queue(1)  # the places in a one-slot runner's own queue


def make_scheduler(tmp_path: Path, fake_env: dict[str, str] | None = None, stop_grace: float | None = None,
                   free_memory=lambda plan: None, **settings_kw) -> Scheduler:
    settings = Settings.from_env({"OLLAMA_MODELS": str(tmp_path)}, **settings_kw)
    env = {**os.environ, **(fake_env or {})}

    def plan(model: FakeModel, options: dict, embedding: bool) -> LoadPlan:
        num_ctx = int(options.get("num_ctx") or 2048)
        spec = LaunchSpec(model=model.model_path, num_ctx=num_ctx, parallel=settings.num_parallel or 1,
                          embedding=embedding)
        return LoadPlan(key=f"{model.model_path}|{embedding}", spec=spec, load_options={"num_ctx": num_ctx},
                        size=1000, context_length=num_ctx)

    def factory(plan: LoadPlan, name: str, on_exit) -> RunnerProcess:
        runner = RunnerProcess(lambda port: [sys.executable, str(FAKE), *build_argv(plan.spec, "x", port)[1:]],
                               name=name, env=env, load_timeout=settings.load_timeout, on_exit=on_exit)
        if stop_grace is not None:
            original = runner.stop
            runner.stop = lambda grace=stop_grace: original(grace)  # type: ignore[method-assign]
        return runner

    return Scheduler(settings, plan=plan, runner_factory=factory, free_memory=free_memory)


def model(tmp_path: Path, name: str) -> FakeModel:
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(b"GGUF")
    return FakeModel(name, path)


async def generate(loaded, n: int = 3) -> str:
    text = ""
    async for ev in loaded.client.stream("/completion", {"prompt": "hi", "n_predict": n, "stream": True}):
        text += ev.get("content", "")
    return text


async def wait_for(predicate, timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.02)):
        if predicate():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("condition not reached")


async def test_load_then_reuse_same_runner(tmp_path):
    sched = make_scheduler(tmp_path)
    a = model(tmp_path, "a")
    try:
        async with sched.use(a, {}, None) as first:
            assert await generate(first) == "The quick brown"
            pid = first.runner.pid
        async with sched.use(a, {}, None) as second:
            assert second.runner.pid == pid
        assert len(sched.loaded) == 1
    finally:
        await sched.shutdown()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


async def test_keep_alive_zero_unloads_when_idle(tmp_path):
    sched = make_scheduler(tmp_path)
    a = model(tmp_path, "a")
    try:
        async with sched.use(a, {}, 0.0) as loaded:
            pid = loaded.runner.pid
        await wait_for(lambda: not sched.loaded)
        await wait_for(lambda: not psutil.pid_exists(pid))
    finally:
        await sched.shutdown()


async def test_keep_alive_expiry_unloads_after_duration(tmp_path):
    sched = make_scheduler(tmp_path)
    a = model(tmp_path, "a")
    try:
        async with sched.use(a, {}, 0.3):
            pass
        assert len(sched.loaded) == 1  # still there right after the request
        await wait_for(lambda: not sched.loaded, timeout=5)
    finally:
        await sched.shutdown()


async def test_default_keep_alive_comes_from_settings(tmp_path):
    sched = make_scheduler(tmp_path, keep_alive=0.2)
    a = model(tmp_path, "a")
    try:
        await sched.load(a, {}, None)
        await wait_for(lambda: not sched.loaded, timeout=5)
    finally:
        await sched.shutdown()


async def test_eviction_takes_the_idle_model_with_shortest_keep_alive(tmp_path):
    sched = make_scheduler(tmp_path, max_loaded_models=2)
    a, b, c = model(tmp_path, "a"), model(tmp_path, "b"), model(tmp_path, "c")
    try:
        await sched.load(a, {}, 600.0)
        await sched.load(b, {}, 60.0)
        await sched.load(c, {}, 600.0)
        names = sorted(entry.name for entry in sched.loaded.values())
        assert names == ["a", "c"]
    finally:
        await sched.shutdown()


async def test_busy_model_is_never_evicted_the_new_one_waits(tmp_path):
    sched = make_scheduler(tmp_path, max_loaded_models=1)
    a, b = model(tmp_path, "a"), model(tmp_path, "b")
    try:
        release = asyncio.Event()
        order: list[str] = []

        async def hold_a():
            async with sched.use(a, {}, 600.0) as loaded:
                order.append("a-start")
                await release.wait()
                assert loaded.runner.alive  # nobody evicted it while busy
                order.append("a-end")

        task = asyncio.create_task(hold_a())
        await wait_for(lambda: order == ["a-start"])

        async def use_b():
            async with sched.use(b, {}, 600.0):
                order.append("b")

        b_task = asyncio.create_task(use_b())
        await asyncio.sleep(0.5)
        assert order == ["a-start"]  # b waits for a
        release.set()
        await asyncio.gather(task, b_task)
        assert order == ["a-start", "a-end", "b"]
        assert [e.name for e in sched.loaded.values()] == ["b"]
    finally:
        await sched.shutdown()


async def test_queue_overflow_answers_server_busy_and_keeps_serving(tmp_path):
    sched = make_scheduler(tmp_path, max_queue=2)
    a = model(tmp_path, "a")
    try:
        release = asyncio.Event()
        holding: list[int] = []

        async def hold():
            async with sched.use(a, {}, None):
                holding.append(1)
                await release.wait()

        async def quick():
            async with sched.use(a, {}, None) as loaded:
                return await generate(loaded, 2)

        # the runner's slot and its own queue (policy.runner_queue) taken; the one in the runner's queue is
        # queued all the same, as are those waiting here
        holders = [asyncio.create_task(hold()) for _ in range(1 + QUEUE)]
        await wait_for(lambda: len(holding) == 1 + QUEUE)
        assert sched.pending == QUEUE
        waiters = [asyncio.create_task(quick()) for _ in range(2 - QUEUE)]
        await wait_for(lambda: sched.pending == 2)
        with pytest.raises(ServerBusy) as exc:
            async with sched.use(a, {}, None):
                pass
        assert exc.value.status == 503
        assert "maximum pending requests exceeded" in str(exc.value)
        release.set()
        assert await asyncio.gather(*waiters) == ["The quick"] * (2 - QUEUE)
        await asyncio.gather(*holders)
        assert await quick() == "The quick"
    finally:
        await sched.shutdown()


async def test_crash_mid_stream_errors_then_next_request_gets_fresh_runner(tmp_path):
    sched = make_scheduler(tmp_path, fake_env={"FAKE_CRASH_AFTER_TOKENS": "2"})
    a = model(tmp_path, "a")
    try:
        async with sched.use(a, {}, None) as loaded:
            first_pid = loaded.runner.pid
            with pytest.raises(RunnerError):
                await generate(loaded, 5)
        await wait_for(lambda: not sched.loaded)
        async with sched.use(a, {}, None) as loaded:
            assert loaded.runner.pid != first_pid
            assert await generate(loaded, 1) == "The"
    finally:
        await sched.shutdown()


async def test_load_failure_carries_the_stderr_message(tmp_path):
    sched = make_scheduler(tmp_path, fake_env={"FAKE_LOAD_FAIL": "error loading model: bad magic"})
    a = model(tmp_path, "a")
    try:
        with pytest.raises(RunnerLoadError, match="error loading model: bad magic"):
            await sched.load(a, {}, None)
        assert not sched.loaded
        assert sched.pending == 0
    finally:
        await sched.shutdown()


async def test_stop_during_start_releases_the_waiter(tmp_path):
    sched = make_scheduler(tmp_path, fake_env={"FAKE_LOAD_SECONDS": "30"})
    a = model(tmp_path, "a")
    task = asyncio.create_task(sched.load(a, {}, None))
    await wait_for(lambda: bool(sched.loaded) and next(iter(sched.loaded.values())).runner.pid is not None)
    pid = next(iter(sched.loaded.values())).runner.pid
    await sched.shutdown()
    with pytest.raises(RunnerLoadError):
        await asyncio.wait_for(task, 10)
    await wait_for(lambda: not psutil.pid_exists(pid))


async def test_num_ctx_change_reloads_sampling_change_does_not(tmp_path):
    sched = make_scheduler(tmp_path)
    a = model(tmp_path, "a")
    try:
        async with sched.use(a, {"num_ctx": 2048}, None) as loaded:
            pid = loaded.runner.pid
        async with sched.use(a, {"num_ctx": 2048, "temperature": 0.1}, None) as loaded:
            assert loaded.runner.pid == pid
        async with sched.use(a, {"num_ctx": 4096}, None) as loaded:
            assert loaded.runner.pid != pid
            assert loaded.plan.spec.num_ctx == 4096
        assert len(sched.loaded) == 1
    finally:
        await sched.shutdown()


async def test_runner_ignoring_sigterm_is_killed(tmp_path):
    sched = make_scheduler(tmp_path, fake_env={"FAKE_IGNORE_SIGTERM": "1"}, stop_grace=0.5)
    a = model(tmp_path, "a")
    await sched.load(a, {}, None)
    pid = next(iter(sched.loaded.values())).runner.pid
    await sched.shutdown()
    await wait_for(lambda: not psutil.pid_exists(pid))


async def test_unload_of_busy_model_waits_until_idle(tmp_path):
    sched = make_scheduler(tmp_path)
    a = model(tmp_path, "a")
    try:
        async with sched.use(a, {}, None) as loaded:
            assert await sched.unload(a) is True
            assert await generate(loaded, 2) == "The quick"  # still serving its request
        await wait_for(lambda: not sched.loaded)
        assert await sched.unload(a) is False
    finally:
        await sched.shutdown()


async def test_model_that_does_not_fit_evicts_an_idle_one_below_the_count_limit(tmp_path):
    def free_memory(plan):  # room for one 1000-byte model only: each runner process holds 1000 while it lives
        return 1500 - 1000 * sum(1 for entry in list(sched.loaded.values())
                                 if entry.runner.pid is not None and entry.runner.returncode is None)

    sched = make_scheduler(tmp_path, free_memory=free_memory, max_loaded_models=3)
    a, b = model(tmp_path, "a"), model(tmp_path, "b")
    try:
        await sched.load(a, {}, 600.0)
        await sched.load(b, {}, 600.0)
        assert [e.name for e in sched.loaded.values()] == ["b"]
    finally:
        await sched.shutdown()


def scheduler_with_argv(tmp_path: Path, argv_for, **settings_kw) -> Scheduler:
    """A scheduler whose runners start with argv_for(plan, port, attempt) (attempt counts runners from 0)."""
    settings = Settings.from_env({"OLLAMA_MODELS": str(tmp_path)}, **settings_kw)
    attempts = iter(range(1000))

    def plan(model: FakeModel, options: dict, embedding: bool) -> LoadPlan:
        spec = LaunchSpec(model=model.model_path, num_ctx=2048, parallel=1, embedding=embedding)
        return LoadPlan(key=f"{model.model_path}|{embedding}", spec=spec, load_options={"num_ctx": 2048}, size=1000)

    def factory(plan: LoadPlan, name: str, on_exit) -> RunnerProcess:
        attempt = next(attempts)
        return RunnerProcess(lambda port: argv_for(plan, port, attempt), name=name, env=dict(os.environ),
                             load_timeout=settings.load_timeout, on_exit=on_exit)

    return Scheduler(settings, plan=plan, runner_factory=factory)


def fake_argv(plan: LoadPlan, port: int) -> list[str]:
    return [sys.executable, str(FAKE), *build_argv(plan.spec, "x", port)[1:]]


async def test_a_start_failing_before_the_spawn_fails_the_request_and_the_next_one_loads(tmp_path):
    def argv_for(plan, port, attempt):
        if attempt == 0:  # what running out of file descriptors looks like before the child exists
            raise OSError(errno.EMFILE, "Too many open files")
        return fake_argv(plan, port)

    sched = scheduler_with_argv(tmp_path, argv_for)
    a = model(tmp_path, "a")
    try:
        with pytest.raises(RunnerLoadError, match="error starting llama-server: .*Too many open files"):
            await asyncio.wait_for(sched.load(a, {}, None), 30)
        assert not sched.loaded  # /api/ps no longer shows it "loading"
        assert sched.pending == 0
        async with asyncio.timeout(30):
            async with sched.use(a, {}, None) as loaded:
                assert await generate(loaded, 2) == "The quick"
    finally:
        await sched.shutdown()


async def test_a_spawn_raising_a_non_os_error_fails_the_start_for_every_waiter(tmp_path):
    # subprocess refuses an argv with a NUL byte with ValueError, not OSError
    sched = scheduler_with_argv(tmp_path, lambda plan, port, attempt: [sys.executable + "\0", "-V"])
    a = model(tmp_path, "a")
    try:
        results = await asyncio.wait_for(
            asyncio.gather(*(sched.load(a, {}, None) for _ in range(3)), return_exceptions=True), 30)
        assert all(isinstance(r, RunnerLoadError) and "embedded null byte" in str(r) for r in results), results
        assert not sched.loaded and sched.pending == 0
        with pytest.raises(RunnerLoadError, match="embedded null byte"):  # the next request is answered too
            await asyncio.wait_for(sched.load(a, {}, None), 30)
    finally:
        await sched.shutdown()


async def test_the_load_deadline_holds_while_the_health_check_hangs(tmp_path):
    # A child that listens but never answers: the health check's request hangs, and the deadline still holds.
    listen_only = ("import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); "
                   "s.listen(); time.sleep(120)")
    sched = scheduler_with_argv(tmp_path, lambda plan, port, attempt: [sys.executable, "-c", listen_only, str(port)],
                                load_timeout=0.5)
    a = model(tmp_path, "a")
    try:
        with pytest.raises(RunnerLoadError, match="timed out waiting for llama runner to start"):
            await asyncio.wait_for(sched.load(a, {}, None), 60)
        assert not sched.loaded and sched.pending == 0
    finally:
        await sched.shutdown()


# -- runner settings (the config file's [models."name"] tables) and the runner key ---------------------------------
def settings_scheduler(tmp_path: Path, tables: dict[str, str]) -> Scheduler:
    """The real plan (plan_load + the model's runner settings) over the fake runner; `tables` maps a model's short
    name to the body of its [models."name"] table and may be changed while the scheduler runs (a reload)."""
    from ollama_py import config_file as cf
    from ollama_py.scheduler.factory import plan_load
    from ollama_py.scheduler.model_settings import plan_with_settings
    from tests.helpers.app import fake_runner_factory

    settings = Settings.from_env({"OLLAMA_MODELS": str(tmp_path)})

    def plan(m, options: dict, embedding: bool) -> LoadPlan:
        text = "".join(f'[models."{name}"]\n{body}\n' for name, body in tables.items())
        ms = cf.parse_config(text).models.for_name(m.name)
        return plan_with_settings(ms, settings, options,
                                  lambda s, o, r: plan_load(s, [], 1 << 40, m, o, embedding, runner=r))

    return Scheduler(settings, plan=plan, runner_factory=fake_runner_factory(settings))


def stored(name: str, weights: Path):
    from types import SimpleNamespace

    from ollama_py.api.names import parse_name

    return SimpleNamespace(name=parse_name(name), model_path=weights, adapters=(), projectors=())


def cmdline(loaded) -> str:
    return " ".join(psutil.Process(loaded.runner.pid).cmdline())


async def test_names_on_the_same_weights_share_a_runner_only_with_the_same_runner_settings(tmp_path, tiny_gguf):
    sched = settings_scheduler(tmp_path, {"a": 'kv_cache_type = "q8_0"', "c": 'kv_cache_type = "q8_0"'})
    a, b, c = (stored(n, tiny_gguf) for n in "abc")
    try:
        async with sched.use(a, {}, None) as on_a:
            assert "--cache-type-k q8_0" in cmdline(on_a)
        async with sched.use(b, {}, None) as on_b:  # no settings: a runner of its own, beside a's
            assert on_b.runner.pid != on_a.runner.pid and "q8_0" not in cmdline(on_b)
        async with sched.use(a, {}, None) as again:
            assert again is on_a  # not replaced by b's
        async with sched.use(c, {}, None) as on_c:  # c's settings are a's: a's runner
            assert on_c is on_a
        assert len(sched.loaded) == 2 and on_a.runner.alive and on_b.runner.alive
        assert await sched.unload(b) is True
        await wait_for(lambda: len(sched.loaded) == 1)
        assert next(iter(sched.loaded.values())) is on_a
    finally:
        await sched.shutdown()


async def test_a_changed_runner_setting_replaces_the_models_runner_once_idle(tmp_path, tiny_gguf):
    tables = {"a": 'kv_cache_type = "q8_0"'}
    sched = settings_scheduler(tmp_path, tables)
    a = stored("a", tiny_gguf)
    try:
        async with sched.use(a, {}, None) as old:
            tables["a"] = 'kv_cache_type = "q4_0"'  # a reload, while a request holds the runner
            waiting = asyncio.ensure_future(sched.load(a, {}, None))
            await asyncio.sleep(0.3)
            assert not waiting.done() and old.runner.alive and not old.unloading  # never mid-request
            assert await generate(old, 2) == "The quick"
        new = await asyncio.wait_for(waiting, 20)
        assert new is not old and "--cache-type-k q4_0" in cmdline(new)
        assert list(sched.loaded.values()) == [new]  # replaced, not doubled
        assert not old.runner.alive
    finally:
        await sched.shutdown()


async def test_unload_finds_a_runner_started_with_settings_since_changed(tmp_path, tiny_gguf):
    tables = {"a": "n_cpu_moe = 1"}
    sched = settings_scheduler(tmp_path, tables)
    a = stored("a", tiny_gguf)
    try:
        await sched.load(a, {}, None)
        tables["a"] = "n_cpu_moe = 2"
        assert await sched.unload(a, wait=True) is True
        assert not sched.loaded
    finally:
        await sched.shutdown()


async def test_a_slot_given_back_early_lets_the_queued_request_in_before_the_holder_is_done(tmp_path):
    """A completion gives its slot back once the runner's last event is in (SlotHold); the request queued behind
    it starts then, while the first still finishes its own bookkeeping. Its prompt was built before it queued."""
    from ollama_py.scheduler.scheduler import SlotHold

    sched = make_scheduler(tmp_path, num_parallel=1)
    a = model(tmp_path, "a")
    try:
        order: list[str] = []
        finish = asyncio.Event()
        first_in = asyncio.Event()
        queued: list[int] = []

        async def in_the_runners_queue():  # holds the place a runner has beyond its slots (policy.runner_queue)
            async with sched.use(a, {}, 600.0):
                queued.append(1)
                await finish.wait()

        async def first():
            hold = SlotHold()
            async with sched.use(a, {}, 600.0, hold=hold) as loaded:
                first_in.set()
                order.append("first: " + await generate(loaded, 2))
                hold.release()
                hold.release()  # once only: a second release gives back nothing
                await finish.wait()  # the final bookkeeping, still inside the block
                order.append("first: done")

        async def second():
            async def prepare(loaded) -> None:
                order.append("second: prompt built")

            async with sched.use(a, {}, 600.0, before_slot=prepare) as loaded:
                order.append("second: " + await generate(loaded, 3))

        t1 = asyncio.create_task(first())
        await first_in.wait()
        blockers = [asyncio.create_task(in_the_runners_queue()) for _ in range(QUEUE)]
        await wait_for(lambda: len(queued) == QUEUE)
        t2 = asyncio.create_task(second())
        await wait_for(lambda: "second: The quick brown" in order)
        assert order == ["second: prompt built", "first: The quick", "second: The quick brown"] or \
            order == ["first: The quick", "second: prompt built", "second: The quick brown"]
        assert order.index("second: prompt built") < order.index("second: The quick brown")
        finish.set()
        await asyncio.gather(t1, t2, *blockers)
        loaded = next(iter(sched.loaded.values()))
        assert loaded.requests_served == 2 + QUEUE
        # every place free, each given back once: the double release gave back nothing
        assert loaded.slots._value == 1 + QUEUE  # noqa: SLF001
    finally:
        await sched.shutdown()


async def test_one_request_beyond_the_slots_waits_in_the_runners_own_queue(tmp_path):
    """While a runner's one slot streams, the next request is already sent to it (llama-server starts it in the
    step the slot frees); the one after waits here. Both count as queued (OLLAMA_MAX_QUEUE, /metrics)."""
    log = tmp_path / "bodies.jsonl"
    sched = make_scheduler(tmp_path, {"FAKE_TOKEN_DELAY": "0.2", "FAKE_LOG_FILE": str(log)}, num_parallel=1)
    a = model(tmp_path, "a")

    def bodies() -> list[str]:
        return [json.loads(line)["prompt"] for line in log.read_text().splitlines()] if log.exists() else []

    async def ask(prompt: str) -> str:
        async with sched.use(a, {}, 600.0) as loaded:
            text = ""
            async for ev in loaded.client.stream("/completion", {"prompt": prompt, "n_predict": 2, "stream": True}):
                text += ev.get("content", "")
            return text

    try:
        tasks = [asyncio.create_task(ask(p)) for p in ("one", "two", "three")]
        await wait_for(lambda: bodies() == ["one", "two"])  # the second is at the runner while the first streams
        loaded = next(iter(sched.loaded.values()))
        assert not tasks[0].done()
        assert loaded.waiting == 1 and loaded.in_runner_queue == 1  # the third waits here, the second there
        assert sched.pending == 2
        assert await asyncio.gather(*tasks) == ["The quick"] * 3
        assert bodies() == ["one", "two", "three"]
    finally:
        await sched.shutdown()
