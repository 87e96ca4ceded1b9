"""GET /metrics, the per-request log line and /api/ps's queue, through the real app over the fake llama-server."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ollama_py.estimate.gpus import GpuInfo
from ollama_py.scheduler.factory import plan_load
from ollama_py.scheduler.scheduler import LoadPlan, Scheduler
from ollama_py.server.app import create_app
from ollama_py.server.appkeys import METRICS, SCHEDULER
from ollama_py.server.metrics import Metrics, relabel
from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import as_serve, create_tiny_model, fake_runner_factory, make_settings
from tests.prometheus_scrape import Scrape

MODEL = "tiny:latest"
GEN = {"endpoint": "/api/generate", "method": "POST", "model": MODEL}
TEST_GPU = GpuInfo(index=0, uuid="GPU-0f1e2d3c", name="Test GPU", library="cuda", total=8 << 30, free=6 << 30,
                   compute="8.9", driver="550.54")


async def scrape(client: Any) -> Scrape:
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return Scrape(await resp.text())


async def scrape_until(client: Any, ok: Callable[[Scrape], bool], what: str, timeout: float = 15.0) -> Scrape:
    """Scrape until `ok` holds (requests and runners move on their own time)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        got = await scrape(client)
        if ok(got):
            return got
        if loop.time() > deadline:
            raise AssertionError(f"never saw {what}; last scrape:\n{got.text}")
        await asyncio.sleep(0.02)


@pytest.fixture
def gateway(tmp_path: Path, tiny_gguf: Path, aiohttp_server: Any, aiohttp_client: Any) -> Callable[..., Any]:
    """Start the real app and scheduler over the fake runner; returns the test client.

    gpus: what the GPU probe finds (none by default); models: more models, each with its own weights (so its
    own runner); runner_metrics=False starts runners without --metrics; the rest are Settings overrides. The app
    is served with serve's aiohttp settings (a client that hangs up cancels its handler, as in `serve`).
    """

    async def start(fake_env: dict[str, str] | None = None, *, gpus: tuple[GpuInfo, ...] = (),
                    models: tuple[str, ...] = (), runner_metrics: bool = True,
                    **overrides: Any) -> Any:
        settings = make_settings(tmp_path, **overrides)
        create_tiny_model(settings, tiny_gguf)
        for i, name in enumerate(models):
            create_tiny_model(settings, write_tiny_gguf(tmp_path / f"{name}.gguf", blocks=3 + i), name=name)

        def plan(model: Any, options: dict[str, Any], embedding: bool) -> LoadPlan:
            p = plan_load(settings, [], 1 << 40, model, options, embedding)
            return p if runner_metrics else dataclasses.replace(p, spec=dataclasses.replace(p.spec, metrics=False))

        scheduler = Scheduler(settings, plan=plan, runner_factory=fake_runner_factory(settings, fake_env))
        app = create_app(settings, scheduler=scheduler)
        app[METRICS] = Metrics(gpu_probe=lambda: list(gpus))
        return await aiohttp_client(await aiohttp_server(app, **as_serve()))

    return start


async def generate(client: Any, model: str = "tiny", **extra: Any) -> dict[str, Any]:
    resp = await client.post("/api/generate", json={"model": model, "prompt": "hello there", "stream": False,
                                                    **extra})
    body = await resp.json()
    assert resp.status == 200, body
    return body


# -- the exposition ------------------------------------------------------------------------------------------------

async def test_metrics_before_any_request_show_an_empty_queue_and_no_model(gateway: Any) -> None:
    client = await gateway()
    got = await scrape(client)
    assert got.value("ollama_queue_depth") == 0
    assert got.value("ollama_queue_capacity") == 512
    assert got.value("ollama_models_loaded") == 0
    assert not any(s.name.startswith("llamacpp:") for s in got.samples)
    assert got.series("ollama_gpu_memory_total_bytes") == []


