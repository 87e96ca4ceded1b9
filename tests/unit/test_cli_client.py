"""The HTTP client against a fake Ollama server, and the fake server the CLI tests share (`fake` fixture).

FakeOllama is a canned *server*: aiohttp on a loopback port in a thread, answering JSON or NDJSON that a test
sets per route, and recording what it was sent. Nothing of ours is mocked.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from ollama_py.client import Client, ServerUnreachable, file_digest
from ollama_py.errors import BadRequest, NotFound, OllamaError, ServerBusy

Reply = Any  # dict (200 JSON) | (status, dict) | list[dict] (NDJSON stream) | bytes | callable(body) -> Reply


class FakeOllama:
    """Routes are (METHOD, path) -> Reply; unknown routes answer 404 {"error": "not found"}."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Reply] = {("HEAD", "/"): b"", ("GET", "/"): b"Ollama is running"}
        self.requests: list[tuple[str, str, Any]] = []
        self.blobs: dict[str, bytes] = {}
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.port = 0

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def on(self, method: str, path: str, reply: Reply) -> None:
        self.routes[(method, path)] = reply

    def bodies(self, method: str, path: str) -> list[Any]:
        return [b for m, p, b in self.requests if m == method and p == path]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        path = request.path
        if path.startswith("/api/blobs/") and request.method == "POST":
            digest = path.removeprefix("/api/blobs/")
            self.blobs[digest] = raw
            self.requests.append((request.method, path, {"sha256": hashlib.sha256(raw).hexdigest(),
                                                         "length": request.content_length}))
            return web.Response(status=201)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = raw
        self.requests.append((request.method, path, body))
        reply = self.routes.get((request.method, path))
        if reply is None and request.method == "HEAD" and path.startswith("/api/blobs/"):
            reply = (200, {}) if path.removeprefix("/api/blobs/") in self.blobs else (404, {"error": "not found"})
        if reply is None:
            return web.json_response({"error": f"no route {request.method} {path}"}, status=404)
        if callable(reply):
            reply = reply(body)
        status = 200
        if isinstance(reply, tuple):
            status, reply = reply
        if isinstance(reply, bytes):
            return web.Response(status=status, body=reply)
        if isinstance(reply, list):
            resp = web.StreamResponse(status=status, headers={"Content-Type": "application/x-ndjson"})
            await resp.prepare(request)
            for item in reply:
                await resp.write(json.dumps(item).encode() + b"\n")
            await resp.write_eof()
            return resp
        return web.json_response(reply, status=status)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=1 << 30)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(self._runner.cleanup())

    def start(self) -> FakeOllama:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    server = FakeOllama().start()
    yield server
    server.stop()


@pytest.fixture
def client(fake: FakeOllama) -> Iterator[Client]:
    with Client(fake.host) as c:
        yield c


# -- the client ---------------------------------------------------------------------------------------------------


def test_chat_streams_each_object_in_order(fake: FakeOllama, client: Client) -> None:
    chunks = [{"message": {"role": "assistant", "content": w}, "done": False} for w in ("Hel", "lo")]
    fake.on("POST", "/api/chat", chunks + [{"done": True, "done_reason": "stop", "eval_count": 2}])
    got = list(client.chat("m", [{"role": "user", "content": "hi"}], options={"temperature": 0}))
    assert [c.get("message", {}).get("content") for c in got[:2]] == ["Hel", "lo"]
    assert got[-1]["done_reason"] == "stop"
    assert fake.bodies("POST", "/api/chat") == [{"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                 "stream": True, "options": {"temperature": 0}}]


def test_generate_leaves_out_fields_that_are_none(fake: FakeOllama, client: Client) -> None:
    fake.on("POST", "/api/generate", [{"response": "x", "done": True}])
    list(client.generate("m", "why?", system=None, keep_alive="5m"))
    assert fake.bodies("POST", "/api/generate") == [{"model": "m", "prompt": "why?", "stream": True,
                                                     "keep_alive": "5m"}]


@pytest.mark.parametrize(
    ("status", "error_class"),
    [(400, BadRequest), (404, NotFound), (503, ServerBusy), (500, OllamaError)],
    ids=["400-bad-request", "404-not-found", "503-busy", "500-other"],
)
def test_error_status_raises_its_class_with_the_server_text(fake: FakeOllama, client: Client, status: int,
                                                            error_class: type) -> None:
    fake.on("POST", "/api/show", (status, {"error": "model 'x' not found"}))
    with pytest.raises(error_class) as info:
        client.show("x")
    assert str(info.value) == "model 'x' not found"
    assert info.value.status == status


def test_error_line_inside_a_stream_raises(fake: FakeOllama, client: Client) -> None:
    fake.on("POST", "/api/pull", [{"status": "pulling manifest"},
                                  {"error": "pull model manifest: file does not exist"}])
    stream = client.pull("nope")
    assert next(stream) == {"status": "pulling manifest"}
    with pytest.raises(OllamaError, match="file does not exist"):
        next(stream)


def test_nothing_listening_raises_server_unreachable() -> None:
    with Client("nonexistent.invalid:11434") as c, pytest.raises(ServerUnreachable) as info:
        c.list()
    assert str(info.value) == ("could not connect to ollama-py server at http://nonexistent.invalid:11434; "
                               "is it running?")


@pytest.mark.parametrize(
    ("raw", "url"),
    [("", "http://127.0.0.1:11434"), ("example.org", "http://example.org:11434"),
     ("example.org:8080", "http://example.org:8080"), ("https://example.org", "https://example.org:443")],
    ids=["default", "host", "host-port", "scheme-host"],
)
def test_host_forms_from_ollama_host(raw: str, url: str) -> None:
    assert Client(raw).base_url == url


def test_blob_upload_sends_the_file_with_its_length_and_reports_progress(fake: FakeOllama, client: Client,
                                                                         tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(range(256)) * 9000)
    digest = file_digest(path)
    assert not client.blob_exists(digest)
    seen: list[int] = []
    client.create_blob(digest, path, progress=seen.append)
    assert client.blob_exists(digest)
    sent = fake.bodies("POST", f"/api/blobs/{digest}")[0]
    assert sent == {"sha256": digest.removeprefix("sha256:"), "length": path.stat().st_size}
    assert sum(seen) == path.stat().st_size


def test_closing_a_stream_early_stops_iteration(fake: FakeOllama, client: Client) -> None:
    fake.on("POST", "/api/generate", [{"response": str(i), "done": False} for i in range(50)])
    stream = client.generate("m", "count")
    assert next(stream)["response"] == "0"
    stream.close()
    assert list(stream) == []


def test_copy_and_delete_send_ollama_bodies(fake: FakeOllama, client: Client) -> None:
    fake.on("POST", "/api/copy", b"")
    fake.on("DELETE", "/api/delete", b"")
    client.copy("a", "b")
    client.delete("b")
    assert fake.bodies("POST", "/api/copy") == [{"source": "a", "destination": "b"}]
    assert fake.bodies("DELETE", "/api/delete") == [{"model": "b"}]


def test_embed_returns_the_json_answer(fake: FakeOllama, client: Client) -> None:
    fake.on("POST", "/api/embed", lambda body: {"model": body["model"], "embeddings": [[0.6, 0.8]]})
    assert client.embed("m", "hello") == {"model": "m", "embeddings": [[0.6, 0.8]]}
    assert fake.bodies("POST", "/api/embed") == [{"model": "m", "input": "hello"}]
