"""server/loop_watch.py (OLLAMA_PY_LOOP_WARN_MS): a hold of the event loop past the threshold is one warning
naming the code that held it; a loop that keeps turning says nothing."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from ollama_py.config import Settings
from ollama_py.server.loop_watch import LoopWatch


def hold_the_loop_with_a_blocking_call() -> None:
    time.sleep(0.2)


async def test_a_held_loop_is_one_warning_that_names_the_code(caplog) -> None:
    caplog.set_level(logging.WARNING, logger="ollama_py.server.loop_watch")
    watch = LoopWatch(asyncio.get_running_loop(), 0.05)
    watch.start()
    try:
        for _ in range(20):  # a loop that turns: nothing to say
            await asyncio.sleep(0.005)
        assert not caplog.records
        hold_the_loop_with_a_blocking_call()
        for _ in range(20):
            await asyncio.sleep(0.005)
    finally:
        watch.stop()
    (record,) = caplog.records
    assert record.getMessage().startswith("event loop held for ")
    assert "hold_the_loop_with_a_blocking_call (test_loop_watch.py:" in record.getMessage()
    assert watch.longest > 0.05


def test_the_threshold_is_a_setting_off_by_default() -> None:
    assert Settings.from_env({}).loop_warn_ms == 0
    assert Settings.from_env({"OLLAMA_PY_LOOP_WARN_MS": "50"}).loop_warn_ms == 50


def test_a_hold_between_the_loops_callbacks_names_the_threads_that_were_busy() -> None:
    """The loop's thread found in the loop itself (no callback of ours running) waited for the GIL: a C call in
    another thread held it (a worker rendering a 33 MiB message did, ~100 ms): the warning names the threads busy
    then, not the idle ones (an executor's waiting workers, a thread waiting on an event)."""
    import concurrent.futures
    import threading

    stop = threading.Event()

    def select() -> None:  # where the loop's thread sits between callbacks (the selector's wait)
        while not stop.is_set():
            time.sleep(0.001)

    def render_a_huge_message() -> None:
        while not stop.is_set():
            time.sleep(0.001)

    loop_thread = threading.Thread(target=select, name="loop")
    busy = threading.Thread(target=render_a_huge_message, name="template_0")
    idle = threading.Thread(target=stop.wait, name="idle")
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="executor") as pool:
        pool.submit(lambda: None).result()  # a worker that now waits for work
        for t in (loop_thread, busy, idle):
            t.start()
        try:
            where = _where_for(loop_thread)
        finally:
            stop.set()
            for t in (loop_thread, busy, idle):
                t.join()
    assert where.startswith("select (test_loop_watch.py:")
    _, _, others = where.partition("; busy meanwhile: ")
    assert "template_0: render_a_huge_message (test_loop_watch.py:" in others  # (other tests' threads may be too)
    assert "idle:" not in others and "executor" not in others and "loop:" not in others


def test_a_hold_in_our_own_code_names_that_code_alone() -> None:
    import threading

    stop = threading.Event()

    def hold_the_loop() -> None:
        while not stop.is_set():
            time.sleep(0.001)

    loop_thread = threading.Thread(target=hold_the_loop)
    loop_thread.start()
    try:
        where = _where_for(loop_thread)
    finally:
        stop.set()
        loop_thread.join()
    assert where.startswith("hold_the_loop (test_loop_watch.py:") and "busy meanwhile" not in where


def _where_for(loop_thread: Any) -> str:
    """What the watch says of a hold, with `loop_thread` standing for the loop's thread."""
    loop = asyncio.new_event_loop()
    try:
        watch = LoopWatch(loop, 0.05)
        watch._thread_id = loop_thread.ident or 0
        return watch._where()
    finally:
        loop.close()
