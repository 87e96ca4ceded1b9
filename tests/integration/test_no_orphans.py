"""No runner outlives `serve`: SIGTERM and Ctrl-C stop every runner before serve exits; SIGKILL of serve takes
the runners with it (PR_SET_PDEATHSIG), even one still loading.

`serve` runs as a real subprocess (`python -m ollama_py serve`). The fast tests give it a runners directory
whose llama-server is the fake (tests/fakes/fake_llama_server.py, exec'd by a two-line script, so the runner
process is the fake itself); the integration tests use the real llama-server and SmolLM2. `start_fake_serve` and
the runner-process helpers are in tests/helpers/processes.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.helpers.paths import required_path
from tests.helpers.processes import is_gone, start_fake_serve, wait_for_runners, wait_gone
from tests.helpers.serve import create_from_file, start_serve, stop_serve


def send(proc: subprocess.Popen, how: str) -> None:
    """Stop serve the way a user would: `kill`, Ctrl-C at its terminal (SIGINT to its process group), kill -9."""
    if how == "SIGTERM":
        proc.send_signal(signal.SIGTERM)
    elif how == "Ctrl-C":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGKILL)


class StreamInFlight:
    """A streaming /api/generate held open in a thread, so serve is stopped with a runner busy."""

    def __init__(self, url: str, body: dict[str, Any]) -> None:
        self.first_line = threading.Event()
        self.last_line: dict[str, Any] | None = None  # None: the stream broke off without a last line
        self._thread = threading.Thread(target=self._run, args=(url, body), daemon=True)
        self._thread.start()

    def _run(self, url: str, body: dict[str, Any]) -> None:
        with contextlib.suppress(requests.RequestException), \
                requests.post(url + "/api/generate", json=body, stream=True, timeout=60) as resp:
            for line in resp.iter_lines():
                self.first_line.set()
                self.last_line = json.loads(line)
            return
        self.last_line = None

    def join(self) -> None:
        self._thread.join(60)


def _post_quietly(url: str, body: dict[str, Any]) -> None:
    with contextlib.suppress(requests.RequestException):
        requests.post(url, json=body, timeout=60)


@pytest.mark.parametrize("how", ["SIGTERM", "Ctrl-C", "SIGKILL"])
def test_serve_stopped_leaves_no_runner(how: str, tmp_path: Path, tiny_gguf: Path) -> None:
    proc, url = start_fake_serve(tmp_path, tiny_gguf, {
        "OLLAMA_DEBUG": "1", "OLLAMA_NUM_PARALLEL": "2", "FAKE_TOKEN_DELAY": "0.05", "FAKE_TOKENS": "100000"})
    try:
        assert requests.post(url + "/api/embed", json={"model": "tiny", "input": "x"}, timeout=60).ok  # embedding
        stream = StreamInFlight(url, {"model": "tiny", "prompt": "go on"})  # generation runner, busy
        assert stream.first_line.wait(60)
        runners = wait_for_runners(proc.pid, 2)
        send(proc, how)
        proc.wait(30)
        if how != "SIGKILL":
            # Stopped by serve itself, before it exited: gone at once, each after a graceful SIGTERM.
            assert [p for p in runners if not is_gone(p)] == []
            log = (tmp_path / "serve.log").read_text(errors="replace")
            assert log.count("cleaning up before exit") >= len(runners)
            stream.join()  # and the stream in flight was ended with a final error line, not cut off
            assert stream.last_line == {"error": "llama runner was stopped"}
        assert wait_gone(runners) == []
        stream.join()
    finally:
        stop_serve(proc)


def test_serve_sigkilled_while_a_runner_loads_leaves_no_runner(tmp_path: Path, tiny_gguf: Path) -> None:
    proc, url = start_fake_serve(tmp_path, tiny_gguf, {"FAKE_LOAD_SECONDS": "120"})
    loading = threading.Thread(target=_post_quietly, args=(url + "/api/generate", {"model": "tiny"}), daemon=True)
    try:
        loading.start()
        runners = wait_for_runners(proc.pid, 1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        assert wait_gone(runners) == []
    finally:
        stop_serve(proc)
        loading.join(60)


@pytest.mark.integration
@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_serve_stopped_leaves_no_real_llama_server(how: str, tmp_path: Path) -> None:
    model = required_path("OLLAMA_PY_TEST_MODEL")
    proc, url, _ = start_serve(tmp_path)
    try:
        create_from_file(url, "smollm2:135m", model)
        resp = requests.post(url + "/api/generate", json={"model": "smollm2:135m", "prompt": "Hi", "stream": False,
                                                          "options": {"num_predict": 2}}, timeout=300)
        assert resp.status_code == 200, resp.text
        assert json.loads(resp.text)["done"] is True
        [runner] = wait_for_runners(proc.pid, 1)
        assert runner.name() == "llama-server"
        send(proc, how)
        proc.wait(60)
        assert wait_gone([runner]) == []
    finally:
        stop_serve(proc)
