"""Property tests for the stream parsers on our side of the wire: llama-server's SSE and JSON answers
(runner/client.py) and Ollama's NDJSON (client/client.py). Whatever the chunk boundaries, the events come back
whole and in order; garbage gives a clear error, never a hang or a traceback of the wrong kind."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from aiohttp import web
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ollama_py.client.client import Client
from ollama_py.errors import OllamaError
from ollama_py.runner.client import LlamaClient

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=20)
events = st.lists(st.fixed_dictionaries({"content": texts, "tokens": st.lists(st.integers(0, 50000), max_size=3)}),
                  max_size=12)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:]) if b > a]


async def serve_chunks(chunks: list[bytes], content_type: str) -> tuple[web.AppRunner, str]:
    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": content_type})
        await resp.prepare(request)
        for chunk in chunks:
            await resp.write(chunk)
            await asyncio.sleep(0)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/completion", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    site = web.SockSite(runner, sock)
    await site.start()
    return runner, f"http://127.0.0.1:{sock.getsockname()[1]}"


def sse_roundtrip(evs: list[dict], cuts: list[int]) -> list[dict]:
    final = {"content": "", "stop": True, "stop_type": "eos", "timings": {"predicted_n": len(evs)}}
    data = b"".join(f"data: {json.dumps(e)}\n\n".encode() for e in [*evs, final])

    async def run() -> list[dict]:
        runner, url = await serve_chunks(split(data, cuts), "text/event-stream")
        client = LlamaClient(url)
        try:
            return [e async for e in client.stream("/completion", {"prompt": "x"})]
        finally:
            await client.close()
            await runner.cleanup()

    return asyncio.run(run())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evs=events, cuts=st.lists(st.integers(0, 10_000), max_size=8))
def test_sse_events_survive_any_chunking(evs, cuts):
    got = sse_roundtrip(evs, cuts)
    assert got[:-1] == evs
    assert got[-1]["stop"] is True


async def raw_reply(chunks: list[bytes], path: str = "/tokenize") -> object:
    """LlamaClient.post against a server that answers with these bytes, written in these pieces, then closes."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length"))
        await reader.readexactly(length)
        for chunk in chunks:
            writer.write(chunk)
            await writer.drain()
            await asyncio.sleep(0)
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    client = LlamaClient(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}")
    try:
        return await client.post(path, {"content": "x"})
    finally:
        await client.close()
        server.close()
        await server.wait_closed()


replies = st.recursive(st.none() | st.booleans() | st.integers() | texts,
                       lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
                       max_leaves=12)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reply=replies, chunked=st.booleans(), cuts=st.lists(st.integers(0, 10_000), max_size=8))
def test_json_reply_survives_any_chunking(reply, chunked, cuts):
    body = json.dumps(reply).encode()
    if chunked:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
        data = head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    else:
        data = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    assert asyncio.run(raw_reply(split(data, cuts))) == reply


def test_json_reply_error_status_and_lost_connection():
    body = b'{"error":{"code":400,"message":"bad input","type":"invalid_request_error"}}'
    try:
        asyncio.run(raw_reply([b"HTTP/1.1 400 Bad Request\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)]))
    except OllamaError as e:
        assert str(e) == "bad input"
    else:
        raise AssertionError("a 400 must raise")
    try:
        asyncio.run(raw_reply([b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"tok"]))
    except OllamaError as e:
        assert "connection to llama runner lost" in str(e) or "closed" in str(e)
    else:
        raise AssertionError("a cut-off answer must raise")


class _NDJSONHandler(BaseHTTPRequestHandler):
    chunks: list[bytes] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for chunk in self.chunks:
            self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args: object) -> None:
        pass


def ndjson_roundtrip(chunks: list[bytes]) -> list[dict]:
    _NDJSONHandler.chunks = chunks
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NDJSONHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        client = Client(f"127.0.0.1:{server.server_address[1]}")
        return list(client.chat("m", [{"role": "user", "content": "x"}]))
    finally:
        server.shutdown()
        server.server_close()


chat_chunks = st.lists(st.fixed_dictionaries({"message": st.fixed_dictionaries(
    {"role": st.just("assistant"), "content": texts}), "done": st.just(False)}), max_size=10)


@settings(max_examples=20, deadline=None)
@given(objs=chat_chunks, cuts=st.lists(st.integers(0, 10_000), max_size=8))
def test_ndjson_objects_survive_any_chunking(objs, cuts):
    final = {"message": {"role": "assistant", "content": ""}, "done": True, "done_reason": "stop"}
    data = b"".join((json.dumps(o) + "\n").encode() for o in [*objs, final])
    assert ndjson_roundtrip(split(data, cuts)) == [*objs, final]


@settings(max_examples=20, deadline=None)
@given(junk=st.binary(min_size=1, max_size=60).filter(lambda b: b.strip() and b"\n" not in b))
def test_ndjson_garbage_is_a_clear_error(junk):
    try:
        out = ndjson_roundtrip([b'{"message": {"role": "assistant", "content": "a"}, "done": false}\n', junk + b"\n"])
    except OllamaError as e:
        assert str(e)
    else:  # junk that happens to be a JSON object is a valid (if odd) chunk
        assert isinstance(out[-1], dict)


def test_ndjson_error_line_raises_the_servers_message():
    try:
        ndjson_roundtrip([b'{"message": {"role": "assistant", "content": "a"}, "done": false}\n',
                          b'{"error": "llama runner process has terminated"}\n'])
    except OllamaError as e:
        assert str(e) == "llama runner process has terminated"
    else:
        raise AssertionError("an error line must raise")
