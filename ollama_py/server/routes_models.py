"""Model management routes. Placeholder until the store routes land."""

from aiohttp import web

routes = web.RouteTableDef()
