"""The --mem relay against a small fake of ggml-rpc-server's protocol: what a client (llama.cpp) is told and
allowed, and that memory comes back when buffers are freed or a client goes away."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

import pytest

from ollama_py.runner import rpc_cap

MiB = 1 << 20
REAL_FREE, REAL_TOTAL = 8000 * MiB, 16000 * MiB


def fake_rpc_server(listener: socket.socket) -> None:
    """Answers HELLO, GET_DEVICE_MEMORY, GET_MAX_SIZE and ALLOC_BUFFER (ptr = a counter) like the real one."""
    def serve(conn: socket.socket) -> None:
        ptr = 0x1000
        with conn, contextlib.suppress(rpc_cap._Closed, OSError):  # the relay hung up
            while True:
                head = rpc_cap._exactly(conn, 9)
                cmd, size = head[0], struct.unpack_from("<Q", head, 1)[0]
                payload = rpc_cap._exactly(conn, size)
                if cmd == rpc_cap.HELLO:
                    reply = bytes([3, 6, 0, 0]) + b"\xff" * (size)  # caps the relay must clear
                elif cmd == rpc_cap.GET_DEVICE_MEMORY:
                    reply = struct.pack("<QQ", REAL_FREE, REAL_TOTAL)
                elif cmd == rpc_cap.GET_MAX_SIZE:
                    reply = struct.pack("<Q", 1 << 62)
                elif cmd == rpc_cap.ALLOC_BUFFER:
                    ptr += 0x1000
                    reply = struct.pack("<QQ", ptr, struct.unpack_from("<IQ", payload)[1])
                else:
                    continue  # FREE_BUFFER and the like: no reply
                conn.sendall(rpc_cap._message(reply))

    while True:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


@pytest.fixture
def worker():
    """A relay capped at 100 MiB in front of the fake server; yields a function that opens a client."""
    upstream = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=fake_rpc_server, args=(upstream,), daemon=True).start()
    listener = socket.create_server(("127.0.0.1", 0))
    running = [True]
    relay = threading.Thread(target=rpc_cap.serve, args=(listener, upstream.getsockname(), 100 * MiB),
                             kwargs={"running": lambda: running[0]}, daemon=True)
    relay.start()

    def connect() -> socket.socket:
        return socket.create_connection(listener.getsockname())

    yield connect
    running[0] = False
    relay.join(2)
    listener.close()
    upstream.close()


def ask(sock: socket.socket, cmd: int, payload: bytes, reply: bool = True) -> bytes:
    sock.sendall(struct.pack("<BQ", cmd, len(payload)) + payload)
    if not reply:
        return b""
    return rpc_cap._exactly(sock, struct.unpack("<Q", rpc_cap._exactly(sock, 8))[0])


def memory(sock: socket.socket) -> tuple[int, int]:
    return struct.unpack("<QQ", ask(sock, rpc_cap.GET_DEVICE_MEMORY, struct.pack("<I", 0)))


def alloc(sock: socket.socket, size: int) -> int:
    return struct.unpack("<QQ", ask(sock, rpc_cap.ALLOC_BUFFER, struct.pack("<IQ", 0, size)))[0]


def test_hello_keeps_the_version_and_drops_transport_upgrades(worker):
    with worker() as c:
        answer = ask(c, rpc_cap.HELLO, b"\x01" * 32)
        assert answer[:3] == bytes([3, 6, 0]) and set(answer[4:]) == {0}


def test_memory_is_reported_against_the_cap(worker):
    with worker() as c:
        ask(c, rpc_cap.HELLO, bytes(32))
        assert memory(c) == (100 * MiB, 100 * MiB)
        assert struct.unpack("<Q", ask(c, rpc_cap.GET_MAX_SIZE, struct.pack("<I", 0)))[0] == 100 * MiB
        first = alloc(c, 60 * MiB)
        assert first and memory(c) == (40 * MiB, 100 * MiB)
        assert alloc(c, 50 * MiB) == 0  # over the cap: refused like a failed allocation
        ask(c, rpc_cap.FREE_BUFFER, struct.pack("<Q", first), reply=False)
        assert memory(c) == (100 * MiB, 100 * MiB)
        assert alloc(c, 50 * MiB)


def test_a_client_that_goes_away_gives_its_memory_back(worker):
    with worker() as c:
        ask(c, rpc_cap.HELLO, bytes(32))
        assert alloc(c, 90 * MiB)
    with worker() as again:
        ask(again, rpc_cap.HELLO, bytes(32))
        for _ in range(50):  # the first connection's thread notices the close
            if memory(again)[0] == 100 * MiB:
                break
            threading.Event().wait(0.02)
        assert memory(again) == (100 * MiB, 100 * MiB)
