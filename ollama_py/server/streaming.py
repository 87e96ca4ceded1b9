"""Writing streams: Ollama's NDJSON and SSE (OpenAI, Anthropic), with errors that respect what was sent.

No header goes out before the first chunk (a Lane may prepare the response early, holding its headers back), so
an error before any output gets a proper status code; after that, an error becomes a final {"error": ...} line (or
SSE error event). The event source is always closed, so a client that hangs up frees its runner slot at once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from typing import Any, ClassVar, Protocol

from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

from ollama_py.errors import OllamaError
from ollama_py.fastjson import dumps, json_string
from ollama_py.runner.sse import SSEStream, Tap
from ollama_py.server.completion import Delta, Final
from ollama_py.server.errors import describe, error_body

log = logging.getLogger(__name__)


_SECOND: list[Any] = [None, "", b""]  # [whole second, its "YYYY-MM-DDTHH:MM:SS." text, the same in bytes]


def now_rfc3339() -> str:
    """UTC now as Ollama writes created_at ("2024-05-01T12:00:00.123456Z"). Called once per streamed chunk, so
    the date and time are formatted once a second and only the microseconds per call."""
    second, micros = divmod(time.time_ns() // 1000, 1_000_000)
    if second != _SECOND[0]:
        _new_second(second)
    return f"{_SECOND[1]}{micros:06d}Z"


def _new_second(second: int) -> None:
    text = dt.datetime.fromtimestamp(second, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.")
    _SECOND[:] = [second, text, text.encode()]


class _StreamResponse(web.StreamResponse):
    """The headers leave with the first chunk, in one send: the first event is already in hand when the
    response is prepared, so holding them back delays nothing (aiohttp's own web.Response does the same)."""

    _send_headers_immediately = False


_LANE_BUFFER = 64 * 1024  # bytes waiting in the transport beyond which the lane hands back (a slow client)


_TEXT, _TIME = "\ue000text\ue000", "\ue000time\ue000"  # markers no chunk's fixed parts contain
_NUMBER = 8765432109876543210  # ... and a number no event's fixed parts contain (a delta's index or sequence number)


def escaped(text: str) -> bytes:
    """A text as its JSON string body, escaped as fastjson.dumps escapes it, in UTF-8."""
    return json_string(text)[1:-1].encode()


class Lane:
    """The per-token fast path of one streamed completion: plain tokens written to the client's transport from the
    runner stream's protocol callback, with no task wake-up and no generator chain per token, the first token
    included. This class owns it, start to end; the steps, in the order they must happen:

    1. the route makes a Lane with its chunk renderer (`render(text, created_at) -> bytes`: the chunk's fixed
       parts are laid out once, each token formats two bytes) or, for named events that keep state (Anthropic's
       blocks, the Responses API's sequence numbers), its block translator (`blocks`: the events its `text`
       gives, the message's or block's opening with the first; past that, one delta, formatted into a layout
       made once, its number and text formatted in), and gives it to both the CompletionRequest and the writer
       (`ndjson` / `sse`);
    2. stream_response `offer`s the lane its response, not yet prepared, before it waits for the first event;
       run_completion, for a request without logprobs (nor a forced call, nor a model whose parser reads whole
       messages), `collect`s: it gives the lane the lists its text and token ids go to and what to do at the first
       token, and streams the runner's events with `lane.tap`. An answer parsed for thinking or tool calls also
       gives its parsers' `plain`: the lane then takes only tokens whose text they call plain content (past the
       thoughts, the answer's start and any tag or part of one), and its stop event goes the ordinary way; a
       thinking answer's parsers also say which texts are plain thoughts (inside the thoughts, no closing tag or
       part of one, nothing held back), which the lane writes as the route renders a thought (`thought`, or the
       blocks' `thinking`);
    3. once the runner has the request (the tap is connected), while the runner computes the first token, the
       lane prepares the response (aiohttp makes the status line and headers and holds them back: nothing is
       sent), `bind`s itself to it (only a chunked, uncompressed body, whose framing the lane writes as aiohttp
       would) and `divert`s the stream: its events go to the lane's sinks instead of the queue (unless an event
       went to the queue before: a busy loop may run this after a fast runner's first token, which the handler
       then writes first, and diverts after it);
    4. in the protocol callback, `_take_unparsed` gets a plain token as llama-server's own bytes (runner/sse.py
       _PLAIN: one match, the event's fields in llama-server's order, nothing escaped) and writes them as they
       are, the held-back headers with the first; any other event is parsed and offered to `_take_event`, which
       writes its text escaped;
    5. the runner's stop event ends the body from the callback too, when the route gave the lane its last
       events (`end(final)`, the same the route's own generator yields for a Final) and run_completion can make
       the Final at once (`on_stop(event)`, given to `collect`; None when it must wait for something, as for
       /api/generate's context before its prompt's ids are in): the last chunk and the end of the body leave in
       one write (`ended`), and stream_response, when the Final reaches it through the generators, only closes
       the response. aiohttp's writer is told the body is over (its `set_eof`, with its chunked framing
       reset, as the lane wrote the last chunk itself);
    6. the first event a sink declines (a stop it cannot end the body with, log-probabilities, a client gone or
       more than _LANE_BUFFER behind, a split answer's text that is not plain content) goes the ordinary way, and
       so does everything after it until the handler has written them all: run_completion diverts the stream
       again after each Delta, which takes once no declined event waits. The Final and the end of the body are
       written by stream_response on the same response (the headers with them if the lane sent none).
    An error before the lane wrote anything takes the prepared response back (`withdraw`: nothing was sent), so
    the error still gets its own status; after, it is the body's last line, as any error mid-stream. Where the
    response cannot be prepared early (not offered, or an older aiohttp), the first chunk goes the ordinary way
    and the lane is bound and diverted after it (run_completion calls `divert` after each Delta it yielded, a
    no-op once diverted). Either way the client sees every chunk in order, and the text and token ids the sinks
    take are appended to run_completion's own lists (bytes for unparsed text, decoded with the rest at the end),
    so the Final is the same whichever way a token went.

    `unparsed` and `parsed` count the tokens each sink wrote (`thoughts` the thoughts); `Lane.totals` sums them
    over the process when the response ends, and counts the bodies the lane ended (`ended`). The real-runner tests
    assert most tokens of a plain stream are `unparsed` and its body `ended`, on every route: a llama-server whose
    events no longer match _PLAIN, or whose stop event carries its text, would otherwise only be slower, silently.
    """

    totals: ClassVar[collections.Counter[str]] = collections.Counter()

    def __init__(self, render: Callable[[str, str], bytes] | None = None,
                 end: Callable[[Final], Iterable[Any]] | None = None, *, blocks: BlockStream | None = None,
                 thought: Callable[[str, str], bytes] | None = None) -> None:
        self._render = render  # stateless chunks: a text (and created_at) -> the chunk's bytes
        self._render_thought = thought  # the same for a thought (None: thoughts go the ordinary way)
        self._blocks = blocks  # or a block translator's events for each text, in its state (Anthropic, Responses)
        self._end = end  # a Final -> the route's last events (None: the ordinary way writes them)
        self.tap = Tap(self._connected)
        self._transport: asyncio.Transport | None = None  # (uvloop's is no subclass: typed, never isinstance)
        self.put: Callable[[bytes], bool] = _refuse  # a text's JSON string body (escaped, UTF-8) -> written?
        self.write: Callable[[str], bool] = _refuse  # the same for a text as it is
        self._put_thought: Callable[[bytes], bool] = _refuse  # the same two for a thought
        self._write_thought: Callable[[str], bool] = _refuse
        self._diverted: SSEStream | None = None
        self._text: list[str | bytes] = []
        self._tokens: list[int] | None = None
        self._on_first: Callable[[], None] | None = None
        self._on_stop: Callable[[dict[str, Any]], Final | None] | None = None
        self._plain: Callable[[str], bool] | None = None  # a split answer's: is this text plain content now?
        self._thought: Callable[[str], bool] | None = None  # ... or a plain thought?
        self._thinking: list[str] = []
        self._encode: Callable[[Any], bytes] | None = None  # stream_response's encoder and trailer
        self._trailer = b""
        self._writer: AbstractStreamWriter | None = None
        self._outlet: _Outlet | None = None  # where bind()'s putters send (the held-back headers with the first)
        self.final: Final | None = None  # the Final the lane ended the body with (`ended`)
        self._request: web.Request | None = None
        self.response: web.StreamResponse | None = None  # offered by stream_response, prepared early or by it
        self._early: asyncio.Task[None] | None = None
        self.wrote = False  # the lane sent a chunk (and with the first, the headers)
        self.unparsed = 0
        self.parsed = 0
        self.thoughts = 0

    def offer(self, request: web.Request, resp: web.StreamResponse, encode: Callable[[Any], bytes] | None = None,
              trailer: bytes = b"") -> None:
        """Step 2 (stream_response): the response, to prepare once the runner has the request; how its events
        are encoded and what follows the last (for step 5)."""
        self._encode, self._trailer = encode, trailer
        if getattr(request.writer, "send_headers", None) is not None:  # aiohttp >= 3.12 holds headers back
            self._request, self.response = request, resp

    def collect(self, text: list[str | bytes], tokens: list[int] | None, on_first: Callable[[], None],
                on_stop: Callable[[dict[str, Any]], Final | None] | None = None,
                plain: Callable[[str], bool] | None = None, thought: Callable[[str], bool] | None = None,
                thinking: list[str] | None = None) -> None:
        """Step 2 (run_completion): where the text and token ids go (None: ids not wanted), what to do when
        the lane writes the first token, and the Final for the runner's stop event (step 5). A split answer
        (thinking, tool calls) gives `plain` (its parsers' `_Split.plain`): the lane writes a token only when its
        text is plain content in the parsers' state, and declines the others, which the ordinary way splits; a
        thinking answer also gives `thought` (`_Split.thought`) and where thoughts go: a token its parsers take
        whole as a thought is written as one, where the route renders thoughts."""
        self._text, self._tokens, self._on_first, self._on_stop = text, tokens, on_first, on_stop
        self._plain = plain
        if thinking is not None and (self._render_thought is not None or self._blocks is not None):
            self._thought, self._thinking = thought, thinking

    @property
    def ended(self) -> bool:
        """The lane wrote the last chunk and the end of the body (step 5)."""
        return self.final is not None

    def _connected(self, stream: SSEStream) -> None:
        """The tap's stream has the runner's request (again, after a retry on a new connection)."""
        if self.wrote:
            return
        if self._early is None and self.response is not None and self._on_first is not None:
            self._early = asyncio.get_running_loop().create_task(self._prepare_early())
        elif self._diverted is not None:  # a retry: the new stream, not the one that failed
            self._diverted = None
            self.divert()

    async def _prepare_early(self) -> None:
        """Step 3: while the runner computes, the response is prepared (its headers held back) and the stream
        diverted."""
        assert self._request is not None and self.response is not None
        request, resp = self._request, self.response
        try:
            if not resp.prepared:
                await resp.prepare(request)
        except (ConnectionError, RuntimeError) as e:  # the client is gone: the handler finds out itself
            log.debug("the early response was not prepared: %s", e)
            return
        self.bind(request, resp)
        stream = self.tap.stream
        if stream is not None and stream.queued == 0:  # else an event went to the handler first: it writes it first
            self.divert()

    async def settled(self) -> None:
        """The early preparation, if it started, is over (stream_response waits for it before it writes)."""
        if self._early is not None:
            await asyncio.shield(self._early)

    def withdraw(self, request: web.Request) -> None:
        """Nothing was sent: the prepared response is taken back, so that an error gets a response of its own
        (aiohttp's writer keeps only its chunked framing from the preparation; the error's response replaces the
        held-back headers)."""
        self.put = self.write = self._put_thought = self._write_thought = _refuse
        if self.response is not None and self.response.prepared and not self.wrote:
            writer = request.writer
            if hasattr(writer, "chunked"):
                writer.chunked = False

    def bind(self, request: web.Request, resp: web.StreamResponse) -> None:
        """Step 3 (or after the first chunk): chunks may now be written directly."""
        if self._transport is not None:
            return
        if resp.headers.get("Transfer-Encoding") == "chunked" and not resp.compression and request.transport:
            self._transport = request.transport
            self._writer = request.writer
            transport, writer = request.transport, request.writer
            self._outlet = outlet = _Outlet(transport, writer)
            if self._blocks is not None:
                encode = self._encode or sse_event
                put, write = _block_putters(self._blocks, "text", encode, transport, writer, outlet)
                put_thought, write_thought = _block_putters(self._blocks, "thinking", encode, transport, writer,
                                                            outlet)
            else:
                assert self._render is not None
                put, write = _template_putters(self._render, transport, writer, outlet)
                put_thought, write_thought = (_template_putters(self._render_thought, transport, writer, outlet)
                                              if self._render_thought is not None else (_refuse, _refuse))

            def opened() -> bool:  # the first chunk the lane writes: the held-back headers go with it
                if not self.ready():
                    return False
                outlet.with_headers()
                self.put, self.write, self.wrote = put, write, True
                self._put_thought, self._write_thought = put_thought, write_thought
                if self._on_first is not None:
                    self._on_first()
                return True

            def first(sink: Callable[[Any], bool]) -> Callable[[Any], bool]:
                return lambda x: opened() and sink(x)

            self.put, self.write = first(put), first(write)
            self._put_thought, self._write_thought = first(put_thought), first(write_thought)

    def ready(self) -> bool:
        t = self._transport
        return t is not None and not t.is_closing() and t.get_write_buffer_size() < _LANE_BUFFER

    def divert(self) -> None:
        """From the next event on, the stream's events go to the sinks (a no-op until bound and connected, while
        diverted, and while events the sinks declined still wait for the handler: they go out first)."""
        stream = self.tap.stream
        if self._diverted is not None or stream is None or stream.backlog or not self.ready():
            return
        self._diverted = stream
        stream.divert(self._take_event, self._take_unparsed)

    def _take_unparsed(self, content: bytes, token_ids: bytes) -> bool:
        """A plain token as llama-server's bytes, nothing in them escaped: written and kept as they are."""
        if content:
            if self._plain is not None and not self._plain(text := content.decode("utf-8", "surrogateescape")):
                if self._thought is None or not self._thought(text) or not _whole(text) \
                        or not self._put_thought(content):
                    return False
                self._thinking.append(text)
                self.thoughts += 1
            elif not self.put(content):
                return False
            else:
                self._text.append(content)
                self.unparsed += 1
        if self._tokens is not None and token_ids:
            self._tokens.extend(map(int, token_ids.split(b",")))
        return True

    def _take_event(self, event: dict[str, Any]) -> bool:
        """A parsed event: a plain token's text is written, and a stop event ends the body where it can (step
        5); anything else is declined. Declined, the event and those after it go to the handler, which diverts
        the stream again once it has written them (run_completion, after each Delta)."""
        if self._take(event):
            return True
        self._diverted = None
        return False

    def _take(self, event: dict[str, Any]) -> bool:
        if event.get("completion_probabilities"):
            return False
        if event.get("stop"):
            return self._finish(event)
        content = event.get("content")
        if content:
            if self._plain is not None and not self._plain(content):
                if self._thought is None or not self._thought(content) or not self._write_thought(content):
                    return False
                self._thinking.append(content)
                self.thoughts += 1
            elif not self.write(content):
                return False
            else:
                self._text.append(content)
                self.parsed += 1
        if self._tokens is not None and event.get("tokens"):
            self._tokens.extend(event["tokens"])
        return True

    def _finish(self, event: dict[str, Any]) -> bool:
        """Step 5: the route's last events for the Final of this stop event and the end of the body, in one
        write; False (nothing written) where the ordinary way must do it (what on_stop noted of the event it notes
        again: the slot given back, the event kept)."""
        writer, outlet, encode, end, on_stop = self._writer, self._outlet, self._encode, self._end, self._on_stop
        if (not self.wrote or writer is None or outlet is None or encode is None or end is None
                or on_stop is None or event.get("content") or not self.ready() or not hasattr(writer, "chunked")
                or (set_eof := getattr(writer, "set_eof", None)) is None):
            return False
        try:
            final = on_stop(event)
            if final is None:
                return False
            data = b"".join(map(encode, end(final))) + self._trailer
        except Exception:  # the ordinary way makes it again, and reports what went wrong
            log.debug("the lane did not end the body", exc_info=True)
            return False
        frame = b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)
        writer.output_size += len(frame)  # the access log's byte count
        outlet.send(frame)
        if hasattr(writer, "chunked"):
            writer.chunked = False  # the lane wrote the end of the chunked body: the writer adds nothing to it
        set_eof()
        self.final = final
        return True

    def close(self) -> None:
        """The response is over: this stream's counts join the process's."""
        if self._early is not None and not self._early.done():
            self._early.cancel()
        Lane.totals["unparsed"] += self.unparsed
        Lane.totals["parsed"] += self.parsed
        Lane.totals["thoughts"] += self.thoughts
        Lane.totals["ended"] += self.final is not None


