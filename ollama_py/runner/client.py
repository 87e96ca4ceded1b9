"""HTTP to one llama-server child: /completion as a stream of events (runner/sse.py, the hot path), the small
JSON endpoints (sse.post_json: one connection a call, as the stream; a burst of them over a few kept-alive
connections, sse.KeptConnection) and GETs (aiohttp).

A request makes one small call at a time (`post`), and the scheduler bounds the requests a runner serves by its
slots. A request with many calls (`post_each`: an embed request's tokenizations) uses at most `max_calls`
kept-alive connections for all of them, and all such bursts to one runner together have at most `max_calls`
calls in flight (a FIFO semaphore, so two bursts take turns); single calls never wait for it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import urllib.parse
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Any

import aiohttp

from ollama_py.runner import sse
from ollama_py.runner.sse import RunnerStalled, UpstreamLost, error_from

__all__ = ["LlamaClient", "RunnerStalled", "UpstreamLost"]

log = logging.getLogger(__name__)


class LlamaClient:
    """read_timeout: the longest silence allowed while waiting for a response or between stream events
    (llama-server streams tokens and pings idle SSE streams, so a long silence means it is hung); None waits
    forever. api_key: the runner's key, sent as a bearer token on every request. max_calls: the calls of
    `post_each` bursts in flight to this runner at once (and the connections one burst uses). spares: the most
    connections opened ahead of streams (sse.Spare; the runner's slots)."""

    MAX_CALLS = 4

    def __init__(self, base_url: str, *, read_timeout: float | None = None, api_key: str = "",
                 max_calls: int = MAX_CALLS, spares: int = 1) -> None:
        self.max_calls = max_calls
        self._spares = spares
        self._calls = asyncio.Semaphore(max_calls)
        self.read_timeout = read_timeout
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._session: aiohttp.ClientSession | None = None
        self._streams: set[sse.SSEStream] = set()
        self._spare: sse.Spare | None = None
        self.base_url = base_url  # (the scheduler sets it once the runner listens)
        self._n_vocab: int | None = None

    @property
    def base_url(self) -> str:
        return self._base_url

    @base_url.setter
    def base_url(self, url: str) -> None:
        """The runner's address; its spare connection (sse.Spare) goes there, none before it has one."""
        self._base_url = url
        parts = urllib.parse.urlsplit(url)
        self._host, self._port = parts.hostname or "127.0.0.1", parts.port or 80  # (parsed once, not per call)
        if self._spare is not None:
            self._spare.close()
            self._spare = None
        if url:
            self._spare = sse.Spare(self._host, self._port, self.read_timeout, self._spares)

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
        if self._spare is not None:
            self._spare.close()
        for stream in list(self._streams):
            stream.fail(UpstreamLost("connection to llama runner lost: runner stopped"))
        if self._session is not None:
            await self._session.close()

    async def _raise_for(self, resp: aiohttp.ClientResponse) -> None:
        raise error_from(resp.status, await resp.text())

    def stream(self, path: str, body: dict[str, Any],
               tap: sse.Tap | None = None) -> AsyncGenerator[dict[str, Any], None]:
        """POST body with stream=true and yield each SSE `data:` event as a dict, up to the one with stop."""
        return sse.stream_events(self._host, self._port, path, body,
                                 read_timeout=self.read_timeout, streams=self._streams, tap=tap,
                                 headers=self._headers, spare=self._spare)

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        """POST body, the JSON answer (a connection of its own, as `stream`: runner/sse.post_json)."""
        return await sse.post_json(self._host, self._port, path, body,
                                   read_timeout=self.read_timeout, headers=self._headers, streams=self._streams)

    @contextlib.asynccontextmanager
    async def kept(self) -> AsyncIterator[sse.KeptConnection]:
        """One kept-alive connection for a few calls in a row by one request (closed when the block ends)."""
        conn = sse.KeptConnection(self._host, self._port, read_timeout=self.read_timeout,
                                  headers=self._headers, streams=self._streams)
        try:
            yield conn
        finally:
            conn.close()

    async def post_each(self, path: str, bodies: Sequence[dict[str, Any]]) -> list[Any]:
        """POST each body to `path`; the answers in the bodies' order. At most `max_calls` workers, each with one
        kept-alive connection for all the bodies it takes, closed when none are left; each call holds one of the
        runner's `max_calls` places only while it is in flight, so other requests' calls take turns with these.
        The first error stops the rest and is raised."""
        answers: list[Any] = [None] * len(bodies)
        work = iter(enumerate(bodies))

        async def worker() -> None:
            conn = sse.KeptConnection(self._host, self._port, read_timeout=self.read_timeout,
                                      headers=self._headers, streams=self._streams)
            try:
                for i, body in work:
                    async with self._calls:
                        answers[i] = await conn.post(path, body)
            finally:
                conn.close()

        try:
            async with asyncio.TaskGroup() as group:
                for _ in range(min(self.max_calls, len(bodies))):
                    group.create_task(worker())
        except BaseExceptionGroup as group_error:  # the first worker's error, as a single call would raise it
            raise group_error.exceptions[0] from None
        return answers

    async def get_text(self, path: str) -> str:
        async with self.session.get(self.base_url + path) as resp:
            if resp.status != 200:
                await self._raise_for(resp)
            return await resp.text()

    async def tokenize(self, content: str, add_special: bool = False) -> list[int]:
        data = await self.post("/tokenize", {"content": content, "add_special": add_special})
        tokens = data.get("tokens", [])
        if not tokens or isinstance(tokens[0], int):  # plain ids (llama-server's answer without pieces): as they are
            return tokens
        if len(tokens) > 100_000:  # millions of {id, piece} (a 32 MB text): looked at off the loop
            return await asyncio.to_thread(_token_ids, tokens)
        return _token_ids(tokens)

    async def tokenize_array(self, content: str, add_special: bool = False) -> list[bytes] | None:
        """tokenize() for a long text, as the bytes of the JSON array of ids (`[1,2,...]`, in pieces) that
        llama-server sent: relayed, never made into millions of Python ints (making them took 0.35 s in a thread
        and freeing them 0.1 s on the loop for a 32 MB text). None when the answer has another shape."""
        parts = await sse.post_for_parts(self._host, self._port, "/tokenize",
                                         {"content": content, "add_special": add_special},
                                         read_timeout=self.read_timeout, headers=self._headers, streams=self._streams)
        return await asyncio.to_thread(id_array, parts)

    async def tokenize_each(self, texts: Sequence[str], add_special: bool = False) -> list[list[int]]:
        """tokenize() of each text (llama-server's /tokenize takes one), through post_each's few connections."""
        answers = await self.post_each("/tokenize", [{"content": t, "add_special": add_special} for t in texts])
        return [[t if isinstance(t, int) else t["id"] for t in data.get("tokens", [])] for data in answers]

    async def vocab_size(self) -> int | None:
        """The model's vocabulary size as its runner reports it (/v1/models' meta.n_vocab; asked once), or None
        when it does not say."""
        if self._n_vocab is None:
            try:
                data = json.loads(await self.get_text("/v1/models"))
                n_vocab = data["data"][0]["meta"]["n_vocab"]
            except (ValueError, LookupError, TypeError):
                return None
            if isinstance(n_vocab, int) and n_vocab > 0:
                self._n_vocab = n_vocab
        return self._n_vocab

    async def detokenize(self, tokens: list[int]) -> str:
        return (await self.post("/detokenize", {"tokens": tokens})).get("content", "")


_ARRAY_HEAD = re.compile(rb'\A\s*\{\s*"tokens"\s*:\s*(?=\[)')
_ARRAY_TAIL = re.compile(rb'(?<=\])\s*\}\s*\Z')
_NOT_IDS = bytes(range(256)).translate(None, b"0123456789, \t\r\n")


def id_array(parts: list[bytes]) -> list[bytes] | None:
    """The `[...]` of a `{"tokens": [...]}` body that arrived in pieces, as pieces, when it holds only ids
    (digits, commas, spaces); else None. Each byte is looked at once, a piece at a time (short C calls)."""
    parts = list(parts)
    while len(parts) > 1 and len(parts[0]) < 64:  # the envelope's ends within one piece each
        parts[0:2] = [parts[0] + parts[1]]
    while len(parts) > 1 and len(parts[-1]) < 64:
        parts[-2:] = [parts[-2] + parts[-1]]
    if not parts:
        return None
    head = _ARRAY_HEAD.match(parts[0])
    window = parts[-1][-64:]
    tail = _ARRAY_TAIL.search(window)
    if head is None or tail is None:
        return None
    end = len(parts[-1]) - len(window) + tail.start()
    if len(parts) == 1:
        if end - head.end() < 2:
            return None
        body = [parts[0][head.end():end]]
    else:
        body = [parts[0][head.end():], *parts[1:-1], parts[-1][:end]]
    if body[0][:1] != b"[" or body[-1][-1:] != b"]":
        return None
    for k, piece in enumerate(body):
        inner = piece[1 if k == 0 else 0: len(piece) - 1 if k == len(body) - 1 else len(piece)]
        if inner.translate(None, _NOT_IDS) != inner:
            return None
    return body


def _token_ids(tokens: list[Any]) -> list[int]:
    return [t if isinstance(t, int) else t["id"] for t in tokens]
