"""Shared fixtures.

- `tiny_gguf`: a small llama-architecture GGUF written with gguf.GGUFWriter (for fast tests with the fake runner).
- `fake_scheduler_factory` / `fake_server`: the real app and scheduler, whose runners are the fake llama-server
  (tests/fakes/fake_llama_server.py) — fast and deterministic.
- `live_server` (session): `ollama-py serve` as a subprocess with the real llama-server runner and the real SmolLM2
  model created as smollm2:135m. Paths come from the Makefile (OLLAMA_PY_TEST_*), so `make test` is the way in.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

ROOT = Path(__file__).resolve().parent.parent
FAKE_SERVER = ROOT / "tests" / "fakes" / "fake_llama_server.py"
_UNIT_DIRS = (ROOT / "tests" / "unit", ROOT / "tests" / "fakes")  # what they hold needs nothing built


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `unit` what needs no built runner, model or browser: tests/unit and tests/fakes, less `integration`.
    `make test` runs these first (`-m unit`), before it builds anything, and the rest after (`-m "not unit"`)."""
    for item in items:
        if any(item.path.is_relative_to(d) for d in _UNIT_DIRS) and item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.unit)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def required_path(var: str) -> Path:
    value = os.environ.get(var)
    if not value or not Path(value).exists():
        pytest.fail(f"{var} must point at an existing file (run the suite with `make test`, which sets it); "
                    f"got {value!r}")
    return Path(value)


def write_tiny_gguf(path: Path, *, arch: str = "llama", blocks: int = 2, embd: int = 64, vocab: int = 32,
                    ctx: int = 2048, chat_template: str | None = None, dtype: Any = np.float32,
                    scores: bool = False) -> Path:
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny")
    w.add_context_length(ctx)
    w.add_embedding_length(embd)
    w.add_block_count(blocks)
    w.add_feed_forward_length(embd * 2)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0 if dtype == np.float32 else 1)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(vocab)])
    if scores:  # as real vocabularies have them: a float per token
        w.add_token_scores([-i / 7 for i in range(vocab)])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    if chat_template:
        w.add_chat_template(chat_template)
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((vocab, embd)).astype(dtype))
    for i in range(blocks):
        for name, shape in (("attn_q", (embd, embd)), ("attn_k", (embd // 2, embd)), ("attn_v", (embd // 2, embd)),
                            ("attn_output", (embd, embd)), ("ffn_gate", (embd * 2, embd)),
                            ("ffn_up", (embd * 2, embd)), ("ffn_down", (embd, embd * 2))):
            w.add_tensor(f"blk.{i}.{name}.weight", rng.standard_normal(shape).astype(dtype))
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(embd, dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones(embd, dtype=np.float32))
    w.add_tensor("output.weight", rng.standard_normal((vocab, embd)).astype(dtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


# -- the app over the fake runner -------------------------------------------------------------------------------
def fake_runner_factory(settings: Any, fake_env: dict[str, str] | None = None):
    """A Scheduler runner factory that starts the fake llama-server with the real argv."""
    from ollama_py.runner.argv import build_argv
    from ollama_py.runner.process import RunnerProcess

    env = {**os.environ, **(fake_env or {})}

    def factory(plan, name, on_exit):
        return RunnerProcess(lambda port: [sys.executable, str(FAKE_SERVER), *build_argv(plan.spec, "x", port)[1:]],
                             name=name, env=env, load_timeout=settings.load_timeout, on_exit=on_exit)

    return factory


def fake_scheduler(settings: Any, fake_env: dict[str, str] | None = None):
    from ollama_py.scheduler.factory import plan_load
    from ollama_py.scheduler.scheduler import Scheduler

    return Scheduler(settings, plan=lambda m, o, e: plan_load(settings, [], 1 << 40, m, o, e),
                     runner_factory=fake_runner_factory(settings, fake_env))


def make_settings(tmp: Path, **overrides: Any):
    from ollama_py.config import Settings

    env = {"OLLAMA_MODELS": str(tmp / "models"), "OLLAMA_PY_DATA_DIR": str(tmp / "data"),
           "OLLAMA_HOST": f"127.0.0.1:{free_port()}"}
    return Settings.from_env(env, **overrides)


def create_tiny_model(settings: Any, gguf_path: Path, name: str = "tiny", **req: Any) -> None:
    from ollama_py.api.names import parse_name
    from ollama_py.store.create import create_model
    from ollama_py.store.models import ModelStore

    store = ModelStore(settings.models)
    digest, _ = store.blobs.write_file(gguf_path)
    for _ in create_model(store, parse_name(name), {"files": {"model.gguf": digest}, **req}):
        pass


@pytest.fixture
def fake_app(tmp_path: Path, tiny_gguf: Path):
    """Build (settings, app) for the fake runner; call with overrides for Settings and env for the fake."""
    from ollama_py.server.app import create_app

    def build(fake_env: dict[str, str] | None = None, **overrides: Any):
        settings = make_settings(tmp_path, **overrides)
        create_tiny_model(settings, tiny_gguf)
        return settings, create_app(settings, scheduler=fake_scheduler(settings, fake_env))

    return build


# -- the live server with the real runner and SmolLM2 -----------------------------------------------------------
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


def start_serve(tmp: Path, extra_env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str, dict[str, str]]:
    port = free_port()
    runners = os.environ.get("OLLAMA_PY_TEST_RUNNERS_DIR") or str(ROOT / "runners")
    env = {**os.environ, "OLLAMA_HOST": f"127.0.0.1:{port}", "OLLAMA_MODELS": str(tmp / "models"),
           "OLLAMA_PY_DATA_DIR": str(tmp / "data"), "OLLAMA_RUNNERS_DIR": runners, **(extra_env or {})}
    log = open(tmp / "serve.log", "ab")  # noqa: SIM115 - the child's stdout for as long as it runs
    proc = subprocess.Popen([sys.executable, "-m", "ollama_py", "serve"], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
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


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory):
    model_file = required_path("OLLAMA_PY_TEST_MODEL")
    tmp = tmp_path_factory.mktemp("live")
    proc, url, env = start_serve(tmp)
    try:
        create_from_file(url, "smollm2:135m", model_file)
        yield LiveServer(url=url, env={k: v for k, v in env.items()}, models_dir=tmp / "models", proc=proc,
                         log_path=tmp / "serve.log")
    finally:
        stop_serve(proc)