def _refuse(raw: Any) -> bool:
    return False


class _Outlet:
    """Where a lane's bytes go: its client's transport, except that the first send after `with_headers` takes
    the status line and headers aiohttp holds back with it (aiohttp >= 3.12 keeps them until the body's first
    write): one send, and one wake-up of the client, for the headers and the first token, as aiohttp does for a
    body it writes itself. A writer whose held headers this cannot take (another aiohttp) sends them first."""

    __slots__ = ("send", "_transport", "_writer")

    def __init__(self, transport: asyncio.Transport, writer: AbstractStreamWriter) -> None:
        self._transport, self._writer = transport, writer
        self.send: Callable[[bytes], Any] = transport.write

    def with_headers(self) -> None:
        """The next send takes the held-back headers with it (nothing to do once they were sent)."""
        writer = self._writer
        if hasattr(writer, "_headers_buf") and hasattr(writer, "_headers_written"):
            if writer._headers_buf and not writer._headers_written:
                self.send = self._with_headers
        elif (send_headers := getattr(writer, "send_headers", None)) is not None:
            send_headers()  # (a no-op once aiohttp sent them)

    def _with_headers(self, data: bytes) -> None:
        transport, writer = self._transport, self._writer
        self.send = transport.write
        head = writer._headers_buf  # type: ignore[attr-defined]
        if head and not writer._headers_written:  # type: ignore[attr-defined]  # (else the ordinary way sent them)
            writer._headers_buf, writer._headers_written = None, True  # type: ignore[attr-defined]
            writer.buffer_size += len(head)
            writer.output_size += len(head)  # as aiohttp counts them
            data = head + data
        transport.write(data)


