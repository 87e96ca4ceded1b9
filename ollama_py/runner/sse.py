"""One streamed POST to llama-server, read as server-sent events by a small asyncio protocol.

This is the gateway's hot path: every generated token crosses it. A general HTTP client costs several
coroutine hops, a timer reschedule and two readline calls per event; this protocol parses the response as
bytes arrive (status line, headers, chunked or close-delimited body, `data:` lines), decodes each event once
and hands the consumer everything that arrived in one read without another wake-up. A silence longer than
`read_timeout` is found by one timer that re-arms itself, not by rescheduling a timer per event.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import re
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any, TypeVar

from ollama_py import bigjson, fastjson
from ollama_py.errors import BadRequest, ContextExceeded, OllamaError, RunnerError

_HIGH_WATER, _LOW_WATER = 256, 32  # events queued before reading pauses / resumes (a slow client)
_MAX_HEAD = 64 * 1024
_TICKS = 4  # looks at a stream's read count per read_timeout (a stall is found within 1.25 read_timeouts)

# One HTTP chunk holding one plain token event exactly as llama-server streams it (compact JSON, these fields in
# this order) whose content has nothing escaped: its text and token ids are taken by one match, with no
# de-chunking, line splitting or JSON decoding (see SSEStream.divert). Anything else takes the general path.
_PLAIN = re.compile(rb'([0-9a-f]{1,8})\r\ndata: \{"index":0,"content":"([^"\\\x00-\x1f]*)","tokens":\[([0-9,]*)\],'
                    rb'"stop":false,"id_slot":-?[0-9]+,"tokens_predicted":[0-9]+,"tokens_evaluated":[0-9]+\}\n\n\r\n')


class UpstreamLost(RunnerError):
    """The connection to llama-server broke mid-request (the child probably died)."""


class RunnerStalled(RunnerError):
    """llama-server sent nothing for `read_timeout` seconds mid-request: it is hung (stopped, deadlocked)."""


def error_from(status: int, text: str) -> OllamaError:
    """llama-server's error body ({"error": {"message": ...}} or plain text) as our error."""
    err: Any = None
    try:
        err = json.loads(text).get("error", text)
        message = err.get("message", text) if isinstance(err, dict) else str(err)
    except (ValueError, AttributeError):
        message = text
    if status == 400:
        if isinstance(err, dict) and err.get("type") == "exceed_context_size_error":
            return ContextExceeded(message, int(err.get("n_prompt_tokens") or 0), int(err.get("n_ctx") or 0))
        return BadRequest(message)
    return RunnerError(f"llama-server {status}: {message}")


