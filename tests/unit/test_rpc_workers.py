"""Who chooses the RPC workers a model's weights go to (the operator, never a request: issue 22.2), and how
they are asked for their memory (off the event loop, a bounded cache, a probe that dies with us)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from ollama_py.runner import rpc
from tests.helpers.app import create_tiny_model


@pytest.fixture
def listener() -> Iterator[tuple[socket.socket, str]]:
    """A TCP listener the test owns: a connection to it shows up as a pending accept."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    sock.setblocking(False)
    try:
        yield sock, f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def connections_to(sock: socket.socket) -> int:
    n = 0
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return n
        conn.close()
        n += 1


REQUESTS = [
    pytest.param("/api/generate", {"prompt": "hi"}, id="generate"),
    pytest.param("/api/chat", {"messages": [{"role": "user", "content": "hi"}]}, id="chat"),
    pytest.param("/api/embed", {"input": "hi"}, id="embed"),
]


@pytest.mark.parametrize(("path", "body"), REQUESTS)
async def test_a_request_cannot_send_the_weights_to_a_worker_of_its_choice(
        path: str, body: dict[str, Any], listener: Any, fake_app: Any, aiohttp_client: Any) -> None:
    sock, endpoint = listener
    _, app = fake_app()
    client = await aiohttp_client(app)
    resp = await client.post(path, json={"model": "tiny", **body, "options": {"rpc_servers": endpoint}})
    assert resp.status == 400
    assert (await resp.json())["error"] == (
        'option "rpc_servers" cannot be set per request: RPC workers are chosen by the server '
        "(OLLAMA_RPC_SERVERS, or a Modelfile PARAMETER naming some of them)")
    assert connections_to(sock) == 0
    assert (await (await client.get("/api/ps")).json())["models"] == []  # nothing was loaded


async def test_a_modelfile_naming_a_worker_the_operator_did_not_list_is_refused(
        listener: Any, fake_app: Any, aiohttp_client: Any, tiny_gguf: Path) -> None:
    sock, endpoint = listener
    settings, app = fake_app(rpc_servers=("127.0.0.1:9",))  # the fake runner never dials its workers
    create_tiny_model(settings, tiny_gguf, name="elsewhere", parameters={"rpc_servers": endpoint})
    client = await aiohttp_client(app)
    resp = await client.post("/api/generate", json={"model": "elsewhere", "prompt": "hi"})
    assert resp.status == 400
    assert (await resp.json())["error"] == (
        f"rpc_servers names RPC workers that are not in the server's OLLAMA_RPC_SERVERS: {endpoint}")
    assert connections_to(sock) == 0
    # the same model without the parameter still answers
    resp = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False,
                                                     "options": {"num_predict": 2}})
    assert resp.status == 200, await resp.text()


@pytest.mark.parametrize(("parameter", "expected"), [
    pytest.param(None, ("a:1", "b:2"), id="unset-all-of-them"),
    pytest.param("", (), id="empty-this-machine-only"),
    pytest.param("b:2", ("b:2",), id="one-of-them"),
    pytest.param(" b:2 , a:1 ,b:2", ("b:2", "a:1"), id="spaces-and-repeats"),
])
def test_a_modelfile_picks_among_the_operators_workers(parameter: str | None, expected: tuple[str, ...]) -> None:
    assert rpc.workers_for(parameter, ("a:1", "b:2")) == expected


# -- the memory probe --------------------------------------------------------------------------------------------

def fake_list_devices(tmp_path: Path, *, silent: bool = False) -> Path:
    """A `llama-server --list-devices` look-alike: logs each call (and its pid), then lists the RPC devices it was
    given, or (silent) waits for ever as the real one does against a worker that never answers."""
    script = tmp_path / "llama-server"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent(f"""\
        import os, sys, time
        with open({str(tmp_path / 'calls')!r}, "a") as f:
            f.write(f"{{os.getpid()}} {{sys.argv[2]}}\\n")
        if {silent!r}:
            time.sleep(600)
        for i, endpoint in enumerate(sys.argv[2].split(",")):
            print(f"  RPC{{i}}: {{endpoint}} (1024 MiB, 512 MiB free)")
        """))
    script.chmod(0o755)
    return script


def calls(tmp_path: Path) -> list[tuple[int, str]]:
    path = tmp_path / "calls"
    lines = path.read_text().splitlines() if path.exists() else []
    return [(int(pid), servers) for pid, servers in (line.split(" ", 1) for line in lines)]


async def test_worker_memory_is_asked_once_per_set_and_the_cache_is_bounded(tmp_path: Path, listener: Any) -> None:
    _, endpoint = listener
    binary = fake_list_devices(tmp_path)
    probe = rpc.WorkerProbe(lambda: binary, size=2)
    sets = [(endpoint,), (endpoint, "127.0.0.1:1"), ("127.0.0.1:1", endpoint)]
    assert await probe.free(sets[0]) == {endpoint: 512 << 20}
    assert await probe.free(sets[0]) == {endpoint: 512 << 20}
    assert len(calls(tmp_path)) == 1  # asked once
    for servers in sets[1:]:  # two more sets push the first out of a cache of two
        assert await probe.free(servers) == {endpoint: 512 << 20}  # the unreachable one is left out
    assert len(calls(tmp_path)) == 3
    await probe.free(sets[0])
    assert len(calls(tmp_path)) == 4


async def test_a_probe_of_a_silent_worker_is_killed_after_its_timeout(tmp_path: Path, listener: Any) -> None:
    _, endpoint = listener
    binary = fake_list_devices(tmp_path, silent=True)
    gaps: list[float] = []

    async def ticker() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    try:
        assert await rpc.worker_memory(binary, (endpoint,), timeout=3.0) == {}
    finally:
        task.cancel()
    [(pid, _)] = calls(tmp_path)
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert gaps and max(gaps) < 1.5  # the event loop kept running while the probe waited


def test_a_probe_dies_with_the_server_that_started_it(tmp_path: Path, listener: Any) -> None:
    _, endpoint = listener
    binary = fake_list_devices(tmp_path, silent=True)
    code = ("import asyncio, sys; from pathlib import Path; from ollama_py.runner.rpc import worker_memory; "
            "asyncio.run(worker_memory(Path(sys.argv[1]), (sys.argv[2],), timeout=600))")
    server = subprocess.Popen([sys.executable, "-c", code, str(binary), endpoint], cwd=Path(__file__).parents[2])
    try:
        deadline = time.monotonic() + 30
        while not calls(tmp_path):
            assert time.monotonic() < deadline and server.poll() is None, "the probe did not start"
            time.sleep(0.05)
        [(pid, _)] = calls(tmp_path)
        os.kill(server.pid, signal.SIGKILL)  # serve killed mid-probe
        server.wait()
        deadline = time.monotonic() + 30
        while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the probe outlived the server"
            time.sleep(0.05)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        for pid, _ in calls(tmp_path):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
