"""The scheduler: which models are loaded, who is using them, when they unload.

One llama-server runner per loaded model (keyed by its weights, adapters and runner settings: LoadPlan.key). A
request asks for an outcome — `async with scheduler.use(model, options, keep_alive) as loaded:` — and gets a
ready runner and one of its slots, or an error. Every waiting request counts against OLLAMA_MAX_QUEUE,
including those waiting for a busy model's slot (Ollama bounds only the load queue: its issue #7758).

Seams injected at construction: `plan` (model, options, embedding -> LoadPlan, or an awaitable of one), `runner_factory`
(LoadPlan, name, on_exit -> RunnerProcess) and `free_memory` (plan -> bytes free where that plan puts the model:
VRAM when it offloads to GPUs, else RAM; None skips the check), `free_host` (() -> bytes of RAM available: what a
partly offloaded plan keeps in host memory must fit there too; None skips it) and `may_stay` (loading model,
loaded model -> whether the loaded one may stay beside it: the config file's exclusive groups; one that may not is
unloaded first, once it is idle, never mid-request), `cpu_cores` (the cores runners on the CPU share:
policy.cpu_threads; 0 leaves threads to llama-server) and `forget_slots` (a model's weights -> remove its saved
slots: runner/slot_cache.py).

Under memory pressure: a model that does not fit even with every other runner unloaded fails at once
(InsufficientMemory, naming the numbers); else idle runners are evicted one at a time, and the next runner starts
only once the evicted one has exited and its memory shows as free again (up to MEMORY_RECOVERY_SECONDS), so a slow
release never evicts a second runner for nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ollama_py.config import Settings
from ollama_py.errors import InsufficientMemory, OllamaError, RunnerLoadError, ServerBusy
from ollama_py.runner.argv import LaunchSpec
from ollama_py.runner.client import LlamaClient, RunnerStalled
from ollama_py.runner.load_progress import LoadReport
from ollama_py.runner.process import RunnerProcess, RunnerState
from ollama_py.scheduler import policy
from ollama_py.template.jinja_chat import JinjaLimit, check_gguf_chat_templates

if TYPE_CHECKING:
    from ollama_py.store.models import Model

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LoadPlan:
    """How a model will be loaded: the launch spec plus what /api/ps reports.

    `key` names the runner: requests whose plans have the same key share it (the same weights, adapters, kind
    and runner settings, whatever name they came by). `lineage` names what the runner is a version of (a model's
    name with that key less its runner settings): a runner of the same lineage under another key was started
    with settings since changed, and is replaced once idle rather than kept beside the new one. "" means none.
    """

    key: str
    spec: LaunchSpec
    load_options: dict[str, Any]
    size: int = 0  # all of it: weights, KV cache, buffers and the prompt cache's cap
    size_vram: int = 0
    # what the plan really puts on GPUs (size_vram reads as Ollama's: the whole size once every layer is offloaded,
    # though llama.cpp keeps the input embeddings in host memory); 0: size_vram. What a GPU's free memory must hold.
    vram_need: int = 0
    # device memory the runner's own context takes beyond size_vram (memory.GPU_MINIMUM of each GPU it uses); the
    # free_memory seam leaves it out of what a plan may fill
    vram_reserve: int = 0
    context_length: int = 4096
    cache_ram: int = 0  # the prompt cache's cap (--cache-ram), in host memory: part of size
    lineage: str = ""
    gpus: tuple[str, ...] | None = None  # GpuInfo.uuid of the only GPUs it may use (--device); None: any
    load_note: str = ""  # why its runner may fail to load, said with the failure (runner/gguf_compat.py)


class SlotHold:
    """A request's hold on a runner slot, for a request that is done with the runner before it is done itself
    (Scheduler.use(hold=...)): a completion gives its slot to the next queued request as soon as llama-server
    has sent the last event, not after its own final bookkeeping and the client's last write. Released once."""

    __slots__ = ("_loaded",)

    def __init__(self) -> None:
        self._loaded: Loaded | None = None

    def release(self) -> None:
        loaded, self._loaded = self._loaded, None
        if loaded is not None:
            loaded.give_back()


