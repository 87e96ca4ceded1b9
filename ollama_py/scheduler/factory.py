"""Wiring the real scheduler: probe the host once, pick the runner variant, plan loads from GGUF metadata.

`default_scheduler(settings)` is what `serve` uses; tests build a Scheduler with their own seams instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ollama_py.config import Settings
from ollama_py.errors import ModelNotFound, RunnerLoadError
from ollama_py.estimate import devices, memory
from ollama_py.estimate import gpus as gpu_probe
from ollama_py.runner import gguf_compat, rpc, shards, slot_cache, variants
from ollama_py.runner.argv import MEDIA_MARKER, LaunchSpec, build_argv
from ollama_py.runner.process import RunnerProcess, RunnerState, address_space_limit
from ollama_py.scheduler import model_settings, policy
from ollama_py.scheduler.scheduler import Loaded, LoadPlan, Scheduler

if TYPE_CHECKING:
    from ollama_py.store.models import Model

log = logging.getLogger(__name__)

_LOAD_KEYS = ("num_ctx", "num_batch", "num_gpu", "main_gpu", "use_mmap", "num_thread", "rpc_servers",
              "draft_num_predict", "draft_ngram")


@functools.lru_cache(maxsize=64)
def _shape(path: str, mtime_ns: int) -> memory.ModelShape:
    return memory.shape_from_gguf(Path(path))


def model_shape(path: Path) -> memory.ModelShape:
    return _shape(str(path), path.stat().st_mtime_ns)


def weights_shape(model: Model) -> memory.ModelShape:
    """(Blocking, cached.) The shape of a stored model's weights: its one GGUF, or all the shards of a split one."""
    files = getattr(model, "shards", ())
    if files:
        return memory.shape_from_shards(files)
    if model.model_path is None:
        raise FileNotFoundError(None)  # a manifest without weights: "missing a blob" (_shape_of_stored)
    return model_shape(model.model_path)


def _shape_of_stored(model: Model) -> memory.ModelShape:
    """The weights' shape; a weights, adapter or projector blob deleted from disk behind our back is a 404 that
    names the model (never a 500 quoting the server's blob path)."""
    try:
        for extra in (*model.adapters, *model.projectors):
            if not Path(extra).is_file():
                raise FileNotFoundError(extra)
        return weights_shape(model)
    except FileNotFoundError as e:
        blob = Path(str(e.filename or "")).name or "a blob"
        name = model.name.short
        raise ModelNotFound(name, f"model '{name}' is missing {blob} from the store: pull or create it again") \
            from None