async def test_generate_moves_the_request_token_and_load_counters(gateway: Any) -> None:
    client = await gateway()
    first = await generate(client)
    after_one = await scrape(client)
    assert after_one.value("ollama_requests_total", **GEN, status="200") == 1
    assert after_one.value("ollama_request_duration_seconds_count", endpoint="/api/generate", model=MODEL) == 1
    assert after_one.value("ollama_time_to_first_token_seconds_count", model=MODEL) == 1
    assert after_one.value("ollama_prompt_tokens_total", model=MODEL) == first["prompt_eval_count"]
    assert after_one.value("ollama_generated_tokens_total", model=MODEL) == first["eval_count"]
    assert after_one.value("ollama_eval_seconds_total", model=MODEL) == pytest.approx(first["eval_duration"] / 1e9)
    assert after_one.value("ollama_generation_tokens_per_second_count", model=MODEL) == 1
    assert after_one.value("ollama_model_loads_total", model=MODEL) == 1
    assert after_one.value("ollama_model_load_duration_seconds_count", model=MODEL) == 1

    second = await generate(client, prompt="something else entirely")
    after_two = await scrape(client)
    assert after_two.value("ollama_requests_total", **GEN, status="200") == 2
    assert after_two.value("ollama_generated_tokens_total", model=MODEL) == first["eval_count"] + second["eval_count"]
    assert after_two.value("ollama_time_to_first_token_seconds_count", model=MODEL) == 2
    assert after_two.value("ollama_model_loads_total", model=MODEL) == 1  # the runner stayed loaded


async def test_runner_metrics_are_relabelled_with_the_model(gateway: Any) -> None:
    client = await gateway()
    body = await generate(client)
    got = await scrape(client)
    runner = {"model": MODEL, "runner": "completion"}
    assert got.value("ollama_runner_metrics_up", **runner) == 1
    # llama-server counts every decoded token, EOS included, exactly as Ollama's eval_count reports them
    assert got.value("llamacpp:tokens_predicted_total", **runner) == body["eval_count"]
    assert got.value("llamacpp:requests_processing", **runner) == 0
    assert "# TYPE llamacpp:n_tokens_max gauge" in got.text  # a counter without _total stays under its name


async def test_loaded_model_state_memory_and_slots(gateway: Any) -> None:
    client = await gateway(num_parallel=2)
    await generate(client)
    plan = next(iter(client.app[SCHEDULER].loaded.values())).plan
    got = await scrape(client)
    runner = {"model": MODEL, "runner": "completion"}
    assert got.value("ollama_models_loaded") == 1
    assert got.value("ollama_model_state", **runner, state="ready") == 1
    assert got.value("ollama_model_state", **runner, state="loading") == 0
    assert got.value("ollama_model_slots", **runner) == 2
    assert got.value("ollama_model_memory_bytes", **runner, memory="ram") == plan.size - plan.size_vram
    assert got.value("ollama_model_memory_bytes", **runner, memory="vram") == plan.size_vram
    assert got.value("ollama_model_context_length", **runner) == plan.context_length
    assert got.value("ollama_model_prompt_cache_bytes", **runner) == plan.cache_ram > 0  # part of "ram" above


