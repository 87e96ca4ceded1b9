"""One record per HTTP request: the INFO log line, and what feeds the request metrics (server/metrics.py).

The middleware opens a `RequestStats` for each request and makes it current (a context variable, so the
completion path can fill it without every route passing it along): `current_stats()` returns it, or a
detached record outside a request. The completion path notes the model, the first token and the final
timings; once the response is written the middleware logs

    method=POST path=/api/chat status=200 duration=1.204s client=127.0.0.1 model=smollm2:135m ttft=0.211s
    load=0.000s prompt_tokens=31 prompt_eval=0.044s eval_tokens=64 eval=0.945s

and hands the record to Metrics. `/metrics` scrapes are logged at DEBUG (a scraper calls every few seconds);
with OLLAMA_DEBUG=1 each request also gets a DEBUG line with its route, sizes, user agent, cached prompt
tokens and done reason.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ollama_py.server.appkeys import CONSOLE, METRICS
from ollama_py.server.console import is_console_path
from ollama_py.server.offload import BULKY, release, resume_gc

if TYPE_CHECKING:
    from ollama_py.api.names import ModelName
    from ollama_py.server.completion import Final  # completion imports this module
    from ollama_py.store.models import Model

log = logging.getLogger(__name__)

UNMATCHED = "unmatched"  # the endpoint label of requests no route matched (404/405): raw paths are unbounded
CLIENT_CLOSED = 499  # nginx's status for a request whose client went away before the answer was complete
_QUIET_PATHS = ("/metrics",)


@dataclass(slots=True)
class RequestStats:
    """What one request did; filled in by whoever knows (the completion path), read when it is over."""

    started: float  # time.perf_counter() at arrival
    model: str = ""  # only names that resolved to a stored model: a label must not take arbitrary input
    first_token_at: float | None = None
    prompt_tokens: int | None = None
    eval_tokens: int | None = None  # None until a completion finished
    prompt_eval_ns: int = 0
    eval_ns: int = 0
    load_ns: int = 0
    cached_tokens: int = 0
    done_reason: str = ""
    bulky: list[list[Any]] = field(default_factory=list)  # lists of millions of items, emptied off the loop at the end
    gc_paused: bool = False  # the cycle collector is paused for this request (offload.pause_gc)...
    gc_until_done: bool = False  # ...until it is over (else until its first output)

    def hold(self, value: Any) -> None:
        """Keep a list of millions of items (token ids) to empty in a thread once the response is out: freeing it
        where its last owner lets go, on the loop, took ~25 ms per 20M items (offload.release)."""
        if isinstance(value, list) and len(value) > BULKY:
            self.bulky.append(value)

    @property
    def attached(self) -> bool:
        """Whether this is the record of the request being served (the access-log middleware ends it)."""
        return _current.get() is self

    def gc_paused_for(self, *, until_done: bool) -> None:
        """The request paused the cycle collector (offload.pause_gc): it is resumed at the first output (the
        model's first token), or with `until_done` when the request is over."""
        if self.gc_paused and not until_done:
            resume_gc()  # one pause per request
        self.gc_paused = True
        self.gc_until_done = self.gc_until_done or until_done

    def _resume_gc(self) -> None:
        if self.gc_paused:
            self.gc_paused = False
            resume_gc()

    def note_model(self, model: Model | ModelName | str) -> None:
        """The model this request uses: a store Model (its short name) or a name."""
        name = getattr(model, "name", model)
        self.model = str(getattr(name, "short", name))

    def first_output(self) -> None:
        """Called for every upstream event; the first call is the time to first token."""
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()
            if self.gc_paused and not self.gc_until_done:
                self._resume_gc()

    def finished(self, final: Final) -> None:
        """The completion's Final (server/completion.py): token counts and the runner's timings."""
        self.prompt_tokens = final.prompt_eval_count
        self.eval_tokens = final.eval_count
        self.prompt_eval_ns = final.prompt_eval_duration
        self.eval_ns = final.eval_duration
        self.load_ns = final.load_duration
        self.cached_tokens = final.cache_n
        self.done_reason = final.done_reason

    @property
    def ttft(self) -> float | None:
        return None if self.first_token_at is None else self.first_token_at - self.started


_current: contextvars.ContextVar[RequestStats | None] = contextvars.ContextVar("request_stats", default=None)


def current_stats() -> RequestStats:
    """The current request's record; a detached one (that nobody reads) outside a request."""
    stats = _current.get()
    return stats if stats is not None else RequestStats(time.perf_counter())


def endpoint_of(request: web.Request) -> str:
    """The route pattern that served the request ("/api/blobs/{digest}"), not the raw path."""
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else UNMATCHED


def _seconds(ns: int) -> str:
    return f"{ns / 1e9:.3f}s"


def log_line(request: web.Request, status: int, duration: float, stats: RequestStats) -> str:
    parts = [f"method={request.method}", f"path={request.path}", f"status={status}", f"duration={duration:.3f}s",
             f"client={request.remote or '-'}"]
    if stats.model:
        parts.append(f"model={stats.model}")
    if stats.ttft is not None:
        parts.append(f"ttft={stats.ttft:.3f}s")
    if stats.eval_tokens is not None:
        parts += [f"load={_seconds(stats.load_ns)}", f"prompt_tokens={stats.prompt_tokens}",
                  f"prompt_eval={_seconds(stats.prompt_eval_ns)}", f"eval_tokens={stats.eval_tokens}",
                  f"eval={_seconds(stats.eval_ns)}"]
    return " ".join(parts)


def _debug_line(request: web.Request, response: web.StreamResponse | None, stats: RequestStats) -> str:
    sent = getattr(response, "body_length", 0) if response is not None else 0
    return (f"method={request.method} path={request.path} endpoint={endpoint_of(request)} "
            f"request_bytes={request.content_length or 0} response_bytes={sent} "
            f"user_agent={request.headers.get('User-Agent', '-')!r} cached_tokens={stats.cached_tokens} "
            f"done_reason={stats.done_reason or '-'}")


@web.middleware
async def access_log_middleware(request: web.Request,
                                handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                                ) -> web.StreamResponse:
    """Outermost: sees the status the error middleware chose, and streamed responses once fully written."""
    stats = RequestStats(time.perf_counter())
    token = _current.set(stats)
    status = 500
    response: web.StreamResponse | None = None
    try:
        response = await handler(request)
        status = response.status
        if stats.bulky:
            await release(stats.bulky)
        return response
    except web.HTTPException as e:  # redirects and the like that the error middleware lets through
        status = e.status
        raise
    except asyncio.CancelledError:
        status = CLIENT_CLOSED
        raise
    finally:
        _current.reset(token)
        stats._resume_gc()
        duration = time.perf_counter() - stats.started
        metrics = request.app.get(METRICS)
        if metrics is not None:
            try:
                metrics.observe_request(endpoint=endpoint_of(request), method=request.method, status=status,
                                        stats=stats, duration=duration)
            except Exception:  # metrics must never fail a request
                log.exception("recording request metrics failed")
        console = request.app.get(CONSOLE)
        own = is_console_path(request.path)  # the console's page and streams: not what it shows, logged at DEBUG
        if console is not None and not own:
            console.request_tap.record(method=request.method, path=request.path, status=status, duration=duration,
                                       stats=stats)
        level = logging.DEBUG if own or request.path in _QUIET_PATHS else logging.INFO
        if log.isEnabledFor(level):
            log.log(level, "%s", log_line(request, status, duration, stats))
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s", _debug_line(request, response, stats))
