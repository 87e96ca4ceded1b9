"""runner/sse.py against raw HTTP responses: the framings llama-server (cpp-httplib) may use, its error
bodies, and connections that break. Each test runs under asyncio's loop and under uvloop, which `serve` runs."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from ollama_py.errors import BadRequest, RunnerError
from ollama_py.runner.sse import KeptConnection, RunnerStalled, Tap, UpstreamLost, post_stream, stream_events

EVENTS = [{"content": "Hel", "stop": False}, {"content": "lo", "stop": False},
          {"content": "", "stop": True, "timings": {"predicted_n": 2}}]
SSE = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in EVENTS)


@pytest.fixture(autouse=True, params=["asyncio", "uvloop"])
def event_loop_kind(request: pytest.FixtureRequest) -> Iterator[str]:
    """The loop every asyncio.run here gets: the protocol's callbacks, pausing and aborting a transport are the
    loop's own code, and production runs uvloop's."""
    if request.param == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        yield request.param
    finally:
        asyncio.set_event_loop_policy(None)


async def respond(raw: bytes, *, close: bool = True, pause: float = 0.0) -> list[dict]:
    """Serve `raw` as the whole response to one request and return the events the stream yields."""
    seen: list[bytes] = []

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await reader.readuntil(b"\r\n\r\n"))
        for i in range(0, len(raw), 7):  # in small pieces, to cross every boundary
            writer.write(raw[i : i + 7])
            await writer.drain()
        if pause:
            await asyncio.sleep(pause)
        if close:
            writer.close()

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        return [e async for e in stream_events("127.0.0.1", port, "/completion", {"prompt": "x"}, read_timeout=0.3)]
    finally:
        server.close()
        await asyncio.sleep(pause)  # let the handler finish
        assert not seen or seen[0].startswith(b"POST /completion HTTP/1.1\r\n")


def chunked(body: bytes, size: int = 5) -> bytes:
    parts = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


async def read_diverting(port: int, after: int, *sinks: Any) -> list[dict]:
    """The events a consumer gets from a stream whose later events it diverts to `sinks` after the first `after`."""
    tap, got = Tap(), []
    async for event in stream_events("127.0.0.1", port, "/completion", {}, read_timeout=5, tap=tap):
        got.append(event)
        if len(got) == after:
            assert tap.stream is not None
            tap.stream.divert(*sinks)
    return got


def test_a_request_body_goes_out_as_utf8_json_of_the_same_text():
    """A runner request is UTF-8 JSON (fastjson.to_runner: orjson, quick for an agent's long prompt): its
    Content-Length counts its bytes, not its characters, and they decode to the text sent."""
    body = {"prompt": 'Réponds → "oui" 🐉 日本語\n\\ done', "n_predict": 1}
    got: list[bytes] = []

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        got.append(await reader.readexactly(length))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + SSE)
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            assert [e async for e in stream_events("127.0.0.1", port, "/completion", body, read_timeout=5)] == EVENTS
        finally:
            server.close()

    asyncio.run(main())
    assert json.loads(got[0].decode("utf-8")) == body
    assert "🐉 日本語".encode() in got[0]  # as UTF-8, not escaped


def test_chunked_body_with_extensions():
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert asyncio.run(respond(head + chunked(SSE))) == EVENTS


def test_close_delimited_body():
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
    assert asyncio.run(respond(head + SSE)) == EVENTS


def test_done_marker_ends_the_stream_without_a_stop_event():
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in EVENTS[:2]) + b"data: [DONE]\n\n"
    assert asyncio.run(respond(head + body, close=False)) == EVENTS[:2]


def test_a_400_body_is_a_bad_request_with_llama_servers_message():
    body = json.dumps({"error": {"code": 400, "message": "the request exceeds the available context size"}})
    raw = b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body.encode())
    with pytest.raises(BadRequest, match="exceeds the available context size"):
        asyncio.run(respond(raw, close=False))


def test_a_500_body_is_a_runner_error_naming_the_status():
    raw = b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(b"boom")
    with pytest.raises(RunnerError, match="llama-server 500: boom"):
        asyncio.run(respond(raw))


def test_an_error_event_mid_stream_is_a_runner_error():
    raw = (b"HTTP/1.1 200 OK\r\n\r\n" + SSE[: SSE.index(b"\n\n") + 2]
           + b'data: {"error": {"message": "slot unavailable"}}\n\n')
    with pytest.raises(RunnerError, match="slot unavailable"):
        asyncio.run(respond(raw))


def test_a_connection_dropped_mid_stream_is_upstream_lost():
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(SSE)[:40]
    with pytest.raises(UpstreamLost, match="closed the stream before it was done"):
        asyncio.run(respond(raw))


def test_silence_past_the_read_timeout_is_a_stall():
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked(SSE)[:60]
    with pytest.raises(RunnerStalled, match="stopped responding: no output for 0.3s"):
        asyncio.run(respond(raw, pause=1.0))


def test_garbage_instead_of_http_is_upstream_lost():
    with pytest.raises(UpstreamLost, match="malformed status line"):
        asyncio.run(respond(b"SSH-2.0-OpenSSH\r\n\r\n"))


def test_nobody_listening_is_upstream_lost():
    async def run() -> None:
        server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        server.close()
        await server.wait_closed()
        await post_stream("127.0.0.1", port, "/completion", {})

    with pytest.raises(UpstreamLost, match="connection to llama runner lost"):
        asyncio.run(run())


def test_a_slow_consumer_pauses_reading_and_still_gets_every_event_in_order():
    """Thousands of events arrive at once: reading pauses while they wait to be consumed and resumes after."""
    many = [{"content": f"t{i}", "stop": False} for i in range(3000)] + [{"content": "", "stop": True}]
    body = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in many)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body)

    async def main() -> list[dict]:
        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(head + body)
            await writer.drain()

        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        got = []
        try:
            async for event in stream_events("127.0.0.1", port, "/completion", {}, read_timeout=5):
                got.append(event)
                if len(got) % 50 == 0:
                    await asyncio.sleep(0.001)  # a client that reads slowly
        finally:
            server.close()
        return got

    assert asyncio.run(main()) == many


def test_a_diverted_stream_hands_events_to_the_sink_until_it_declines_one():
    """Events go to the sink in the protocol callback; the first it declines, and all after it, to the consumer."""
    many = [{"content": f"t{i}", "stop": False} for i in range(50)] + [{"content": "", "stop": True}]
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

    async def main() -> tuple[list[dict], list[dict]]:
        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(head)
            for e in many:  # one event per read, as llama-server sends them
                data = b"data: " + json.dumps(e).encode() + b"\n\n"
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                await writer.drain()
                await asyncio.sleep(0.001)
            writer.write(b"0\r\n\r\n")
            await writer.drain()

        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sunk: list[dict] = []

        def sink(event: dict) -> bool:
            if len(sunk) == 30:
                return False
            sunk.append(event)
            return True

        try:
            got = await read_diverting(port, 2, sink)
        finally:
            server.close()
        return got, sunk

    got, sunk = asyncio.run(main())
    assert sunk == many[2:32]
    assert got == many[:2] + many[32:]


def llama_event(content: str, token: int, n: int) -> bytes:
    """A token event as llama-server streams it: compact JSON, its fields in its order, non-ASCII kept."""
    event = {"index": 0, "content": content, "tokens": [token], "stop": False, "id_slot": -1,
             "tokens_predicted": n, "tokens_evaluated": 7}
    data = b"data: " + json.dumps(event, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


@pytest.mark.parametrize("batched", [False, True], ids=["one-event-per-read", "many-events-per-read"])
def test_plain_token_events_reach_the_plain_sink_unparsed_and_the_rest_the_general_one(batched: bool):
    """Tokens whose text needs no unescaping go to the plain sink as llama-server's bytes; a text with a quote,
    a backslash or a newline, an event of another shape, and whatever the plain sink refuses go to the general
    sink parsed; nothing is lost or reordered."""
    texts = [" plain", " héllo 日本", ' say "hi"', "\n", " back\\slash", " tab\t", " plain again", "", " refused",
             " last"]
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    final = b"data: " + json.dumps({"content": "", "stop": True}).encode() + b"\n\n"
    odd = b'data: {"content":" odd order","stop":false}\n\n'  # valid, but not llama-server's layout

    async def main() -> tuple[list, list]:
        async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(head + llama_event("first", 1, 1))
            await writer.drain()
            await asyncio.sleep(0.05)
            frames = [llama_event(t, 10 + i, 2 + i) for i, t in enumerate(texts)]
            frames.insert(3, b"%x\r\n%s\r\n" % (len(odd), odd))
            frames.append(b"%x\r\n%s\r\n0\r\n\r\n" % (len(final), final))
            for frame in [b"".join(frames)] if batched else frames:
                writer.write(frame)
                await writer.drain()
                await asyncio.sleep(0.002)

        server = await asyncio.start_server(on_client, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        sunk: list[tuple[str, str]] = []  # (which sink, text), in the order they came

        def take_plain(content: bytes, ids: bytes) -> bool:
            if content == b" refused":
                return False
            sunk.append(("plain", content.decode()))
            assert ids == b"%d" % (10 + texts.index(content.decode()))
            return True

        def take_general(event: dict) -> bool:
            if event.get("stop"):
                return False
            sunk.append(("general", event["content"]))
            return True

        try:
            got = await read_diverting(port, 1, take_general, take_plain)
        finally:
            server.close()
        return got, sunk

    got, sunk = asyncio.run(main())
    assert [e["content"] for e in got] == ["first", ""] and got[-1]["stop"] is True
    assert [t for _, t in sunk] == [*texts[:3], " odd order", *texts[3:]]
    by_sink = dict((t, k) for k, t in sunk)
    for text in (' say "hi"', "\n", " odd order", " back\\slash", " tab\t", " refused"):
        assert by_sink[text] == "general", text
    # One event per read: every token with nothing to unescape is taken unparsed. Many per read: those before
    # the first that is not; the rest of that read goes the general way.
    plain = [" plain", " héllo 日本"] if batched else [" plain", " héllo 日本", " plain again", "", " last"]
    assert [t for k, t in sunk if k == "plain"] == plain


async def serve_json_calls(answers_per_connection: list[int], *, server_says_close: bool = False):
    """A server that answers each POST with {"n": <request number>}; the i-th connection takes
    answers_per_connection[i] requests, then closes (silently, or saying Connection: close on its last answer).
    Returns (server, port, the number of connections accepted so far as a one-item list)."""
    accepted = [0]
    served = [0]

    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        quota = answers_per_connection[min(accepted[0], len(answers_per_connection) - 1)]
        accepted[0] += 1
        for i in range(quota):
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length")))
            await reader.readexactly(length)
            served[0] += 1
            body = json.dumps({"n": served[0]}).encode()
            last = server_says_close and i == quota - 1
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s"
                         % (len(body), b"Connection: close\r\n" if last else b"", body))
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], accepted


def test_a_kept_connection_carries_call_after_call():
    async def run() -> tuple[list[Any], int]:
        server, port, accepted = await serve_json_calls([100])
        conn = KeptConnection("127.0.0.1", port, read_timeout=5)
        try:
            return [await conn.post("/tokenize", {"content": str(i)}) for i in range(20)], accepted[0]
        finally:
            conn.close()
            server.close()

    answers, accepted = asyncio.run(run())
    assert answers == [{"n": i} for i in range(1, 21)]
    assert accepted == 1


@pytest.mark.parametrize("says_close", [False, True], ids=["closes-silently", "says-connection-close"])
def test_a_kept_connection_the_server_closed_is_opened_again(says_close: bool):
    """cpp-httplib ends a kept-alive connection after 100 requests or 5 s idle: the next call goes on a new one."""
    async def run() -> tuple[list[Any], int]:
        server, port, accepted = await serve_json_calls([3], server_says_close=says_close)
        conn = KeptConnection("127.0.0.1", port, read_timeout=5)
        try:
            answers = []
            for i in range(7):
                answers.append(await conn.post("/tokenize", {"content": str(i)}))  # sent before or after the close
            return answers, accepted[0]
        finally:
            conn.close()
            server.close()

    answers, accepted = asyncio.run(run())
    assert answers == [{"n": i} for i in range(1, 8)]
    assert accepted == 3


# -- the spare connection (sse.Spare): the next stream's connection opened as one ends ---------------------------
class Runner:
    """A llama-server stand-in that answers each request with EVENTS and closes, as llama-server does a stream;
    `drop` lists the connections (1-based, in accept order) it closes unanswered once their request has come."""

    def __init__(self, drop: tuple[int, ...] = (), together: int = 1) -> None:
        self.accepted = 0
        self.answered: list[int] = []
        self.closed_idle = 0
        self.drop = drop
        self.server: asyncio.Server | None = None
        self.together = together  # requests held unanswered until this many have come (streams at once)
        self._requests = 0
        self._all_in = asyncio.Event()

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._on_client, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        n = self.accepted
        try:
            await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed_idle += 1  # the client closed it without a request
            writer.close()
            return
        if n in self.drop:
            writer.close()
            return
        self._requests += 1
        if self._requests % self.together == 0:
            self._all_in.set()
        await self._all_in.wait()
        if self._requests % self.together == 0:
            self._all_in.clear()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + chunked(SSE))
        await writer.drain()
        self.answered.append(n)
        writer.close()

    def close(self) -> None:
        assert self.server is not None
        self.server.close()


async def _events(port: int, spare: Any, tap: Tap | None = None) -> list[dict]:
    return [e async for e in stream_events("127.0.0.1", port, "/completion", {"prompt": "x"}, read_timeout=5,
                                           spare=spare, tap=tap)]


async def _settle() -> None:
    for _ in range(20):  # the refill's connect and the stand-in's accept
        await asyncio.sleep(0.01)


def test_a_stream_right_after_another_goes_on_the_spare_connection() -> None:
    from ollama_py.runner.sse import Spare

    async def main() -> tuple[list[list[dict]], list[bool], Runner]:
        runner = Runner()
        port = await runner.start()
        spare = Spare("127.0.0.1", port, 5)
        got, used = [], []
        try:
            for _ in range(3):
                tap = Tap()
                got.append(await _events(port, spare, tap))
                assert tap.stream is not None
                used.append(tap.stream.spare)
                await _settle()
        finally:
            spare.close()
            await _settle()
            runner.close()
        return got, used, runner

    got, used, runner = asyncio.run(main())
    assert got == [EVENTS] * 3
    assert used == [False, True, True]  # the first connects itself; each later one finds its connection open
    assert runner.answered == [1, 2, 3]  # one connection a request...
    assert runner.accepted == 4 and runner.closed_idle == 1  # ...and the last spare, closed unused


def test_streams_at_once_leave_as_many_spares_for_the_next_ones_up_to_the_slots() -> None:
    """A burst of requests finds a connection open for each (up to `most`, the runner's slots): none of them
    waits for a connect, during which every other request's work ready on the loop would run first."""
    from ollama_py.runner.sse import Spare

    async def main() -> tuple[list[bool], list[bool], list[bool], Runner]:
        runner = Runner(together=3)
        port = await runner.start()
        spare = Spare("127.0.0.1", port, 5, most=2)
        streams: set[Any] = set()

        async def burst() -> list[bool]:
            taps = [Tap() for _ in range(3)]
            got = await asyncio.gather(*(
                _collect(stream_events("127.0.0.1", port, "/completion", {"prompt": "x"}, read_timeout=5,
                                       streams=streams, spare=spare, tap=tap)) for tap in taps))
            assert got == [EVENTS] * 3
            await _settle()
            return [bool(tap.stream and tap.stream.spare) for tap in taps]

        try:
            first, second = await burst(), await burst()
            runner.together = 1
            tap = Tap()
            assert await _events(port, spare, tap) == EVENTS  # alone: the spare the burst left...
            await _settle()
            alone = [bool(tap.stream and tap.stream.spare)]
            return first, second, alone, runner
        finally:
            spare.close()
            await _settle()
            runner.close()

    first, second, alone, runner = asyncio.run(main())
    assert first == [False] * 3  # nothing open yet
    assert sorted(second) == [False, True, True]  # two spares (the most), the third connected itself
    assert alone == [True]
    assert runner.closed_idle == 1  # ...and after it one spare, not two: one stream was in flight


def test_spares_that_waited_too_long_are_closed_and_opened_anew_when_a_stream_ends(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from ollama_py.runner import sse

    async def main() -> tuple[bool, int, Runner]:
        runner = Runner(together=2)
        port = await runner.start()
        spare = sse.Spare("127.0.0.1", port, 5, most=2)
        streams: set[Any] = set()
        try:
            await asyncio.gather(*(_collect(stream_events("127.0.0.1", port, "/completion", {"prompt": "x"},
                                                          read_timeout=5, streams=streams, spare=spare))
                                   for _ in range(2)))
            await _settle()  # two spares open
            monkeypatch.setattr(sse, "SPARE_SECONDS", 0.0)
            runner.together = 1
            tap = Tap()
            assert await _events(port, spare, tap) == EVENTS  # both too old: closed, and a connection of its own
            monkeypatch.setattr(sse, "SPARE_SECONDS", 3.0)
            await _settle()
            opened = len(spare._ready)
            return bool(tap.stream and tap.stream.spare), opened, runner
        finally:
            spare.close()
            await _settle()
            runner.close()

    used, opened, runner = asyncio.run(main())
    assert not used
    assert opened == 1  # one stream was in flight: one spare, fresh
    assert runner.closed_idle == 3  # the two stale ones, and the fresh one closed with the pool


async def _collect(events: Any) -> list[dict]:
    return [e async for e in events]


def test_a_spare_the_runner_closed_as_the_request_went_out_is_sent_again_on_a_new_connection() -> None:
    from ollama_py.runner.sse import Spare

    async def main() -> tuple[list[dict], Runner]:
        runner = Runner(drop=(2,))  # the spare: closed once the request is in, nothing answered
        port = await runner.start()
        spare = Spare("127.0.0.1", port, 5)
        try:
            await _events(port, spare)
            await _settle()
            return await _events(port, spare), runner
        finally:
            spare.close()
            runner.close()

    events, runner = asyncio.run(main())
    assert events == EVENTS
    assert runner.answered == [1, 3]


def test_a_spare_that_waited_too_long_is_dropped_for_a_new_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    from ollama_py.runner import sse

    monkeypatch.setattr(sse, "SPARE_SECONDS", 0.0)  # llama-server drops a connection idle for 5 s

    async def main() -> tuple[bool, Runner]:
        runner = Runner()
        port = await runner.start()
        spare = sse.Spare("127.0.0.1", port, 5)
        try:
            await _events(port, spare)
            await _settle()
            tap = Tap()
            assert await _events(port, spare, tap) == EVENTS
            assert tap.stream is not None
            await _settle()
            return tap.stream.spare, runner
        finally:
            spare.close()
            await _settle()
            runner.close()

    used, runner = asyncio.run(main())
    assert not used
    assert runner.answered == [1, 3]  # the stale one (2) was closed unused, as was the last spare (4)
    assert runner.closed_idle == 2


def test_a_spare_is_closed_with_its_runner_client() -> None:
    from ollama_py.runner.client import LlamaClient

    async def main() -> Runner:
        runner = Runner()
        port = await runner.start()
        client = LlamaClient(f"http://127.0.0.1:{port}", read_timeout=5)
        try:
            assert [e async for e in client.stream("/completion", {"prompt": "x"})] == EVENTS
            await _settle()
            assert runner.accepted == 2  # the spare is open...
            await client.close()
            await _settle()
            return runner
        finally:
            runner.close()

    runner = asyncio.run(main())
    assert runner.closed_idle == 1  # ...and closed with the client, never used


def test_a_runner_client_given_its_address_once_the_runner_listens_has_a_spare_there() -> None:
    """The scheduler makes a runner's client before the runner has a port, and sets base_url once it listens:
    the spare connection must go to that address (not to port 80 of an empty URL)."""
    from ollama_py.runner.client import LlamaClient

    async def main() -> tuple[list[bool], Runner]:
        runner = Runner()
        port = await runner.start()
        client = LlamaClient("", read_timeout=5)
        client.base_url = f"http://127.0.0.1:{port}"
        used = []
        try:
            for _ in range(2):
                tap = Tap()
                assert [e async for e in client.stream("/completion", {"prompt": "x"}, tap)] == EVENTS
                assert tap.stream is not None
                used.append(tap.stream.spare)
                await _settle()
            await client.close()
            await _settle()
            return used, runner
        finally:
            runner.close()

    used, runner = asyncio.run(main())
    assert used == [False, True]
    assert runner.answered == [1, 2] and runner.closed_idle == 1
