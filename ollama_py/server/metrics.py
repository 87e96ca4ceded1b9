"""Prometheus `GET /metrics`: what the gateway, its queue, its loaded models, their runners and the GPUs are doing.

Three sources, one registry per `Metrics` (tests build many apps, so nothing is global):

- Per request, fed by the access-log middleware once a request is over (server/access_log.py):
  `ollama_requests_total{endpoint,method,model,status}` (endpoint is the route pattern, never the raw path),
  `ollama_request_duration_seconds`, `ollama_time_to_first_token_seconds`, `ollama_requests_rejected_total`
  (503, 429 on /v1: the queue is full or the server is stopping), prompt/generated tokens, their eval seconds and a
  generation tokens/s histogram, all from the completion's final timings (nothing is parsed per token). These
  are plain numbers on the loop (server/series.py), copied into the exposition when a scrape asks.
- Scheduler events (`Scheduler.listeners`): loads, load durations and failures, unloads, evictions, runner
  crashes and restarts (a load that follows a crash of the same model).
- At scrape time: queue depth, each loaded model's state, queued/active requests, slots, RAM/VRAM and context;
  per-GPU memory when NVML sees a GPU; and each ready runner's own `/metrics` (llama-server `--metrics`),
  fetched concurrently and re-labelled with `model` and `runner` (completion|embedding) under llama.cpp's names
  (`llamacpp:prompt_tokens_total{model="smollm2:135m",runner="completion"}`), so llama.cpp dashboards still work;
  and template rendering: `ollama_template_renders_total{where="inline"|"thread"}`,
  `ollama_template_inline_given_up_total`, `ollama_template_jobs{state="running"|"waiting"}`.

Labels stay bounded: `model` is only ever a name that resolved to a stored model ("" otherwise), and a deleted
model's series go with it (`forget_model`). The text is rendered in a thread, not on the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector, disable_created_metrics
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.parser import text_string_to_metric_families

from ollama_py.errors import OllamaError
from ollama_py.estimate.gpus import GpuInfo, probe_nvidia
from ollama_py.server.appkeys import METRICS
from ollama_py.server.series import PlainCounter, PlainHistogram, PlainSeries

if TYPE_CHECKING:
    from ollama_py.scheduler.scheduler import Loaded, Scheduler
    from ollama_py.server.access_log import RequestStats

log = logging.getLogger(__name__)

metrics_routes = web.RouteTableDef()

RUNNER_SCRAPE_TIMEOUT = 2.0
# Always the classic text format, whatever the scraper's Accept header prefers: prometheus_client's OpenMetrics
# writer escapes the ':' of llama.cpp's sample names but not of their family names, which breaks them.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_STATES = ("loading", "ready", "stopping")
_TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_DURATION_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
_LOAD_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
_TPS_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0)

# A `_created` series per counter and histogram doubles what Prometheus stores and nothing here needs it.
disable_created_metrics()


def runner_kind(loaded: Loaded) -> str:
    return "embedding" if loaded.plan.spec.embedding else "completion"


def queue_counts(loaded: Loaded) -> tuple[int, int]:
    """(queued, active) for one runner: requests waiting for it (to finish loading, or for a slot: here or in
    its own queue, policy.runner_queue) and requests in its slots. While it loads, every request holding a
    reference on it is waiting."""
    if loaded.state == "loading":
        return loaded.refcount, 0
    queued = loaded.waiting + loaded.in_runner_queue
    return queued, max(loaded.refcount - queued, 0)


def relabel(text: str, labels: Mapping[str, str]) -> list[Metric]:
    """A runner's Prometheus text as metric families with `labels` added to every sample.

    llama-server declares a few non-monotonic values as counters without a `_total` suffix (n_tokens_max,
    n_busy_slots_per_decode); the parser would rename them `..._total`, so they are re-exposed as gauges under
    their own names. Unparsable text gives [] (the runner's series are then just missing from this scrape).
    """
    declared = {parts[2] for line in text.splitlines()
                if line.startswith("# TYPE ") and len(parts := line.split()) >= 4}
    try:
        families = list(text_string_to_metric_families(text))
    except ValueError as e:
        log.debug("unparsable runner metrics: %s", e)
        return []
    out: list[Metric] = []
    for fam in families:
        typ, rename = fam.type, False
        if typ == "counter" and f"{fam.name}_total" not in declared:
            typ, rename = "gauge", True
        metric = Metric(fam.name, fam.documentation, typ, fam.unit)
        for sample in fam.samples:
            metric.add_sample(fam.name if rename else sample.name, {**sample.labels, **labels}, sample.value,
                              sample.timestamp)
        out.append(metric)
    return out


def nvidia_gpus(env: Mapping[str, str]) -> Callable[[], list[GpuInfo]]:
    """The default GPU probe: NVIDIA GPUs through NVML (Metal's unified memory has no free figure to report)."""
    return lambda: probe_nvidia(env)[0]


class _LiveState:
    """The scrape-time collector: the scheduler as it is now, plus what Metrics.refresh() just fetched."""

    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._snapshot: list[Metric] = []

    def describe(self) -> list[Metric]:
        return []  # nothing to check for clashes at registration; collecting needs the scheduler

    def take(self) -> None:
        """On the event loop, where the scheduler lives: its state now, for the render thread to collect."""
        m = self._metrics
        out: list[Metric] = list(self._scheduler(m.scheduler)) if m.scheduler is not None else []
        out += _merge(m.runner_families)
        out += _templates()
        if m.gpus:
            out += _gpus(m.gpus)
        self._snapshot = out

    def collect(self) -> Iterator[Metric]:
        yield from self._snapshot

    @staticmethod
    def _scheduler(sched: Scheduler) -> Iterator[Metric]:
        depth = GaugeMetricFamily("ollama_queue_depth",
                                  "Requests waiting for a model to load or for a free slot, over all models")
        depth.add_metric([], sched.pending)
        capacity = GaugeMetricFamily("ollama_queue_capacity",
                                     "OLLAMA_MAX_QUEUE: more waiting requests get 503 (429 on /v1)")
        capacity.add_metric([], sched.settings.max_queue)
        loaded_count = GaugeMetricFamily("ollama_models_loaded", "Runners loaded or loading")
        loaded_count.add_metric([], len(sched.loaded))
        labels = ["model", "runner"]
        state = GaugeMetricFamily("ollama_model_state", "1 for the state each loaded model is in",
                                  labels=[*labels, "state"])
        queued = GaugeMetricFamily("ollama_model_queued_requests",
                                   "Requests waiting for this model (to load, or for a free slot)", labels=labels)
        active = GaugeMetricFamily("ollama_model_active_requests", "Requests this model is serving now",
                                   labels=labels)
        slots = GaugeMetricFamily("ollama_model_slots", "Parallel slots of this model's runner", labels=labels)
        memory = GaugeMetricFamily("ollama_model_memory_bytes", "Estimated memory of a loaded model, by kind",
                                   labels=[*labels, "memory"])
        context = GaugeMetricFamily("ollama_model_context_length", "Context length per slot", labels=labels)
        cache_ram = GaugeMetricFamily("ollama_model_prompt_cache_bytes",
                                      "Cap of the runner's host prompt cache (--cache-ram), part of its RAM",
                                      labels=labels)
        allocated = GaugeMetricFamily("ollama_model_allocated_bytes",
                                      "What llama-server reported allocating after the load, by device (CPU, CUDA0, "
                                      "Vulkan0, RPC0...); compare with ollama_model_memory_bytes, the estimate",
                                      labels=[*labels, "device"])
        seen: set[tuple[str, str]] = set()
        for loaded in list(sched.loaded.values()):
            key = (loaded.name, runner_kind(loaded))
            if key in seen:  # two runners under one name (a reload in progress): one series each, the first
                continue
            seen.add(key)
            now = loaded.state
            for s in _STATES:
                state.add_metric([*key, s], 1 if s == now else 0)
            waiting, serving = queue_counts(loaded)
            queued.add_metric(list(key), waiting)
            active.add_metric(list(key), serving)
            slots.add_metric(list(key), loaded.plan.spec.parallel)
            memory.add_metric([*key, "vram"], loaded.plan.size_vram)
            memory.add_metric([*key, "ram"], max(loaded.plan.size - loaded.plan.size_vram, 0))
            context.add_metric(list(key), loaded.plan.context_length)
            cache_ram.add_metric(list(key), loaded.plan.cache_ram)
            for device, size in loaded.devices.items():
                allocated.add_metric([*key, device], size)
        yield from (depth, capacity, loaded_count, state, queued, active, slots, memory, context, allocated,
                    cache_ram)


def _templates() -> Iterator[Metric]:
    """Template rendering (server/rendering.py's fair pool): a growing `thread` count beside `inline` means renders
    take the thread hop; a standing `waiting` means slow templates hold the threads."""
    from ollama_py.server.rendering import pool_stats  # noqa: PLC0415 - jinja2 only once a scrape asks

    stats = pool_stats()
    renders = CounterMetricFamily("ollama_template_renders", "Template jobs (parse, render) by where they ran: "
                                  "inline on the event loop (a template known to be cheap) or in the template "
                                  "threads", labels=["where"])
    renders.add_metric(["inline"], stats["inline"])
    renders.add_metric(["thread"], stats["thread"])
    given_up = CounterMetricFamily("ollama_template_inline_given_up", "Inline renders that passed their time limit "
                                   "(or failed) and went to the threads")
    given_up.add_metric([], stats["given_up"])
    jobs = GaugeMetricFamily("ollama_template_jobs", "Template jobs in the threads now, running or waiting for one",
                             labels=["state"])
    jobs.add_metric(["running"], stats["running"])
    jobs.add_metric(["waiting"], stats["waiting"])
    yield from (renders, given_up, jobs)


def _merge(per_runner: Iterable[list[Metric]]) -> Iterator[Metric]:
    """One family per name over all runners (a name twice in one exposition is invalid)."""
    merged: dict[str, Metric] = {}
    for families in per_runner:
        for fam in families:
            into = merged.setdefault(fam.name, Metric(fam.name, fam.documentation, fam.type, fam.unit))
            if into.type == fam.type:
                into.samples.extend(fam.samples)
    yield from merged.values()


def _gpus(gpus: list[GpuInfo]) -> Iterator[Metric]:
    labels = ["gpu", "uuid", "name"]
    total = GaugeMetricFamily("ollama_gpu_memory_total_bytes", "GPU memory", labels=labels)
    free = GaugeMetricFamily("ollama_gpu_memory_free_bytes", "GPU memory free (all processes)", labels=labels)
    for gpu in gpus:
        values = [str(gpu.index), gpu.uuid, gpu.name]
        total.add_metric(values, gpu.total)
        free.add_metric(values, gpu.free)
    yield from (total, free)


class Metrics:
    """The gateway's metrics. `attach(scheduler)` at start-up; the access-log middleware calls
    `observe_request`; `GET /metrics` calls `render`.

    gpu_probe: returns the GPUs now (a test passes a fixed list); None = NVML via the environment at
    construction. A probe that finds none, or fails, is not asked again: GPUs do not appear at run time.
    """

    def __init__(self, *, gpu_probe: Callable[[], list[GpuInfo]] | None = None,
                 scrape_timeout: float = RUNNER_SCRAPE_TIMEOUT) -> None:
        self.registry = CollectorRegistry()
        self.scheduler: Scheduler | None = None
        self.runner_families: list[list[Metric]] = []
        self.gpus: list[GpuInfo] = []
        self._gpu_probe: Callable[[], list[GpuInfo]] | None = (
            gpu_probe if gpu_probe is not None else nvidia_gpus(dict(os.environ)))
        self._scrape_timeout = scrape_timeout
        self._crashed: set[str] = set()
        self._deleted: set[str] = set()  # deleted models: their runners' last events (unloaded...) are not counted
        # Per model name, every (metric, label values) it has a series under: dropped when the model is deleted.
        self._series: dict[str, set[tuple[Any, tuple[str, ...]]]] = {}
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}  # (metric, label values) -> its series
        self._render_lock = asyncio.Lock()
        r = self.registry
        # What every request updates: plain numbers on the loop (server/series.py), written out at scrape time.
        plain = self._plain = PlainSeries()
        self.requests = plain.add(PlainCounter("ollama_requests", "HTTP requests by route, model and status",
                                               ["endpoint", "method", "model", "status"]))
        self.request_duration = plain.add(PlainHistogram("ollama_request_duration_seconds",
                                                         "Time from request to last byte", ["endpoint", "model"],
                                                         _DURATION_BUCKETS))
        self.ttft = plain.add(PlainHistogram(
            "ollama_time_to_first_token_seconds",
            "Time from request to the first generated token (queueing and loading included)", ["model"],
            _TTFT_BUCKETS))
        self.rejected = plain.add(PlainCounter("ollama_requests_rejected",
                                               "Requests refused with 503 or 429 (queue full, stopping)",
                                               ["endpoint", "model"]))
        self.prompt_tokens = plain.add(PlainCounter("ollama_prompt_tokens", "Prompt tokens of finished completions",
                                                    ["model"]))
        self.generated_tokens = plain.add(PlainCounter("ollama_generated_tokens",
                                                       "Tokens generated by finished completions", ["model"]))
        self.prompt_seconds = plain.add(PlainCounter("ollama_prompt_eval_seconds",
                                                     "Time the runners spent on prompts", ["model"]))
        self.eval_seconds = plain.add(PlainCounter("ollama_eval_seconds", "Time the runners spent generating",
                                                   ["model"]))
        self.tokens_per_second = plain.add(PlainHistogram("ollama_generation_tokens_per_second",
                                                          "Generation speed of each finished completion", ["model"],
                                                          _TPS_BUCKETS))
        r.register(plain)
        self.loads = Counter("ollama_model_loads", "Runners started and ready", ["model"], registry=r)
        self.load_failures = Counter("ollama_model_load_failures", "Runners that failed to load", ["model"],
                                     registry=r)
        self.load_duration = Histogram("ollama_model_load_duration_seconds", "Time from runner start to ready",
                                       ["model"], buckets=_LOAD_BUCKETS, registry=r)
        self.unloads = Counter("ollama_model_unloads", "Runners stopped on keep-alive expiry or request",
                               ["model"], registry=r)
        self.evictions = Counter("ollama_model_evictions", "Runners stopped to make room for another model",
                                 ["model"], registry=r)
        self.crashes = Counter("ollama_runner_crashes", "Runners that exited on their own after loading",
                               ["model"], registry=r)
        self.restarts = Counter("ollama_runner_restarts", "Loads of a model whose previous runner crashed",
                                ["model"], registry=r)
        ProcessCollector(registry=r)
        self._live = _LiveState(self)
        r.register(self._live)

    # -- wiring ----------------------------------------------------------------------------------------------
    def attach(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        scheduler.listeners.append(self.on_scheduler_event)

    def _of(self, metric: Any, model: str, *values: str) -> Any:
        """metric.labels(*values), a series of `model`'s (forget_model drops it), kept here once made: one dict
        look-up a series (a finished request updates up to nine)."""
        key = (metric, values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
            if model:
                self._series.setdefault(model, set()).add(key)
        return child

    def forget_model(self, name: str) -> None:
        """Drop every series labelled with this model (it was deleted): /metrics lists what exists."""
        for metric, values in self._series.pop(name, ()):
            self._children.pop((metric, values), None)
            with contextlib.suppress(KeyError):
                metric.remove(*values)
        self._crashed.discard(name)
        self._deleted.add(name)

    def on_scheduler_event(self, event: str, loaded: Loaded) -> None:
        name = loaded.name
        if event == "loaded":
            self._deleted.discard(name)  # created again under that name
        elif name in self._deleted:
            return  # the runner of a deleted model stopping: its series are gone and stay gone
        if event == "loaded":
            self._of(self.loads, name, name).inc()
            self._of(self.load_duration, name, name).observe(loaded.runner.load_duration)
            if name in self._crashed:
                self._crashed.discard(name)
                self._of(self.restarts, name, name).inc()
        elif event == "failed":
            self._of(self.load_failures, name, name).inc()
        elif event == "unloaded":
            self._of(self.unloads, name, name).inc()
        elif event == "evicted":
            self._of(self.evictions, name, name).inc()
        elif event == "crashed":
            self._of(self.crashes, name, name).inc()
            self._crashed.add(name)

    def observe_request(self, *, endpoint: str, method: str, status: int, stats: RequestStats,
                        duration: float) -> None:
        model = stats.model
        if endpoint == "/api/delete" and status == 200:
            model = ""  # it is gone: counting the delete under its name would bring its series back
        self._of(self.requests, model, endpoint, method, model, str(status)).inc()
        self._of(self.request_duration, model, endpoint, model).observe(duration)
        if status in (429, 503):  # a full queue: 429 on /v1, 503 on /api (server/errors.py)
            self._of(self.rejected, model, endpoint, model).inc()
        if stats.ttft is not None:
            self._of(self.ttft, model, model).observe(stats.ttft)
        if stats.eval_tokens is not None:
            self._of(self.prompt_tokens, model, model).inc(stats.prompt_tokens or 0)
            self._of(self.generated_tokens, model, model).inc(stats.eval_tokens)
            self._of(self.prompt_seconds, model, model).inc(stats.prompt_eval_ns / 1e9)
            self._of(self.eval_seconds, model, model).inc(stats.eval_ns / 1e9)
            if stats.eval_ns > 0 and stats.eval_tokens > 0:
                self._of(self.tokens_per_second, model, model).observe(stats.eval_tokens / (stats.eval_ns / 1e9))

    # -- scraping --------------------------------------------------------------------------------------------
    async def refresh(self) -> None:
        """Fetch what only a scrape needs: every ready runner's metrics and the GPUs' memory."""
        sched = self.scheduler
        ready = [lo for lo in sched.loaded.values() if lo.state == "ready" and lo.client.base_url] if sched else []
        runner_results, gpus = await asyncio.gather(
            asyncio.gather(*(self._scrape_runner(lo) for lo in ready)), self._probe_gpus())
        self.runner_families = list(runner_results)
        self.gpus = gpus

    async def _scrape_runner(self, loaded: Loaded) -> list[Metric]:
        labels = {"model": loaded.name, "runner": runner_kind(loaded)}
        up = GaugeMetricFamily("ollama_runner_metrics_up", "1 when the runner's own /metrics answered this scrape",
                               labels=list(labels))
        families: list[Metric] = []
        try:
            if loaded.unloading:  # its HTTP session is being closed; asking would open a new one
                raise ConnectionError("runner is stopping")
            async with asyncio.timeout(self._scrape_timeout):
                text = await loaded.client.get_text("/metrics")
            families = relabel(text, labels)
        except (OSError, TimeoutError, aiohttp.ClientError, OllamaError, RuntimeError) as e:
            log.debug("runner metrics of %s unavailable: %s", loaded.name, e)
        up.add_metric(list(labels.values()), 1 if families else 0)
        return [up, *families]

    async def _probe_gpus(self) -> list[GpuInfo]:
        probe = self._gpu_probe
        if probe is None:
            return []
        try:
            gpus = await asyncio.to_thread(probe)
        except Exception as e:  # a broken driver must not break /metrics
            log.debug("GPU probe failed, not asking again: %s", e)
            gpus = []
        if not gpus:
            self._gpu_probe = None
        return gpus

    async def render(self) -> bytes:
        """The exposition in Prometheus text format (CONTENT_TYPE). The scheduler's state is taken here, on the
        loop; the text (every series, the process's /proc figures) is written in a thread. One render at a time."""
        async with self._render_lock:
            await self.refresh()
            self._live.take()
            self._plain.snapshot()
            return await asyncio.to_thread(generate_latest, self.registry)


@metrics_routes.get("/metrics")
async def metrics_handler(request: web.Request) -> web.Response:
    return web.Response(body=await request.app[METRICS].render(), headers={"Content-Type": CONTENT_TYPE})
