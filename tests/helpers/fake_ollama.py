"""FakeOllama: a canned Ollama *server* for the CLI and client tests (the `fake` fixture in tests/unit/conftest.py).

aiohttp on a loopback port in a thread, answering JSON or NDJSON that a test sets per route, and recording what it
was sent. Nothing of ours is mocked.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from typing import Any

from aiohttp import web

Reply = Any  # dict (200 JSON) | (status, dict) | list[dict] (NDJSON stream) | bytes | callable(body) -> Reply


class FakeOllama:
    """Routes are (METHOD, path) -> Reply; unknown routes answer 404 {"error": "not found"}."""

    def __init__(self) -> None:
        self.routes: dict[tuple[str, str], Reply] = {("HEAD", "/"): b"", ("GET", "/"): b"Ollama is running"}
        self.requests: list[tuple[str, str, Any]] = []
        self.authorizations: list[str | None] = []  # each request's Authorization header
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
        self.authorizations.append(request.headers.get("Authorization"))
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
