"""The built cpu_avx2 runner, started by RunnerProcess on SmolLM2, answers with tokens (issue 3)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import aiohttp
import psutil
import pytest

from ollama_py.runner.argv import LaunchSpec, build_argv
from ollama_py.runner.client import LlamaClient
from ollama_py.runner.process import RunnerProcess, RunnerState
from tests.helpers.paths import ROOT, required_path

pytestmark = pytest.mark.integration


def test_build_script_is_cached_and_records_build_info():
    runners = Path(os.environ.get("OLLAMA_PY_TEST_RUNNERS_DIR", ROOT / "runners"))
    out = subprocess.run([str(ROOT / "scripts" / "build_runners.sh"), "cpu_avx2"], capture_output=True, text=True,
                         timeout=1800, env={**os.environ, "OLLAMA_RUNNERS_DIR": str(runners)})
    assert out.returncode == 0, out.stderr
    assert "cpu_avx2: up to date" in out.stderr  # make install built it already: nothing to do
    info = json.loads((runners / "cpu_avx2" / "build-info.json").read_text())
    assert info["variant"] == "cpu_avx2"
    assert "-DGGML_NATIVE=OFF" in info["cmake_flags"] and "-DGGML_AVX2=ON" in info["cmake_flags"]
    assert info["source"].startswith("sdist-832db069") and info["llama_cpp_version"]
    for binary in ("llama-server", "llama-quantize", "ggml-rpc-server"):
        assert os.access(runners / "cpu_avx2" / binary, os.X_OK)


async def test_cpu_avx2_runner_serves_smollm2():
    binary = required_path("OLLAMA_PY_TEST_RUNNER")
    model = required_path("OLLAMA_PY_TEST_MODEL")
    spec = LaunchSpec(model=model, num_ctx=1024, n_gpu_layers=0)
    runner = RunnerProcess(lambda port: build_argv(spec, binary, port), name="smollm2")
    client = LlamaClient("", api_key=runner.api_key)
    try:
        await runner.ensure_ready()
        assert runner.state == RunnerState.READY
        client.base_url = runner.base_url
        events = [e async for e in client.stream("/completion", {
            "prompt": "The capital of France is", "n_predict": 6, "temperature": 0, "stream": True})]
        text = "".join(e.get("content", "") for e in events)
        assert "Paris" in text
        assert events[-1]["stop"] is True and events[-1]["timings"]["predicted_n"] == 6
    finally:
        await client.close()
        await runner.stop()
    assert runner.state == RunnerState.STOPPED


async def test_the_runner_refuses_a_direct_call_without_its_key():
    """OLLAMA_API_KEYS cannot be bypassed by calling the runner's port (in the process list) directly."""
    binary = required_path("OLLAMA_PY_TEST_RUNNER")
    model = required_path("OLLAMA_PY_TEST_MODEL")
    spec = LaunchSpec(model=model, num_ctx=256, n_gpu_layers=0)
    runner = RunnerProcess(lambda port: build_argv(spec, binary, port), name="smollm2")
    body = {"prompt": "Hi", "n_predict": 1}
    try:
        await runner.ensure_ready()
        assert runner.api_key not in " ".join(psutil.Process(runner.pid).cmdline())
        async with aiohttp.ClientSession() as session:
            async with session.post(runner.base_url + "/completion", json=body) as resp:
                assert resp.status == 401
                assert (await resp.json())["error"]["message"] == "Invalid API Key"
            async with session.post(runner.base_url + "/completion", json=body,
                                    headers={"Authorization": "Bearer wrong"}) as resp:
                assert resp.status == 401
            async with session.post(runner.base_url + "/completion", json=body, headers=runner.auth_headers) as resp:
                assert resp.status == 200
    finally:
        await runner.stop()