async def test_streaming_chat_records_time_to_first_token_within_the_request(gateway: Any) -> None:
    client = await gateway({"FAKE_TOKEN_DELAY": "0.02"})
    resp = await client.post("/api/chat", json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
    lines = [json.loads(line) for line in (await resp.text()).splitlines()]
    assert resp.status == 200 and lines[-1]["done"]
    got = await scrape(client)
    chat = {"endpoint": "/api/chat", "model": MODEL}
    assert got.value("ollama_requests_total", **chat, status="200") == 1
    assert got.value("ollama_time_to_first_token_seconds_count", model=MODEL) == 1
    ttft = got.value("ollama_time_to_first_token_seconds_sum", model=MODEL)
    assert 0 < ttft < got.value("ollama_request_duration_seconds_sum", **chat)
    assert got.value("ollama_generated_tokens_total", model=MODEL) == lines[-1]["eval_count"]


# -- the queue -------------------------------------------------------------------------------------------------------

async def test_queue_depth_counts_requests_waiting_for_a_busy_model(gateway: Any) -> None:
    client = await gateway({"FAKE_TOKEN_DELAY": "0.05", "FAKE_TOKENS": "20"}, num_parallel=1)
    busy = await client.post("/api/generate", json={"model": "tiny", "prompt": "a long answer"})
    await busy.content.readline()  # generating: it holds the only slot
    waiting = [asyncio.create_task(generate(client, prompt=f"q{i}", options={"num_predict": 1})) for i in range(2)]
    during = await scrape_until(client, lambda s: s.value("ollama_queue_depth") == 2, "two queued requests")
    runner = {"model": MODEL, "runner": "completion"}
    assert during.value("ollama_model_queued_requests", **runner) == 2
    assert during.value("ollama_model_active_requests", **runner) == 1
    assert during.value("llamacpp:requests_processing", **runner) == 1
    ps = await (await client.get("/api/ps")).json()
    assert [(m["name"], m["state"], m["queued"], m["active"]) for m in ps["models"]] == [(MODEL, "ready", 2, 1)]

    await busy.read()
    await asyncio.gather(*waiting)
    after = await scrape(client)
    assert after.value("ollama_queue_depth") == 0
    assert after.value("ollama_model_queued_requests", **runner) == 0
    assert after.value("ollama_requests_total", **GEN, status="200") == 3


async def test_requests_over_the_queue_limit_are_counted_as_rejected(gateway: Any) -> None:
    client = await gateway({"FAKE_TOKEN_DELAY": "0.05", "FAKE_TOKENS": "20"}, num_parallel=1, max_queue=1)
    busy = await client.post("/api/generate", json={"model": "tiny", "prompt": "a long answer"})
    await busy.content.readline()
    queued = asyncio.create_task(generate(client, options={"num_predict": 1}))
    await scrape_until(client, lambda s: s.value("ollama_queue_depth") == 1, "one queued request")
    refused = await client.post("/api/generate", json={"model": "tiny", "prompt": "one more", "stream": False})
    assert refused.status == 503
    got = await scrape(client)
    assert got.value("ollama_requests_rejected_total", endpoint="/api/generate", model=MODEL) == 1
    assert got.value("ollama_requests_total", **GEN, status="503") == 1
    await busy.read()
    await queued


async def test_client_that_hangs_up_mid_stream_is_counted_as_499(gateway: Any) -> None:
    client = await gateway({"FAKE_TOKEN_DELAY": "0.05", "FAKE_TOKENS": "200"})
    resp = await client.post("/api/generate", json={"model": "tiny", "prompt": "a long answer"})
    await resp.content.readline()
    resp.close()
    got = await scrape_until(client, lambda s: s.value("ollama_requests_total", **GEN, status="499") == 1,
                             "the abandoned request")
    assert got.value("ollama_model_active_requests", model=MODEL) == 0  # its slot was given back
    assert got.value("ollama_generated_tokens_total", model=MODEL) == 0  # it never finished


# -- model life ------------------------------------------------------------------------------------------------------

async def test_runner_crash_and_restart_are_counted(gateway: Any) -> None:
    client = await gateway({"FAKE_CRASH_AFTER_TOKENS": "3"})
    resp = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False})
    assert resp.status == 500
    await scrape_until(client, lambda s: s.value("ollama_runner_crashes_total", model=MODEL) == 1, "the crash")
    await generate(client, options={"num_predict": 2})  # a new runner; it stops before its third token
    got = await scrape(client)
    assert got.value("ollama_runner_restarts_total", model=MODEL) == 1
    assert got.value("ollama_model_loads_total", model=MODEL) == 2
    assert got.value("ollama_requests_total", **GEN, status="500") == 1
    assert got.value("ollama_requests_total", **GEN, status="200") == 1


async def test_failed_load_is_counted(gateway: Any) -> None:
    client = await gateway({"FAKE_LOAD_FAIL": "llama_model_load: error loading model: tensor data is not valid"})
    resp = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False})
    assert resp.status == 500
    got = await scrape(client)
    assert got.value("ollama_model_load_failures_total", model=MODEL) == 1
    assert got.value("ollama_model_loads_total", model=MODEL) == 0
    assert got.value("ollama_models_loaded") == 0


async def test_eviction_is_counted(gateway: Any) -> None:
    client = await gateway(models=("other",), max_loaded_models=1)
    await generate(client, "tiny")
    await generate(client, "other")
    got = await scrape(client)
    assert got.value("ollama_model_evictions_total", model=MODEL) == 1
    assert got.value("ollama_models_loaded") == 1
    assert got.value("ollama_model_state", model="other:latest", state="ready") == 1
    assert got.series("ollama_model_state") and all(s["model"] == "other:latest"
                                                    for s in got.series("ollama_model_state"))


async def test_unload_by_keep_alive_zero_is_counted(gateway: Any) -> None:
    client = await gateway()
    await generate(client, keep_alive=0)
    got = await scrape_until(client, lambda s: s.value("ollama_model_unloads_total", model=MODEL) == 1, "the unload")
    assert got.value("ollama_model_evictions_total", model=MODEL) == 0
    await scrape_until(client, lambda s: s.value("ollama_models_loaded") == 0, "no model loaded")


