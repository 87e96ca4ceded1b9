"""The default slots with the real llama-server (issue 25): four slots in one unified KV cache, and still one
long request gets the whole num_ctx it asked for, not a quarter of it."""

from __future__ import annotations

import psutil
import pytest
import requests

from tests.helpers.paths import required_path
from tests.helpers.serve import create_from_file, start_serve, stop_serve

pytestmark = pytest.mark.integration

NUM_CTX = 2048


def runner_argv(serve_pid: int) -> list[str]:
    found = [p.cmdline() for p in psutil.Process(serve_pid).children(recursive=True)
             if "llama-server" in " ".join(p.cmdline())]
    assert len(found) == 1, found
    return found[0]


def test_one_long_prompt_gets_the_whole_num_ctx_with_four_slots(tmp_path) -> None:
    proc, url, _ = start_serve(tmp_path, {"OLLAMA_NUM_PARALLEL": ""})  # unset: slots chosen from memory
    try:
        create_from_file(url, "smollm2:135m", required_path("OLLAMA_PY_TEST_MODEL"))
        prompt = "Count the apples:" + " apple" * 1400  # ~1,400 tokens: more than NUM_CTX / 4
        r = requests.post(url + "/api/generate", timeout=600, json={
            "model": "smollm2:135m", "prompt": prompt, "raw": True, "stream": False,
            "options": {"num_ctx": NUM_CTX, "num_predict": 4, "temperature": 0}})
        assert r.status_code == 200, r.text
        body = r.json()
        assert NUM_CTX // 4 < body["prompt_eval_count"] < NUM_CTX
        assert body["eval_count"] >= 1

        argv = runner_argv(proc.pid)
        assert argv[argv.index("-np") + 1] == "4"  # this machine has the memory for four
        assert "--kv-unified" in argv
        assert argv[argv.index("--kv-unified-per-slot") + 1] == str(NUM_CTX)
        ps = requests.get(url + "/api/ps", timeout=30).json()["models"]
        assert [m["context_length"] for m in ps] == [NUM_CTX]  # num_ctx keeps its meaning in /api/ps
    finally:
        stop_serve(proc)
