"""Per-item passes over a client's lists (a chat's messages, its tools) off the event loop when the list is long.

A pass costs about a microsecond an item: nothing for an ordinary chat, but a 3 MiB body can hold 100,000
messages, and a handler makes several such passes in a row (checks, translation, the template's messages, each
try of a truncation), which held the loop ~150 ms. Past LONG items a pass runs in a thread, where the loop gets
the GIL back every switch interval."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

LONG = 2048  # items: a pass over more runs in a thread (under it: ~2 ms at most on the loop)


def count(value: Any) -> int:
    """How many items a client's list holds (0 for anything else)."""
    return len(value) if isinstance(value, list) else 0


async def per_item(n: int, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """fn(*args, **kwargs): here when it walks `n` <= LONG items, else in a thread."""
    if n <= LONG:
        return fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)
