"""A model spread over two llama.cpp RPC workers on loopback (issue 12)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import requests

from tests.helpers.paths import required_path
from tests.helpers.ports import free_port
from tests.helpers.serve import create_from_file, start_serve, stop_serve

pytestmark = pytest.mark.integration

PROMPT = {"prompt": "The capital of France is", "raw": True, "stream": False,
          "options": {"num_predict": 12, "temperature": 0, "seed": 3}}


def start_worker(port: int, env: dict[str, str], mem_mib: int | None = None) -> subprocess.Popen:
    cap = ["--mem", str(mem_mib)] if mem_mib else []
    proc = subprocess.Popen([sys.executable, "-m", "ollama_py", "rpc-worker", "--port", str(port), "--threads", "1",
                             *cap], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if any(c.laddr.port == port for c in psutil.net_connections("tcp") if c.status == "LISTEN"):
            return proc
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"rpc worker on {port} did not listen")


@pytest.fixture(scope="module")
def rpc_setup(tmp_path_factory):
    model = required_path("OLLAMA_PY_TEST_MODEL")
    tmp = tmp_path_factory.mktemp("rpc")
    env = {**os.environ, "OLLAMA_RUNNERS_DIR": os.environ.get("OLLAMA_PY_TEST_RUNNERS_DIR", "runners")}
    ports = [free_port(), free_port()]
    workers = [start_worker(p, env) for p in ports]
    servers = ",".join(f"127.0.0.1:{p}" for p in ports)
    proc, url, _ = start_serve(tmp, {"OLLAMA_RPC_SERVERS": servers})
    try:
        create_from_file(url, "smollm2:135m", model)
        yield url, proc, workers, ports
    finally:
        stop_serve(proc)
        for w in workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGKILL)
                w.wait()


def test_spread_output_equals_local_output(rpc_setup, live_server):
    url, proc, _, ports = rpc_setup
    spread = requests.post(url + "/api/generate", json={"model": "smollm2:135m", **PROMPT}, timeout=300).json()
    local = requests.post(live_server.url + "/api/generate", json={"model": live_server.model, **PROMPT},
                          timeout=300).json()
    assert spread["response"] == local["response"] and spread["response"]
    runner = [p for p in psutil.Process(proc.pid).children(recursive=True) if "llama-server" in " ".join(p.cmdline())]
    assert len(runner) == 1
    cmd = runner[0].cmdline()
    assert cmd[cmd.index("--rpc") + 1] == ",".join(f"127.0.0.1:{p}" for p in ports)
    # /api/ps shows the split: llama-server put layers on both workers
    devices = requests.get(url + "/api/ps", timeout=30).json()["models"][0]["devices"]
    for port in ports:
        assert any(f"127.0.0.1:{port}" in name and size > 0 for name, size in devices.items()), devices
    # and `ollama-py ps` shows it in the PROCESSOR column
    host = url.removeprefix("http://")
    out = subprocess.run([sys.executable, "-m", "ollama_py", "ps"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "OLLAMA_HOST": host})
    assert out.returncode == 0 and "RPC" in out.stdout.splitlines()[1], out.stdout


def test_worker_lost_mid_generation_errors_then_recovers(rpc_setup):
    url, proc, workers, ports = rpc_setup
    r = requests.post(url + "/api/generate", stream=True, timeout=300, json={
        "model": "smollm2:135m", "prompt": "Write a very long story about the sea.",
        "options": {"num_predict": 2000}})
    lines = r.iter_lines()
    first = json.loads(next(lines))
    assert first["done"] is False
    os.killpg(workers[1].pid, signal.SIGKILL)
    workers[1].wait()
    rest = [json.loads(line) for line in lines if line]
    assert "error" in rest[-1], rest[-1]
    assert f"127.0.0.1:{ports[1]}" in rest[-1]["error"]
    again = requests.post(url + "/api/generate", json={"model": "smollm2:135m", **PROMPT}, timeout=300)
    assert again.status_code == 200 and again.json()["response"]


def test_a_modelfile_picks_among_the_operators_workers_and_a_request_cannot(rpc_setup):
    url, proc, _, ports = rpc_setup

    def runner_cmd():
        runners = [p for p in psutil.Process(proc.pid).children(recursive=True)
                   if "llama-server" in " ".join(p.cmdline())]
        return runners[0].cmdline() if runners else []

    def create(name: str, servers: str) -> None:
        r = requests.post(url + "/api/create", timeout=300, json={
            "model": name, "from": "smollm2:135m", "parameters": {"rpc_servers": servers}, "stream": False})
        assert r.status_code == 200, r.text

    create("local-only", "")
    local = requests.post(url + "/api/generate", timeout=300, json={"model": "local-only", **PROMPT}).json()
    assert local["response"]
    assert "--rpc" not in runner_cmd()  # "" means: load on this machine only
    create("one-worker", f"127.0.0.1:{ports[0]}")
    one = requests.post(url + "/api/generate", timeout=300, json={"model": "one-worker", **PROMPT})
    assert one.status_code == 200
    cmd = runner_cmd()
    assert cmd[cmd.index("--rpc") + 1] == f"127.0.0.1:{ports[0]}"
    # a worker the operator did not list: refused, from a Modelfile and per request alike
    outside = f"127.0.0.1:{free_port()}"
    create("elsewhere", outside)
    r = requests.post(url + "/api/generate", timeout=300, json={"model": "elsewhere", **PROMPT})
    assert r.status_code == 400 and outside in r.json()["error"]
    r = requests.post(url + "/api/generate", timeout=300, json={
        "model": "smollm2:135m", **PROMPT, "options": {**PROMPT["options"], "rpc_servers": f"127.0.0.1:{ports[0]}"}})
    assert r.status_code == 400 and "rpc_servers" in r.json()["error"]


def test_a_workers_memory_is_read_for_the_plan(rpc_setup):
    """The fit decision counts what the workers can hold: llama.cpp asks them for their memory."""
    from ollama_py.runner.rpc import worker_memory

    env = {**os.environ, "OLLAMA_RUNNERS_DIR": os.environ.get("OLLAMA_PY_TEST_RUNNERS_DIR", "runners")}
    port = free_port()
    worker = start_worker(port, env)  # a worker no runner holds (one serves a single client at a time)
    try:
        binary = Path(env["OLLAMA_RUNNERS_DIR"]) / "cpu_avx2" / "llama-server"
        memory = asyncio.run(worker_memory(binary, (f"127.0.0.1:{port}",)))
        assert set(memory) == {f"127.0.0.1:{port}"}
        total, free = memory[f"127.0.0.1:{port}"]
        assert 0 < free <= total
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()


@pytest.fixture(scope="module")
def capped_workers():
    """Two workers held to 30 MiB and 300 MiB: SmolLM2 (~100 MB) cannot sit evenly on them."""
    env = {**os.environ, "OLLAMA_RUNNERS_DIR": os.environ.get("OLLAMA_PY_TEST_RUNNERS_DIR", "runners")}
    ports = [free_port(), free_port()]
    workers = [start_worker(ports[0], env, 30), start_worker(ports[1], env, 300)]
    try:
        yield [f"127.0.0.1:{p}" for p in ports]
    finally:
        for w in workers:
            os.killpg(w.pid, signal.SIGKILL)
            w.wait()


def test_a_worker_reports_its_memory_cap(capped_workers):
    from ollama_py.runner.rpc import worker_memory

    binary = Path(os.environ.get("OLLAMA_PY_TEST_RUNNER", "runners/cpu_avx2/llama-server"))
    memory = asyncio.run(worker_memory(binary, tuple(capped_workers)))
    assert memory == {capped_workers[0]: (30 << 20, 30 << 20), capped_workers[1]: (300 << 20, 300 << 20)}


def test_memory_caps_force_an_uneven_split_with_the_same_output(capped_workers, live_server, tmp_path):
    model = required_path("OLLAMA_PY_TEST_MODEL")
    # one slot: four slots' KV cache per layer no longer fits the 30 MiB worker at all, and the split is the point
    proc, url, _ = start_serve(tmp_path, {"OLLAMA_RPC_SERVERS": ",".join(capped_workers), "OLLAMA_NUM_PARALLEL": "1"})
    try:
        create_from_file(url, "smollm2:135m", model)
        spread = requests.post(url + "/api/generate", json={"model": "smollm2:135m", **PROMPT}, timeout=300).json()
        local = requests.post(live_server.url + "/api/generate", json={"model": live_server.model, **PROMPT},
                              timeout=300).json()
        assert spread["response"] == local["response"] and spread["response"]
        devices = requests.get(url + "/api/ps", timeout=30).json()["models"][0]["devices"]
        small, big = (next(size for name, size in devices.items() if w in name) for w in capped_workers)
        assert 0 < small <= 30 << 20 < big <= 300 << 20, devices
    finally:
        stop_serve(proc)


def test_a_worker_refuses_allocations_beyond_its_cap(capped_workers, tmp_path):
    """A client that ignores the reported memory (here: a forced split putting most layers on the small
    worker) fails to load with an error instead of overrunning the worker."""
    model = required_path("OLLAMA_PY_TEST_MODEL")
    proc, url, _ = start_serve(tmp_path, {"OLLAMA_RPC_SERVERS": capped_workers[0]})
    try:
        create_from_file(url, "smollm2:135m", model)
        r = requests.post(url + "/api/generate", json={"model": "smollm2:135m", **PROMPT,
                                                       "options": {**PROMPT["options"], "num_gpu": 31}}, timeout=300)
        assert r.status_code == 500 and "error" in r.json()
        ok = requests.post(url + "/api/generate", json={"model": "smollm2:135m", **PROMPT}, timeout=300)
        assert ok.status_code == 200 and ok.json()["response"]
    finally:
        stop_serve(proc)
