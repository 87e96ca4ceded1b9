"""Typed application keys: what the aiohttp app holds for its handlers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiohttp import web

from ollama_py.config import Settings

if TYPE_CHECKING:
    from ollama_py.scheduler.scheduler import Scheduler
    from ollama_py.server.connections import ConnectionGuard
    from ollama_py.server.console import Console
    from ollama_py.server.live_config import LiveConfig
    from ollama_py.server.metrics import Metrics
    from ollama_py.store.models import ModelStore

SETTINGS = web.AppKey("settings", Settings)
STORE: web.AppKey[ModelStore] = web.AppKey("store")
SCHEDULER: web.AppKey[Scheduler] = web.AppKey("scheduler")
METRICS: web.AppKey[Metrics] = web.AppKey("metrics")
CONNECTIONS: web.AppKey[ConnectionGuard] = web.AppKey("connections")  # used by serve's site; idle in tests
CONSOLE: web.AppKey[Console] = web.AppKey("console")  # absent with OLLAMA_NOUI=1
CONFIG: web.AppKey[LiveConfig] = web.AppKey("config")  # the config file's model tables, reloaded when it changes
