"""`serve`: run the gateway until SIGTERM/SIGINT, then stop every runner before exiting."""

from __future__ import annotations

import asyncio
import atexit
import logging
import socket
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from ollama_py import __version__, timeslice
from ollama_py.config import Settings
from ollama_py.server.app import create_app
from ollama_py.server.keys import SCHEDULER
from ollama_py.store.lock import StoreLocked

log = logging.getLogger(__name__)


def configure_logging(settings: Settings) -> None:
    logging.basicConfig(
        level=logging.DEBUG if settings.debug else logging.INFO,
        format="time=%(asctime)s level=%(levelname)s source=%(name)s msg=%(message)s",
    )
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where it is installed (it is a dependency everywhere but Windows), asyncio's own loop otherwise.
    The gateway spends its time relaying small socket writes, which uvloop does with about a quarter less CPU."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def run_server(settings: Settings) -> None:
    configure_logging(settings)
    app = create_app(settings)

    def last_resort() -> None:
        # If the loop dies without running cleanup, no runner may outlive us (PDEATHSIG covers SIGKILL).
        sched = app.get(SCHEDULER)
        if sched is not None:
            sched.kill_all()

    atexit.register(last_resort)
    host = settings.host.host
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, settings.host.port))
    except OSError as e:
        raise SystemExit(f"Error: listen tcp {host}:{settings.host.port}: bind: {e.strerror.lower()}") from None
    log.info("Listening on %s:%d (version %s)", host, settings.host.port, __version__)
    log.info("models: %s; runners: %s", settings.models, settings.runners_dir)
    loop = new_event_loop()
    timeslice.relay_slices()
    # Blocking work (hashing a blob, reading a GGUF) runs in threads that have no business with short slices.
    loop.set_default_executor(ThreadPoolExecutor(thread_name_prefix="ollama-py", initializer=timeslice.default_slice))
    try:
        web.run_app(app, sock=sock, print=None, access_log=None, shutdown_timeout=5.0,
                    handler_cancellation=True, loop=loop)
    except StoreLocked as e:  # another serve holds OLLAMA_MODELS (store/lock.py): one line, no traceback
        raise SystemExit(f"Error: {e}") from None


async def start_background(settings: Settings) -> web.AppRunner:
    """Start the gateway inside the current event loop (for tests and benchmarks)."""
    app = create_app(settings)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, settings.host.host, settings.host.port)
    await site.start()
    await asyncio.sleep(0)
    return runner
