"""Writing streams: Ollama's NDJSON and SSE (OpenAI, Anthropic), with errors that respect what was sent.

The first event is awaited before headers go out, so an error before any output gets a proper status code;
after that, an error becomes a final {"error": ...} line (or SSE error event). The event source is always
closed, so a client that hangs up frees its runner slot at once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import select
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from aiohttp import web

from ollama_py.errors import OllamaError
from ollama_py.server.errors import describe, error_body

log = logging.getLogger(__name__)


_SECOND: list[Any] = [None, ""]  # [whole second, its "YYYY-MM-DDTHH:MM:SS." text]


def now_rfc3339() -> str:
    """UTC now as Ollama writes created_at ("2024-05-01T12:00:00.123456Z"). Called once per streamed chunk, so
    the date and time are formatted once a second and only the microseconds per call."""
    ns = time.time_ns()
    second, micros = divmod(ns // 1000, 1_000_000)
    if second != _SECOND[0]:
        _SECOND[0] = second
        _SECOND[1] = dt.datetime.fromtimestamp(second, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.")
    return f"{_SECOND[1]}{micros:06d}Z"


# One encoder for every chunk: json.dumps with options builds a new JSONEncoder on each call.
_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def dumps(obj: Any) -> str:
    return _ENCODER.encode(obj)


class _StreamResponse(web.StreamResponse):
    """The headers leave with the first chunk, in one send: the first event is already in hand when the
    response is prepared, so holding them back delays nothing (aiohttp's own web.Response does the same)."""

    _send_headers_immediately = False


class DirectSink:
    """Chunks written straight to the client's socket from a worker thread (server/completion.py relays a
    token stream that way once the headers and the first chunk are out): the same HTTP/1.1 chunked framing
    aiohttp uses, so aiohttp writes the final chunk and the end of the body after it as usual. Usable only
    while aiohttp has nothing buffered for the socket and the response is chunked and uncompressed."""

    def __init__(self, encode: Callable[[Any], bytes]) -> None:
        self.encode = encode
        self._transport: Any = None
        self._sock: socket.socket | None = None
        self._poller: select.poll | None = None

    def bind(self, request: web.Request, resp: web.StreamResponse) -> None:
        if resp.headers.get("Transfer-Encoding") == "chunked" and not resp.compression and request.transport:
            self._transport = request.transport

    def ready(self) -> bool:
        t = self._transport
        return t is not None and not t.is_closing() and t.get_write_buffer_size() == 0

    def open(self) -> None:
        """(Event loop.) A dup of the client's socket for the worker thread."""
        raw = self._transport.get_extra_info("socket")
        self._sock = socket.socket(fileno=os.dup(raw.fileno()))
        self._poller = select.poll()
        self._poller.register(self._sock, select.POLLOUT)

    def write(self, item: Any) -> None:
        """(Worker thread.) One chunk; ConnectionResetError when the client is gone or stops reading."""
        assert self._sock is not None and self._poller is not None
        data = self.encode(item)
        view = memoryview(b"%x\r\n%s\r\n" % (len(data), data))
        while view:
            try:
                view = view[self._sock.send(view):]
            except BlockingIOError:
                if not self._poller.poll(_SEND_TIMEOUT_MS):
                    raise ConnectionResetError("client stopped reading") from None
            except OSError as e:
                raise ConnectionResetError(str(e)) from None

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


_SEND_TIMEOUT_MS = 60_000


async def _first(events: AsyncIterator[Any]) -> tuple[bool, Any]:
    try:
        return True, await events.__anext__()
    except StopAsyncIteration:
        return False, None


async def stream_response(
    request: web.Request,
    events: AsyncIterator[Any],
    *,
    content_type: str,
    encode: Callable[[Any], bytes],
    encode_error: Callable[[str], bytes],
    trailer: bytes = b"",
    sink: DirectSink | None = None,
) -> web.StreamResponse:
    """Write events as they come; the first is awaited before the headers go out. A sink is bound once they
    are: the event source may then write further chunks through it itself."""
    async with contextlib.aclosing(events):
        has_first, first = await _first(events)
        resp = _StreamResponse(status=200, headers={"Content-Type": content_type, "Cache-Control": "no-cache",
                                                    "X-Accel-Buffering": "no"})
        await resp.prepare(request)
        try:
            if has_first:
                await resp.write(encode(first))
                if sink is not None:
                    sink.bind(request, resp)
                async for event in events:
                    await resp.write(encode(event))
            if trailer:
                await resp.write(trailer)
        except OllamaError as e:
            log.warning("%s %s failed mid-stream: %s", request.method, request.path, e)
            await _write_error(resp, encode_error(str(e)))
        except (ConnectionResetError, ConnectionError):
            log.info("%s %s: client disconnected mid-stream", request.method, request.path)
            return resp
        except Exception as e:  # e.g. a full disk during a create: the client still gets a final error
            status, message = describe(e)
            if status == 500:
                log.exception("%s %s failed mid-stream", request.method, request.path)
            else:
                log.warning("%s %s failed mid-stream: %s", request.method, request.path, e)
            await _write_error(resp, encode_error(message))
        with contextlib.suppress(ConnectionError):
            await resp.write_eof()
    return resp


async def _write_error(resp: web.StreamResponse, data: bytes) -> None:
    with contextlib.suppress(ConnectionError):  # the client may be gone too
        await resp.write(data)


def ndjson_line(obj: Any) -> bytes:
    return (dumps(obj) + "\n").encode()


async def ndjson(request: web.Request, events: AsyncIterator[dict[str, Any]],
                 sink: DirectSink | None = None) -> web.StreamResponse:
    return await stream_response(
        request, events, content_type="application/x-ndjson", encode=ndjson_line,
        encode_error=lambda msg: (dumps({"error": msg}) + "\n").encode(), sink=sink,
    )


async def sse(request: web.Request, events: AsyncIterator[Any], *, done_marker: bool = True) -> web.StreamResponse:
    """SSE. An event is a dict (data only) or a (event_name, dict) pair (Anthropic's named events)."""

    def encode(ev: Any) -> bytes:
        if isinstance(ev, tuple):
            return f"event: {ev[0]}\ndata: {dumps(ev[1])}\n\n".encode()
        return f"data: {dumps(ev)}\n\n".encode()

    def encode_error(msg: str) -> bytes:
        body = error_body(request.path, 500, msg)
        if request.path.startswith("/v1/messages"):
            return f"event: error\ndata: {dumps(body)}\n\n".encode()
        return f"data: {dumps(body)}\n\n".encode()

    return await stream_response(request, events, content_type="text/event-stream", encode=encode,
                                 encode_error=encode_error, trailer=b"data: [DONE]\n\n" if done_marker else b"")


async def collect(events: AsyncIterator[Any]) -> list[Any]:
    async with contextlib.aclosing(events):
        return [e async for e in events]
