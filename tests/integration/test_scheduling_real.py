"""Scheduling with the real llama-server: reuse, unload, reload, and two real models swapping (issue 5)."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
import requests

from tests.helpers.paths import required_path
from tests.helpers.serve import create_from_file, start_serve, stop_serve
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.integration


def runner_pids(serve_pid: int) -> set[int]:
    return {p.pid for p in psutil.Process(serve_pid).children(recursive=True) if "llama-server" in " ".join(
        p.cmdline())}


def ps(url: str) -> list[dict]:
    return requests.get(url + "/api/ps", timeout=30).json()["models"]


def gen(url: str, model: str, prompt: str, raw: bool = False, **opts) -> dict:
    r = requests.post(url + "/api/generate", timeout=300, json={
        "model": model, "prompt": prompt, "stream": False, "raw": raw,
        "options": {"num_predict": 12, "temperature": 0, "seed": 1, **opts}})
    assert r.status_code == 200, r.text
    return r.json()




@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    smollm = required_path("OLLAMA_PY_TEST_MODEL")
    gemma = required_path("OLLAMA_PY_TEST_GEMMA")
    tmp = tmp_path_factory.mktemp("swap")
    proc, url, _ = start_serve(tmp, {"OLLAMA_MAX_LOADED_MODELS": "1"})
    try:
        create_from_file(url, "smollm2:135m", smollm)
        # This GGUF carries no chat template (llama-server would fall back to ChatML, which Gemma does not
        # know): give it Ollama's gemma3 template, as `ollama create` with a TEMPLATE would.
        template = (Path(__file__).resolve().parent.parent / "unit" / "templates" / "gemma3.gotmpl").read_text()
        create_from_file(url, "gemma3:270m", gemma, template=template, parameters={"stop": ["<end_of_turn>"]})
        yield proc, url
    finally:
        stop_serve(proc)
    assert not psutil.pid_exists(proc.pid) or psutil.Process(proc.pid).status() == psutil.STATUS_ZOMBIE


def test_load_reuse_reload_and_unload(two_models):
    proc, url = two_models
    gen(url, "smollm2:135m", "Hello")
    pids = runner_pids(proc.pid)
    assert len(pids) == 1
    gen(url, "smollm2:135m", "Hello again", temperature=0.5)  # sampling change: same runner
    assert runner_pids(proc.pid) == pids
    assert ps(url)[0]["context_length"] == 4096
    gen(url, "smollm2:135m", "Hello", num_ctx=2048)  # load-time option: reload
    new = runner_pids(proc.pid)
    assert len(new) == 1 and new != pids
    wait_until(lambda: not any(psutil.pid_exists(p) for p in pids))
    assert ps(url)[0]["context_length"] == 2048
    r = requests.post(url + "/api/generate", json={"model": "smollm2:135m", "keep_alive": 0}, timeout=60).json()
    assert r["done_reason"] == "unload"
    wait_until(lambda: not ps(url))
    wait_until(lambda: not runner_pids(proc.pid))


def test_alternating_requests_swap_the_two_models(two_models):
    proc, url = two_models
    answers = {}
    for model in ("smollm2:135m", "gemma3:270m", "smollm2:135m", "gemma3:270m"):
        # A plain completion prompt: the Gemma 3 270M on PyPI is a base model, not an instruction-tuned one.
        out = gen(url, model, "The Eiffel Tower is in the city of", raw=True, num_predict=8)
        loaded = [m["name"] for m in ps(url)]
        assert loaded == [model]  # OLLAMA_MAX_LOADED_MODELS=1: the other one was evicted
        assert len(runner_pids(proc.pid)) == 1
        assert "paris" in out["response"].lower(), (model, out["response"])
        answers.setdefault(model, out["response"])
        assert out["response"] == answers[model]  # same seed, same answer after a swap
