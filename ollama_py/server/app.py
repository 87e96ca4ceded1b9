"""The aiohttp application: routes, middlewares, and the lifecycle of the store and the scheduler."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

from aiohttp import web
from prometheus_client import Counter

from ollama_py.config import Settings
from ollama_py.runner import gguf_compat
from ollama_py.scheduler.model_settings import runner_flags
from ollama_py.scheduler.scheduler import Scheduler
from ollama_py.server import appkeys
from ollama_py.server.access_log import access_log_middleware
from ollama_py.server.blob_prune import prune_while_serving, sweep_text_only
from ollama_py.server.connections import ConnectionGuard, default_max_connections, open_file_limit
from ollama_py.server.errors import error_middleware
from ollama_py.server.live_config import LiveConfig, while_serving
from ollama_py.server.security import add_cors_headers, security_middleware
from ollama_py.server.transfers import transfer_pools

log = logging.getLogger(__name__)


def create_app(settings: Settings, *, scheduler: Scheduler | None = None,
               live_config: LiveConfig | None = None) -> web.Application:
    """The gateway. A test may pass its own scheduler (e.g. one whose runner factory starts the fake server), and
    the LiveConfig that scheduler plans with (else one reads settings.config_file)."""
    from ollama_py.server import (
        openapi,
        routes_anthropic,
        routes_audio,
        routes_load,
        routes_models,
        routes_native,
        routes_openai,
        routes_rerank,
        routes_tokens,
        routes_transfer,
    )
    from ollama_py.server.metrics import Metrics, metrics_routes
    from ollama_py.store.lock import StoreLock, StoreReadOnly
    from ollama_py.store.models import ModelStore

    guard = ConnectionGuard(settings.max_connections or default_max_connections(open_file_limit()),
                            settings.read_timeout)
    # The guard's marker is outermost: a connection is busy for the whole of its request. The access log comes
    # next: it sees the status the error middleware picked, and whole streams.
    app = web.Application(middlewares=[guard.middleware, access_log_middleware, error_middleware,
                                       security_middleware(settings)],
                          client_max_size=settings.max_body_bytes)
    app[appkeys.SETTINGS] = settings
    app[appkeys.CONNECTIONS] = guard
    app[appkeys.STORE] = ModelStore(settings.models)
    app[appkeys.METRICS] = Metrics()
    live = live_config or LiveConfig(settings, known_flags=lambda: runner_flags(settings.runners_dir))
    app[appkeys.CONFIG] = live
    reloads = Counter("ollama_config_reloads", "Reloads of the config file, by result (ok, error)", ["result"],
                      registry=app[appkeys.METRICS].registry)
    live.on_reload.append(lambda result: reloads.labels(result).inc())
    app.on_response_prepare.append(add_cors_headers)
    app.add_routes(routes_native.routes)
    app.add_routes(routes_load.routes)
    app.add_routes(routes_models.routes)
    app.add_routes(routes_transfer.routes)
    app.add_routes(routes_openai.routes)
    app.add_routes(routes_anthropic.routes)
    app.add_routes(routes_audio.routes)
    app.add_routes(routes_tokens.routes)
    app.add_routes(routes_rerank.routes)
    app.add_routes(metrics_routes)
    app.add_routes(openapi.routes)
    if not settings.noui:
        from ollama_py.server.routes_ui import setup_console

        setup_console(app)

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        store = app[appkeys.STORE]
        if not settings.noprune and not store.read_only:
            removed = await asyncio.to_thread(store.prune)
            if removed:
                log.info("pruned %d unused blobs and partial files", len(removed))
            await asyncio.to_thread(sweep_text_only, store, settings.data_dir / gguf_compat.TEXT_ONLY_DIR)
        await live.load()  # the config file's model tables, before the scheduler plans with them
        sched = scheduler
        if sched is None:
            from ollama_py.scheduler.factory import default_scheduler

            sched = await asyncio.to_thread(default_scheduler, settings, live.for_model, live.may_stay)
        app[appkeys.SCHEDULER] = sched
        app[appkeys.METRICS].attach(sched)
        try:
            yield
        finally:
            await sched.shutdown()

    async def stop_runners(app: web.Application) -> None:
        # on_shutdown runs before aiohttp waits (shutdown_timeout) for in-flight handlers: stopping the runners
        # first ends their streams now, with an error line, so SIGTERM / Ctrl-C of serve does not hang.
        sched = app.get(appkeys.SCHEDULER)
        if sched is not None:
            await sched.shutdown()

    async def hold_store(app: web.Application) -> AsyncIterator[None]:
        # One serve per store (store/lock.py), taken before the prune below and kept until the runners stop.
        lock = StoreLock(settings.models)
        try:
            await asyncio.to_thread(lock.acquire)
        except StoreReadOnly as e:  # what is there runs; nothing is written, so there is nothing to lock or prune
            app[appkeys.STORE].read_only = True
            log.warning("the model store is read-only (%s): its models can be listed, shown and run; pull, create, "
                        "copy and delete will fail", e)
        try:
            yield
        finally:
            lock.release()

    app.cleanup_ctx.append(hold_store)  # startup in order, cleanup in reverse: the lock outlives `lifecycle`
    app.cleanup_ctx.append(transfer_pools)  # uploads', pulls' and pushes' own threads (server/transfers.py)
    app.cleanup_ctx.append(lifecycle)
    app.cleanup_ctx.append(while_serving)  # preloads, then the config file's watcher: needs the scheduler
    app.cleanup_ctx.append(prune_while_serving)  # unreferenced blobs, hourly (server/blob_prune.py)
    app.on_shutdown.append(stop_runners)
    return app
