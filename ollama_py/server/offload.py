"""Work over a client's long lists kept from holding the event loop.

- per_item: a pass over a list (a chat's messages, its tools) costs about a microsecond an item: nothing for an
  ordinary chat, but a 3 MiB body can hold 100,000 messages, and a handler makes several such passes in a row
  (checks, translation, the template's messages, each try of a truncation), which held the loop ~150 ms. Past
  LONG items a pass runs in a thread, where the loop gets the GIL back every switch interval.
- release: a list of millions of items (token ids) emptied in a thread, a slice at a time, instead of freed in one
  go wherever its last owner lets go (on the loop: ~25 ms per 20M items).
- pause_gc/resume_gc: the cycle collector paused while such lists are alive (its full collections walk them).
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

LONG = 2048  # items: a pass over more runs in a thread (under it: ~2 ms at most on the loop)
BULKY = 100_000  # items of a list that is emptied in a thread (release) rather than freed where it is dropped
_CUT = 1 << 16


def count(value: Any) -> int:
    """How many items a client's list holds (0 for anything else)."""
    return len(value) if isinstance(value, list) else 0


async def per_item(n: int, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """fn(*args, **kwargs): here when it walks `n` <= LONG items, else in a thread."""
    if n <= LONG:
        return fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)


async def release(lists: list[list[Any]]) -> None:
    """Empty each list in a thread, 64k items at a time (one C call each), so that what frees them later frees
    nothing: a list of millions of items freed in one go holds the GIL, and so the loop, for tens of ms."""

    def empty() -> None:
        for items in lists:
            while items:
                del items[-_CUT:]
        lists.clear()

    await asyncio.to_thread(empty)


# Python's cycle collector walks every item of every list it tracks, holding the GIL: a full collection with a few
# lists of 20M token ids alive took ~40-70 ms, in whichever thread allocated last, so the loop waited that long.
# While a request holds such lists the collector is paused (reference counting still frees everything acyclic).
_gc_pauses = 0


def pause_gc() -> None:
    """Pause the cycle collector until the matching resume_gc (on the loop; pauses nest)."""
    global _gc_pauses
    _gc_pauses += 1
    gc.disable()


def resume_gc() -> None:
    global _gc_pauses
    _gc_pauses -= 1
    if _gc_pauses <= 0:
        _gc_pauses = 0
        gc.enable()


def holds_bulky(body: dict[str, Any]) -> bool:
    """Whether a decoded body has a list of more than BULKY items at its top level (a context of token ids)."""
    return any(isinstance(v, list) and len(v) > BULKY for v in body.values())
