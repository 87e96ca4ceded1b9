"""runner/sse.py against raw HTTP responses: the framings llama-server (cpp-httplib) may use, its error
bodies, and connections that break."""

from __future__ import annotations

import asyncio
import json

import pytest

from ollama_py.errors import BadRequest, RunnerError
from ollama_py.runner.sse import RunnerStalled, UpstreamLost, post_stream, stream_events

EVENTS = [{"content": "Hel", "stop": False}, {"content": "lo", "stop": False},
          {"content": "", "stop": True, "timings": {"predicted_n": 2}}]
SSE = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in EVENTS)


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
    from ollama_py.runner.sse import Tap

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
        got: list[dict] = []

        def sink(event: dict) -> bool:
            if len(sunk) == 30:
                return False
            sunk.append(event)
            return True

        tap = Tap()
        try:
            async for event in stream_events("127.0.0.1", port, "/completion", {}, read_timeout=5, tap=tap):
                got.append(event)
                if len(got) == 2:
                    assert tap.stream is not None
                    tap.stream.divert(sink)
        finally:
            server.close()
        return got, sunk

    got, sunk = asyncio.run(main())
    assert sunk == many[2:32]
    assert got == many[:2] + many[32:]