async def test_runner_without_its_metrics_endpoint_is_reported_down(gateway: Any) -> None:
    client = await gateway(runner_metrics=False)  # such a runner answers 501 at /metrics
    await generate(client)
    got = await scrape(client)
    assert got.value("ollama_runner_metrics_up", model=MODEL, runner="completion") == 0
    assert not any(s.name.startswith("llamacpp:") for s in got.samples)
    assert got.value("ollama_requests_total", **GEN, status="200") == 1


# -- labels, GPUs, formats --------------------------------------------------------------------------------------------

async def test_endpoint_label_is_the_route_pattern_and_unknown_models_get_no_label(gateway: Any) -> None:
    client = await gateway()
    digest = "sha256:" + "ab" * 32
    assert (await client.head(f"/api/blobs/{digest}")).status == 404
    assert (await client.get("/no/such/page")).status == 404
    assert (await client.post("/api/generate", json={"model": "nope", "prompt": "hi"})).status == 404
    got = await scrape(client)
    assert got.value("ollama_requests_total", endpoint="/api/blobs/{digest}", method="HEAD", status="404") == 1
    assert got.value("ollama_requests_total", endpoint="unmatched", method="GET", status="404") == 1
    assert got.value("ollama_requests_total", endpoint="/api/generate", model="", status="404") == 1
    assert "ab" * 32 not in got.text and "nope" not in got.text


async def test_gpu_memory_is_reported_when_a_gpu_is_present(gateway: Any) -> None:
    client = await gateway(gpus=(TEST_GPU,))
    got = await scrape(client)
    gpu = {"gpu": "0", "uuid": "GPU-0f1e2d3c", "name": "Test GPU"}
    assert got.value("ollama_gpu_memory_total_bytes", **gpu) == 8 << 30
    assert got.value("ollama_gpu_memory_free_bytes", **gpu) == 6 << 30


async def test_prometheus_own_accept_header_gets_text_that_parses(gateway: Any) -> None:
    client = await gateway()
    body = await generate(client)
    accept = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
              "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")  # what Prometheus sends
    resp = await client.get("/metrics", headers={"Accept": accept})
    assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    got = Scrape(await resp.text())
    assert got.value("llamacpp:tokens_predicted_total", model=MODEL) == body["eval_count"]


# -- the request log line ---------------------------------------------------------------------------------------------

async def test_each_request_gets_one_info_log_line(gateway: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = await gateway()
    caplog.set_level(logging.INFO, logger="ollama_py.server.access_log")
    body = await generate(client)
    await scrape(client)
    lines = [r.getMessage() for r in caplog.records if r.name == "ollama_py.server.access_log"]
    assert len(lines) == 1  # the /metrics scrape is logged at DEBUG only
    line = lines[0]
    for part in ("method=POST", "path=/api/generate", "status=200", f"model={MODEL}",
                 f"prompt_tokens={body['prompt_eval_count']}", f"eval_tokens={body['eval_count']}",
                 "duration=", "ttft=", "load=", "prompt_eval=", "eval="):
        assert part in line, line
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "ollama_py.server.access_log")


async def test_debug_logging_adds_request_details(gateway: Any, caplog: pytest.LogCaptureFixture) -> None:
    client = await gateway()
    caplog.set_level(logging.DEBUG, logger="ollama_py.server.access_log")
    await client.get("/api/version", headers={"User-Agent": "metrics-test/1.0"})
    debug = [r.getMessage() for r in caplog.records
             if r.name == "ollama_py.server.access_log" and r.levelno == logging.DEBUG]
    assert any("endpoint=/api/version" in m and "metrics-test/1.0" in m for m in debug), debug


