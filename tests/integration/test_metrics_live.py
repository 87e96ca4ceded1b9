"""GET /metrics against `ollama-py serve` with the real llama-server runner and SmolLM2.

The live server is shared by the whole session, so every check is a difference between two scrapes.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import requests

from tests.prometheus_scrape import Scrape

pytestmark = pytest.mark.integration


def scrape(live_server: Any) -> Scrape:
    r = live_server.api("GET", "/metrics", timeout=30)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    return Scrape(r.text)


def generate(live_server: Any, prompt: str, num_predict: int) -> dict[str, Any]:
    r = live_server.api("POST", "/api/generate", json={
        "model": live_server.model, "prompt": prompt, "stream": False,
        "options": {"temperature": 0, "num_predict": num_predict}})
    assert r.status_code == 200, r.text
    return r.json()


def test_generate_moves_gateway_and_runner_counters(live_server: Any) -> None:
    model = live_server.model
    runner = {"model": model, "runner": "completion"}
    generate(live_server, "Warm up.", 1)  # loaded, so the runner's own counters exist before and after
    before = scrape(live_server)
    body = generate(live_server, "Name three colours.", 24)
    after = scrape(live_server)

    def moved(name: str, **labels: str) -> float:
        return after.value(name, **labels) - before.value(name, **labels)

    assert moved("ollama_requests_total", endpoint="/api/generate", method="POST", model=model, status="200") == 1
    assert moved("ollama_request_duration_seconds_count", endpoint="/api/generate", model=model) == 1
    assert moved("ollama_time_to_first_token_seconds_count", model=model) == 1
    assert 0 < moved("ollama_time_to_first_token_seconds_sum", model=model) <= moved(
        "ollama_request_duration_seconds_sum", endpoint="/api/generate", model=model)
    assert moved("ollama_prompt_tokens_total", model=model) == body["prompt_eval_count"]
    assert moved("ollama_generated_tokens_total", model=model) == body["eval_count"] > 0
    assert moved("ollama_generation_tokens_per_second_count", model=model) == 1
    # llama-server's own numbers, re-labelled: it counts the same decoded tokens Ollama reports as eval_count
    assert after.value("ollama_runner_metrics_up", **runner) == 1
    assert moved("llamacpp:tokens_predicted_total", **runner) == body["eval_count"]
    assert after.value("ollama_model_state", **runner, state="ready") == 1
    assert after.value("ollama_model_memory_bytes", **runner) > 0
    # what llama-server itself reported allocating, beside the estimate: on the CPU runner, all of it on "CPU"
    assert after.value("ollama_model_allocated_bytes", **runner, device="CPU") > 0


def test_queue_depth_seen_while_requests_wait_for_smollm2(live_server: Any) -> None:
    model = live_server.model
    runner = {"model": model, "runner": "completion"}
    generate(live_server, "Warm up.", 1)
    before = scrape(live_server)
    n = int(before.value("ollama_model_slots", **runner)) + 2  # more requests than slots: some must wait
    seen_metrics: Scrape | None = None
    seen_ps: dict[str, Any] | None = None
    with ThreadPoolExecutor(n) as pool:
        futures = [pool.submit(generate, live_server, f"Write a long story about ship number {i}.", 48)
                   for i in range(n)]
        deadline = time.monotonic() + 120
        while (seen_metrics is None or seen_ps is None) and time.monotonic() < deadline \
                and not all(f.done() for f in futures):
            got = scrape(live_server)
            if got.value("ollama_queue_depth") >= 1 and got.value("ollama_model_queued_requests", **runner) >= 1:
                seen_metrics = seen_metrics or got
            ps = requests.get(live_server.url + "/api/ps", timeout=30).json()["models"]
            seen_ps = seen_ps or next((m for m in ps if m["name"] == model and m["queued"] >= 1), None)
            time.sleep(0.02)
        results = [f.result() for f in futures]
    assert seen_metrics is not None, "no scrape saw a request waiting"
    assert seen_metrics.value("ollama_model_active_requests", **runner) >= 1
    assert seen_ps is not None, "/api/ps never showed a queued request"
    assert seen_ps["state"] == "ready" and seen_ps["active"] >= 1
    after = scrape(live_server)
    assert after.value("ollama_queue_depth") == 0
    assert after.value("ollama_requests_total", endpoint="/api/generate", model=model, status="200") - before.value(
        "ollama_requests_total", endpoint="/api/generate", model=model, status="200") == n
    assert after.value("ollama_generated_tokens_total", model=model) - before.value(
        "ollama_generated_tokens_total", model=model) == sum(r["eval_count"] for r in results)
