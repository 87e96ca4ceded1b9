"""A few threads for work whose cost a client decides (template parsing and rendering), shared fairly.

A template runs for as long as it asks, up to the engine's limits (seconds). With a plain pool, four requests
with a slow template take every thread and each other chat waits behind them (issue 34: ~9 s). Here each job
has a key (its template) and the pool remembers how long that key's last job took:

1. A key known to be cheap (its last job took under FAST seconds) runs whenever a thread is free.
2. Any other key (slow last time, or never seen) runs at most one job at a time, and such jobs together take at
   most `workers - 1` threads: one thread is always left for cheap templates, the ordinary chats.
3. Jobs wait in arrival order; a waiting job that may not start yet does not hold up those behind it.

Bookkeeping happens in the worker threads under a lock (not on an event loop), so a job whose loop has gone
away still frees its place. A caller that stops waiting (cancelled) drops its job if it has not started.

A thread hop costs ~0.2 ms before the job starts, a fifth of the gateway's whole added first-token time at GPU
speed (issue 38). So a job may come with an `inline` form of itself, the same work under a tight time limit
(INLINE_CAP): when its key's last job took under INLINE seconds, that form runs right here on the caller's loop;
should it fail (its limit passed, or any error) the job runs in the threads as usual, and its key is not run
inline again until a job of it is cheap once more. The loop is never held longer than INLINE_CAP by a job.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

FAST = 0.05  # seconds: a key whose last job took less is cheap
# seconds: a key whose last job took less may run its inline form on the caller's loop. 1 ms lets an agent's
# turn (Claude Code's 50 KB request: a ~0.2-0.6 ms render) skip the two thread hops (0.23 ms of its first content
# at GPU pace); a render in the threads holds the GIL too, a switch interval (serve's 1 ms) at a time, so the
# loop waits about as long either way.
INLINE = 0.001
INLINE_CAP = 0.003  # seconds: the time limit an inline form is given (past it, the job goes to the threads)
_REMEMBERED = 4096  # keys whose last cost is kept (the oldest forgotten first)


@dataclass(slots=True)
class _Job:
    key: int
    fn: Callable[[], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    cheap: bool = False
    dropped: bool = field(default=False)


class FairPool:
    def __init__(self, workers: int = 4, *, thread_name_prefix: str = "fair") -> None:
        assert workers >= 2
        self.workers = workers
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix=thread_name_prefix)
        self._lock = threading.Lock()
        self._waiting: collections.deque[_Job] = collections.deque()
        self._running = 0
        self._costly_running = 0  # jobs of keys not known to be cheap
        self._costly_keys: set[int] = set()
        self._cost: collections.OrderedDict[int, float] = collections.OrderedDict()
        self.inline_runs = 0  # jobs run in their inline form, on the caller's loop
        self.inline_given_up = 0  # inline forms that failed (their limit, or an error) and went to the threads
        self.thread_runs = 0  # jobs run in the threads

    async def run(self, key: int, fn: Callable[[], Any], *, inline: Callable[[], Any] | None = None) -> Any:
        """fn() in one of the threads, when the rules allow; its result (or exception) here. With `inline` (fn
        under a limit of INLINE_CAP seconds) and a key known to be very cheap, inline() on this loop instead."""
        if inline is not None and self.inline_ok(key):
            started = time.monotonic()
            try:
                result = inline()
            except Exception:  # passed its limit (or fails anyway): the threads run it with the full limits
                self.inline_given_up += 1
                self._note(key, INLINE_CAP)
            else:
                self.inline_runs += 1
                self._note(key, time.monotonic() - started)
                return result
        loop = asyncio.get_running_loop()
        job = _Job(key, fn, loop, loop.create_future())
        with self._lock:
            self._waiting.append(job)
            self._start_allowed()
        try:
            return await job.future
        finally:
            job.dropped = True  # still waiting (we were cancelled): never started

    def stats(self) -> dict[str, int]:
        """The counts /metrics shows: jobs run inline and in the threads, inline forms given up, and the jobs
        running and waiting now."""
        with self._lock:
            return {"inline": self.inline_runs, "thread": self.thread_runs, "given_up": self.inline_given_up,
                    "running": self._running, "waiting": sum(1 for job in self._waiting if not job.dropped)}

    def inline_ok(self, key: int) -> bool:
        """Whether a job of `key` may run its inline form: its last job took under INLINE seconds."""
        cost = self._cost.get(key)
        return cost is not None and cost < INLINE

    def _note(self, key: int, took: float) -> None:
        with self._lock:
            self._remember(key, took)

    def _remember(self, key: int, took: float) -> None:
        self._cost[key] = took
        self._cost.move_to_end(key)
        if len(self._cost) > _REMEMBERED:
            self._cost.popitem(last=False)

    # -- under self._lock ------------------------------------------------------------------------------------
    def _start_allowed(self) -> None:
        if self._running >= self.workers or not self._waiting:
            return
        kept: collections.deque[_Job] = collections.deque()
        while self._waiting and self._running < self.workers:
            job = self._waiting.popleft()
            if job.dropped:
                continue
            cost = self._cost.get(job.key)
            job.cheap = cost is not None and cost < FAST
            if not job.cheap and (job.key in self._costly_keys or self._costly_running >= self.workers - 1):
                kept.append(job)
                continue
            self._running += 1
            if not job.cheap:
                self._costly_running += 1
                self._costly_keys.add(job.key)
            self._executor.submit(self._work, job)
        kept.extend(self._waiting)
        self._waiting = kept

    # -- in a worker thread ----------------------------------------------------------------------------------
    def _work(self, job: _Job) -> None:
        started = time.monotonic()
        try:
            result: Any = job.fn()
            error: BaseException | None = None
        except BaseException as e:  # handed to the caller
            result, error = None, e
        took = time.monotonic() - started
        with self._lock:
            self.thread_runs += 1
            self._running -= 1
            if not job.cheap:
                self._costly_running -= 1
                self._costly_keys.discard(job.key)
            self._remember(job.key, took)
            self._start_allowed()
        try:
            job.loop.call_soon_threadsafe(_settle, job.future, result, error)
        except RuntimeError:  # the caller's loop is closed: nobody is waiting
            pass


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


def key_of(value: Any) -> int:
    """The cost key of a job's subject (a template's text, a parsed template): equal values, equal keys."""
    try:
        return hash(value)
    except TypeError:
        return id(value)
