"""A memory cap in front of llama.cpp's RPC server, for `ollama-py rpc-worker --mem MB`.

ggml-rpc-server has no memory limit of its own: it reports its device's whole free memory and allocates
whatever a client asks for. This relay sits on the worker's public port, passes the binary protocol through
to a ggml-rpc-server on a private loopback port, and changes three things:

- GET_DEVICE_MEMORY answers at most the cap (total) and the cap minus what clients hold (free), so the
  serving side's fit decision and llama.cpp's split by free memory see a device of that size;
- GET_MAX_SIZE answers at most the cap;
- ALLOC_BUFFER beyond the cap is refused as the server refuses an allocation it cannot make (remote_ptr 0),
  so a client that ignores the reported memory fails to load instead of overrunning the worker.

It also clears the transport capabilities in HELLO, so the two ends keep to plain TCP through the relay.

The protocol (ggml-rpc.cpp): a request is | cmd: u8 | size: u64 | payload |; the commands in REPLIED are
answered with | size: u64 | payload |. The client waits for each answer before it sends anything else, so
the relay handles one request at a time per connection. It does so with blocking sockets, a thread per
connection: every token of a spread model crosses it several times, and on the 2-core VM this was measured on
a blocked thread woke and relayed a message for about two thirds of the CPU an asyncio loop needed.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

ALLOC_BUFFER, GET_MAX_SIZE, FREE_BUFFER, GET_DEVICE_MEMORY, HELLO = 0, 2, 4, 11, 14
# ALLOC_BUFFER, GET_ALIGNMENT, GET_MAX_SIZE, BUFFER_GET_BASE, SET_TENSOR_HASH, GET_TENSOR, COPY_TENSOR,
# GET_DEVICE_MEMORY, GET_ALLOC_SIZE, HELLO, DEVICE_COUNT
REPLIED = frozenset({0, 1, 2, 3, 7, 8, 9, 11, 13, 14, 15})
COMMANDS = 19  # RPC_CMD_COUNT - 1 (RPC_CMD_NONE never goes over the wire)
HELLO_CAPS = 4  # hello reply: major, minor, patch, padding, then conn_caps
CHUNK = 1 << 20


@dataclass
class Ledger:
    """What clients hold on the worker, per device, against one cap that applies to each device."""

    cap: int
    used: dict[int, int] = field(default_factory=dict)  # device -> bytes
    buffers: dict[int, tuple[int, int]] = field(default_factory=dict)  # remote_ptr -> (device, bytes)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def free(self, device: int, reported: int) -> int:
        with self.lock:
            return max(min(reported, self.cap - self.used.get(device, 0)), 0)

    def reserve(self, device: int, size: int) -> bool:
        """Count `size` against the cap if it fits (an allocation about to be asked of the server)."""
        with self.lock:
            if self.used.get(device, 0) + size > self.cap:
                return False
            self.used[device] = self.used.get(device, 0) + size
            return True

    def settle(self, device: int, reserved: int, ptr: int, got: int) -> None:
        """The server's answer to a reserved allocation: `got` bytes at `ptr`, or nothing (ptr 0)."""
        with self.lock:
            self.used[device] = self.used.get(device, 0) - reserved + (got if ptr else 0)
            if ptr:
                self.buffers[ptr] = (device, got)

    def release(self, ptr: int) -> None:
        with self.lock:
            device, size = self.buffers.pop(ptr, (0, 0))
            self.used[device] = self.used.get(device, 0) - size


class _Closed(Exception):
    """One side of the relay closed its connection."""


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = sock.recv_into(view[got:])
        if not k:
            raise _Closed
        got += k
    return bytes(buf)


def _pipe(src: socket.socket, dst: socket.socket, size: int) -> None:
    """Copy `size` bytes without holding them all (SET_TENSOR carries whole weight tensors)."""
    buf = bytearray(min(size, CHUNK))
    view = memoryview(buf)
    while size:
        k = src.recv_into(view[: min(size, len(buf))])
        if not k:
            raise _Closed
        dst.sendall(view[:k])
        size -= k


