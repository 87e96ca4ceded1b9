"""HTTP to one llama-server child: /completion as a stream of events (runner/sse.py, the hot path), the small
JSON endpoints (sse.post_json: one connection a call, as the stream) and GETs (aiohttp)."""

from __future__ import annotations

import json
import logging
import urllib.parse
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from ollama_py.runner import sse
from ollama_py.runner.sse import RunnerStalled, UpstreamLost, error_from

__all__ = ["LlamaClient", "RunnerStalled", "UpstreamLost"]

log = logging.getLogger(__name__)


class LlamaClient:
    """read_timeout: the longest silence allowed while waiting for a response or between stream events
    (llama-server streams tokens and pings idle SSE streams, so a long silence means it is hung); None waits
    forever. api_key: the runner's key, sent as a bearer token on every request."""

    def __init__(self, base_url: str, *, read_timeout: float | None = None, api_key: str = "") -> None:
        self.base_url = base_url
        self.read_timeout = read_timeout
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._session: aiohttp.ClientSession | None = None
        self._streams: set[sse.SSEStream] = set()

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=60),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=self.read_timeout),
                json_serialize=lambda o: json.dumps(o, ensure_ascii=False),
                headers=self._headers,
            )
        return self._session

    async def close(self) -> None:
        """Close the session. Requests still in flight fail at once (UpstreamLost)."""
        for stream in list(self._streams):
            stream.fail(UpstreamLost("connection to llama runner lost: runner stopped"))
        if self._session is not None:
            await self._session.close()

    async def _raise_for(self, resp: aiohttp.ClientResponse) -> None:
        raise error_from(resp.status, await resp.text())

    def stream(self, path: str, body: dict[str, Any], tap: sse.Tap | None = None) -> AsyncIterator[dict[str, Any]]:
        """POST body with stream=true and yield each SSE `data:` event as a dict, up to the one with stop."""
        url = urllib.parse.urlsplit(self.base_url)
        return sse.stream_events(url.hostname or "127.0.0.1", url.port or 80, path, body,
                                 read_timeout=self.read_timeout, streams=self._streams, tap=tap,
                                 headers=self._headers)

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        """POST body, the JSON answer (a connection of its own, as `stream`: runner/sse.post_json)."""
        url = urllib.parse.urlsplit(self.base_url)
        return await sse.post_json(url.hostname or "127.0.0.1", url.port or 80, path, body,
                                   read_timeout=self.read_timeout, headers=self._headers, streams=self._streams)

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
