"""OpenAI- and Anthropic-compatible routes (/v1/*). Placeholder until the compatibility layer lands."""

from aiohttp import web

routes = web.RouteTableDef()