def plan_load(settings: Settings, gpus: list[gpu_probe.GpuInfo], system_free: int, model: Model,
              options: dict[str, Any], embedding: bool,
              workers_free: Callable[[tuple[str, ...]], dict[str, int]] = lambda servers: {},
              runner: model_settings.RunnerMemory | None = None) -> LoadPlan:
    """How to load `model` for a request with these options: context, slots, GPU layers, memory.

    Slots: OLLAMA_NUM_PARALLEL, or 4 where a load with 4 fits in free memory, else 1 (policy.choose_parallel);
    each slot gets the full num_ctx, in one unified KV cache (runner/argv.build_argv).

    workers_free(servers) is the free memory of each of those RPC workers that answered ({endpoint: bytes}).
    `runner`: what the model's runner flags change (model_settings.runner_memory): only the GPUs its --device
    names count, experts of --n-cpu-moe stay in host memory, -ctk/-ctv size the KV cache."""
    runner = runner or model_settings.RunnerMemory()
    gpus = devices.pinned_gpus(gpus, runner.devices)
    shape = _shape_of_stored(model)
    assert model.model_path is not None  # else _shape_of_stored raised ModelNotFound
    layout = gguf_compat.ollama_layout(getattr(model, "info", None))
    if layout.text_only:  # its encoder stays out of the copy the runner reads
        shape = dataclasses.replace(shape, projector_bytes=0)
    num_ctx = int(options.get("num_ctx") or settings.context_length)
    num_ctx = max(num_ctx, 4)
    if shape.context_length:
        num_ctx = min(num_ctx, shape.context_length)
    num_batch = options.get("num_batch")
    if embedding:
        num_batch = num_ctx
    num_gpu = int(options.get("num_gpu", -1) if options.get("num_gpu") is not None else -1)
    kv_type = runner.kv_type_k or settings.kv_cache_type or "f16"
    kv_type_v = runner.kv_type_v or settings.kv_cache_type or "f16"

    def load_with(slots: int) -> tuple[memory.Estimate, memory.Placement]:
        est = memory.estimate(shape, num_ctx=num_ctx, num_parallel=slots, num_batch=num_batch or 512,
                              kv_type=kv_type, kv_type_v=kv_type_v, n_cpu_moe=runner.n_cpu_moe,
                              kv_unified=slots > 1,  # as build_argv starts it
                              # unset means llama-server's "auto", which turns flash attention on where supported
                              flash_attn=settings.flash_attention != "off")
        return est, memory.place(est, gpus, num_gpu=num_gpu, main_gpu=options.get("main_gpu"),
                                 spread=settings.sched_spread, overhead=settings.gpu_overhead,
                                 system_free=system_free)

    def prompt_cache(est: memory.Estimate) -> int:
        return memory.prompt_cache_bytes(settings.cache_ram, est.kv, embedding=embedding)

    def fits(slots: int) -> bool:
        """All of it in free memory: every layer on the GPUs where there are GPUs to use, else in free RAM."""
        est, placement = load_with(slots)
        if gpus and num_gpu != 0:
            return bool(placement.size_vram) and placement.n_gpu_layers >= shape.block_count + 1 and placement.fits
        return placement.size + prompt_cache(est) <= system_free

    parallel = policy.choose_parallel(settings.num_parallel, embedding=embedding, architecture=shape.architecture,
                                      fits=fits)
    est, placement = load_with(parallel)
    rpc_servers = rpc.workers_for(options.get("rpc_servers"), settings.rpc_servers)  # Modelfile PARAMETER
    n_gpu_layers = placement.n_gpu_layers
    size, size_vram = placement.size, placement.size_vram
    vram_need = sum(placement.gpu_bytes) if size_vram else 0
    tensor_split = tuple(placement.tensor_split or ())
    if rpc_servers:
        workers = workers_free(rpc_servers)
        if not gpus and len(workers) == len(rpc_servers):
            # RPC workers are devices to llama.cpp (listed first): place layers on them like on GPUs, spread
            # by free memory, and keep on this machine what does not fit there.
            rpc_devices = [gpu_probe.GpuInfo(i, endpoint, f"RPC{i}", "rpc", workers[endpoint], workers[endpoint], "",
                                             "") for i, endpoint in enumerate(rpc_servers)]
            on_workers = memory.place(est, rpc_devices, num_gpu=num_gpu, spread=True, system_free=system_free)
            n_gpu_layers, size, size_vram, vram_need = on_workers.n_gpu_layers, on_workers.host_bytes, 0, 0
            tensor_split = tuple(on_workers.tensor_split or ())
        elif num_gpu < 0:
            # Memory of a worker unknown, or local GPUs too: offload every layer and let llama.cpp split them
            # over all devices by their free memory; the workers take what they report off this machine.
            n_gpu_layers = shape.block_count + 1
            size = max(size - sum(workers.values()), 0)
    cache_ram = prompt_cache(est)  # host memory, whatever the placement: part of the size, never of size_vram
    size += cache_ram
    # a reranker's embedding runner is a rerank runner: the only kind its model has (Model.capabilities)
    rerank = embedding and "rerank" in getattr(model, "capabilities", ())
    draft = None if embedding else getattr(model, "draft_path", None)
    if draft is not None:  # the draft's weights go where the main model's layers go (speculation_args)
        draft_bytes = draft.stat().st_size
        size += draft_bytes
        if size_vram and n_gpu_layers != 0:
            size_vram += draft_bytes
            vram_need += draft_bytes
    if layout.overrides:
        log.info("model %s is an Ollama-published GGUF: read with --override-kv %s", getattr(model, "name", ""),
                 " ".join(layout.overrides))
    spec = LaunchSpec(
        model=model.model_path,
        shards=tuple(getattr(model, "shards", ())),
        num_ctx=num_ctx,
        parallel=parallel,
        num_batch=num_batch,
        n_gpu_layers=n_gpu_layers,
        num_thread=options.get("num_thread") or None,
        flash_attention=settings.flash_attention,
        kv_cache_type=settings.kv_cache_type,
        adapters=tuple(model.adapters),
        projectors=tuple(model.projectors),
        embedding=embedding,
        rerank=rerank,
        use_mmap=options.get("use_mmap"),
        main_gpu=placement.main_gpu if len(gpus) > 1 else None,
        tensor_split=tensor_split,
        rpc_servers=rpc_servers,
        draft_model=draft,
        draft_ngram=bool(options.get("draft_ngram")) and not embedding,
        draft_max=options.get("draft_num_predict") or None,
        cache_ram_mib=cache_ram // memory.MiB,
        kv_overrides=layout.overrides,
        text_only_copy=(settings.data_dir / gguf_compat.TEXT_ONLY_DIR / f"{model.model_path.name}.gguf"
                        if layout.text_only and not getattr(model, "shards", ()) else None),
    )
    # one runner per weights, adapters, projectors and draft: two models on the same weights with another
    # projector (vision, audio) or none are two runners, each started with its own --mmproj
    key = "|".join([str(model.model_path), *map(str, model.adapters), *(f"mmproj={p}" for p in model.projectors),
                    *([f"draft={draft}"] if draft else []), "rerank" if rerank else "embed" if embedding else "gen"])
    load_options = {k: options.get(k) for k in _LOAD_KEYS if k != "num_ctx"}
    load_options["num_ctx"] = num_ctx
    return LoadPlan(key=key, spec=spec, load_options=load_options, size=size, cache_ram=cache_ram,
                    size_vram=size_vram, vram_need=vram_need, vram_reserve=placement.reserve if size_vram else 0,
                    context_length=num_ctx, lineage=f"{getattr(model, 'name', '')}|{key}",
                    gpus=None if runner.devices is None else tuple(g.uuid for g in gpus), load_note=layout.note)


