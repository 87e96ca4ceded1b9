"""server/fair_pool.py: the template threads shared fairly (issue 34: four clients with a slow template filled the
4-thread pool and every other chat waited ~9 s). Slow work here waits on an event, so nothing depends on timing."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import pytest

from ollama_py.server.fair_pool import FairPool

CHEAP, SLOW = 1, 2


def blocking(started: threading.Semaphore, release: threading.Event) -> object:
    def work() -> str:
        started.release()
        release.wait(30)
        return "slow"
    return work


async def acquired(sem: threading.Semaphore, n: int) -> None:
    for _ in range(n):
        assert await asyncio.to_thread(sem.acquire, True, 30)


async def test_four_renders_of_a_slow_template_leave_threads_for_the_others():
    pool = FairPool(4)
    assert await pool.run(CHEAP, lambda: "warm") == "warm"  # measured once: cheap
    started, release = threading.Semaphore(0), threading.Event()
    slow = [asyncio.create_task(pool.run(SLOW, blocking(started, release))) for _ in range(4)]
    try:
        await acquired(started, 1)
        assert [await pool.run(CHEAP, lambda i=i: i) for i in range(20)] == list(range(20))
        assert not started.acquire(timeout=0.2)  # the same slow template: one render at a time
        assert not any(t.done() for t in slow)
    finally:
        release.set()
    assert await asyncio.gather(*slow) == ["slow"] * 4


async def test_many_slow_templates_still_leave_one_thread_to_cheap_ones():
    pool = FairPool(4)
    assert await pool.run(CHEAP, lambda: "warm") == "warm"
    started, release = threading.Semaphore(0), threading.Event()
    slow = [asyncio.create_task(pool.run(100 + i, blocking(started, release))) for i in range(6)]
    try:
        await acquired(started, 3)
        assert await pool.run(CHEAP, lambda: "chat") == "chat"  # while three slow renders hold their threads
        assert not started.acquire(timeout=0.2)  # and no fourth one took the last thread
    finally:
        release.set()
    assert await asyncio.gather(*slow) == ["slow"] * 6


async def test_an_error_reaches_the_caller_and_frees_the_thread():
    pool = FairPool(2)

    def fail() -> None:
        raise ValueError("template error")

    for _ in range(5):
        with pytest.raises(ValueError, match="template error"):
            await pool.run(SLOW, fail)
    assert await pool.run(SLOW, lambda: "ok") == "ok"


async def test_a_cancelled_wait_drops_the_job_before_it_starts():
    pool = FairPool(2)
    started, release = threading.Semaphore(0), threading.Event()
    ran: list[int] = []
    first = asyncio.create_task(pool.run(SLOW, blocking(started, release)))
    await acquired(started, 1)
    queued = asyncio.create_task(pool.run(SLOW, lambda: ran.append(1)))  # same slow key: waits
    await asyncio.sleep(0.05)
    queued.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await queued  # the caller has stopped waiting
    release.set()
    await first
    assert await pool.run(SLOW, lambda: "after") == "after"
    assert ran == []


async def test_slow_renders_in_the_template_threads_do_not_hold_up_a_chat():
    """Through server/rendering.py's own threads (the seam every template render takes): before, four slow
    renders held all four threads and the chat's render waited for them."""
    from ollama_py.server import rendering

    template = "{{ range .Messages }}{{ .Role }}: {{ .Content }}\n{{ end }}"
    messages = [{"role": "user", "content": "hi"}]

    async def chat() -> str:
        return await rendering.render_off_loop(template, messages=messages, tools=None, suffix=None, think=None)

    assert await chat() == "user: hi\n"
    started, release = threading.Semaphore(0), threading.Event()

    def slow_render(source: str) -> str:
        return blocking(started, release)()  # type: ignore[operator]

    slow = [asyncio.create_task(rendering._off_loop(slow_render, f"a slow template {i % 2}")) for i in range(4)]
    try:
        await acquired(started, 2)
        async with asyncio.timeout(30):  # a hang guard: before the fix this waited for the slow renders
            assert await chat() == "user: hi\n"
        assert not any(t.done() for t in slow)
    finally:
        release.set()
    await asyncio.gather(*slow)


