"""The prompt cache with the real llama-server and SmolLM2 (issue 36): its host cache stops growing at the cap
ollama-py sets (--cache-ram), and a conversation's prompt survives an unload or a restart of serve (slots saved, then
restored)."""

from __future__ import annotations

import time
from pathlib import Path

import psutil
import pytest
import requests

from tests.helpers.paths import required_path
from tests.helpers.serve import create_from_file, start_serve, stop_serve

pytestmark = pytest.mark.integration

MiB = 1 << 20
CAP_MIB = 48  # ~2 of the ~22 MiB states of a 1,000-token SmolLM2 prompt


def runner_rss(serve_pid: int) -> int:
    for p in psutil.Process(serve_pid).children(recursive=True):
        if "llama-server" in " ".join(p.cmdline()[:2]):
            return int(p.memory_info().rss)
    raise AssertionError("no runner")


def generate(url: str, prompt: str, **extra: object) -> dict:
    r = requests.post(url + "/api/generate", timeout=300, json={
        "model": "smollm2", "prompt": prompt, "raw": True, "stream": False,
        "options": {"num_predict": 1, "num_ctx": 4096}, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def distinct_prompt(i: int, tokens: int) -> str:
    """About `tokens` SmolLM2 tokens, sharing nothing with another i's prompt."""
    return f"Document {i * 7919}: " + " ".join(f"item{i}x{j}" for j in range(tokens // 6))


@pytest.fixture
def serve_with(tmp_path: Path):
    procs = []

    def start(env: dict[str, str]) -> tuple[int, str]:
        proc, url, _ = start_serve(tmp_path, {"OLLAMA_NUM_PARALLEL": "1", **env})
        procs.append(proc)
        create_from_file(url, "smollm2", required_path("OLLAMA_PY_TEST_MODEL"))
        return proc.pid, url

    yield start
    for proc in procs:
        stop_serve(proc)


def test_the_runners_memory_stops_growing_at_its_prompt_cache_cap(serve_with) -> None:
    pid, url = serve_with({"OLLAMA_CACHE_RAM": str(CAP_MIB), "OLLAMA_PY_PROMPT_CACHE_DISK": "0"})
    rss = []
    for i in range(8):
        assert 800 < generate(url, distinct_prompt(i, 1000))["prompt_eval_count"] < 1200
        rss.append(runner_rss(pid))
    [entry] = requests.get(url + "/api/ps", timeout=30).json()["models"]
    assert entry["cache_ram"] == CAP_MIB * MiB
    # Uncapped, each prompt adds its ~22 MiB state (bench/results/memory.md): +150 MiB over these 7.
    growth = (rss[-1] - rss[0]) / MiB
    assert growth < CAP_MIB + 16, [round(x / MiB) for x in rss]


def test_after_keep_alive_0_and_a_reload_the_same_prompt_starts_from_its_cache(serve_with) -> None:
    pid, url = serve_with({"OLLAMA_PY_PROMPT_CACHE_DISK": "4096"})  # the default, which tests' serves turn off
    prompt = distinct_prompt(1, 1800)
    first = generate(url, prompt)
    assert first["prompt_eval_count"] > 1500
    generate(url, prompt, keep_alive=0)  # the unload saves the slot
    deadline = time.monotonic() + 60
    while requests.get(url + "/api/ps", timeout=30).json()["models"]:
        assert time.monotonic() < deadline, "did not unload"
        time.sleep(0.1)
    again = generate(url, prompt)  # a new runner: restored before it took this request
    assert again["prompt_eval_count"] <= 4, again


def test_after_serve_is_stopped_and_started_again_the_same_prompt_starts_from_its_cache(serve_with) -> None:
    """SIGTERM to serve: the idle runner saves its slot before it stops, and the next serve restores it."""
    env = {"OLLAMA_PY_PROMPT_CACHE_DISK": "4096"}
    pid, url = serve_with(env)
    prompt = distinct_prompt(2, 1800)
    assert generate(url, prompt)["prompt_eval_count"] > 1500
    serve = psutil.Process(pid)
    serve.terminate()
    assert serve.wait(60) == 0
    pid, url = serve_with(env)
    again = generate(url, prompt)
    assert again["prompt_eval_count"] <= 4, again