class Planner:
    """The real scheduler's plan seam: plan_load with the model's config-file settings (`models(model)`, None for
    none), each plan remembered so that the next request for the same runner does not estimate it again.

    A plan depends on the model (name and manifest digest: a model created again under its name is a new one),
    its config-file settings as they are now (a reload that changes them plans anew), the request's load options
    (_LOAD_KEYS: plan_load is given only those, so no other option can change a plan) and the RPC workers' free
    memory; the GPUs and free memory are the ones probed at start (the scheduler asks for free memory itself, per
    load). A remembered plan still checks that the model's blobs are on disk (a stat, as plan_load does)."""

    LIMIT = 256  # plans remembered; past it the oldest goes

    def __init__(self, settings: Settings, gpus: list[gpu_probe.GpuInfo], system_free: int,
                 workers_free: Callable[[tuple[str, ...]], Awaitable[dict[str, int]]],
                 models: Callable[[Model], model_settings.ModelSettings] | None = None) -> None:
        self._settings, self._gpus, self._system_free = settings, gpus, system_free
        self._workers_free, self._models = workers_free, models
        self._plans: dict[tuple[Any, ...], tuple[model_settings.ModelSettings | None, LoadPlan]] = {}

    async def __call__(self, model: Model, options: dict[str, Any], embedding: bool) -> LoadPlan:
        settings = self._settings
        load = {k: options[k] for k in _LOAD_KEYS if options.get(k) is not None}
        servers = rpc.workers_for(load.get("rpc_servers"), settings.rpc_servers)
        free = await self._workers_free(servers) if servers else {}
        ms = self._models(model) if self._models is not None else None
        # (load's keys come in _LOAD_KEYS' order: its items are the same tuple for the same options)
        key = (str(model.name), model.digest, embedding, repr(tuple(load.items())), tuple(sorted(free.items())))
        known = self._plans.get(key)
        if known is not None and (known[0] is ms or known[0] == ms):
            _shape_of_stored(model)  # a blob deleted behind our back is still a 404 naming the model
            return known[1]
        if ms is None:
            plan = plan_load(settings, self._gpus, self._system_free, model, load, embedding, lambda servers: free)
        else:
            plan = model_settings.plan_with_settings(
                ms, settings, load, lambda s, o, r: plan_load(s, self._gpus, self._system_free, model, o, embedding,
                                                              lambda servers: free, r))
        self._plans.pop(key, None)
        self._plans[key] = (ms, plan)
        if len(self._plans) > self.LIMIT:
            del self._plans[next(iter(self._plans))]
        return plan