async def test_a_deleted_models_series_go_with_it(gateway: Any) -> None:
    """Issue 34: every model a request touched kept its series forever, after /api/delete too."""
    client = await gateway(models=("other",))
    await generate(client)
    await generate(client, "other")
    resp = await client.delete("/api/delete", json={"model": "tiny"})
    assert resp.status == 200
    got = await scrape_until(client, lambda s: not any(x.labels.get("model") == MODEL for x in s.samples),
                             "the deleted model's series gone")  # its runner's gauges go once it has stopped
    assert got.value("ollama_requests_total", **GEN, status="200") == 0
    assert got.value("ollama_requests_total", endpoint="/api/generate", model="other:latest", status="200") == 1
    assert got.value("ollama_model_loads_total", model="other:latest") == 1
    assert got.value("ollama_requests_total", endpoint="/api/delete", model="", status="200") == 1
    await generate(client, "other")
    assert (await scrape(client)).value("ollama_requests_total", endpoint="/api/generate", status="200") == 2
    # the name again (a copy of another model): its series start anew, and count
    assert (await client.post("/api/copy", json={"source": "other", "destination": "tiny"})).status == 200
    await generate(client)
    again = await scrape(client)
    assert again.value("ollama_requests_total", **GEN, status="200") == 1
    assert again.value("ollama_generated_tokens_total", model=MODEL) > 0


async def test_the_exposition_is_written_off_the_event_loop(gateway: Any) -> None:
    """Issue 34: thousands of series were rendered on the loop, stalling every stream while /metrics was read."""
    import threading

    client = await gateway()
    threads: list[threading.Thread] = []

    class Probe:
        def collect(self) -> Any:
            threads.append(threading.current_thread())
            return iter(())

    client.app[METRICS].registry.register(Probe())
    await scrape(client)
    assert threads and threading.main_thread() not in threads


# -- relabel (pure) ---------------------------------------------------------------------------------------------------

LABELS = {"model": "m:latest", "runner": "completion"}


@pytest.mark.parametrize(("text", "expected"), [
    pytest.param("# HELP llamacpp:prompt_tokens_total Prompt tokens\n# TYPE llamacpp:prompt_tokens_total counter\n"
                 "llamacpp:prompt_tokens_total 12\n",
                 [("llamacpp:prompt_tokens", "counter", [("llamacpp:prompt_tokens_total", LABELS, 12.0)])],
                 id="counter-keeps-its-name"),
    pytest.param("# HELP llamacpp:n_tokens_max Largest\n# TYPE llamacpp:n_tokens_max counter\n"
                 "llamacpp:n_tokens_max 30\n",
                 [("llamacpp:n_tokens_max", "gauge", [("llamacpp:n_tokens_max", LABELS, 30.0)])],
                 id="counter-without-total-becomes-gauge"),
    pytest.param("# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n",
                 [("llamacpp:requests_processing", "gauge", [("llamacpp:requests_processing", LABELS, 1.0)])],
                 id="gauge"),
    pytest.param('# TYPE slot_busy gauge\nslot_busy{slot="0"} 1\nslot_busy{slot="1"} 0\n',
                 [("slot_busy", "gauge", [("slot_busy", {"slot": "0", **LABELS}, 1.0),
                                          ("slot_busy", {"slot": "1", **LABELS}, 0.0)])],
                 id="own-labels-kept"),
    pytest.param('# TYPE x gauge\nx{model="router"} 1\n', [("x", "gauge", [("x", LABELS, 1.0)])],
                 id="our-model-label-wins"),
    pytest.param("", [], id="empty"),
    pytest.param("<html>not metrics</html>\n", [], id="not-prometheus-text"),
])
def test_relabel(text: str, expected: list[tuple[str, str, list[tuple[str, dict[str, str], float]]]]) -> None:
    got = [(m.name, m.type, [(s.name, s.labels, s.value) for s in m.samples]) for m in relabel(text, LABELS)]
    assert got == expected


async def test_template_renders_are_counted_by_where_they_ran(gateway: Any) -> None:
    client = await gateway()
    before = await scrape(client)
    ran = sum(before.value("ollama_template_renders_total", where=w) for w in ("inline", "thread"))
    for text in ("hi", "hello again"):
        resp = await client.post("/api/chat", json={"model": "tiny", "stream": False,
                                                    "messages": [{"role": "user", "content": text}]})
        assert resp.status == 200, await resp.text()
    after = await scrape(client)
    assert sum(after.value("ollama_template_renders_total", where=w) for w in ("inline", "thread")) >= ran + 2
    assert after.series("ollama_template_jobs") == [{"state": "running"}, {"state": "waiting"}]
    assert after.value("ollama_template_jobs", state="running") == after.value("ollama_template_jobs",
                                                                               state="waiting") == 0
    assert after.series("ollama_template_inline_given_up_total") == [{}]