@dataclass(eq=False)
class Loaded:
    """One loaded (or loading) model and its runner."""

    name: str
    model: Model
    plan: LoadPlan
    runner: RunnerProcess
    client: LlamaClient
    slots: asyncio.Semaphore  # the runner's slots and its own queue (policy.runner_queue): requests sent to it
    session_duration: float
    refcount: int = 0
    waiting: int = 0
    expires_at: float = math.inf  # wall clock
    timer: asyncio.TimerHandle | None = None
    unloading: bool = False
    keep_slots: bool = True  # save its slots when it stops for keep-alive, eviction or new settings (not on delete)
    requests_served: int = 0
    dispatched: int = 0  # requests holding one of `slots`' places: in a slot, or in the runner's own queue
    # What llama-server really allocated, from its buffer log lines once loaded (factory.record_actual_memory);
    # None / empty until then, or when its log names no buffers.
    actual_size: int | None = None
    actual_vram: int | None = None
    devices: dict[str, int] = field(default_factory=dict)  # bytes per device: CPU, CUDA0, RPC0[host:port], ...

    @property
    def key(self) -> str:
        return self.plan.key

    @property
    def in_runner_queue(self) -> int:
        """Requests sent to the runner beyond its slots (policy.runner_queue): queued, though no longer here."""
        return max(self.dispatched - self.plan.spec.parallel, 0)

    def give_back(self) -> None:
        """A request is done with its place (Scheduler.use, SlotHold)."""
        self.slots.release()
        self.dispatched -= 1
        self.requests_served += 1

    @property
    def state(self) -> str:
        if self.unloading:
            return "stopping"
        return {RunnerState.STARTING: "loading", RunnerState.READY: "ready"}.get(self.runner.state, "stopping")

    def resident(self) -> policy.Resident:
        # its own GPU context (plan.vram_reserve) is device memory it holds too, and frees when it goes
        reserve = self.plan.vram_reserve
        return policy.Resident(self.key, self.name, self.refcount > 0, self.session_duration, self.plan.size + reserve,
                               self.plan.size_vram + reserve)


