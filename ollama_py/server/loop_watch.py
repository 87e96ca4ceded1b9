"""OLLAMA_PY_LOOP_WARN_MS: a warning for every time the event loop was held longer than that.

Everything a client sends must stay off the loop or be cut into short steps (the request-path and hostile-client
issues); this says where it did not. The loop re-arms a timer every INTERVAL; a watcher thread looks just as
often, and once the loop is late past the threshold it takes the loop thread's stack (the code holding it), then
logs one line when the loop is back: how long it was held and where. Off by default (200 wake-ups a second);
bench/hardening.py turns it on and reports the longest hold per step.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import time
import traceback
from types import FrameType

log = logging.getLogger(__name__)

INTERVAL = 0.005  # seconds between the loop's beats (and the watcher's looks)


class LoopWatch:
    def __init__(self, loop: asyncio.AbstractEventLoop, threshold: float) -> None:
        self._loop = loop
        self.threshold = threshold
        self._beat_at = time.monotonic()
        self._stop = threading.Event()
        self._handle: asyncio.TimerHandle | None = None
        self._thread_id = 0
        self.longest = 0.0  # the longest hold seen, in seconds

    def start(self) -> None:
        """On the loop's thread."""
        self._thread_id = threading.get_ident()
        self._beat()
        threading.Thread(target=self._watch, name="loop-watch", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()
        if self._handle is not None:
            self._handle.cancel()

    def _beat(self) -> None:
        self._beat_at = time.monotonic()
        self._handle = self._loop.call_later(INTERVAL, self._beat)

    def _watch(self) -> None:
        held_since: float | None = None
        where = ""
        while not self._stop.wait(INTERVAL):
            beat = self._beat_at
            late = time.monotonic() - beat - INTERVAL
            if held_since is None:
                if late > self.threshold:
                    held_since = beat
                    where = self._where()
                continue
            if beat > held_since:  # the loop ran again
                held = beat - held_since - INTERVAL
                self.longest = max(self.longest, held)
                log.warning("event loop held for %.0f ms (%s)", held * 1000, where)
                held_since = None

    def _where(self) -> str:
        """The innermost frames of the loop's thread, in one line. When the loop's thread is in the loop itself
        (no callback of ours running: it waited for the GIL, which a C call in another thread held), the other
        threads that were busy then are named too, innermost frames first: one of them held it."""
        frames = sys._current_frames()
        frame = frames.get(self._thread_id)
        if frame is None:
            return "unknown"
        where = _line(frame)
        if frame.f_code.co_name in _IN_THE_LOOP:
            busy = [f"{t.name}: {_line(frames[t.ident])}" for t in threading.enumerate()
                    if t.ident in frames and t.ident not in (self._thread_id, threading.get_ident())
                    and not _idle(frames[t.ident])]
            where += "; busy meanwhile: " + ("; ".join(busy) if busy else "no other thread")
        return where


# The loop's own frames: the loop thread was between callbacks (uvloop's loop is C, so this is its caller).
_IN_THE_LOOP = frozenset({"_run_until_signal", "run_forever", "run_until_complete", "_run_once", "select"})
# Where an idle worker thread waits (an executor's queue, a condition, an Event).
_IDLE = frozenset({"_worker", "wait", "_wait_for_tstate_lock", "get"})


def _idle(frame: FrameType) -> bool:
    return frame.f_code.co_name in _IDLE


def _line(frame: FrameType) -> str:
    frames = traceback.extract_stack(frame)[-3:]
    return " < ".join(f"{f.name} ({f.filename.rsplit('/', 1)[-1]}:{f.lineno})" for f in reversed(frames))
