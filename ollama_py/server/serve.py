"""`serve`: run the gateway until SIGTERM/SIGINT, then stop every runner before exiting."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import gc
import logging
import socket
import sys
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web

from ollama_py import __version__, timeslice
from ollama_py.config import Settings
from ollama_py.server.app import create_app
from ollama_py.server.appkeys import CONNECTIONS, SCHEDULER, SETTINGS
from ollama_py.server.connections import GuardedSite, raise_open_file_limit
from ollama_py.server.log_output import BackgroundStderrHandler, LineFormatter
from ollama_py.server.loop_watch import LoopWatch
from ollama_py.store.lock import StoreLocked

log = logging.getLogger(__name__)


def configure_logging(settings: Settings) -> BackgroundStderrHandler:
    """Log lines to stderr from a thread of their own (server/log_output.py): a stderr nobody reads stops no client."""
    handler = BackgroundStderrHandler()
    handler.setFormatter(LineFormatter())
    # The line names no caller, thread or process: a record need not look them up (the logging HOWTO's
    # "Optimization"; the caller's frame walk and a getpid system call were a fifth of an access line's cost).
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging.basicConfig(level=logging.DEBUG if settings.debug else logging.INFO, handlers=[handler], force=True)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    return handler


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop where it is installed (it is a dependency everywhere but Windows), asyncio's own loop otherwise.
    The gateway spends its time relaying small socket writes, which uvloop does with about a quarter less CPU."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def console_url(settings: Settings) -> str:
    """Where a browser on this machine finds the console (a wildcard bind is reached through loopback)."""
    host = settings.host
    name = {"0.0.0.0": "127.0.0.1", "::": "[::1]", "": "127.0.0.1"}.get(host.host)
    base = f"{host.scheme}://{name}:{host.port}" if name else host.url
    return f"{base}/ui/"


# How serve's aiohttp takes requests (tests that run the app as serve does pass the same): a handler is cancelled
# when its client hangs up; a compressed body reaches the handler as sent, to be decoded off the loop and within
# the body limit (server/body_coding.py), not by aiohttp inline, whose bound did not hold; a request line or header
# may be 64 KiB, not aiohttp's 8 KiB: a browser on localhost sends every localhost cookie to the console and the
# API (Go's server, Ollama's, takes 1 MB of headers; a dozen apps' cookies passed 8 KiB, a plain-text 400).
PROTOCOL: dict[str, Any] = {"handler_cancellation": True, "auto_decompress": False,
                            "max_line_size": 64 << 10, "max_field_size": 64 << 10}

SWITCH_INTERVAL = 0.001  # seconds (Python's default: 0.005)


def run_server(settings: Settings) -> None:
    handler = configure_logging(settings)
    try:
        _run_server(settings)
    finally:
        handler.flush()  # the lines logged so far come out before the error line (if any) Python prints on exit


def _run_server(settings: Settings) -> None:
    raise_open_file_limit()  # before create_app: the connection cap's default is half of it
    app = create_app(settings)

    def last_resort() -> None:
        # If the loop dies without running cleanup, no runner may outlive us (PDEATHSIG covers SIGKILL).
        sched = app.get(SCHEDULER)
        if sched is not None:
            sched.kill_all()

    atexit.register(last_resort)
    host, port = settings.host.host, settings.host.port
    try:
        socks = [_bound(host, port)]
    except OSError as e:
        reason = (e.strerror or str(e)).lower()
        raise SystemExit(f"Error: listen tcp {host}:{port}: bind: {reason}") from None
    if host in ("127.0.0.1", "localhost"):
        # IPv6's loopback too: clients that resolve "localhost" to ::1 first (Node 17+ without happy eyeballs,
        # Go, some resolvers) got "ECONNREFUSED ::1:11434" from Ollama, which listens on 127.0.0.1 alone.
        try:
            socks.append(_bound("::1", port))
        except OSError as e:  # no IPv6 here, or someone else's: say so, and serve 127.0.0.1
            log.log(logging.DEBUG if e.errno in _NO_IPV6 else logging.WARNING,
                    "not also listening on [::1]:%d: %s", port, (e.strerror or str(e)).lower())
    where = " and ".join(_address(sock) for sock in socks)
    log.info("Listening on %s (version %s)", where, __version__)
    log.info("models: %s; runners: %s", settings.models, settings.runners_dir)
    if not settings.noui and sys.stdout is not None:  # (None: started with stdout closed)
        # one write: with PYTHONUNBUFFERED, print's text and its newline are two, and the log thread's lines could
        # land between them in a file both streams share
        sys.stdout.write(f"Web console: {console_url(settings)}\n")
        sys.stdout.flush()
    loop = new_event_loop()
    timeslice.relay_slices()
    # A thread doing Python work (a template, a long request's checks) gives the GIL back to the loop every
    # switch interval: at the default 5 ms, a request needing a few GIL hand-overs waits tens of milliseconds
    # behind it; at 1 ms the loop answers others within a few.
    sys.setswitchinterval(SWITCH_INTERVAL)
    # What start-up made (modules, the app) lives as long as the server: kept out of the cycle collector's full
    # collections, which otherwise walk all of it (~40 ms here, holding the GIL and so the loop).
    gc.freeze()
    # Blocking work (hashing a blob, reading a GGUF) runs in threads that have no business with short slices.
    loop.set_default_executor(ThreadPoolExecutor(thread_name_prefix="ollama-py", initializer=timeslice.default_slice))
    try:
        _run_until_signal(loop, _serve(app, socks))
    except StoreLocked as e:  # another serve holds OLLAMA_MODELS (store/lock.py): one line, no traceback
        raise SystemExit(f"Error: {e}") from None


_NO_IPV6 = (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT)


def _bound(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (listening comes with the site)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


def _address(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def _serve(app: web.Application, socks: list[socket.socket]) -> None:
    """web.run_app's work with our site: the connection guard stands in front of aiohttp's protocol."""
    runner = web.AppRunner(app, handle_signals=True, access_log=None, shutdown_timeout=5.0,
                           keepalive_timeout=75.0, **PROTOCOL)
    await runner.setup()
    settings = app[SETTINGS]
    watch = None
    if settings.loop_warn_ms:
        watch = LoopWatch(asyncio.get_running_loop(), settings.loop_warn_ms / 1000)
        watch.start()
    try:
        for sock in socks:
            await GuardedSite(runner, sock, app[CONNECTIONS]).start()
        await asyncio.Event().wait()  # until SIGTERM/SIGINT raise GracefulExit (handle_signals)
    finally:
        if watch is not None:
            watch.stop()
        await runner.cleanup()


def _run_until_signal(loop: asyncio.AbstractEventLoop, main: Coroutine[Any, Any, None]) -> None:
    task = loop.create_task(main)
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(task)
    except (web.GracefulExit, KeyboardInterrupt):
        pass
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                loop.run_until_complete(task)
        left = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in left:
            t.cancel()
        if left:
            loop.run_until_complete(asyncio.gather(*left, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()
