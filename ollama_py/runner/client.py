"""HTTP to one llama-server child: /completion as a stream of events, and the small JSON endpoints.

The streaming path is hot: one json.loads per SSE event and nothing else.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from ollama_py.errors import BadRequest, RunnerError

log = logging.getLogger(__name__)


class UpstreamLost(RunnerError):
    """The connection to llama-server broke mid-request (the child probably died)."""


class RunnerStalled(RunnerError):
    """llama-server sent nothing for `read_timeout` seconds mid-request: it is hung (stopped, deadlocked)."""


_LOST = (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, ConnectionResetError)


class LlamaClient:
    """read_timeout: the longest silence allowed while waiting for a response or between stream events
    (llama-server streams tokens and pings idle SSE streams, so a long silence means it is hung); None waits
    forever."""

    def __init__(self, base_url: str, *, read_timeout: float | None = None) -> None:
        self.base_url = base_url
        self.read_timeout = read_timeout
        self._session: aiohttp.ClientSession | None = None
        self._in_flight: set[aiohttp.ClientResponse] = set()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=self.read_timeout),
                json_serialize=lambda o: json.dumps(o, ensure_ascii=False),
            )
        return self._session

    def _lost(self, e: BaseException) -> RunnerError:
        """The error for a request whose connection failed: a silence past read_timeout means a hung runner."""
        if isinstance(e, TimeoutError) or isinstance(e.__cause__, TimeoutError):
            return RunnerStalled(f"llama runner stopped responding: no output for {self.read_timeout:g}s")
        return UpstreamLost(f"connection to llama runner lost: {e}")

    async def close(self) -> None:
        """Close the session. Requests still in flight fail at once (UpstreamLost): closing aiohttp's
        connections under a response would leave its reader waiting forever."""
        for resp in list(self._in_flight):
            resp.content.set_exception(aiohttp.ServerDisconnectedError("runner stopped"))
        if self._session is not None:
            await self._session.close()

    @contextlib.asynccontextmanager
    async def _request(self, path: str, body: dict[str, Any]) -> AsyncIterator[aiohttp.ClientResponse]:
        resp = await self._send(path, body)
        self._in_flight.add(resp)
        try:
            async with resp:
                yield resp
        finally:
            self._in_flight.discard(resp)

    async def _raise_for(self, resp: aiohttp.ClientResponse) -> None:
        text = await resp.text()
        try:
            err = json.loads(text).get("error", text)
            message = err.get("message", text) if isinstance(err, dict) else str(err)
        except (ValueError, AttributeError):
            message = text
        if resp.status == 400:
            raise BadRequest(message)
        raise RunnerError(f"llama-server {resp.status}: {message}")

    async def _send(self, path: str, body: dict[str, Any]) -> aiohttp.ClientResponse:
        """POST; a pooled keep-alive connection the child already closed gets one retry on a fresh one."""
        try:
            return await self.session.post(self.base_url + path, json=body)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError):
            return await self.session.post(self.base_url + path, json=body)

    async def stream(self, path: str, body: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """POST body with stream=true and yield each SSE `data:` event as a dict."""
        try:
            async with self._request(path, body) as resp:
                if resp.status != 200:
                    await self._raise_for(resp)
                async for line in resp.content:
                    if line.startswith(b"data: "):
                        payload = line[6:].strip()
                        if payload == b"[DONE]":
                            return
                        event = json.loads(payload)
                        if "error" in event and "content" not in event:
                            err = event["error"]
                            raise RunnerError(err.get("message", str(err)) if isinstance(err, dict) else str(err))
                        yield event
                        if event.get("stop") is True:
                            return
                    elif line.startswith(b"error: "):
                        raise RunnerError(line[7:].decode("utf-8", "replace").strip())
        except _LOST as e:
            raise self._lost(e) from None
        except TimeoutError:  # aiohttp's sock_read timeout
            raise self._lost(TimeoutError()) from None
        raise UpstreamLost("llama runner closed the stream before it was done")

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        try:
            async with self._request(path, body) as resp:
                if resp.status != 200:
                    await self._raise_for(resp)
                return await resp.json(content_type=None)
        except _LOST as e:
            raise self._lost(e) from None
        except TimeoutError:  # aiohttp's sock_read timeout
            raise self._lost(TimeoutError()) from None

    async def get_text(self, path: str) -> str:
        async with self.session.get(self.base_url + path) as resp:
            if resp.status != 200:
                await self._raise_for(resp)
            return await resp.text()

    async def tokenize(self, content: str, add_special: bool = False) -> list[int]:
        data = await self.post("/tokenize", {"content": content, "add_special": add_special})
        return [t if isinstance(t, int) else t["id"] for t in data.get("tokens", [])]

    async def detokenize(self, tokens: list[int]) -> str:
        return (await self.post("/detokenize", {"tokens": tokens})).get("content", "")