class SSEStream(asyncio.Protocol):
    """The response to one request; `stream_events` yields its `data:` payloads as dicts."""

    def __init__(self, loop: asyncio.AbstractEventLoop, read_timeout: float | None) -> None:
        self._loop = loop
        self._read_timeout = read_timeout
        self._transport: asyncio.Transport | None = None
        self._head = bytearray()  # status line and headers, until the blank line
        self.status = 0
        self._chunked = False
        self._remaining = -1  # body bytes left: Content-Length, or of the current chunk when chunked
        self._need_crlf = False  # chunked: the CRLF after a chunk's data is still to come
        self._raw = bytearray()  # body bytes not yet de-chunked
        self._text = bytearray()  # de-chunked body not yet split into lines
        self._events: collections.deque[dict[str, Any]] = collections.deque()
        self._waiter: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._finished = False  # saw the last event ([DONE], stop, or a non-200 body complete)
        self._closed = False
        self._paused = False
        self._reads = 0  # reads so far; the silence timer compares it with what it saw last time
        self._timer: asyncio.TimerHandle | None = None
        self._sink: Callable[[dict[str, Any]], bool] | None = None
        self._plain_sink: Callable[[bytes, bytes], bool] | None = None
        self._boundary = False  # a 200 chunked body, between chunks, nothing held back: where plain events may start
        self.queued = 0  # events queued for the consumer so far (not taken by a diverted sink)
        self.spare = False  # opened ahead of its request (Spare)

    # -- the protocol side -------------------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self._rearm()

    def data_received(self, data: bytes) -> None:
        self._reads += 1
        sink = self._plain_sink
        if sink is not None and self._boundary:  # plain token events, taken whole while the sink accepts them
            pos, end = 0, len(data)
            while pos < end:
                m = _PLAIN.match(data, pos)
                if m is None or int(m[1], 16) != m.end() - m.end(1) - 4 or not sink(m[2], m[3]):
                    break
                pos = m.end()
            if pos == end:
                return
            if pos:
                data = data[pos:]
        try:
            if not self.status:
                self._head += data
                end = self._head.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._head) > _MAX_HEAD:
                        raise UpstreamLost("llama-server sent an oversized response head")
                    return
                data = bytes(self._head[end + 4 :])
                self._parse_head(bytes(self._head[:end]))
                if self._remaining == 0:  # Content-Length: 0
                    self._end_of_body()
            self._body(data)
        except RunnerError as e:
            self.fail(e)
            return
        if self._events or self._finished:  # a read that only fed a diverted sink wakes nobody
            self._wake()
        if len(self._events) > _HIGH_WATER and not self._paused and self._transport is not None:
            self._paused = True
            self._transport.pause_reading()

    def eof_received(self) -> bool | None:
        if self.status and not self._chunked and self._remaining < 0:
            self._end_of_body()  # a close-delimited body
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
        if not self._finished and self._error is None:
            self._error = UpstreamLost(f"connection to llama runner lost: {exc}" if exc else
                                       "llama runner closed the stream before it was done")
        self._wake()

    def fail(self, error: BaseException) -> None:
        """End the request with this error (also: the runner is being stopped) and drop the connection."""
        if self._error is None and not self._finished:
            self._error = error
        if self._transport is not None:
            self._transport.abort()
        self._wake()

    def _check_silence(self, reads: int, quiet: int) -> None:
        """Every `read_timeout / _TICKS` seconds: a stream that read nothing in the last _TICKS looks (and is
        not paused for a slow client) has been silent for `read_timeout`. One timer a stream; reads only count."""
        assert self._read_timeout
        if self._finished or self._closed:
            return
        quiet = quiet + 1 if reads == self._reads and not self._paused else 0
        if quiet >= _TICKS:
            self.fail(RunnerStalled(f"llama runner stopped responding: no output for {self._read_timeout:g}s"))
        else:
            self._timer = self._loop.call_later(self._read_timeout / _TICKS, self._check_silence, self._reads, quiet)

    def _rearm(self) -> None:
        """The silence timer started: on connecting, and anew when a spare connection gets its request (its idle
        time before that is no silence)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._read_timeout and not self._closed:
            self._timer = self._loop.call_later(self._read_timeout / _TICKS, self._check_silence, -1, 0)

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- parsing ---------------------------------------------------------------------------------------
    def _parse_head(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise UpstreamLost(f"llama-server sent a malformed status line: {lines[0][:80]!r}")
        self.status = int(parts[1])
        for line in lines[1:]:
            name, _, value = line.partition(":")
            name = name.strip().lower()
            if name == "transfer-encoding" and "chunked" in value.lower():
                self._chunked = True
            elif name == "content-length" and value.strip().isdigit():
                self._remaining = int(value.strip())
        if self._chunked:
            self._remaining = -1

    def _body(self, data: bytes) -> None:
        if self._finished:
            return
        if not self._chunked:
            if self._remaining >= 0:
                data = data[: self._remaining]
                self._remaining -= len(data)
            self._text += data
            self._lines()
            if self._remaining == 0:
                self._end_of_body()
            return
        raw = self._raw
        raw += data
        pos = 0
        while True:
            if self._need_crlf:  # after a chunk's data
                if len(raw) - pos < 2:
                    break
                pos += 2
                self._need_crlf = False
            elif self._remaining < 0:  # at a chunk-size line
                eol = raw.find(b"\r\n", pos)
                if eol < 0:
                    break
                size_text = bytes(raw[pos:eol]).split(b";", 1)[0].strip()
                try:
                    size = int(size_text, 16)
                except ValueError:
                    raise UpstreamLost(f"llama-server sent a malformed chunk size: {size_text[:20]!r}") from None
                pos = eol + 2
                if size == 0:  # the last chunk (trailers, if any, are of no interest)
                    del raw[:]
                    self._lines()
                    self._end_of_body()
                    return
                self._remaining = size
            else:
                take = min(len(raw) - pos, self._remaining)
                if take == 0:
                    break
                self._text += raw[pos : pos + take]
                pos += take
                self._remaining -= take
                if self._remaining == 0:
                    self._remaining, self._need_crlf = -1, True
        del raw[:pos]
        self._lines()
        self._boundary = (self.status == 200 and self._remaining < 0 and not self._need_crlf and not raw
                          and not self._text and not self._finished)

    def _lines(self) -> None:
        text = self._text
        end = text.rfind(b"\n")
        if end < 0 or self.status != 200 or self._finished:
            return
        block = bytes(text[:end])
        del text[: end + 1]
        for line in block.split(b"\n"):
            if line.startswith(b"data: "):
                payload = line[6:].strip()
                if payload == b"[DONE]":
                    self._finished = True
                    return
                try:
                    event = fastjson.loads(payload)
                except ValueError:
                    raise UpstreamLost(f"llama-server sent an event that is not JSON: {payload[:80]!r}") from None
                if "error" in event and "content" not in event:
                    err = event["error"]
                    raise RunnerError(err.get("message", str(err)) if isinstance(err, dict) else str(err))
                if self._sink is not None:
                    if self._sink(event):
                        if event.get("stop") is True:  # the sink took the last event: the stream is over
                            self._finished = True
                            return
                        continue
                    self._sink = self._plain_sink = None  # it declined: this and all after go to the consumer
                self._events.append(event)
                self.queued += 1
                if event.get("stop") is True:
                    self._finished = True
                    return
            elif line.startswith(b"error: "):
                raise RunnerError(line[7:].decode("utf-8", "replace").strip())

    def _end_of_body(self) -> None:
        self._boundary = False
        if self.status != 200:
            self._error = error_from(self.status, self._text.decode("utf-8", "replace"))
        elif not self._finished:
            self._error = UpstreamLost("llama runner closed the stream before it was done")
        self._finished = True
        self._wake()

    # -- the consumer side -----------------------------------------------------------------------------
    def take(self) -> collections.deque[dict[str, Any]]:
        """The events parsed so far, to be consumed by popping from the left (reading resumes if it was
        paused)."""
        if self._paused and len(self._events) < _LOW_WATER and self._transport is not None:
            self._paused = False
            self._transport.resume_reading()
        return self._events

    @property
    def backlog(self) -> int:
        """Events parsed and waiting for the consumer."""
        return len(self._events)

    def divert(self, sink: Callable[[dict[str, Any]], bool],
               plain: Callable[[bytes, bytes], bool] | None = None) -> None:
        """Hand each event from now on to `sink` as it is parsed, in the protocol callback, instead of queueing
        it for the consumer: the consumer is not woken per event. The first event the sink declines (returns
        False for) and everything after it are queued as usual, and the sink is dropped. A stop event the sink
        takes ends the stream: the consumer finds it over, with no last event of its own.

        `plain`, if given, gets the plain token events first, unparsed: `plain(content, token_ids)` with the
        content as the bytes between the JSON quotes (nothing in them escaped) and the ids as the bytes between
        the brackets ("12,34"). When it returns False the event goes the general way, to `sink`."""
        self._sink = sink
        self._plain_sink = plain

    async def wait(self) -> bool:
        """Wait for more events; False when the stream is over (raises its error, if it failed)."""
        if self._error is not None:
            raise self._error
        if self._finished:
            return False
        self._waiter = self._loop.create_future()
        try:
            await self._waiter
        finally:
            self._waiter = None
        return True

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self._transport is not None and not self._closed:
            self._transport.abort()


_S = TypeVar("_S", bound=SSEStream)


class Tap:
    """Access to the stream behind a `stream_events` generator, to `divert` its events: `stream` is set once the
    request is written on it (anew after a retry on another connection), and `on_connect(stream)` told."""

    def __init__(self, on_connect: Callable[[SSEStream], None] | None = None) -> None:
        self.stream: SSEStream | None = None
        self._on_connect = on_connect

    def connected(self, stream: SSEStream) -> None:
        self.stream = stream
        if self._on_connect is not None:
            self._on_connect(stream)


SPARE_SECONDS = 3.0  # llama-server (cpp-httplib) drops a connection that sends no request within 5 s


class Spare:
    """Connections to a runner opened ahead of its next streams. llama-server closes every streamed connection,
    so none can be kept; instead, when a stream ends, the next ones' connections are opened in the background,
    and a request that comes within SPARE_SECONDS writes into one at once: no connect, and the runner's HTTP
    thread is already waiting on the socket (its accept and hand-off are off the request's path). Older, or
    closed by the runner meanwhile, one is dropped and the request connects as before.

    As many are kept as streams were in flight when one ended (the load this runner has just seen), up to
    `most` (the runner's slots): one for a client asking in turn; for a burst of requests at once, a connection
    for each slot, so that each of them is written the moment it is ready. (A request that had to connect
    waited, before its write, for every other request's work that was ready on the loop meanwhile: a burst of 16
    on 4 slots started its fourth stream ~6 ms after the first, against ~1 ms straight to the runner.)"""

    def __init__(self, host: str, port: int, read_timeout: float | None, most: int = 1) -> None:
        self._host, self._port, self._read_timeout = host, port, read_timeout
        self._most = max(1, most)
        self._ready: collections.deque[tuple[SSEStream, float]] = collections.deque()  # (stream, opened at)
        self._opening: set[asyncio.Task[None]] = set()
        self._closed = False

    def take(self) -> SSEStream | None:
        """A spare connection, fresh and open (the oldest such), else None."""
        self._drop_stale()
        if not self._ready:
            return None
        stream = self._ready.popleft()[0]
        stream._rearm()
        stream.spare = True
        return stream

    def _drop_stale(self) -> None:
        """Close the spares the runner closed, or that waited past SPARE_SECONDS (a few at most: one a slot)."""
        now = time.monotonic()
        fresh: collections.deque[tuple[SSEStream, float]] = collections.deque()
        for stream, opened in self._ready:
            if stream._closed or stream._error is not None or now - opened > SPARE_SECONDS:
                stream.close()
            else:
                fresh.append((stream, opened))
        self._ready = fresh

    def refill(self, want: int = 1) -> None:
        """Open spare connections in the background until `want` (at most `most`) are open or opening."""
        want = min(max(want, 1), self._most)
        self._drop_stale()
        loop = asyncio.get_running_loop()
        while not self._closed and len(self._ready) + len(self._opening) < want:
            task = loop.create_task(self._open())
            self._opening.add(task)
            task.add_done_callback(self._opening.discard)

    async def _open(self) -> None:
        try:
            stream = await _connect(self._host, self._port, self._read_timeout, SSEStream)
        except RunnerError:
            return  # the runner is gone or busy: the next request connects itself, and says so if it cannot
        if self._closed:
            stream.close()
            return
        self._ready.append((stream, time.monotonic()))

    def close(self) -> None:
        self._closed = True
        for task in list(self._opening):
            task.cancel()
        while self._ready:
            self._ready.popleft()[0].close()


async def stream_events(host: str, port: int, path: str, body: dict[str, Any], *,
                        read_timeout: float | None = None, streams: set[SSEStream] | None = None,
                        tap: Tap | None = None, headers: dict[str, str] | None = None,
                        spare: Spare | None = None) -> AsyncGenerator[dict[str, Any], None]:
    """POST `body` and yield each `data:` event as a dict, up to the last. The hot path: one generator frame
    between the socket and the consumer. `streams` holds the stream while it is open (to fail it from outside).
    With `spare`, the request goes on its connection when it has a fresh one (sent again on a new connection if
    the runner had closed it unread), and the next spare is opened when the stream ends."""
    stream = await post_stream(host, port, path, body, read_timeout=read_timeout, headers=headers, spare=spare)
    try:
        while True:
            if streams is not None:
                streams.add(stream)
            if tap is not None:
                tap.connected(stream)
            try:
                events = stream.take()
                while True:
                    while events:
                        yield events.popleft()
                    stream.take()  # reading resumes if a slow consumer had paused it
                    if not await stream.wait():
                        return
            except UpstreamLost:
                if not (stream.spare and stream._reads == 0):
                    raise
                # the runner closed the spare connection as the request went out, before reading it
                stream.close()
                if streams is not None:
                    streams.discard(stream)
                stream = await post_stream(host, port, path, body, read_timeout=read_timeout, headers=headers)
    finally:
        stream.close()
        if streams is not None:
            streams.discard(stream)
        if spare is not None:  # as many as were streaming, this one included
            spare.refill(len(streams) + 1 if streams is not None else 1)


async def post_stream(host: str, port: int, path: str, body: dict[str, Any], *,
                      read_timeout: float | None = None, headers: dict[str, str] | None = None,
                      reply: type[SSEStream] = SSEStream, accept: bytes = b"text/event-stream",
                      spare: Spare | None = None) -> SSEStream:
    """Connect (or take `spare`'s connection), send `body` as JSON (with `headers` besides the usual ones) and
    return the stream (nothing of the response read yet)."""
    if _bulky(body):  # a long prompt or conversation: encoded in a thread, in slices (bigjson), so that the GIL
        # and with it the event loop is never held long (json.dumps: ~0.1 s per 30 MB of text, 1 s per 20M ids),
        # and written a piece at a time
        chunks = await asyncio.to_thread(functools.partial(bigjson.dumps_chunks, body, ascii_only=True))
        head = _request(host, port, path, None, headers, accept, keep_alive=False,
                        length=sum(len(c) for c in chunks))
        stream = await _connect(host, port, read_timeout, reply)
        assert stream._transport is not None
        stream._transport.write(head)
        for chunk in chunks:
            stream._transport.write(chunk)
            await asyncio.sleep(0)
        return stream
    request = _request(host, port, path, body, headers, accept, keep_alive=False)
    stream = (spare.take() if spare is not None and reply is SSEStream else None) or \
        await _connect(host, port, read_timeout, reply)
    assert stream._transport is not None
    stream._transport.write(request)
    return stream


_BULKY = 256 << 10  # characters of strings, or items of lists, a body may hold before it is encoded off the loop


def _bulky(value: Any, depth: int = 0) -> bool:
    """Whether a request body is big enough to encode in a thread: strings by length, lists by count, looked at
    three levels deep (a prompt, the messages' contents), and cheap for the ordinary small body: its strings and
    numbers are looked at in the loop, only containers take a call (a native request's body: 2 calls, was 7 with
    their generators)."""
    if isinstance(value, str):
        return len(value) > _BULKY
    if depth > 3:
        return False
    if isinstance(value, dict):
        items: Any = value.values()
    elif isinstance(value, list):
        if len(value) > _BULKY // 8:
            return True
        items = value[:64]
    else:
        return False
    for item in items:
        if isinstance(item, str):
            if len(item) > _BULKY:
                return True
        elif isinstance(item, (dict, list)) and _bulky(item, depth + 1):
            return True
    return False


async def _connect(host: str, port: int, read_timeout: float | None, reply: type[_S]) -> _S:
    loop = asyncio.get_running_loop()
    try:
        _, stream = await loop.create_connection(lambda: reply(loop, read_timeout), host, port)
    except OSError as e:
        raise UpstreamLost(f"connection to llama runner lost: {e}") from None
    return stream


def _request(host: str, port: int, path: str, body: dict[str, Any] | None, headers: dict[str, str] | None,
             accept: bytes, *, keep_alive: bool, length: int = 0) -> bytes:
    """The request's bytes; with body None, the head alone for a body of `length` bytes sent after it."""
    data = fastjson.to_runner(body) if body is not None else b""
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items()).encode()
    return (b"POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\nAccept: %s\r\n%s"
            b"Content-Length: %d\r\nConnection: %s\r\n\r\n%s"
            % (path.encode(), host.encode(), port, accept, extra, len(data) if body is not None else length,
               b"keep-alive" if keep_alive else b"close", data))


class _Reply(SSEStream):
    """The response to a small request, read whole: the body is kept as it is, not split into events. A 200 body
    framed by its length is kept as the pieces that arrived (`parts`): one growing buffer is copied whole now and
    then as it grows, on the event loop (~20 ms a copy at 40 MB: a 32 MB text's token ids)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, read_timeout: float | None) -> None:
        super().__init__(loop, read_timeout)
        self.parts: list[bytes] = []

    def _lines(self) -> None:
        pass

    def _body(self, data: bytes) -> None:
        if self._finished or self._chunked or self.status != 200:
            super()._body(data)
            return
        if self._remaining >= 0:
            data = data[: self._remaining]
            self._remaining -= len(data)
        self.parts.append(data)
        if self._remaining == 0:
            self._end_of_body()

    def body_parts(self) -> list[bytes]:
        """The body, in pieces (a chunked one, de-chunked, as one)."""
        return self.parts if not self._text else [bytes(self._text)]

    def _end_of_body(self) -> None:
        if self.status != 200:
            super()._end_of_body()
            return
        self._boundary = False
        self._finished = True
        self._wake()


async def post_json(host: str, port: int, path: str, body: dict[str, Any], *, read_timeout: float | None = None,
                    headers: dict[str, str] | None = None, streams: set[SSEStream] | None = None) -> Any:
    """POST `body` and return the JSON response: a connection of its own, as a stream has, no client session.
    Measured in serve (a warm chat's /apply-template, 200 requests, 2 cores): 1.66 ms from call to answer and 0.32
    ms of the event loop's CPU, where aiohttp's pooled keep-alive session took 1.95 and 0.60. Errors as for a
    stream: UpstreamLost, RunnerStalled after `read_timeout` of silence, error_from's error for a status other
    than 200."""
    reply = await post_stream(host, port, path, body, read_timeout=read_timeout, headers=headers, reply=_Reply,
                              accept=b"application/json")
    assert isinstance(reply, _Reply)
    await _whole(reply, streams)
    return await _decoded(reply.body_parts())


async def _whole(reply: SSEStream, streams: set[SSEStream] | None) -> None:
    """Wait for the whole of a small call's answer (held in `streams` meanwhile), then close its connection."""
    if streams is not None:
        streams.add(reply)
    try:
        while await reply.wait():
            pass
    finally:
        reply.close()
        if streams is not None:
            streams.discard(reply)


_INLINE_JSON = 256 << 10  # answers decoded on the event loop up to this size (a batch of embeddings is bigger)


async def _decoded(parts: list[bytes]) -> Any:
    if sum(len(p) for p in parts) <= _INLINE_JSON:
        return json.loads(b"".join(parts))
    return await asyncio.to_thread(lambda: bigjson.loads(bigjson.joined(parts)))  # in slices: json.loads holds the GIL


async def post_for_parts(host: str, port: int, path: str, body: dict[str, Any], *, read_timeout: float | None = None,
                         headers: dict[str, str] | None = None, streams: set[SSEStream] | None = None) -> list[bytes]:
    """post_json's call, its 200 answer's body as the pieces it arrived in (a chunked answer as one piece)."""
    reply = await post_stream(host, port, path, body, read_timeout=read_timeout, headers=headers, reply=_Reply,
                              accept=b"application/json")
    assert isinstance(reply, _Reply)
    await _whole(reply, streams)
    return reply.body_parts()


class _KeptReply(_Reply):
    """A small call's response on a connection that stays open for the next call (see KeptConnection)."""

    reusable = False  # a whole 200 response came, framed by its length, and the server did not say it closes

    def _parse_head(self, head: bytes) -> None:
        super()._parse_head(head)
        self._server_closes = any(line.lower().replace(" ", "") == "connection:close"
                                  for line in head.decode("latin-1").split("\r\n")[1:])

    def _end_of_body(self) -> None:
        self.reusable = (self.status == 200 and not self._server_closes and not self._closed
                         and (self._chunked or self._remaining == 0))
        super()._end_of_body()

    def answered(self) -> bool:
        """Whether any of the response to the current call arrived."""
        return bool(self.status or self._head)

    def reset(self) -> None:
        """Ready for the next call on the same connection."""
        self._head.clear()
        self.status, self._chunked, self._remaining, self._need_crlf = 0, False, -1, False
        self._raw.clear()
        self._text.clear()
        self.parts = []
        self._events.clear()
        self._error, self._finished, self._boundary, self.reusable = None, False, False, False
        if self._read_timeout:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._loop.call_later(self._read_timeout / _TICKS, self._check_silence, -1, 0)


class KeptConnection:
    """Small JSON calls one after another over one connection (HTTP keep-alive): a burst of calls (an embed
    request's tokenizations) costs one connection instead of one each. The owner closes it when the burst ends:
    an idle connection would hold one of llama-server's HTTP threads. A call on a reused connection that the
    server had closed, before any answer arrived, is sent again once on a new one (the calls are idempotent)."""

    def __init__(self, host: str, port: int, *, read_timeout: float | None = None,
                 headers: dict[str, str] | None = None, streams: set[SSEStream] | None = None) -> None:
        self._host, self._port, self._read_timeout = host, port, read_timeout
        self._headers, self._streams = headers, streams
        self._reply: _KeptReply | None = None
        self.opened = 0  # connections opened so far

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        """POST `body` and return the JSON answer; errors as post_json's."""
        request = _request(self._host, self._port, path, body, self._headers, b"application/json", keep_alive=True)
        for _ in range(2):
            reply = self._reply
            reused = reply is not None and reply.reusable and not reply._closed
            if reused:
                assert reply is not None
                reply.reset()
            else:
                self.close()
                reply = self._reply = await _connect(self._host, self._port, self._read_timeout, _KeptReply)
                self.opened += 1
            assert reply._transport is not None
            reply._transport.write(request)
            if self._streams is not None:
                self._streams.add(reply)
            try:
                while await reply.wait():
                    pass
            except UpstreamLost:
                self.close()
                if reused and not reply.answered():
                    continue
                raise
            except BaseException:
                self.close()
                raise
            finally:
                if self._streams is not None:
                    self._streams.discard(reply)
            return await _decoded(reply.body_parts())
        raise AssertionError("unreachable")  # pragma: no cover - the second try uses a new connection

    def close(self) -> None:
        if self._reply is not None:
            self._reply.close()
            self._reply = None
