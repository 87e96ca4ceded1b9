"""Who may talk to the server: Host checks (DNS rebinding), CORS, optional bearer-token auth."""

from __future__ import annotations

import fnmatch
import functools
import hmac
import ipaddress
import socket

from aiohttp import web

from ollama_py.config import Settings
from ollama_py.server.appkeys import SETTINGS
from ollama_py.server.console import is_console_asset
from ollama_py.server.errors import error_response

DEFAULT_ORIGINS = (
    "http://localhost", "https://localhost", "http://localhost:*", "https://localhost:*",
    "http://127.0.0.1", "https://127.0.0.1", "http://127.0.0.1:*", "https://127.0.0.1:*",
    "http://0.0.0.0", "https://0.0.0.0", "http://0.0.0.0:*", "https://0.0.0.0:*",
    "app://*", "file://*", "tauri://*", "vscode-webview://*", "vscode-file://*",
)
ALLOWED_HEADERS = ("Authorization, Content-Type, User-Agent, Accept, X-Requested-With, OpenAI-Beta, "
                   "x-stainless-arch, x-stainless-lang, x-stainless-os, x-stainless-package-version, "
                   "x-stainless-runtime, x-stainless-runtime-version, x-stainless-async, x-stainless-retry-count, "
                   "x-stainless-timeout, x-api-key, anthropic-version, anthropic-beta")
OPEN_PATHS = ("/", "/api/version")


@functools.lru_cache(maxsize=256)  # asked on every request, with a handful of Host values (a bounded cache)
def host_allowed(host_header: str) -> bool:
    """Loopback, private and local names pass; anything else could be a rebinding attack."""
    host = host_header.strip()
    if host.startswith("["):
        host = host[1:host.find("]")] if "]" in host else host
    elif host.count(":") == 1:
        host = host.rsplit(":", 1)[0]
    host = host.lower().rstrip(".")
    if not host or host == "localhost" or host.endswith((".localhost", ".local", ".internal")):
        return True
    try:
        ip = ipaddress.ip_address(host)
        return ip.is_loopback or ip.is_private or ip.is_unspecified or ip.is_link_local
    except ValueError:
        pass
    try:
        return host == socket.gethostname().lower()
    except OSError:
        return False


def origin_allowed(origin: str, extra: tuple[str, ...]) -> bool:
    if origin.startswith(("chrome-extension://", "moz-extension://", "safari-web-extension://")):
        return True
    return any(fnmatch.fnmatchcase(origin, pattern) for pattern in (*DEFAULT_ORIGINS, *extra))


def security_middleware(settings: Settings):
    keys = tuple(k.encode() for k in settings.api_keys)

    @web.middleware
    async def middleware(request: web.Request, handler):
        if settings.host.is_loopback and not host_allowed(request.host or ""):
            return web.Response(status=403)
        origin = request.headers.get("Origin")
        if origin and "*" not in settings.origins and not origin_allowed(origin, settings.origins):
            return web.Response(status=403)
        if request.method == "OPTIONS":
            resp: web.StreamResponse = web.Response(status=204)
        else:
            if keys and request.path not in OPEN_PATHS and not is_console_asset(request.path):
                auth = request.headers.get("Authorization", "")
                token = auth[7:].strip() if auth.lower().startswith("bearer ") else request.headers.get(
                    "x-api-key", "")
                if not any(hmac.compare_digest(token.encode(), k) for k in keys):
                    return error_response(request, 401, "unauthorized")
            resp = await handler(request)
        return resp

    return middleware


async def add_cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """on_response_prepare: runs before headers go out, streamed responses included. A refused origin gets
    no CORS headers, so a browser does not let that page read even the 403."""
    origin = request.headers.get("Origin")
    if not origin:  # (most requests: no browser's)
        return
    origins = request.app[SETTINGS].origins
    if "*" in origins or origin_allowed(origin, origins):
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Vary"] = "Origin"
        response.headers["Access-Control-Allow-Methods"] = "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"
        response.headers["Access-Control-Allow-Headers"] = ALLOWED_HEADERS