async def test_a_key_known_to_be_very_cheap_runs_its_inline_form_on_the_loop():
    pool = FairPool(2)
    where: list[str] = []
    job = lambda: where.append(threading.current_thread().name) or "thread"  # noqa: E731
    inline = lambda: where.append(threading.current_thread().name) or "inline"  # noqa: E731
    assert await pool.run(CHEAP, job, inline=inline) == "thread"  # never seen: the threads measure it first
    assert await pool.run(CHEAP, job, inline=inline) == "inline"
    assert where[0].startswith("fair") and where[1] == threading.current_thread().name


async def test_an_inline_form_that_fails_is_run_again_in_the_threads_and_not_inline_next_time():
    pool = FairPool(2)
    assert await pool.run(CHEAP, lambda: "warm") == "warm"
    tries: list[str] = []

    def inline() -> str:
        tries.append("inline")
        raise TimeoutError("passed its 3 ms limit")

    def full() -> str:  # what made the inline form pass its limit costs the threads too
        time.sleep(0.002)
        return "full"

    assert await pool.run(CHEAP, full, inline=inline) == "full"
    assert await pool.run(CHEAP, lambda: "full again", inline=inline) == "full again"
    assert tries == ["inline"]  # the key's last job was not very cheap: the threads ran the second one
    assert pool.inline_ok(CHEAP)  # and measured it cheap again


async def test_a_key_whose_last_job_was_slow_never_runs_inline():
    pool = FairPool(2)
    await pool.run(SLOW, lambda: time.sleep(0.01))
    assert not pool.inline_ok(SLOW)
    assert await pool.run(SLOW, lambda: "thread", inline=lambda: "inline") == "thread"


async def test_a_small_chat_with_an_ollama_template_renders_inline_once_the_template_is_known():
    from ollama_py.server import rendering

    template = "{{ range .Messages }}[{{ .Role }}] {{ .Content }}\n{{ end }}"
    await rendering.parse_off_loop(template)  # in the threads, measured
    runs, given_up = rendering._POOL.inline_runs, rendering._POOL.inline_given_up
    prompts = [await rendering.render_off_loop(template, messages=[{"role": "user", "content": f"hi {i}"}],
                                               tools=None, suffix=None, think=None) for i in range(3)]
    assert prompts == [f"[user] hi {i}\n" for i in range(3)]
    assert rendering._POOL.inline_runs > runs and rendering._POOL.inline_given_up == given_up


async def test_an_agents_turn_with_an_ollama_template_renders_inline_once_the_template_is_known():
    """A coding agent's turn (tens of KB of instructions, a dozen tools) takes the inline form too, as a short chat
    does: two thread hops less before its runner request (issue 38)."""
    from ollama_py.server import rendering

    template = ("{{ range .Tools }}{{ .Function.Name }};{{ end }}"
                "{{ range .Messages }}[{{ .Role }}] {{ .Content }}\n{{ end }}")
    tools = [{"type": "function", "function": {"name": f"tool{i}", "description": "d" * 500,
                                               "parameters": {"type": "object", "properties": {}}}} for i in range(12)]
    messages = [{"role": "system", "content": "You are an agent. " * 1200}, {"role": "user", "content": "Fix the bug."}]
    assert sum(len(m["content"]) for m in messages) > 16 << 10  # past what rendered inline before
    await rendering.parse_off_loop(template)
    # measured: a template's first render converts its tools and finds the engine cold (1.7 ms on a slow machine,
    # past the 1 ms an inline render may cost); the next ones take ~0.2 ms, and the last render's cost is the one kept
    for _ in range(3):
        await rendering.render_off_loop(template, messages=messages, tools=tools, suffix=None, think=None)
    runs, given_up = rendering._POOL.inline_runs, rendering._POOL.inline_given_up
    prompt = await rendering.render_off_loop(template, messages=messages, tools=tools, suffix=None, think=None)
    assert prompt.startswith("tool0;tool1;") and prompt.endswith("[user] Fix the bug.\n")
    assert rendering._POOL.inline_runs == runs + 1 and rendering._POOL.inline_given_up == given_up