GPU_VARIANTS = frozenset({"cuda", "vulkan", "metal"})


class VariantRunner(RunnerProcess):
    """A runner that falls back to the next built variant when one dies of SIGILL on this CPU, or when a GPU
    variant fails to start at all (a driver that crashes or refuses the device): the model then loads on the
    CPU build, without offload, rather than not at all."""

    def __init__(self, spec: LaunchSpec, candidates: list[tuple[str, Path]], bad: variants.BadVariants,
                 shard_links: Path | None = None, **kwargs: Any) -> None:
        self.spec = spec
        self.candidates = list(candidates)
        self._bad = bad
        self._shard_links = shard_links  # where a split GGUF's shards are linked under llama.cpp's names
        self._copying = asyncio.Lock()  # the model's text-only copy (LaunchSpec.text_only_copy) being written
        super().__init__(lambda port: build_argv(self.spec, self.candidates[0][1], port), **kwargs)
        self._base_env = self._env

    @property
    def variant(self) -> str:
        return self.candidates[0][0]

    async def ensure_ready(self) -> None:
        if self.state == RunnerState.READY:  # (started, and its shards linked, already)
            return
        if self.spec.rpc_servers and self.state == RunnerState.STOPPED and self.pid is None:
            await self._leave_out_unreachable_workers()
        if self.spec.shards and self._shard_links is not None and self.spec.model == self.spec.shards[0]:
            first = await asyncio.to_thread(shards.link_shards, self.spec.shards, self._shard_links)
            self.spec = dataclasses.replace(self.spec, model=first)
        if self.spec.text_only_copy is not None:
            async with self._copying:  # one copy at a time, whoever waits for the start
                await asyncio.to_thread(ensure_model_copy, self.spec.model, self.spec.text_only_copy, self.name)
        while True:
            try:
                return await super().ensure_ready()
            except RunnerLoadError as e:
                if len(self.candidates) < 2:
                    raise
                failed = self.candidates[0][0]
                if variants.is_sigill(self.returncode):
                    reason = "llama-server died with SIGILL (illegal instruction) on this CPU"
                    self._bad.mark(failed, reason)
                elif failed in GPU_VARIANTS and self.candidates[1][0] not in GPU_VARIANTS:
                    # not remembered as bad: the next load tries the GPU again (a model error fails both ways)
                    reason = f"it failed to start ({e})"
                    self.spec = dataclasses.replace(self.spec, n_gpu_layers=0, tensor_split=(), main_gpu=None)
                else:
                    raise
                self.candidates.pop(0)
                log.warning("runner variant %s: %s; falling back to %s", failed, reason, self.variant)
                self.reset()

    async def _spawn(self) -> None:
        # each variant with its own libraries (a cuda runner's libcudart and cuBLAS: build-info's library_path),
        # read as each start begins: a ready runner's requests read no file
        self._env = variants.runner_env(self.candidates[0][1], os.environ if self._base_env is None
                                        else self._base_env)
        await super()._spawn()

    async def _leave_out_unreachable_workers(self) -> None:
        """Before the first start: load without the RPC workers that do not answer (all gone: fail)."""
        up, down = await rpc.reachable_async(self.spec.rpc_servers)
        if down and not up:
            raise RunnerLoadError(f"no RPC worker is reachable: {', '.join(down)}")
        if down:
            log.warning("RPC workers unreachable, loading %s without them: %s", self.name, ", ".join(down))
            # a split planned for the workers that answered no longer applies
            self.spec = dataclasses.replace(self.spec, rpc_servers=tuple(up), tensor_split=())


