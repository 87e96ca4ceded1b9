"""server/loop_watch.py (OLLAMA_PY_LOOP_WARN_MS): a hold of the event loop past the threshold is one warning
naming the code that held it; a loop that keeps turning says nothing."""

from __future__ import annotations

import asyncio
import logging
import time

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
