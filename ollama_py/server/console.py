"""What the web console (/ui) shows live: the server's recent log lines and recent requests, kept cheaply.

    LogTap          a logging.Handler: each record becomes a small dict in a bounded deque
    RequestTap      the access-log middleware hands it every finished request (method, path, model, status,
                    duration, tokens); it keeps the last few hundred and 10-second buckets for the chart
    Subscribers     the live viewers: one bounded asyncio.Queue per open /ui/api/events stream, fed by the taps
                    and by one shared ticker (routes_ui.py) while any viewer is open

Neither tap is on the per-token path: a request is recorded once, when it is over (the same moment the access
log writes its line), and a log record costs a format and a deque append. With no viewer connected nothing
else happens; a viewer too slow to keep up loses events rather than slowing the server (its queue is bounded).
Log records may come from any thread (blocking store work runs in threads), so events reach the viewers'
queues through `loop.call_soon_threadsafe`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ollama_py.server.access_log import RequestStats  # access_log imports this module

LOG_LINES_KEPT = 500
REQUESTS_KEPT = 200
BUCKET_SECONDS = 10
BUCKETS_KEPT = 90  # 15 minutes of chart
VIEWER_QUEUE = 1000

Event = tuple[str, Any]  # (SSE event name, its JSON payload)
UI_PREFIX = "/ui"
UI_DATA_PREFIX = "/ui/api/"  # the console's data routes: behind OLLAMA_API_KEYS like the API


def is_console_path(path: str) -> bool:
    return path == UI_PREFIX or path.startswith(UI_PREFIX + "/")


def is_console_asset(path: str) -> bool:
    """The page and its static files: no data in them, so served without a key (the page then asks for one)."""
    return is_console_path(path) and not path.startswith(UI_DATA_PREFIX)


class Subscribers:
    """The open live streams. `publish` may be called from any thread; it never blocks and never raises."""

    def __init__(self) -> None:
        self._queues: list[tuple[asyncio.AbstractEventLoop, asyncio.Queue[Event | None]]] = []

    def __bool__(self) -> bool:
        return bool(self._queues)

    @contextlib.contextmanager
    def subscribe(self) -> Iterator[asyncio.Queue[Event | None]]:
        entry = (asyncio.get_running_loop(), asyncio.Queue[Event | None](VIEWER_QUEUE))
        self._queues.append(entry)
        try:
            yield entry[1]
        finally:
            self._queues.remove(entry)

    def publish(self, event: Event | None) -> None:
        """Offer `event` to every viewer: at once on the viewers' own loop, else one wake-up per loop (not one
        per viewer) from another thread."""
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        by_loop: dict[asyncio.AbstractEventLoop, list[asyncio.Queue[Event | None]]] = {}
        for loop, queue in list(self._queues):
            if loop is running:
                _offer(queue, event)
            else:
                by_loop.setdefault(loop, []).append(queue)
        for loop, queues in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a loop that is closing
                loop.call_soon_threadsafe(_offer_all, queues, event)

    def close_all(self) -> None:
        """Ends every live stream (server shutdown): a stream must not hold up a graceful stop."""
        self.publish(None)


def _offer_all(queues: list[asyncio.Queue[Event | None]], event: Event | None) -> None:
    for queue in queues:
        _offer(queue, event)


def _offer(queue: asyncio.Queue[Event | None], event: Event | None) -> None:
    if event is None:  # the end marker must get through even to a full queue
        while queue.full():
            queue.get_nowait()
    with contextlib.suppress(asyncio.QueueFull):
        queue.put_nowait(event)


class LogTap(logging.Handler):
    """Keeps the last LOG_LINES_KEPT log records (as the console shows them) and passes new ones to viewers."""

    def __init__(self, subscribers: Subscribers, level: int = logging.INFO) -> None:
        super().__init__(level)
        self.lines: deque[dict[str, Any]] = deque(maxlen=LOG_LINES_KEPT)
        self._subscribers = subscribers

    def emit(self, record: logging.LogRecord) -> None:
        try:
            msg = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                msg += f" ({record.exc_info[0].__name__ if record.exc_info[0] else 'error'}: {record.exc_info[1]})"
            line = {"time": record.created, "level": record.levelname, "source": record.name, "msg": msg}
        except Exception:  # noqa: BLE001 - a log call with bad arguments must not break its caller
            return
        self.lines.append(line)
        if self._subscribers:
            self._subscribers.publish(("log", line))


@dataclass(slots=True)
class Bucket:
    start: float  # epoch seconds, a multiple of BUCKET_SECONDS
    requests: int = 0
    errors: int = 0
    eval_tokens: int = 0
    eval_ns: int = 0

    def as_dict(self) -> dict[str, Any]:
        tps = self.eval_tokens / (self.eval_ns / 1e9) if self.eval_ns else 0.0
        return {"start": self.start, "requests": self.requests, "errors": self.errors,
                "eval_tokens": self.eval_tokens, "tokens_per_second": round(tps, 2)}


@dataclass
class RequestTap:
    """Recent finished requests and the per-10-second series the console charts."""

    subscribers: Subscribers
    requests: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=REQUESTS_KEPT))
    buckets: deque[Bucket] = field(default_factory=lambda: deque(maxlen=BUCKETS_KEPT))

    def record(self, *, method: str, path: str, status: int, duration: float, stats: RequestStats) -> None:
        """One finished request, with what it did."""
        now = time.time()
        entry: dict[str, Any] = {"time": now, "method": method, "path": path, "status": status,
                                 "duration": round(duration, 4), "model": stats.model or ""}
        if stats.ttft is not None:
            entry["ttft"] = round(stats.ttft, 4)
        if stats.eval_tokens is not None:
            entry["prompt_tokens"] = stats.prompt_tokens
            entry["eval_tokens"] = stats.eval_tokens
            if stats.eval_ns:
                entry["tokens_per_second"] = round(stats.eval_tokens / (stats.eval_ns / 1e9), 2)
        self.requests.append(entry)
        bucket = self._bucket(now)
        bucket.requests += 1
        bucket.errors += status >= 400
        if stats.eval_tokens:
            bucket.eval_tokens += stats.eval_tokens
            bucket.eval_ns += stats.eval_ns
        if self.subscribers:
            self.subscribers.publish(("request", entry))

    def _bucket(self, now: float) -> Bucket:
        start = now - now % BUCKET_SECONDS
        if not self.buckets or self.buckets[-1].start < start:
            self.buckets.append(Bucket(start))
        return self.buckets[-1]

    def series(self, now: float | None = None) -> list[dict[str, Any]]:
        """The chart's points, oldest first, with empty buckets filled in, ending with the current one."""
        now = time.time() if now is None else now
        last = now - now % BUCKET_SECONDS
        have = {b.start: b for b in self.buckets}
        starts = [last - i * BUCKET_SECONDS for i in range(BUCKETS_KEPT - 1, -1, -1)]
        return [(have.get(s) or Bucket(s)).as_dict() for s in starts]


@dataclass
class Console:
    """What the app holds for the console: the viewers, both taps, and the one ticker that, while anyone
    watches, publishes what changes on its own (/api/ps, the chart, a heartbeat) to every viewer at once:
    an idle viewer costs a queue, not a poll of its own (issue 34: 500 idle viewers took 85 % of a core)."""

    subscribers: Subscribers = field(default_factory=Subscribers)
    log_tap: LogTap = field(init=False)
    request_tap: RequestTap = field(init=False)
    ticker: asyncio.Task[None] | None = None
    last_ps: dict[str, Any] | None = None  # the last /api/ps the ticker published

    def __post_init__(self) -> None:
        self.log_tap = LogTap(self.subscribers)
        self.request_tap = RequestTap(self.subscribers)
