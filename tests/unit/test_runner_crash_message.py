"""What a request is told when its runner dies: the stderr line that says why, not whatever came last (issue 22,
low: the crash message quoted an unrelated INFO line)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from ollama_py.runner.process import cause_of, exit_text

ALLOC = "ggml_backend_cpu_buffer_type_alloc_buffer: failed to allocate buffer of size 17179869184"
TEMPLATE_INFO = "srv  load_model: chat template: {{ raise_exception('Conversation roles must alternate') }}"


@pytest.mark.parametrize(("lines", "expected"), [
    pytest.param([f"0.01.000.001 E {ALLOC}", f"0.01.000.002 I {TEMPLATE_INFO}"], ALLOC,
                 id="error-line-over-a-later-info-line-quoting-an-exception"),
    pytest.param(["0.00.001.000 I load_tensors: loading model tensors",
                  "0.00.002.000 E llama_model_load: error loading model: tensor 'x' is out of bounds",
                  "0.00.002.001 E llama_model_load_from_file_impl: failed to load model",
                  "0.00.002.002 E srv  llama_server: exiting due to model loading error"],
                 "llama_model_load: error loading model: tensor 'x' is out of bounds", id="the-cause-before-exiting"),
    pytest.param(["0.00.001.000 I slot launch_slot_: id  0 | task 1 | processing task",
                  "ggml/src/ggml-cpu/ops.cpp:42: GGML_ASSERT(ne % 2 == 0) failed",
                  "0.00.001.001 I srv  log_server_r: request: POST /completion 127.0.0.1 200"],
                 "ggml/src/ggml-cpu/ops.cpp:42: GGML_ASSERT(ne % 2 == 0) failed", id="unprefixed-abort"),
    pytest.param(["0.00.001.000 I print_info: model type = 135M", "0.00.001.001 I failed_tokens = 0 (an error?)",
                  "0.00.001.002 W srv  load_model: could not open the draft model"],
                 "srv  load_model: could not open the draft model", id="a-warning-over-info-lines"),
    pytest.param(["0.00.001.000 I slot update_slots: id  0 | task 1 | prompt done", ""],
                 "slot update_slots: id  0 | task 1 | prompt done", id="else-the-last-line-without-its-prefix"),
    pytest.param([], "", id="nothing"),
])
def test_the_cause_of_a_runners_death(lines: list[str], expected: str) -> None:
    assert cause_of(lines) == expected


async def test_a_crash_mid_stream_names_the_real_cause(fake_app: Any, aiohttp_client: Any) -> None:
    crash = f"0.01.000.001 E {ALLOC}\n0.01.000.002 I {TEMPLATE_INFO}\n"
    _, app = fake_app({"FAKE_CRASH_AFTER_TOKENS": "2", "FAKE_CRASH_LINES": crash, "FAKE_EXIT_CODE": "-6"})
    client = await aiohttp_client(app)
    resp = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "options": {"num_predict": 8}})
    assert resp.status == 200
    lines = [json.loads(line) for line in (await resp.text()).splitlines() if line]
    error = lines[-1]["error"]
    assert error.startswith("llama runner process has terminated: signal: aborted: "), error
    assert ALLOC in error and "raise_exception" not in error


@pytest.mark.parametrize(("returncode", "text"), [(1, "exit status 1"), (-6, "signal: aborted"),
                                                  (-9, "signal: killed"), (-11, "signal: segmentation fault"),
                                                  (-4, "signal: illegal instruction")])
def test_how_a_runner_ended_reads_as_gos_exit_error(returncode: int, text: str) -> None:
    """As Ollama's errors quote Go's exec.ExitError: a signal by name, never a negative exit status."""
    assert exit_text(returncode) == text
