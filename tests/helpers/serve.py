"""`ollama-py serve` as a subprocess, and what tests do to it over HTTP.

    start_serve(tmp, extra_env, host=, port=) -> (proc, url, env)
                                                       serve with its store under `tmp` (runners from the
                                                       Makefile's OLLAMA_PY_TEST_RUNNERS_DIR), once it answers
    stop_serve(proc)                                   SIGTERM, then SIGKILL of its group after 20 s
    upload_blob(url, path) -> digest                   a file as a blob, through our HTTP client
    create_from_file(url, name, gguf, **req)           a model created from an uploaded GGUF
    LiveServer                                         what the `live_server` fixture (tests/conftest.py) yields:
                                                       serve with the real runner and SmolLM2
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from tests.helpers.paths import ROOT
from tests.helpers.ports import free_port


@dataclass
class LiveServer:
    url: str
    env: dict[str, str]
    models_dir: Path
    proc: subprocess.Popen
    model: str = "smollm2:135m"
    log_path: Path = field(default_factory=Path)

    def api(self, method: str, path: str, **kw: Any) -> requests.Response:
        return requests.request(method, self.url + path, timeout=kw.pop("timeout", 300), **kw)

    def unload(self, model: str | None = None) -> None:
        """Unload the model (keep_alive 0) and wait until /api/ps no longer lists it: its prompt cache is gone."""
        name = model or self.model
        self.api("POST", "/api/generate", json={"model": name, "keep_alive": 0})
        deadline = time.monotonic() + 60
        while any(m["name"] == name for m in self.api("GET", "/api/ps").json()["models"]):
            if time.monotonic() > deadline:
                raise AssertionError(f"{name} did not unload")
            time.sleep(0.05)


def upload_blob(url: str, path: Path) -> str:
    """Upload a file as a blob (skipped when the server has it) through our HTTP client; returns its digest."""
    from ollama_py.client.client import Client, file_digest

    client = Client(url)
    digest = file_digest(path)
    if not client.blob_exists(digest):
        client.create_blob(digest, path)
    return digest


def start_serve(tmp: Path, extra_env: dict[str, str] | None = None, *, host: str = "127.0.0.1",
                port: int | None = None) -> tuple[subprocess.Popen, str, dict[str, str]]:
    port = port or free_port()
    where = f"[{host}]" if ":" in host else host
    runners = os.environ.get("OLLAMA_PY_TEST_RUNNERS_DIR") or str(ROOT / "runners")
    env = {**os.environ, "OLLAMA_HOST": f"{where}:{port}", "OLLAMA_MODELS": str(tmp / "models"),
           "OLLAMA_PY_DATA_DIR": str(tmp / "data"), "OLLAMA_RUNNERS_DIR": runners,
           # Tests that compare two answers take each from a freshly loaded, empty runner (a prefix evaluated from a
           # cache is batched differently and can tip a near tie); the prompt cache kept across unloads would fill
           # it again, so it is off here and the tests of it turn it on (test_prompt_cache_real).
           "OLLAMA_PY_PROMPT_CACHE_DISK": "0", **(extra_env or {})}
    log = open(tmp / "serve.log", "ab")  # noqa: SIM115 - the child's stdout for as long as it runs
    proc = subprocess.Popen([sys.executable, "-m", "ollama_py", "serve"], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://{where}:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"serve exited early: {(tmp / 'serve.log').read_text()[-2000:]}")
        with contextlib.suppress(requests.RequestException):
            if requests.get(url + "/api/version", timeout=1).ok:
                return proc, url, env
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("serve did not answer in 60s")


def stop_serve(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def create_from_file(url: str, name: str, gguf: Path, **req: Any) -> None:
    digest = upload_blob(url, gguf)
    r = requests.post(f"{url}/api/create", json={"model": name, "files": {gguf.name: digest}, "stream": False, **req},
                      timeout=300)
    assert r.status_code == 200, r.text