def _whole(text: str) -> bool:
    """A text decoded with surrogateescape had only whole UTF-8 characters (llama-server sends nothing else)."""
    if text.isascii():
        return True
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def _template_putters(render: Callable[[str, str], bytes], transport: asyncio.Transport,
                      writer: AbstractStreamWriter, outlet: _Outlet,
                      ) -> tuple[Callable[[bytes], bool], Callable[[str], bool]]:
    """`put(raw)` and `write(text)` for a stateless chunk renderer (_putter)."""
    put = _putter(render, transport, writer, outlet)

    def write(text: str) -> bool:
        return put(escaped(text))

    return put, write


def _block_putters(blocks: BlockStream, kind: str, encode: Callable[[Any], bytes], transport: asyncio.Transport,
                   writer: AbstractStreamWriter, outlet: _Outlet,
                   ) -> tuple[Callable[[bytes], bool], Callable[[str], bool]]:
    """`put(raw)` and `write(text)` for a block translator (Anthropic's MessageStream, the Responses API's
    ResponseStream; its `text` or `thinking`, as `kind` says): the events it gives for a text in its state (a
    delta in the open block; the message's or block's opening with the first), in one chunk; False, writing
    nothing and leaving the state as it was, when the client is gone or slow. A plain token's raw bytes are its
    text (runner/sse.py _PLAIN: nothing escaped).

    The token path: while the translator says a text makes one delta (`steady_delta`: its layout and number), the
    delta's bytes are formatted into that layout, made once from `delta_event` with markers as _putter makes a
    route's chunk, the text's JSON string body and the number formatted in; else its events are made and
    encoded."""
    is_closing, buffered = transport.is_closing, transport.get_write_buffer_size
    text_events = blocks.text if kind == "text" else blocks.thinking
    steady, delta_event = blocks.steady_delta, blocks.delta_event
    layouts: dict[Any, tuple[bytes, bool] | None] = {}

    def layout() -> tuple[bytes, bool] | None:
        """The delta's bytes in the current state as a format, and whether the number comes before the text;
        None where the markers are not each found once (the delta is then encoded a token at a time)."""
        chunk = encode(delta_event(kind, _TEXT, _NUMBER))
        text, number = f'"{_TEXT}"'.encode(), b"%d" % _NUMBER
        if chunk.count(text) != 1 or chunk.count(number) != 1:
            return None
        fmt = chunk.replace(b"%", b"%%").replace(text, b'"%s"').replace(number, b"%d")
        return fmt, chunk.index(number) < chunk.index(text)

    def emit(text: str, raw: bytes | None) -> bool:
        if is_closing() or buffered() >= _LANE_BUFFER:
            return False
        taken = steady(kind, text)
        if taken is None:
            data = b"".join([encode(event) for event in text_events(text)])
            if not data:  # (an empty chunk would end the body)
                return True
        else:
            key, n = taken
            if key not in layouts:
                layouts[key] = layout()
            made = layouts[key]
            if made is None:
                data = encode(delta_event(kind, text, n))
            else:
                fmt, number_first = made
                body = escaped(text) if raw is None else raw
                data = fmt % ((n, body) if number_first else (body, n))
        frame = b"%x\r\n%s\r\n" % (len(data), data)
        writer.output_size += len(frame)  # the access log's byte count
        outlet.send(frame)
        return True

    def write(text: str) -> bool:
        return emit(text, None)

    def put(raw: bytes) -> bool:
        try:
            text = raw.decode()
        except UnicodeDecodeError:  # (llama-server sends whole characters; the ordinary way says what this was)
            return False
        return emit(text, raw)

    return put, write