def ensure_model_copy(model: Path, copy: Path, name: str) -> None:
    """(Blocking.) The copy an Ollama-layout model is read from (runner/gguf_compat.py: text-only, translated),
    unless it is there (a copy goes with its model: server/blob_prune.sweep_text_only)."""
    if copy.exists():
        return
    log.info("runner %s: writing a copy of its Ollama-layout GGUF that llama.cpp reads to %s", name, copy)
    try:
        gguf_compat.write_text_only(model, copy)
    except (OSError, ValueError) as e:
        raise RunnerLoadError(f"cannot write a copy of the model that llama.cpp reads to {copy.parent}: "
                              f"{getattr(e, 'strerror', None) or e}") from None


def runner_factory(settings: Settings, env: dict[str, str] | None = None,
                   command_prefix: tuple[str, ...] = (),
                   host: variants.HostInfo | None = None) -> Callable[..., RunnerProcess]:
    """Runner factory for the Scheduler: picks the variant order once per runner (bad marks are re-read)."""
    if host is None:
        host = variants.probe_host(runners_dir=settings.runners_dir, env=env if env is not None else os.environ)
    # ggml prints a gdb backtrace when it aborts: slow, and noise in the error a user sees.
    env = {**(env if env is not None else os.environ), "GGML_NO_BACKTRACE": "1", "LLAMA_MEDIA_MARKER": MEDIA_MARKER}
    bad = variants.BadVariants(settings.data_dir / "bad-variants.json", settings.runners_dir)
    saved = prompt_cache_on_disk(settings)
    unsaved: list[Path] = []  # said once: the prompt cache's directory could not be made
    cores = physical_cores()

    def factory(plan: LoadPlan, name: str, on_exit: Callable[[RunnerProcess], None]) -> RunnerProcess:
        built = variants.built_variants(settings.runners_dir)
        order = variants.candidate_order(host, built, forced=settings.llm_library, bad=bad.load())
        candidates = [(v, built[v]) for v in order]
        spec, slots = plan.spec, None
        if saved is not None and not spec.embedding and candidates:
            try:  # blocking, but a mkdir (the factory runs on the loop, as it always has)
                directory = saved.directory(slot_cache.key_for(spec, candidates[0][0]))
            except OSError as e:  # a data directory serve cannot write: runners run, without the saved prompts
                if not unsaved:
                    log.warning("prompt cache on disk off: %s cannot be written (%s)", saved.root,
                                (e.strerror or str(e)).lower())
                unsaved.append(saved.root)
            else:
                spec = dataclasses.replace(spec, slot_save_path=directory)
                slots = slot_cache.RunnerSlots(saved, directory, spec.parallel)
        # CPU builds only: a GPU driver reserves address space far beyond what it uses
        limit = None
        on_cpu_build = bool(candidates) and candidates[0][0] in ("cpu", "cpu_avx2")
        if settings.runner_memory_limit and on_cpu_build and not plan.size_vram and not spec.rpc_servers:
            limit = address_space_limit(plan.size, cores)
        return VariantRunner(spec, candidates, bad, shard_links=settings.data_dir / "shards", name=name, env=env,
                             load_timeout=settings.load_timeout, on_exit=on_exit, slots=slots, memory_limit=limit)

    return factory


def prompt_cache_on_disk(settings: Settings) -> slot_cache.SlotCache | None:
    """Where runners save their slots at unload (OLLAMA_PY_PROMPT_CACHE_DISK MiB of it); None when that is 0."""
    if settings.prompt_cache_disk <= 0:
        return None
    return slot_cache.SlotCache(settings.data_dir / "prompt-cache", settings.prompt_cache_disk * memory.MiB)


def forget_saved_slots(settings: Settings) -> Callable[[Model], None]:
    """The Scheduler's forget_slots seam: remove a deleted model's saved slots (blocking)."""
    saved = prompt_cache_on_disk(settings)

    def forget(model: Model) -> None:
        if saved is not None and model.model_path is not None:
            saved.forget(model.model_path)

    return forget


