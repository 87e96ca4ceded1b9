"""The memory estimate against what a real llama-server allocates for SmolLM2 (and Gemma 3) on the CPU.

Paths come from the Makefile: OLLAMA_PY_TEST_RUNNER (a llama-server binary), OLLAMA_PY_TEST_MODEL
(SmolLM2-135M-Instruct.Q4_1.gguf) and OLLAMA_PY_TEST_GEMMA (gemma-3-270m-q4_k_m.gguf).
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from ollama_py.estimate.memory import MiB, estimate, parse_llama_server_buffers, shape_from_gguf
from tests.helpers.paths import required_path
from tests.helpers.ports import free_port

pytestmark = pytest.mark.integration

START_TIMEOUT = 120.0


def llama_server_buffers(runner: Path, model: Path, log_path: Path,
                         *args: str) -> tuple[dict[str, dict[str, int]], str]:
    """Start llama-server on the CPU, wait until it listens, stop it; its buffers and its log."""
    # -lv 4: llama.cpp's own INFO lines (the buffer sizes) are only printed at trace verbosity
    argv = [str(runner), "-m", str(model), "--host", "127.0.0.1", "--port", str(free_port()),
            "-ngl", "0", "--no-webui", "-lv", "4", *args]
    with log_path.open("w+") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while time.monotonic() < deadline and proc.poll() is None:
                if "listening on http" in log_path.read_text(errors="replace"):
                    break
                time.sleep(0.2)
            else:
                pytest.fail(f"llama-server did not start (exit {proc.returncode}):\n{log_path.read_text()[-3000:]}")
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    text = log_path.read_text(errors="replace")
    return parse_llama_server_buffers(text.splitlines()), text


@pytest.mark.parametrize(
    ("model_var", "args", "kw"),
    [
        pytest.param("OLLAMA_PY_TEST_MODEL", ("-c", "4096", "-np", "1", "-fa", "on"),
                     dict(num_ctx=4096, num_parallel=1, flash_attn=True), id="smollm2-c4096"),
        pytest.param("OLLAMA_PY_TEST_MODEL", ("-c", "4096", "-np", "1", "-fa", "off"),
                     dict(num_ctx=4096, num_parallel=1, flash_attn=False), id="smollm2-c4096-no-fa"),
        pytest.param("OLLAMA_PY_TEST_MODEL", ("-c", "8192", "-np", "2", "-fa", "on"),
                     dict(num_ctx=4096, num_parallel=2, flash_attn=True), id="smollm2-2-slots"),
        pytest.param("OLLAMA_PY_TEST_MODEL", ("-c", "16384", "-np", "4", "-kvu", "--kv-unified-per-slot", "4096",
                                              "-fa", "on"),
                     dict(num_ctx=4096, num_parallel=4, flash_attn=True, kv_unified=True), id="smollm2-4-unified"),
        pytest.param("OLLAMA_PY_TEST_GEMMA", ("-c", "4096", "-np", "1", "-fa", "on"),
                     dict(num_ctx=4096, num_parallel=1, flash_attn=True), id="gemma3-c4096"),
    ],
)
def test_estimate_within_ten_percent_of_llama_server(
    model_var: str, args: tuple[str, ...], kw: dict, tmp_path: Path
) -> None:
    runner = required_path("OLLAMA_PY_TEST_RUNNER")
    model = required_path(model_var)
    reported, log = llama_server_buffers(runner, model, tmp_path / "llama-server.log", *args)
    assert set(reported) == {"layers", "CPU"}, log[-3000:]
    cpu = reported["CPU"]
    assert all(cpu[k] > 0 for k in ("model", "kv", "compute", "output")), cpu

    est = estimate(shape_from_gguf(model), cpu_repack=runner.parent.name == "cpu_avx2", **kw)
    ours = est.buffers
    errors = {k: (ours[k] - cpu[k]) / cpu[k] for k in cpu}
    summary = ", ".join(f"{k} {ours[k] / MiB:.2f} vs {cpu[k] / MiB:.2f} MiB" for k in cpu)
    assert abs(est.total - sum(cpu.values())) <= 0.10 * sum(cpu.values()), summary
    for kind in ("model", "kv", "compute"):
        assert abs(errors[kind]) <= 0.10, f"{kind}: {summary}"