def _putter(render: Callable[[str, str], bytes], transport: asyncio.Transport,
            writer: AbstractStreamWriter, outlet: _Outlet) -> Callable[[bytes], bool]:
    """`put(raw)`: the route's chunk for a text given as its JSON string body (escaped, UTF-8), framed and
    written, created_at (where the chunk has one) as now_rfc3339() gives it; False, writing nothing, when the
    client is gone or slow. The token path: two bytes formats a token, everything else looked up once here."""
    text, stamp = f'"{_TEXT}"'.encode(), _TIME.encode()
    chunk = render(_TEXT, _TIME)
    text_at, stamp_at = chunk.index(text), chunk.find(stamp)
    fixed = len(chunk) - len(text) + 2 + (27 - len(stamp) if stamp_at >= 0 else 0)  # 27: a created_at's length
    frame_fmt = b"%x\r\n" + chunk.replace(b"%", b"%%").replace(text, b'"%s"').replace(stamp, b"%s") + b"\r\n"
    stamped, stamp_first = stamp_at >= 0, 0 <= stamp_at < text_at
    if not stamped:
        frame_fmt += b"%s"  # the (empty) stamp
    is_closing, buffered, time_ns = transport.is_closing, transport.get_write_buffer_size, time.time_ns

    def put(raw: bytes) -> bool:
        if is_closing() or buffered() >= _LANE_BUFFER:
            return False
        when = b""
        if stamped:
            second, micros = divmod(time_ns() // 1000, 1_000_000)  # now_rfc3339, inlined, in bytes
            if second != _SECOND[0]:
                _new_second(second)
            when = b"%s%06dZ" % (_SECOND[2], micros)
        frame = frame_fmt % ((fixed + len(raw), when, raw) if stamp_first else (fixed + len(raw), raw, when))
        writer.output_size += len(frame)  # the access log's byte count
        outlet.send(frame)
        return True

    return put


class _Closing:
    """contextlib.aclosing for any async iterator: an event source that is a generator (all of ours) is closed,
    so a client that hangs up frees its runner slot at once. (A class, not a generator-based context manager:
    every streamed response enters one.)"""

    __slots__ = ("events",)

    def __init__(self, events: AsyncIterator[Any]) -> None:
        self.events = events

    async def __aenter__(self) -> AsyncIterator[Any]:
        return self.events

    async def __aexit__(self, *exc: object) -> None:
        aclose = getattr(self.events, "aclose", None)
        if aclose is not None:
            await aclose()


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
    lane: Lane | None = None,
    ends: Callable[[Any], bool] | None = None,
) -> web.StreamResponse:
    """Write events as they come; the first is awaited before the headers go out. A lane is bound once they
    are: the event source may then write chunks through it itself. `ends(event)` says an event is the last
    one: it leaves with the trailer and the end of the body in one send, and the source's own ending (the
    runner's place given back, its bookkeeping) runs after the client has the whole response."""
    try:
        return await _write_stream(request, events, content_type, encode, encode_error, trailer, lane, ends)
    finally:
        if lane is not None:
            lane.close()


