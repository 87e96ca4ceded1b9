"""Prometheus /metrics. Placeholder until the observability work lands."""

from __future__ import annotations

from typing import Any

from aiohttp import web

metrics_routes = web.RouteTableDef()


class Metrics:
    def attach(self, scheduler: Any) -> None:
        pass
