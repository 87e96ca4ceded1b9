"""The web console's taps (server/console.py): bounded, cheap, and what live viewers receive."""

from __future__ import annotations

import asyncio
import logging

from ollama_py.server.access_log import RequestStats
from ollama_py.server.console import (
    BUCKET_SECONDS,
    BUCKETS_KEPT,
    LOG_LINES_KEPT,
    REQUESTS_KEPT,
    VIEWER_QUEUE,
    Console,
    is_console_asset,
)


def finished(eval_tokens: int | None = None, eval_ns: int = 0) -> RequestStats:
    stats = RequestStats(0.0, model="smollm2:135m")
    stats.eval_tokens, stats.prompt_tokens, stats.eval_ns = eval_tokens, 5, eval_ns
    return stats


def test_requests_and_log_lines_are_bounded() -> None:
    console = Console()
    for i in range(REQUESTS_KEPT + 10):
        console.request_tap.record(method="GET", path=f"/api/tags?{i}", status=200, duration=0.001, stats=finished())
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "line %d", (0,), None)
    for _ in range(LOG_LINES_KEPT + 10):
        console.log_tap.emit(record)
    assert len(console.request_tap.requests) == REQUESTS_KEPT
    assert console.request_tap.requests[-1]["path"] == f"/api/tags?{REQUESTS_KEPT + 9}"
    assert len(console.log_tap.lines) == LOG_LINES_KEPT
    assert console.log_tap.lines[-1]["msg"] == "line 0"


def test_series_counts_requests_errors_and_tokens_per_second_per_bucket() -> None:
    tap = Console().request_tap
    tap.record(method="POST", path="/api/chat", status=200, duration=1.0, stats=finished(50, 1_000_000_000))
    tap.record(method="POST", path="/api/chat", status=200, duration=1.0, stats=finished(150, 1_000_000_000))
    tap.record(method="POST", path="/api/chat", status=404, duration=0.1, stats=finished())
    series = tap.series()
    assert len(series) == BUCKETS_KEPT
    assert series[-1]["start"] % BUCKET_SECONDS == 0
    assert {k: series[-1][k] for k in ("requests", "errors", "eval_tokens", "tokens_per_second")} == {
        "requests": 3, "errors": 1, "eval_tokens": 200, "tokens_per_second": 100.0}
    assert all(p["requests"] == 0 for p in series[:-1])
    assert tap.requests[0]["tokens_per_second"] == 50.0


async def test_a_viewer_gets_events_and_a_slow_one_loses_them_instead_of_blocking() -> None:
    console = Console()
    with console.subscribers.subscribe() as queue:
        console.request_tap.record(method="GET", path="/api/ps", status=200, duration=0.0, stats=finished())
        await asyncio.sleep(0)
        event, data = queue.get_nowait()
        assert (event, data["path"]) == ("request", "/api/ps")
        for _ in range(VIEWER_QUEUE + 50):
            console.subscribers.publish(("log", {}))
        await asyncio.sleep(0)
        assert queue.qsize() == VIEWER_QUEUE
        console.subscribers.close_all()  # the end marker gets through even to a full queue
        await asyncio.sleep(0)
        assert None in [queue.get_nowait() for _ in range(queue.qsize())]
    assert not console.subscribers


def test_only_the_page_and_its_files_are_open_without_a_key() -> None:
    assert is_console_asset("/ui")
    assert is_console_asset("/ui/js/main.js")
    assert not is_console_asset("/ui/api/events")
    assert not is_console_asset("/uix")
    assert not is_console_asset("/api/tags")