def _message(payload: bytes) -> bytes:
    return struct.pack("<Q", len(payload)) + payload


def relay(client: socket.socket, server: socket.socket, ledger: Ledger) -> None:
    """Serve one client connection until either side closes it."""
    mine: set[int] = set()  # buffers of this connection: the server frees them when it closes
    try:
        while True:
            head = _exactly(client, 9)
            cmd, size = head[0], struct.unpack_from("<Q", head, 1)[0]
            if cmd >= COMMANDS:
                log.warning("rpc-worker: unknown command %d from a client; closing its connection", cmd)
                return
            if cmd not in (ALLOC_BUFFER, FREE_BUFFER, GET_DEVICE_MEMORY, GET_MAX_SIZE, HELLO):
                server.sendall(head)
                _pipe(client, server, size)
                if cmd in REPLIED:
                    _pipe(server, client, struct.unpack("<Q", _reply_head(server, client))[0])
                continue
            payload = _exactly(client, size)
            if cmd == HELLO:
                payload = bytes(len(payload))  # no transport upgrade through the relay
            elif cmd == ALLOC_BUFFER:
                device, want = struct.unpack_from("<IQ", payload)
                if not ledger.reserve(device, want):
                    log.warning("rpc-worker: refused %.1f MiB on device %d: over the %d MiB cap",
                                want / 2**20, device, ledger.cap >> 20)
                    client.sendall(_message(struct.pack("<QQ", 0, 0)))
                    continue
            elif cmd == FREE_BUFFER:
                ptr = struct.unpack_from("<Q", payload)[0]
                ledger.release(ptr)
                mine.discard(ptr)
            server.sendall(head + payload)
            if cmd not in REPLIED:
                continue
            answer = _exactly(server, struct.unpack("<Q", _exactly(server, 8))[0])
            if cmd == HELLO:
                answer = answer[:HELLO_CAPS] + bytes(len(answer) - HELLO_CAPS)
            elif cmd == ALLOC_BUFFER:
                ptr, got = struct.unpack_from("<QQ", answer)
                ledger.settle(device, want, ptr, got)
                if ptr:
                    mine.add(ptr)
            elif cmd == GET_DEVICE_MEMORY:
                free, total = struct.unpack_from("<QQ", answer)
                answer = struct.pack("<QQ", ledger.free(struct.unpack_from("<I", payload)[0], free),
                                     min(total, ledger.cap))
            elif cmd == GET_MAX_SIZE:
                answer = struct.pack("<Q", min(struct.unpack_from("<Q", answer)[0], ledger.cap))
            client.sendall(_message(answer))
    except (_Closed, OSError):
        return
    finally:
        for ptr in mine:
            ledger.release(ptr)


def _reply_head(server: socket.socket, client: socket.socket) -> bytes:
    head = _exactly(server, 8)
    client.sendall(head)
    return head


def serve(listener: socket.socket, upstream: tuple[str, int], cap: int,
          running: Callable[[], bool] = lambda: True) -> None:
    """Accept on `listener` and relay each connection, in a thread of its own, to the RPC server at `upstream`
    under a `cap` of bytes; return when running() turns false (checked twice a second)."""
    ledger = Ledger(cap)
    listener.settimeout(0.5)
    while running():
        try:
            client, _ = listener.accept()
        except TimeoutError:
            continue
        threading.Thread(target=_connection, args=(client, upstream, ledger), daemon=True).start()


def _connection(client: socket.socket, upstream: tuple[str, int], ledger: Ledger) -> None:
    with client:
        client.settimeout(None)
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            server = socket.create_connection(upstream)
        except OSError as e:
            log.warning("rpc-worker: the RPC server at %s:%d is not answering: %s", *upstream, e)
            return
        with server:
            server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            relay(client, server, ledger)
