"""Fixtures for the web console's browser tests.

- `browser` (module): Debian's chromium, headless, driven by Playwright for Python (never `playwright install`:
  the tests launch /usr/bin/chromium, or $OLLAMA_PY_TEST_CHROMIUM).
- `page`: a fresh browser context (its own localStorage and sessionStorage) and page.
- `fake_console`: the real app, in a thread of this process, over the fake llama-server, with the tiny model
  as `tiny`; call it with FAKE_* variables for the fake and Settings overrides. Returns a `Console` handle.

The tests take the README's screenshots with `shoot` (tests/helpers/screens.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings

CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
# How long an expectation waits for the page to show something: a bound for a slow machine, not a speed claim.
expect.set_options(timeout=60_000)


def chromium_path() -> str:
    path = os.environ.get("OLLAMA_PY_TEST_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        pytest.fail("chromium is not installed: `sudo apt-get install chromium` (make test does it)")
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Per module, not per session: while Playwright's sync API is active its event loop is the main thread's
    running loop, and every asyncio test that ran after it in the same session would fail to start."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(60_000)  # a generous bound on waiting, not a claim about speed
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.errors = errors
    try:
        yield pg
    finally:
        context.close()


@dataclass
class Console:
    url: str  # the server's base URL; the console is url + "/ui/"
    settings: Any
    loop: asyncio.AbstractEventLoop


def _serve_in_thread(app: Any, host: str, port: int) -> tuple[asyncio.AbstractEventLoop, threading.Thread, Any]:
    from aiohttp import web

    loop = asyncio.new_event_loop()
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=5.0)
    started = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(runner.setup())
            loop.run_until_complete(web.TCPSite(runner, host, port).start())
        except BaseException as e:  # noqa: BLE001 - reported to the test thread
            failure.append(e)
            started.set()
            return
        started.set()
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=run, name="console-app", daemon=True)
    thread.start()
    started.wait(60)
    if failure:
        raise failure[0]
    return loop, thread, runner


@pytest.fixture
def fake_console(tmp_path: Path, tiny_gguf: Path) -> Iterator[Any]:
    """Like `serve`, with INFO logging on (the console's live log shows what the server logs)."""
    from ollama_py.server.app import create_app

    root, aiohttp_access = logging.getLogger(), logging.getLogger("aiohttp.access")
    levels = root.level, aiohttp_access.level
    root.setLevel(logging.INFO)
    aiohttp_access.setLevel(logging.WARNING)  # as serve sets it: our access log has the line

    running: list[tuple[asyncio.AbstractEventLoop, threading.Thread]] = []

    def start(fake_env: dict[str, str] | None = None, **overrides: Any) -> Console:
        settings = make_settings(tmp_path, **overrides)
        create_tiny_model(settings, tiny_gguf)
        app = create_app(settings, scheduler=fake_scheduler(settings, fake_env))
        loop, thread, _ = _serve_in_thread(app, settings.host.host, settings.host.port)
        running.append((loop, thread))
        return Console(url=settings.host.url, settings=settings, loop=loop)

    try:
        yield start
    finally:
        for loop, thread in running:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(30)
        root.setLevel(levels[0])
        aiohttp_access.setLevel(levels[1])