class Scheduler:
    def __init__(
        self,
        settings: Settings,
        *,
        plan: Callable[[Model, dict[str, Any], bool], LoadPlan | Awaitable[LoadPlan]],
        runner_factory: Callable[[LoadPlan, str, Callable[[RunnerProcess], None]], RunnerProcess],
        free_memory: Callable[[LoadPlan], int | None] = lambda plan: None,
        free_host: Callable[[], int | None] = lambda: None,
        gpu_count: int = 0,
        clock: Callable[[], float] = time.time,
        default_keep_alive: Callable[[Model], float | None] = lambda model: None,
        may_stay: Callable[[Model, Model], bool] = lambda loading, loaded: True,
        cpu_cores: int = 0,
        forget_slots: Callable[[Model], object] = lambda model: None,
    ) -> None:
        self.settings = settings
        self._default_keep_alive = default_keep_alive  # a model's own default (the config file), else settings'
        self._plan = plan
        self._runner_factory = runner_factory
        self._free_memory = free_memory
        self._free_host = free_host
        self._clock = clock
        self._may_stay = may_stay
        self._cpu_cores = cpu_cores
        self._forget_slots = forget_slots
        self.max_runners = policy.max_runners(settings.max_loaded_models, gpu_count)
        self.loaded: dict[str, Loaded] = {}
        self._waiting_here = 0  # requests not yet sent to a runner (loading, or all its places taken)
        self._changed = asyncio.Condition()
        self._closed = False
        self.listeners: list[Callable[[str, Loaded], None]] = []  # ("loaded"|"unloaded"|"crashed"|"evicted", l)
        self._templates_checked: dict[str, OllamaError | None] = {}  # model digest -> its template's verdict

    # -- public -------------------------------------------------------------------------------------------
    @property
    def pending(self) -> int:
        """Requests waiting for a slot (what OLLAMA_MAX_QUEUE bounds): here, or in a runner's own queue."""
        return self._waiting_here + sum(loaded.in_runner_queue for loaded in self.loaded.values())

    @contextlib.asynccontextmanager
    async def use(self, model: Model, options: dict[str, Any], keep_alive: float | None, *,
                  embedding: bool = False,
                  progress: Callable[[Loaded, LoadReport], None] | None = None,
                  before_slot: Callable[[Loaded], Awaitable[None]] | None = None,
                  hold: SlotHold | None = None) -> AsyncIterator[Loaded]:
        """A ready runner for model with one of its slots held for the duration of the block. `progress` is
        given the runner's load reports while this request waits for it to be ready (none when it already is).
        `before_slot` runs once the runner is ready and before the request queues for a slot (work that needs
        the runner but not a slot: the prompt); with `hold`, the caller may give the slot back before the block
        ends (SlotHold.release, once the runner has finished with it)."""
        if self._closed:
            raise ServerBusy("server is shutting down")
        if self.pending >= self.settings.max_queue:
            raise ServerBusy()
        self._waiting_here += 1
        counted = True
        loaded: Loaded | None = None
        slot = False
        try:
            loaded = await self._reserve(model, options, keep_alive, embedding)
            relay = asyncio.ensure_future(_relay(loaded, progress)) if progress is not None else None
            try:
                await loaded.runner.ensure_ready()
            except Exception as e:  # any failure to start: forget the runner, or every later request waits on it
                await self._drop(loaded, "failed")
                note = loaded.plan.load_note
                if isinstance(e, RunnerLoadError) and note and note not in str(e):
                    raise RunnerLoadError(f"{e} ({note})") from None
                raise
            finally:
                if relay is not None:
                    relay.cancel()
            if not loaded.client.base_url:
                loaded.client.base_url = loaded.runner.base_url
                self._emit("loaded", loaded)
            if before_slot is not None:
                await before_slot(loaded)
            loaded.waiting += 1
            try:
                await loaded.slots.acquire()
                slot = True
                loaded.dispatched += 1
            finally:
                loaded.waiting -= 1
            if hold is not None:
                hold._loaded = loaded
            self._waiting_here -= 1
            counted = False
            if not loaded.runner.alive:
                raise loaded.runner.error()
            try:
                yield loaded
            except RunnerStalled as e:
                self._abandon(loaded, str(e))
                raise
        finally:
            if counted:
                self._waiting_here -= 1
            if loaded is not None:
                if slot and hold is not None:
                    hold.release()  # unless the caller already did
                elif slot:
                    loaded.give_back()
                await self._release(loaded)

    async def load(self, model: Model, options: dict[str, Any], keep_alive: float | None, *,
                   embedding: bool = False, progress: Callable[[Loaded, LoadReport], None] | None = None) -> Loaded:
        """Load without generating (an empty prompt): the model stays for its keep-alive."""
        async with self.use(model, options, keep_alive, embedding=embedding, progress=progress) as loaded:
            return loaded

    async def unload(self, model: Model, *, wait: bool = False, keep_slots: bool = True) -> bool:
        """Unload every runner of a model now if idle, else as soon as it is idle. False when none was loaded.
        With `wait`, return once those runners have stopped (after their current requests). `keep_slots` False:
        its slots are not saved for the next load (the model is being deleted)."""
        try:
            plans = [await self._make_plan(model, {}, embedding) for embedding in (False, True)]
            # ... and a runner it started with runner settings since changed (same lineage, another key)
            keys = {p.key for p in plans} | {key for key, loaded in self.loaded.items()
                                              if _same_lineage(loaded.plan, plans)}
        except (OSError, OllamaError):  # weights gone from disk or unreadable: the runners on the same weights
            keys = {key for key, loaded in self.loaded.items() if _same_weights(loaded.model, model)}
        targets: list[Loaded] = []
        async with self._changed:
            for key in keys:
                loaded = self.loaded.get(key)
                if loaded is None:
                    continue
                targets.append(loaded)
                loaded.session_duration = 0.0
                loaded.keep_slots = loaded.keep_slots and keep_slots
                if loaded.refcount == 0 and not loaded.unloading:
                    self._start_unload(loaded, "unloaded")
            if wait:  # those runners, not a new one a later request may start on the same weights
                await self._changed.wait_for(lambda: all(self.loaded.get(t.key) is not t for t in targets))
        return bool(targets)

    async def forget_slots(self, model: Model) -> None:
        """Remove the slots saved for a model's weights (blocking file work, off the loop)."""
        try:
            await asyncio.to_thread(self._forget_slots, model)
        except OSError as e:
            log.warning("could not remove the saved slots of %s: %s", getattr(model, "name", model), e)

    async def shutdown(self) -> None:
        """Stop every runner and wait for them (SIGTERM, grace, SIGKILL, reap). An idle one saves its slots first,
        as at an unload, so the conversations it held start warm after a restart: all of them together for at
        most SHUTDOWN_SAVE_SECONDS, beside the busy ones' stop (their streams end now)."""
        self._closed = True
        runners = list(self.loaded.values())
        idle = [loaded for loaded in runners if loaded.refcount == 0 and not loaded.unloading and loaded.keep_slots
                and loaded.runner.state == RunnerState.READY]
        for loaded in runners:
            loaded.unloading = True
            if loaded.timer:
                loaded.timer.cancel()
        deadline = time.monotonic() + policy.SHUTDOWN_SAVE_SECONDS

        async def save_then_stop(loaded: Loaded) -> None:
            try:
                await asyncio.wait_for(loaded.runner.save_slots(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                log.warning("saving the slots of %s at shutdown took over %.0f s: it stops unsaved", loaded.name,
                            policy.SHUTDOWN_SAVE_SECONDS)
            await self._stop(loaded)

        await asyncio.gather(*(save_then_stop(loaded) if loaded in idle else self._stop(loaded) for loaded in runners),
                             return_exceptions=True)
        self.loaded.clear()

    def kill_all(self) -> None:
        for loaded in self.loaded.values():
            loaded.runner.kill_now()

    # -- internals ----------------------------------------------------------------------------------------
    async def _check_chat_template(self, model: Model) -> None:
        """llama-server applies the GGUF's chat template at load: one that loops or explodes (a 23 GB runner in
        40 s) never reaches a runner. /api/create refuses such a model; this is the same bounded check, once per
        model, for one that did not come through it (pulled, or stored before the check)."""
        digest = getattr(model, "digest", None)  # the scheduler's own tests pass bare stand-ins
        info = getattr(model, "info", None)
        if digest is None or info is None:
            return
        if digest not in self._templates_checked:
            verdict: OllamaError | None = None
            try:
                await asyncio.to_thread(check_gguf_chat_templates, info.kv)
            except JinjaLimit as e:
                verdict = e
            self._templates_checked[digest] = verdict
        error = self._templates_checked[digest]
        if error is not None:
            raise JinjaLimit(str(error))

    async def _make_plan(self, model: Model, options: dict[str, Any], embedding: bool) -> LoadPlan:
        """The plan seam may be async (the real one asks RPC workers for their memory without blocking)."""
        plan = self._plan(model, options, embedding)
        return await plan if inspect.isawaitable(plan) else plan

    async def _reserve(self, model: Model, options: dict[str, Any], keep_alive: float | None,
                       embedding: bool) -> Loaded:
        """Find or start the runner for this request and take a reference on it (under the lock)."""
        await self._check_chat_template(model)
        plan = await self._make_plan(model, options, embedding)
        async with self._changed:
            while True:
                loaded = self.loaded.get(plan.key)
                if loaded is not None and not loaded.unloading:
                    if not policy.needs_reload(loaded.plan.load_options, plan.load_options):
                        self._ref(loaded, keep_alive)
                        return loaded
                    if loaded.refcount == 0:
                        log.info("reloading %s: load options changed", loaded.name)
                        self._start_unload(loaded, "unloaded")
                    await self._changed.wait()
                    continue
                if loaded is not None:  # unloading: wait until it is gone
                    await self._changed.wait()
                    continue
                superseded = [entry for entry in self.loaded.values() if _same_lineage(entry.plan, [plan])]
                if superseded:  # this model's runner with its former runner settings: replaced once idle
                    for entry in superseded:
                        if entry.refcount == 0 and not entry.unloading:
                            log.info("reloading %s: runner settings changed", entry.name)
                            self._start_unload(entry, "unloaded")
                    await self._changed.wait()
                    continue
                outsiders = [entry for entry in self.loaded.values() if not self._may_stay(model, entry.model)]
                if outsiders:  # an exclusive group: the others go first, each once it is idle
                    for entry in outsiders:
                        if entry.refcount == 0 and not entry.unloading:
                            log.info("unloading %s: %s is loading in an exclusive group without it", entry.name,
                                     getattr(getattr(model, "name", None), "short", model))
                            self._start_unload(entry, "evicted")
                    await self._changed.wait()
                    continue
                residents = [entry.resident() for entry in self.loaded.values() if not entry.unloading]
                stopping = any(entry.unloading for entry in self.loaded.values())
                free = await asyncio.to_thread(self._free_memory, plan)  # a device probe: off the loop
                need = (plan.vram_need or plan.size_vram) or plan.size
                if not stopping and policy.never_fits(residents, need, free, vram=bool(plan.size_vram)):
                    raise _insufficient(model, need, free or 0, residents, vram=bool(plan.size_vram))
                if policy.must_evict(residents, self.max_runners, need, free) or (
                        stopping and len(self.loaded) >= self.max_runners):
                    victim = policy.choose_victim(residents)
                    if victim is not None:
                        log.info("evicting %s to make room for %s", victim.name, getattr(model, "name", model))
                        self._start_unload(self.loaded[victim.key], "evicted")
                    await self._changed.wait()
                    continue
                if await self._host_short(model, plan, residents, stopping):
                    await self._changed.wait()
                    continue
                loaded = self._new(model, plan, keep_alive)
                self._ref(loaded, keep_alive)
                return loaded

    async def _host_short(self, model: Model, plan: LoadPlan, residents: list[policy.Resident],
                          stopping: bool) -> bool:
        """For a plan that offloads only part of the model: whether what stays in host memory (the layers left on
        the CPU, the host buffers) does not fit in the RAM available now -- an idle runner holding RAM is evicted
        for it, and the caller waits. Raises InsufficientMemory when it cannot fit even with every runner gone (as
        Ollama refuses a partial offload larger than the system's memory, rather than let the kernel kill a
        process)."""
        need = plan.size - plan.size_vram if plan.size_vram else 0
        if need <= 0:
            return False
        free = await asyncio.to_thread(self._free_host)  # a probe: off the loop
        if free is None or need <= free:
            return False
        if not stopping and policy.never_fits(residents, need, free, vram=False):
            raise _insufficient(model, need, free, residents, vram=False)
        victim = None if stopping else policy.choose_victim([r for r in residents if r.held(False) > 0])
        if victim is not None:  # (one runner stopping at a time: its memory comes back before the next look)
            log.info("evicting %s to make room in host memory for %s", victim.name, getattr(model, "name", model))
            self._start_unload(self.loaded[victim.key], "evicted")
        return True

    def _new(self, model: Model, plan: LoadPlan, keep_alive: float | None) -> Loaded:
        name = str(getattr(getattr(model, "name", None), "short", getattr(model, "name", "model")))
        if self._cpu_cores and not plan.size_vram and not plan.spec.num_thread:  # a user's num_thread wins
            on_cpu = 1 + sum(1 for entry in self.loaded.values() if not entry.plan.size_vram and not entry.unloading)
            threads = policy.cpu_threads(self._cpu_cores, on_cpu)
            plan = dataclasses.replace(plan, spec=dataclasses.replace(plan.spec, num_thread=threads))
        runner = self._runner_factory(plan, name, self._on_runner_exit)
        read_timeout = None if math.isinf(self.settings.request_timeout) else self.settings.request_timeout
        loaded = Loaded(
            name=name, model=model, plan=plan, runner=runner,
            client=LlamaClient("", read_timeout=read_timeout, api_key=runner.api_key, spares=plan.spec.parallel),
            # its slots and its own queue
            slots=asyncio.Semaphore(plan.spec.parallel + policy.runner_queue(plan.spec.parallel)),
            session_duration=self._keep_alive_of(model) if keep_alive is None else keep_alive,
        )
        self.loaded[plan.key] = loaded
        return loaded

    def _keep_alive_of(self, model: Model) -> float:
        own = self._default_keep_alive(model)
        return self.settings.keep_alive if own is None else own

    def _ref(self, loaded: Loaded, keep_alive: float | None) -> None:
        loaded.refcount += 1
        if keep_alive is not None:
            loaded.session_duration = keep_alive
        if loaded.timer:
            loaded.timer.cancel()
            loaded.timer = None
        loaded.expires_at = policy.expiry(self._clock(), loaded.session_duration)

    async def _release(self, loaded: Loaded) -> None:
        async with self._changed:
            loaded.refcount -= 1
            if loaded.refcount == 0 and self.loaded.get(loaded.key) is loaded and not loaded.unloading:
                duration = loaded.session_duration
                loaded.expires_at = policy.expiry(self._clock(), duration)
                if duration <= 0:
                    self._start_unload(loaded, "unloaded")
                elif not math.isinf(duration):
                    loop = asyncio.get_running_loop()
                    loaded.timer = loop.call_later(duration, self._expire, loaded)
            self._changed.notify_all()

    def _expire(self, loaded: Loaded) -> None:
        loaded.timer = None
        if loaded.refcount == 0 and not loaded.unloading and self.loaded.get(loaded.key) is loaded:
            log.info("keep-alive of %s expired", loaded.name)
            self._start_unload(loaded, "unloaded")

    def _start_unload(self, loaded: Loaded, why: str) -> None:
        loaded.unloading = True
        if loaded.timer:
            loaded.timer.cancel()
            loaded.timer = None
        asyncio.get_running_loop().create_task(self._finish_unload(loaded, why))

    async def _finish_unload(self, loaded: Loaded, why: str) -> None:
        freed = None
        if why == "evicted":  # what its memory should come back to once it has exited
            with contextlib.suppress(Exception):
                freed = await asyncio.to_thread(self._free_memory, loaded.plan)
        if why in ("unloaded", "evicted") and loaded.keep_slots and loaded.runner.state == RunnerState.READY:
            await loaded.runner.save_slots()  # never raises: a slot that cannot be saved is only logged
        await self._stop(loaded)
        if freed is not None:
            await self._memory_back(loaded, freed)
        async with self._changed:
            if self.loaded.get(loaded.key) is loaded:
                del self.loaded[loaded.key]
            self._changed.notify_all()
        self._emit(why, loaded)

    async def _memory_back(self, loaded: Loaded, free_before: int) -> None:
        """Wait (up to MEMORY_RECOVERY_SECONDS) until most of what an evicted runner held shows as free: a driver or
        the kernel can take a moment, and a load planned before then would evict another runner for nothing."""
        target = free_before + int((loaded.plan.size_vram or loaded.plan.size) * policy.MEMORY_RECOVERED)
        deadline = time.monotonic() + policy.MEMORY_RECOVERY_SECONDS
        while time.monotonic() < deadline:
            try:
                free = await asyncio.to_thread(self._free_memory, loaded.plan)
            except Exception:
                return
            if free is None or free >= target:
                return
            await asyncio.sleep(0.1)
        log.info("memory of %s not yet back %.1fs after it exited; going on", loaded.name,
                 policy.MEMORY_RECOVERY_SECONDS)

    async def _stop(self, loaded: Loaded) -> None:
        with contextlib.suppress(Exception):
            await loaded.client.close()
        await loaded.runner.stop()

    async def _drop(self, loaded: Loaded, why: str) -> None:
        """Forget a runner that failed to load, so the next request starts afresh."""
        async with self._changed:
            if self.loaded.get(loaded.key) is loaded:
                loaded.unloading = True
                del self.loaded[loaded.key]
            self._changed.notify_all()
        await self._stop(loaded)
        self._emit(why, loaded)

    def _abandon(self, loaded: Loaded, why: str) -> None:
        """A runner that stopped answering mid-request will not recover: SIGKILL it now (a stopped process
        ignores SIGTERM) and forget it, so the next request starts a fresh one instead of queueing on it."""
        if loaded.unloading:
            return
        log.warning("runner for %s is hung (%s); killing it", loaded.name, why)
        loaded.runner.kill_now()
        self._start_unload(loaded, "crashed")

    def _on_runner_exit(self, runner: RunnerProcess) -> None:
        for loaded in list(self.loaded.values()):
            # Before it was ready, a failure belongs to the request that is loading it (see use()).
            if loaded.runner is runner and not loaded.unloading and loaded.client.base_url:
                log.warning("runner for %s exited (status %s); it will be restarted on the next request",
                            loaded.name, runner.returncode)
                loaded.unloading = True
                if loaded.timer:
                    loaded.timer.cancel()
                asyncio.get_running_loop().create_task(self._reap_crashed(loaded))

    async def _reap_crashed(self, loaded: Loaded) -> None:
        with contextlib.suppress(Exception):
            await loaded.client.close()
        async with self._changed:
            if self.loaded.get(loaded.key) is loaded:
                del self.loaded[loaded.key]
            self._changed.notify_all()
        self._emit("crashed", loaded)

    def _emit(self, event: str, loaded: Loaded) -> None:
        for listener in self.listeners:
            try:
                listener(event, loaded)
            except Exception:  # a listener must not break scheduling
                log.exception("scheduler listener failed")


async def _relay(loaded: Loaded, progress: Callable[[Loaded, LoadReport], None]) -> None:
    """Each load report of the runner to `progress` (a listener's failure must not fail the load)."""
    async for report in loaded.runner.watch_load():
        try:
            progress(loaded, report)
        except Exception:
            log.exception("load progress listener failed")


def _insufficient(model: Model, need: int, free: int, residents: list[policy.Resident], *,
                  vram: bool) -> InsufficientMemory:
    kind = "GPU" if vram else "system"
    held = sum(r.held(vram) for r in residents)
    name = getattr(getattr(model, "name", None), "short", getattr(model, "name", "model"))
    others = f", {_gib(held)} more held by the other loaded models" if held else ""
    return InsufficientMemory(f"model '{name}' requires more {kind} memory ({_gib(need)}) than is available "
                              f"({_gib(free)} free{others})")


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _same_lineage(loaded: LoadPlan, plans: list[LoadPlan]) -> bool:
    """Whether a loaded runner is one of these plans' models started with other runner settings."""
    return any(p.lineage and loaded.lineage == p.lineage and loaded.key != p.key for p in plans)


def _same_weights(a: Model, b: Model) -> bool:
    """Whether two stored models run on the same weights and adapters (what a plan's key stands for)."""
    return (getattr(a, "model_path", None), tuple(getattr(a, "adapters", ()))) == \
        (getattr(b, "model_path", None), tuple(getattr(b, "adapters", ())))
