"""Slow and idle clients against a real `serve` (a subprocess): read deadlines and the connection cap keep the
gateway answering everyone else (issue 22.9).

The server runs with OLLAMA_PY_MAX_CONNECTIONS=8 and OLLAMA_PY_READ_TIMEOUT=2s so the deadlines pass quickly;
"closed" is read as the peer's EOF (or reset) on a socket with a generous timeout, never as a measured time.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from ollama_py.server.connections import default_max_connections
from tests.helpers.serve import start_serve, stop_serve

CAP = 8
GENEROUS = 20.0  # seconds a socket waits for the server before the test calls it "never closed"


@pytest.fixture(scope="module")
def serve(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    tmp: Path = tmp_path_factory.mktemp("conns")
    proc, url, _ = start_serve(tmp, {"OLLAMA_PY_MAX_CONNECTIONS": str(CAP), "OLLAMA_PY_READ_TIMEOUT": "2s",
                                     "OLLAMA_NOUI": "1"})
    try:
        yield url, int(url.rsplit(":", 1)[1])
    finally:
        stop_serve(proc)


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=GENEROUS)


def _closed_by_server(s: socket.socket) -> bool:
    """True once the server has closed the connection (EOF or reset); False if it was still open at GENEROUS."""
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


def _still_open(s: socket.socket) -> bool:
    s.settimeout(0.05)
    try:
        return s.recv(1) != b""
    except TimeoutError:
        return True
    except ConnectionError:
        return False


def test_an_idle_connection_without_a_request_is_closed(serve: tuple[str, int]) -> None:
    _, port = serve
    with _connect(port) as s:
        assert _closed_by_server(s)


def test_a_request_head_that_never_ends_is_closed(serve: tuple[str, int]) -> None:
    _, port = serve
    with _connect(port) as s:
        s.sendall(b"GET /api/version HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        assert _closed_by_server(s)


def test_a_body_that_stalls_is_closed(serve: tuple[str, int]) -> None:
    _, port = serve
    with _connect(port) as s:
        s.sendall(b"POST /api/show HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"model\":")
        assert _closed_by_server(s)


def test_a_normal_request_is_answered_while_slowloris_holds_more_than_the_cap(serve: tuple[str, int]) -> None:
    url, port = serve
    slow = [_connect(port) for _ in range(CAP * 4)]
    try:
        for s in slow:
            s.sendall(b"GET /api/version HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        r = requests.get(url + "/api/version", timeout=GENEROUS)
        assert r.status_code == 200 and "version" in r.json()
        # the longest-waiting connections made room: no more than the cap are left open
        assert sum(_still_open(s) for s in slow) <= CAP
    finally:
        for s in slow:
            s.close()


def test_over_the_cap_with_every_connection_busy_a_new_one_gets_503(serve: tuple[str, int]) -> None:
    """Busy = a request being handled; a body trickling in a byte at a time keeps its connection busy, and busy
    connections are never closed to make room."""
    url, port = serve
    stop = threading.Event()

    def busy_connection() -> socket.socket:
        s = _connect(port)
        s.sendall(b"POST /api/show HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100000\r\n\r\n ")
        return s

    busy = [busy_connection() for _ in range(CAP)]

    def trickle() -> None:
        while not stop.wait(0.3):
            for s in list(busy):
                with contextlib.suppress(OSError):
                    s.sendall(b" ")

    feeder = threading.Thread(target=trickle, daemon=True)
    feeder.start()
    try:
        # until all CAP requests are in their handlers, a new connection may still evict a waiting one (rule 3):
        # one so closed is opened again, so that all CAP are busy at last
        refused = None
        for _ in range(50):
            for i, s in enumerate(busy):
                if not _still_open(s):
                    s.close()
                    busy[i] = busy_connection()
            with _connect(port) as s:
                s.settimeout(GENEROUS)
                head = s.recv(4096)
            if head.startswith(b"HTTP/1.1 503"):
                refused = head
                break
            stop.wait(0.1)
        assert refused is not None
        assert b'{"error": "server busy: too many connections"}' in refused
    finally:
        stop.set()
        feeder.join()
        for s in busy:
            s.close()
    # once they are gone the server answers again
    for _ in range(100):
        with contextlib.suppress(requests.RequestException):
            if requests.get(url + "/api/version", timeout=GENEROUS).status_code == 200:
                break
        stop.wait(0.1)
    else:
        pytest.fail("the server did not answer after the busy connections closed")


@pytest.mark.parametrize("open_files,cap", [(1024, 512), (20, 16), (1 << 20, 16384)],
                         ids=["debian-default", "tiny-floor", "large-ceiling"])
def test_default_cap_is_half_the_open_file_limit(open_files: int, cap: int) -> None:
    assert default_max_connections(open_files) == cap