def physical_cores() -> int:
    """The physical cores this process may run on (its CPU affinity; hyperthreads of one core count once), as
    Ollama gives one runner; os.cpu_count() where the topology cannot be read."""
    try:
        cpus = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        return os.cpu_count() or 1
    cores = set()
    for cpu in cpus:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(((topology / "physical_package_id").read_text().strip(),
                       (topology / "core_id").read_text().strip()))
        except OSError:
            cores.add(("cpu", str(cpu)))
    return max(len(cores), 1)


def runner_gpus(variant: str, binary: Path | None, env: dict[str, str]) -> list[gpu_probe.GpuInfo]:
    """The GPUs the chosen runner variant will place layers on.

    vulkan: the devices its own `--list-devices` shows (the one view that knows which devices ggml-vulkan
    accepts, and how it names and counts them). cuda/metal: NVML or Metal, which also refresh free memory cheaply,
    else the runner's own list. CPU builds: none."""
    if variant in ("cpu", "cpu_avx2") or binary is None:
        return []
    if variant != "vulkan":
        found = gpu_probe.probe_gpus(env)
        if found:
            return found
    return devices.runner_gpus(devices.list_devices(binary, variants.runner_env(binary, env)), variant)


def chosen_gpus(variant: str, binary: Path | None, env: dict[str, str], *, forced: bool) -> list[gpu_probe.GpuInfo]:
    """runner_gpus, once at start-up: a GPU variant that sees no device (forced with OLLAMA_LLM_LIBRARY, or its
    device gone) is worth a warning that says what was looked for, since every model then runs on the CPU."""
    gpus = runner_gpus(variant, binary, env)
    if not gpus and variant in GPU_VARIANTS and binary is not None:
        log.warning("%s", variants.no_device_warning(variant, forced=forced))
    return gpus


def default_scheduler(settings: Settings,
                      models: Callable[[Model], model_settings.ModelSettings] | None = None,
                      may_stay: Callable[[Model, Model], bool] = lambda loading, loaded: True) -> Scheduler:
    """The real scheduler. `models(model)` is a model's settings from the config file (its runner settings,
    keep-alive): asked at every plan, so a reloaded file applies to the next load; `may_stay` its exclusive
    groups (Scheduler's seam)."""
    env = dict(os.environ)
    system = gpu_probe.probe_system_memory()
    built = variants.built_variants(settings.runners_dir)
    host = variants.probe_host(runners_dir=settings.runners_dir, env=env)
    variant = ""
    try:
        order = variants.candidate_order(host, built, forced=settings.llm_library,
                                         bad=variants.BadVariants(settings.data_dir / "bad-variants.json",
                                                                  settings.runners_dir).load())
        variant = order[0]
    except Exception as e:  # serve still starts; loading a model will say what is missing
        log.warning("%s", e)
    gpus = (chosen_gpus(variant, built.get(variant), env, forced=variant == settings.llm_library) if variant
            else gpu_probe.probe_gpus(env))
    if variant:
        info = variants.read_build_info(settings.runners_dir / variant)
        log.info("runner variant %s (%s), devices: %s", variant, info.get("llama_cpp_version") or "unknown version",
                 ", ".join(f"{g.name} ({g.free >> 20} MiB free)" for g in gpus) or "CPU only")

    # Device memory our own runners hold (their buffer report, else the plan), by runner key. Not every device
    # reports live usage (a Vulkan driver without VK_EXT_memory_budget says free == total for ever), so free
    # memory is never taken to be more than what was free at start less what we placed there since.
    held: dict[str, int] = {}
    free_at_start = sum(max(g.free - settings.gpu_overhead, 0) for g in gpus)

    def track_device_memory(event: str, loaded: Loaded) -> None:
        if event == "loaded":
            # the runner's context (plan.vram_reserve) is its own too, beyond its buffers
            held[loaded.key] = gpu_bytes(loaded) + loaded.plan.vram_reserve
        else:
            held.pop(loaded.key, None)

    def free_memory(plan: LoadPlan) -> int | None:
        """Free VRAM now (minus the reserved overhead) when the plan offloads, else available RAM. Blocking (a
        device probe): the scheduler calls it in a thread."""
        if plan.size_vram and gpus:
            now = {g.uuid: g for g in runner_gpus(variant, built.get(variant), env)}
            usable = [g for g in gpus if plan.gpus is None or g.uuid in plan.gpus]  # a pinned model's devices only
            live = sum(max(now.get(g.uuid, g).free - settings.gpu_overhead, 0) for g in usable)
            # what the new runner's own context will take there is not free for its buffers
            return max(min(live, free_at_start - sum(dict(held).values())) - plan.vram_reserve, 0)
        return gpu_probe.probe_system_memory().free

    workers = rpc.WorkerProbe(lambda: next(iter(variants.built_variants(settings.runners_dir).values()), None))

    scheduler = Scheduler(
        settings,
        plan=Planner(settings, gpus, system.free, workers.free, models),
        runner_factory=runner_factory(settings, host=host),
        free_memory=free_memory,
        free_host=(lambda: gpu_probe.probe_system_memory().free) if gpus else (lambda: None),
        gpu_count=len(gpus),
        default_keep_alive=(lambda model: models(model).keep_alive) if models is not None else (lambda model: None),
        may_stay=may_stay,
        cpu_cores=physical_cores(),
        forget_slots=forget_saved_slots(settings),
    )
    scheduler.listeners.append(record_actual_memory)
    scheduler.listeners.append(track_device_memory)  # after record_actual_memory: it reads what that one read
    return scheduler


