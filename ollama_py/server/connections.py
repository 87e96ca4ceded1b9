"""The gateway's connections: read deadlines and a cap, so slow or idle clients cannot starve the rest.

    ConnectionGuard(max_connections, read_timeout)   one per app; counts and watches every connection
    GuardedSite(runner, sock, guard)                 an aiohttp site whose connections go through the guard
    guard.middleware                                 marks a connection busy while a request is handled

A connection is *busy* from the moment its request head is complete (the middleware runs) until its handler
returns; otherwise it is *waiting*. The rules, checked by one sweeper task:

1. A waiting connection must complete a request head within `read_timeout` of being accepted, or of its first
   byte after the previous response; otherwise it is closed. (An idle keep-alive connection that sends nothing
   is aiohttp's: it closes it after its keepalive_timeout.)
2. A busy connection whose request body is unfinished is closed when no byte of it has arrived for
   `read_timeout` while the server was reading (a pause the server asked for, by flow control, does not count).
3. At `max_connections`, a new connection first makes room by closing the waiting connection that has waited
   longest; when every connection is busy, the new one is answered 503 and closed at once.

Without this, connections that never finish their headers pile up until the process runs out of file
descriptors and every request fails (issue 22.9).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import resource
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)

_BUSY_BODY = json.dumps({"error": "server busy: too many connections"}).encode()
_REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json; charset=utf-8\r\n"
            b"Retry-After: 1\r\nConnection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


def raise_open_file_limit() -> int:
    """Raise RLIMIT_NOFILE's soft limit to the hard one (each connection and each runner's pipes take
    descriptors); returns the soft limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError) as e:  # macOS refuses more than OPEN_MAX for an unlimited hard limit
            log.debug("could not raise the open-file limit to %d: %s", want, e)
    return soft


def open_file_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


def default_max_connections(open_files: int) -> int:
    """Half the descriptors for clients (the rest for runners, blobs and logs), at most 16384."""
    return max(16, min(open_files // 2, 16384))


@dataclass(slots=True)
class _Conn:
    transport: asyncio.Transport
    waiting_since: float | None  # when the current wait for a request head began; None while busy or idle
    idle_since: float  # when it last became not busy (or was accepted): the eviction order
    request: web.BaseRequest | None = None
    last_read: float = 0.0


class ConnectionGuard:
    def __init__(self, max_connections: int, read_timeout: float) -> None:
        self.max_connections = max_connections
        self.read_timeout = read_timeout
        self._conns: dict[asyncio.BaseTransport, _Conn] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self.refused = 0
        self.timed_out = 0
        self.evicted = 0

    @property
    def open_connections(self) -> int:
        return len(self._conns)

    # -- the protocol side -------------------------------------------------------------------------------------

    def protocol_factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        def make() -> asyncio.Protocol:
            if len(self._conns) >= self.max_connections and not self._evict_one():
                self.refused += 1
                return _Refused()
            return _Guarded(self, inner())

        return make

    def _evict_one(self) -> bool:
        waiting = [c for c in self._conns.values() if c.request is None]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda c: c.idle_since)
        self.evicted += 1
        log.debug("connection cap %d reached: closing the longest-waiting connection", self.max_connections)
        self._close(oldest)
        return True

    def _close(self, conn: _Conn) -> None:
        self._conns.pop(conn.transport, None)  # counted out now: its connection_lost comes a loop turn later
        conn.transport.abort()

    def _opened(self, transport: asyncio.Transport) -> None:
        now = asyncio.get_running_loop().time()
        self._conns[transport] = _Conn(transport, waiting_since=now, idle_since=now)
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    def _closed(self, transport: asyncio.BaseTransport) -> None:
        self._conns.pop(transport, None)

    def _received(self, transport: asyncio.BaseTransport) -> None:
        conn = self._conns.get(transport)
        if conn is None:
            return
        now = asyncio.get_running_loop().time()
        if conn.request is not None:
            conn.last_read = now
        elif conn.waiting_since is None:
            conn.waiting_since = now  # the first byte of the next request head

    # -- the request side --------------------------------------------------------------------------------------

    @web.middleware
    async def middleware(self, request: web.Request, handler: Callable[[web.Request], Awaitable[Any]]) -> Any:
        conn = self._conns.get(request.transport) if request.transport is not None else None
        if conn is None:  # a test client without the guarded site, or a connection just evicted
            return await handler(request)
        conn.request, conn.waiting_since = request, None
        conn.last_read = asyncio.get_running_loop().time()
        try:
            return await handler(request)
        finally:
            conn.request = None
            conn.idle_since = asyncio.get_running_loop().time()

    # -- deadlines ---------------------------------------------------------------------------------------------

    async def _sweep(self) -> None:
        loop = asyncio.get_running_loop()
        tick = max(0.05, min(1.0, self.read_timeout / 4))
        while self._conns:
            await asyncio.sleep(tick)
            now = loop.time()
            for conn in list(self._conns.values()):
                if conn.request is None:
                    if conn.waiting_since is not None and now - conn.waiting_since > self.read_timeout:
                        self._time_out(conn, "request head")
                elif not conn.request.content.is_eof():
                    if not _is_reading(conn.transport):
                        conn.last_read = now  # paused by our flow control: the client is not to blame
                    elif now - conn.last_read > self.read_timeout:
                        self._time_out(conn, "request body")

    def _time_out(self, conn: _Conn, what: str) -> None:
        self.timed_out += 1
        peer = conn.transport.get_extra_info("peername")
        log.debug("closing connection from %s: no complete %s within %gs", peer, what, self.read_timeout)
        self._close(conn)

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper


def _is_reading(transport: asyncio.Transport) -> bool:
    try:
        return transport.is_reading()
    except (AttributeError, NotImplementedError):
        return True


class _Guarded(asyncio.Protocol):
    """aiohttp's RequestHandler with the guard told of each connection, each read and each close."""

    __slots__ = ("_guard", "_inner", "_transport")

    def __init__(self, guard: ConnectionGuard, inner: Any) -> None:
        self._guard = guard
        self._inner = inner
        self._transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport
        self._guard._opened(transport)  # type: ignore[arg-type]
        self._inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._guard._received(self._transport)  # type: ignore[arg-type]
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self._guard._closed(self._transport)  # type: ignore[arg-type]
        self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self._inner.pause_writing()

    def resume_writing(self) -> None:
        self._inner.resume_writing()


class _Refused(asyncio.Protocol):
    """Over the cap with every connection busy: a 503 and the door closed, before reading anything."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.write(_REFUSAL)  # type: ignore[attr-defined]  # a stream transport (uvloop's is no subclass)
        transport.close()


class GuardedSite(web.BaseSite):
    """web.SockSite with the guard in front of aiohttp's protocol."""

    def __init__(self, runner: web.BaseRunner, sock: socket.socket, guard: ConnectionGuard, *,
                 backlog: int = 128) -> None:
        super().__init__(runner, backlog=backlog)
        self._sock = sock
        self._guard = guard
        self._app_runner = runner

    @property
    def name(self) -> str:
        host, port = self._sock.getsockname()[:2]
        return f"http://{host}:{port}"

    async def start(self) -> None:
        await super().start()
        server = self._app_runner.server
        assert server is not None
        self._server = await asyncio.get_running_loop().create_server(
            self._guard.protocol_factory(server), sock=self._sock, backlog=self._backlog)

    async def stop(self) -> None:
        await super().stop()
        await self._guard.stop()
