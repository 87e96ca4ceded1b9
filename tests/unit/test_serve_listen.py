"""Where `serve` listens: on 127.0.0.1 and IPv6's loopback both by default, so a client that resolves "localhost"
to ::1 first reaches it (with Ollama, which listens on 127.0.0.1 alone, such clients get "ECONNREFUSED
::1:11434"); never beyond loopback; and a port already taken is one readable line."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.helpers.ports import free_port
from tests.helpers.serve import start_serve, stop_serve


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not _ipv6_loopback(), reason="this machine has no IPv6 loopback to listen on")


def _listening(pid: int) -> set[str]:
    """The addresses the process listens on (psutil, as `ss -ltn` shows them)."""
    import psutil

    return {f"[{c.laddr.ip}]:{c.laddr.port}" if ":" in c.laddr.ip else f"{c.laddr.ip}:{c.laddr.port}"
            for c in psutil.Process(pid).net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}


@needs_ipv6
def test_serve_answers_on_both_loopbacks_and_listens_nowhere_else(tmp_path: Path):
    proc, url, _env = start_serve(tmp_path)  # OLLAMA_HOST=127.0.0.1:PORT, as the default host
    try:
        port = int(url.rsplit(":", 1)[1])
        assert requests.get(f"http://[::1]:{port}/api/version", timeout=10).ok
        assert requests.get(f"http://127.0.0.1:{port}/api/version", timeout=10).ok
        assert requests.get(f"http://localhost:{port}/api/version", timeout=10).ok  # whichever it resolves to
        assert _listening(proc.pid) == {f"127.0.0.1:{port}", f"[::1]:{port}"}
    finally:
        stop_serve(proc)
    log = (tmp_path / "serve.log").read_text()
    assert f"msg=Listening on 127.0.0.1:{port} and [::1]:{port} (version " in log


@needs_ipv6
def test_ipv6_loopback_taken_by_another_program_leaves_serve_on_127_0_0_1_with_a_warning(tmp_path: Path):
    port = free_port()
    with socket.socket(socket.AF_INET6) as other:
        other.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        other.bind(("::1", port))
        other.listen()
        proc, _url, _env = start_serve(tmp_path, port=port)
        try:
            assert requests.get(f"http://127.0.0.1:{port}/api/version", timeout=10).ok
            assert _listening(proc.pid) == {f"127.0.0.1:{port}"}
        finally:
            stop_serve(proc)
    log = (tmp_path / "serve.log").read_text()
    assert f"level=WARNING source=ollama_py.server.serve msg=not also listening on [::1]:{port}: address already " \
           "in use" in log


@needs_ipv6
def test_an_explicit_ipv6_loopback_host_is_the_only_one(tmp_path: Path):
    port = free_port()
    proc, _url, _env = start_serve(tmp_path, host="::1", port=port)
    try:
        assert _listening(proc.pid) == {f"[::1]:{port}"}
    finally:
        stop_serve(proc)


def test_a_port_already_taken_is_one_line(tmp_path: Path):
    port = free_port()
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind(("127.0.0.1", port))
        other.listen()
        env = {**os.environ, "OLLAMA_HOST": f"127.0.0.1:{port}", "OLLAMA_MODELS": str(tmp_path / "models"),
               "OLLAMA_PY_DATA_DIR": str(tmp_path / "data")}
        done = subprocess.run([sys.executable, "-m", "ollama_py", "serve"], env=env, capture_output=True, text=True,
                              timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == f"Error: listen tcp 127.0.0.1:{port}: bind: address already in use"
    assert "Traceback" not in done.stderr
