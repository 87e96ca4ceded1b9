"""loop_watch: how long the event loop went without running a 10 ms ticker (tests that blocking work stays off it)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator


@contextlib.asynccontextmanager
async def loop_watch() -> AsyncIterator[list[float]]:
    """The largest gap (seconds) between the ticks of a task that wakes every 10 ms, in gaps[0]."""
    gaps = [0.0]

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps[0] = max(gaps[0], now - last)
            last = now

    task = asyncio.create_task(tick())
    await asyncio.sleep(0.05)
    try:
        yield gaps
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