def record_actual_memory(event: str, loaded: Loaded) -> None:
    """After a load: what llama-server really allocated (its buffer log lines), kept for /api/ps and compared
    with the estimate in the log."""
    if event != "loaded":
        return
    buffers = memory.parse_llama_server_buffers(loaded.runner.log_lines)
    devices = {dev: sum(v for k, v in kinds.items() if k in ("model", "kv", "compute", "output"))
               for dev, kinds in buffers.items() if dev != "layers"}
    if not devices:
        return
    total = sum(devices.values())
    vram = sum(v for dev, v in devices.items() if dev != "CPU" and not dev.startswith("RPC"))
    # the prompt cache is not among llama-server's buffers: it fills later, up to its cap, which /api/ps counts
    loaded.actual_size, loaded.actual_vram, loaded.devices = total + loaded.plan.cache_ram, vram, devices
    if vram and all_layers_on_gpus(buffers, loaded.plan, devices):
        # Ollama's rule: every layer offloaded is "100% GPU", size_vram == size. llama.cpp still keeps the token
        # embeddings (CPU_Mapped) and staging buffers (CUDA_Host) in host memory; `devices` keeps that real split.
        loaded.actual_vram = loaded.actual_size
    estimated = loaded.plan.size - loaded.plan.cache_ram
    error = (estimated - total) / total * 100 if total else 0.0
    log.info("memory of %s: estimated %.1f MiB, llama-server allocated %.1f MiB (%+.1f%%), %.1f MiB on GPUs%s",
             loaded.name, estimated / 2**20, total / 2**20, error, vram / 2**20,
             f", {loaded.plan.vram_reserve / 2**20:.0f} MiB more reserved there for the runner's own context"
             if loaded.plan.vram_reserve else "")


def all_layers_on_gpus(buffers: dict[str, dict[str, int]], plan: LoadPlan, devices: dict[str, int]) -> bool:
    """Whether llama-server offloaded every layer ("offloaded 31/31 layers to GPU") of a model the plan puts wholly
    on GPUs (not one whose --n-cpu-moe experts stay in host memory, nor one spread over RPC workers)."""
    layers = buffers.get("layers", {})
    return (bool(layers.get("total")) and layers.get("offloaded") == layers.get("total")
            and plan.size_vram >= plan.size - plan.cache_ram and not any(d.startswith("RPC") for d in devices))


def gpu_bytes(loaded: Loaded) -> int:
    """Device memory a runner's buffers hold: its GPU buffers as llama-server reported them, else the plan's."""
    if loaded.devices:
        return sum(v for dev, v in loaded.devices.items() if dev != "CPU" and not dev.startswith("RPC"))
    return loaded.plan.size_vram