async def _write_stream(request: web.Request, events: AsyncIterator[Any], content_type: str,
                        encode: Callable[[Any], bytes], encode_error: Callable[[str], bytes], trailer: bytes,
                        lane: Lane | None, ends: Callable[[Any], bool] | None) -> web.StreamResponse:
    async with _Closing(events):
        resp: web.StreamResponse = _StreamResponse(
            status=200, headers={"Content-Type": content_type, "Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        if lane is not None:
            # prepared early, while the runner computes; its first token sent by it, and perhaps its end
            lane.offer(request, resp, encode, trailer)
        failed: Exception | None = None
        try:
            has_first, first = await _first(events)
        except Exception as e:
            if lane is None or not lane.wrote:  # nothing sent: the error gets its own status
                if lane is not None:
                    await lane.settled()
                    lane.withdraw(request)
                raise
            has_first, first, failed = False, None, e  # the lane's tokens are out: the error ends the body
        if lane is not None:
            await lane.settled()
        if not resp.prepared:
            await resp.prepare(request)
        try:
            if failed is not None:
                raise failed
            ended = False
            if lane is not None and lane.ended:  # the lane wrote the last events and the end: none is written
                await _skip_to_last(request, events, first, ends)
                await resp.write_eof()
                return resp
            if has_first:
                data = encode(first)
                if ends is not None and ends(first):
                    await resp.write_eof(data + trailer)  # one send: the client is done before the source
                    ended = True
                else:
                    await resp.write(data)
                    if lane is not None:
                        lane.bind(request, resp)
                    ended = await _pump(events, resp, encode, ends, trailer, lane)
            if ended:
                await _after_last(request, events)
            else:
                await resp.write_eof(trailer)
            return resp
        except OllamaError as e:
            log.warning("%s %s failed mid-stream: %s", request.method, request.path, e)
            await _write_error(resp, encode_error(str(e)), lane)
        except (ConnectionResetError, ConnectionError):
            log.info("%s %s: client disconnected mid-stream", request.method, request.path)
            return resp
        except Exception as e:  # e.g. a full disk during a create: the client still gets a final error
            status, message = describe(e)
            if status == 500:
                log.exception("%s %s failed mid-stream", request.method, request.path)
            else:
                log.warning("%s %s failed mid-stream: %s", request.method, request.path, e)
            await _write_error(resp, encode_error(message), lane)
        with contextlib.suppress(ConnectionError):
            await resp.write_eof()
    return resp


async def _relay(events: AsyncIterator[Any], resp: web.StreamResponse, encode: Callable[[Any], bytes],
                 ends: Callable[[Any], bool] | None, trailer: bytes, lane: Lane | None = None) -> bool:
    """Write each event as it comes; the last one (`ends`) leaves with the trailer and the end of the body, in
    one send and from this task, before anything else the loop holds (the runner's next connection, opened
    when its stream closed, waits behind it): True. False: the source ended without a last event."""
    async for event in events:
        if lane is not None and lane.ended:  # the lane wrote the last events and the end (Lane, step 5)
            await _skip_to_last(None, events, event, ends)
            await resp.write_eof()
            return True
        data = encode(event) if not long_context(event) else await encode_long(encode, event)
        if ends is not None and ends(event):
            await resp.write_eof(data + trailer)
            return True
        await resp.write(data)
    return False


async def _skip_to_last(request: web.Request | None, events: AsyncIterator[Any], event: Any,
                        ends: Callable[[Any], bool] | None) -> None:
    """The events the lane already wrote (the route's last ones, from `event` on) are taken, not written; then
    the source's own ending runs (_after_last)."""
    if ends is not None:
        while not ends(event):
            try:
                event = await events.__anext__()
            except StopAsyncIteration:
                return
    if request is not None:
        await _after_last(request, events)


async def _after_last(request: web.Request, events: AsyncIterator[Any]) -> None:
    """The source after its last event was sent: its own ending runs; an event it still yields has no place in
    a finished body, and an error no client to go to (both logged)."""
    try:
        async for event in events:
            log.error("%s %s: an event after the last one was dropped: %.200r", request.method, request.path, event)
    except Exception as e:  # the response is complete: nothing to tell the client
        log.warning("%s %s failed after its last event: %s", request.method, request.path, e)


_LONG_CONTEXT = 100_000  # ids of /api/generate's `context` encoded on the loop; more go a slice at a time


def long_context(event: Any) -> bool:
    """The final /api/generate chunk of a long conversation: its `context` is millions of ids (one encoder call
    over them held the loop ~0.1 s per million)."""
    return isinstance(event, dict) and isinstance(event.get("context"), list) and len(event["context"]) > _LONG_CONTEXT


async def encode_long(encode: Callable[[Any], bytes], event: dict[str, Any]) -> bytes:
    """encode(event), with its long `context` written in slices in a worker thread (compact, as fastjson writes
    it), so that no single call holds the GIL for long."""
    ids = event["context"]
    marker = b'"\\u0000context\\u0000"'  # the placeholder string, as the encoder escapes it
    head = encode({**event, "context": "\x00context\x00"})

    def ids_json() -> bytes:
        step = 1 << 16
        parts = [dumps(ids[k:k + step])[1:-1] for k in range(0, len(ids), step)]
        return ("[" + ",".join(p for p in parts if p) + "]").encode()

    before, _, after = head.partition(marker)
    return before + await asyncio.to_thread(ids_json) + after


async def _pump(events: AsyncIterator[Any], resp: web.StreamResponse, encode: Callable[[Any], bytes],
                ends: Callable[[Any], bool] | None, trailer: bytes, lane: Lane | None = None) -> bool:
    """Relay the rest of the stream in a task of its own (_relay). Each token resumes only the frames of that
    task, not the handler's whole await chain (aiohttp's request handling, the middlewares, the route)."""
    task = asyncio.ensure_future(_relay(events, resp, encode, ends, trailer, lane))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        task.cancel()
        with contextlib.suppress(BaseException):
            await task  # the events are closed after this, never while the task is still inside them
        raise


async def _write_error(resp: web.StreamResponse, data: bytes, lane: Lane | None = None) -> None:
    if lane is not None and lane.ended:  # the client has the whole body: the error is only logged
        return
    with contextlib.suppress(ConnectionError):  # the client may be gone too
        await resp.write(data)


def ndjson_line(obj: Any) -> bytes:
    return (dumps(obj) + "\n").encode()


async def ndjson(request: web.Request, events: AsyncIterator[Mapping[str, Any]],
                 lane: Lane | None = None, ends: Callable[[Any], bool] | None = None) -> web.StreamResponse:
    return await stream_response(
        request, events, content_type="application/x-ndjson", encode=ndjson_line,
        encode_error=lambda msg: ndjson_line({"error": msg}), lane=lane, ends=ends,
    )


def sse_event(ev: Any) -> bytes:
    """One SSE event: a dict (data only) or an (event_name, dict) pair (Anthropic's and Responses' events)."""
    if isinstance(ev, tuple):
        return f"event: {ev[0]}\ndata: {dumps(ev[1])}\n\n".encode()
    return f"data: {dumps(ev)}\n\n".encode()


async def sse(request: web.Request, events: AsyncIterator[Any], *, done_marker: bool = True,
              lane: Lane | None = None, ends: Callable[[Any], bool] | None = None) -> web.StreamResponse:
    """SSE events (sse_event) ending with `data: [DONE]` unless told otherwise."""

    def encode_error(msg: str) -> bytes:
        body = error_body(request.path, 500, msg)
        if request.path.startswith("/v1/messages"):
            return f"event: error\ndata: {dumps(body)}\n\n".encode()
        if request.path.startswith("/v1/responses"):  # the Responses stream's own error event, named like the others
            data = {"type": "error", "code": "api_error", "message": msg, "param": None}
            return f"event: error\ndata: {dumps(data)}\n\n".encode()
        return f"data: {dumps(body)}\n\n".encode()

    return await stream_response(request, events, content_type="text/event-stream", encode=sse_event,
                                 encode_error=encode_error, trailer=b"data: [DONE]\n\n" if done_marker else b"",
                                 lane=lane, ends=ends)


NamedEvent = tuple[str, dict[str, Any]]  # an SSE event's name and data


class BlockStream(Protocol):
    """What content_blocks drives: a translator of a completion into named events, keeping its own block
    bookkeeping (anthropic_translate.MessageStream, responses_translate.ResponseStream)."""

    def thinking(self, text: str) -> Iterable[NamedEvent]: ...

    def text(self, text: str) -> Iterable[NamedEvent]: ...

    def finish(self, final: Final) -> Iterable[NamedEvent]: ...

    def delta_event(self, kind: str, text: str, number: int) -> NamedEvent: ...

    def steady_delta(self, kind: str, text: str) -> tuple[Any, int] | None: ...


async def content_blocks(events: AsyncIterator[Delta | Final], blocks: BlockStream) -> AsyncIterator[NamedEvent]:
    """Deltas and the Final of one completion as a block translator's events (Anthropic's MessageStream, the
    Responses API's ResponseStream: `thinking`, `text`, `finish`). Thoughts and text go out as they come (with
    tools, completion holds back only what may be a call); the calls are blocks of their own at the finish."""
    async with _Closing(events):
        async for ev in events:
            if isinstance(ev, Delta):
                for out in blocks.thinking(ev.thinking):
                    yield out
                for out in blocks.text(ev.text):
                    yield out
                continue
            for out in blocks.finish(ev):
                yield out


async def collect(events: AsyncIterator[Any]) -> list[Any]:
    async with _Closing(events):
        return [e async for e in events]

