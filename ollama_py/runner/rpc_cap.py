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
the relay handles one request at a time per connection.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

ALLOC_BUFFER, GET_MAX_SIZE, FREE_BUFFER, GET_DEVICE_MEMORY, HELLO = 0, 2, 4, 11, 14
# ALLOC_BUFFER, GET_ALIGNMENT, GET_MAX_SIZE, BUFFER_GET_BASE, SET_TENSOR_HASH, GET_TENSOR, COPY_TENSOR,
# GET_DEVICE_MEMORY, GET_ALLOC_SIZE, HELLO, DEVICE_COUNT
REPLIED = frozenset({0, 1, 2, 3, 7, 8, 9, 11, 13, 14, 15})
COMMANDS = 19  # RPC_CMD_COUNT - 1 (RPC_CMD_NONE never goes over the wire)
HELLO_CAPS = slice(4, None)  # hello reply: major, minor, patch, padding, conn_caps[...]
CHUNK = 1 << 20


@dataclass
class Ledger:
    """What clients hold on the worker, per device, against one cap that applies to each device."""

    cap: int
    used: dict[int, int] = field(default_factory=dict)  # device -> bytes
    buffers: dict[int, tuple[int, int]] = field(default_factory=dict)  # remote_ptr -> (device, bytes)

    def free(self, device: int, reported: int) -> int:
        return max(min(reported, self.cap - self.used.get(device, 0)), 0)

    def admits(self, device: int, size: int) -> bool:
        return self.used.get(device, 0) + size <= self.cap

    def hold(self, ptr: int, device: int, size: int) -> None:
        self.buffers[ptr] = (device, size)
        self.used[device] = self.used.get(device, 0) + size

    def release(self, ptr: int) -> None:
        device, size = self.buffers.pop(ptr, (0, 0))
        self.used[device] = self.used.get(device, 0) - size


async def _read_request(reader: asyncio.StreamReader) -> tuple[int, int]:
    head = await reader.readexactly(9)
    return head[0], struct.unpack_from("<Q", head, 1)[0]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, size: int) -> None:
    """Copy `size` bytes without holding them all (SET_TENSOR carries whole weight tensors)."""
    while size:
        chunk = await reader.read(min(size, CHUNK))
        if not chunk:
            raise asyncio.IncompleteReadError(b"", size)
        writer.write(chunk)
        size -= len(chunk)
        await writer.drain()


def _message(payload: bytes) -> bytes:
    return struct.pack("<Q", len(payload)) + payload


async def relay(client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                server: tuple[asyncio.StreamReader, asyncio.StreamWriter], ledger: Ledger) -> None:
    """Serve one client connection until either side closes it."""
    c_in, c_out = client
    s_in, s_out = server
    mine: set[int] = set()  # buffers of this connection: the server frees them when it closes
    try:
        while True:
            cmd, size = await _read_request(c_in)
            if cmd >= COMMANDS:
                log.warning("rpc-worker: unknown command %d from a client; closing its connection", cmd)
                return
            if cmd in (ALLOC_BUFFER, FREE_BUFFER, GET_DEVICE_MEMORY, GET_MAX_SIZE, HELLO):
                payload = await c_in.readexactly(size)
                if cmd == HELLO:
                    payload = bytes(len(payload))  # no transport upgrade through the relay
                if cmd == ALLOC_BUFFER:
                    device, want = struct.unpack_from("<IQ", payload)
                    if not ledger.admits(device, want):
                        log.warning("rpc-worker: refused %.1f MiB on device %d: over the %d MiB cap "
                                    "(%.1f MiB held)", want / 2**20, device, ledger.cap >> 20,
                                    ledger.used.get(device, 0) / 2**20)
                        c_out.write(_message(struct.pack("<QQ", 0, 0)))
                        await c_out.drain()
                        continue
                if cmd == FREE_BUFFER:
                    ptr = struct.unpack_from("<Q", payload)[0]
                    ledger.release(ptr)
                    mine.discard(ptr)
                s_out.write(struct.pack("<BQ", cmd, size) + payload)
            else:
                s_out.write(struct.pack("<BQ", cmd, size))
                await _pipe(c_in, s_out, size)
            await s_out.drain()
            if cmd not in REPLIED:
                continue
            answer = await s_in.readexactly(struct.unpack("<Q", await s_in.readexactly(8))[0])
            if cmd == HELLO:
                answer = answer[:HELLO_CAPS.start] + bytes(len(answer) - HELLO_CAPS.start)
            elif cmd == ALLOC_BUFFER:
                ptr, got = struct.unpack_from("<QQ", answer)
                if ptr:
                    ledger.hold(ptr, device, got)
                    mine.add(ptr)
            elif cmd == GET_DEVICE_MEMORY:
                device = struct.unpack_from("<I", payload)[0]
                free, total = struct.unpack_from("<QQ", answer)
                answer = struct.pack("<QQ", ledger.free(device, free), min(total, ledger.cap))
            elif cmd == GET_MAX_SIZE:
                answer = struct.pack("<Q", min(struct.unpack_from("<Q", answer)[0], ledger.cap))
            c_out.write(_message(answer))
            await c_out.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        return
    finally:
        for ptr in mine:
            ledger.release(ptr)


async def serve(host: str, port: int, upstream: tuple[str, int], cap: int,
                connect: Callable[[str, int], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]]
                = asyncio.open_connection) -> asyncio.Server:
    """Listen on host:port and relay each connection to the RPC server at `upstream` under a `cap` of bytes."""
    ledger = Ledger(cap)

    async def on_client(c_in: asyncio.StreamReader, c_out: asyncio.StreamWriter) -> None:
        try:
            s_in, s_out = await connect(*upstream)
        except OSError as e:
            log.warning("rpc-worker: the RPC server at %s:%d is not answering: %s", *upstream, e)
            c_out.close()
            return
        try:
            await relay((c_in, c_out), (s_in, s_out), ledger)
        finally:
            for w in (s_out, c_out):
                w.close()

    return await asyncio.start_server(on_client, host, port)
