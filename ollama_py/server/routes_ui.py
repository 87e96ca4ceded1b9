"""The web console at /ui: its static page, and the few data routes the public API does not already offer.

    GET  /ui, /ui/                 the page (ollama_py/ui/static/index.html)
    GET  /ui/{file}                its scripts, styles and vendored libraries, from the package (no CDN)
    GET  /ui/api/events            Server-Sent Events: `hello` (recent log lines, recent requests, chart series),
                                   then `log`, `request`, `ps` (when /api/ps changes) and `series` (every 10 s)
    GET  /ui/api/server            version, runner variants and devices, the effective settings
    POST /ui/api/modelfile         a Modelfile's text -> the /api/create fields it stands for (line-numbered 400)

Everything else the page does goes through the public API (/api/chat, /api/pull, /api/ps, ...), with the same
Host check, CORS and OLLAMA_API_KEYS. The page and its files carry no data and are served without a key; the
/ui/api/ routes need it like any other. Every response from /ui carries a Content-Security-Policy that allows
only the console's own scripts, so nothing a model writes can run as script even if it escaped the sanitiser.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import time
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path
from typing import Any

from aiohttp import web

from ollama_py import __version__
from ollama_py.config import Host
from ollama_py.config_file import SERVER_FIELDS
from ollama_py.errors import BadRequest, OllamaError
from ollama_py.server.appkeys import CONSOLE, SCHEDULER, SETTINGS
from ollama_py.server.bodies import read_json
from ollama_py.server.console import BUCKET_SECONDS, Console, Event

log = logging.getLogger(__name__)

routes = web.RouteTableDef()

STATIC_DIR = Path(str(resources.files("ollama_py.ui") / "static"))
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
       "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
_TYPES = {".html": "text/html", ".js": "text/javascript", ".mjs": "text/javascript", ".css": "text/css",
          ".svg": "image/svg+xml", ".png": "image/png", ".ico": "image/x-icon", ".txt": "text/plain"}
PS_CHECK_SECONDS = 1.0
# A viewer writes what arrived at most this often: each event woke every viewer, so with 500 viewers open each
# request cost 500 wake-ups and writes (a busy server's console took a third of a core); now a viewer wakes a few
# times a second whatever the traffic, and one write carries what arrived meanwhile.
FLUSH_SECONDS = 0.25
HEARTBEAT_SECONDS = 15.0


def _headers(content_type: str) -> dict[str, str]:
    return {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
            "Cache-Control": "no-cache", "Content-Type": f"{content_type}; charset=utf-8"
            if content_type.startswith("text/") else content_type}


@routes.get("/ui")
async def ui_redirect(request: web.Request) -> web.Response:
    raise web.HTTPFound("/ui/")


@routes.get("/ui/{path:(?!api/).*}")
async def ui_file(request: web.Request) -> web.StreamResponse:
    path = await asyncio.to_thread(_static_file, request.match_info["path"] or "index.html")
    if path is None:
        raise web.HTTPNotFound()
    return web.FileResponse(path, headers=_headers(_TYPES[path.suffix]))


def _static_file(rel: str) -> Path | None:
    """The console's file at `rel`, or None outside STATIC_DIR or of a type we do not serve (stats: in a thread)."""
    path = (STATIC_DIR / rel).resolve()
    if STATIC_DIR.resolve() not in path.parents or not path.is_file() or path.suffix not in _TYPES:
        return None
    return path


def _sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


@routes.get("/ui/api/events")
async def events(request: web.Request) -> web.StreamResponse:
    """The console's one live stream. A viewer that falls behind loses events (bounded queue); none blocks. It
    only waits on its queue: what changes by itself comes from the console's one ticker (_tick)."""
    console: Console = request.app[CONSOLE]
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    with console.subscribers.subscribe() as queue:
        await response.prepare(request)
        await response.write(_sse("hello", {"logs": list(console.log_tap.lines),
                                            "requests": list(console.request_tap.requests),
                                            "series": console.request_tap.series(),
                                            "bucket_seconds": BUCKET_SECONDS}))
        if console.ticker is None or console.ticker.done():
            console.last_ps = _ps(request.app)  # what the ticker publishes changes against
            console.ticker = asyncio.create_task(_tick(request.app, console), name="console-ticker")
        await response.write(_sse("ps", console.last_ps))
        stopping = False
        while not stopping:
            items = [await queue.get()]
            if items[0] is not None:
                await asyncio.sleep(FLUSH_SECONDS)
            while not queue.empty():  # what arrived meanwhile goes out in one write
                items.append(queue.get_nowait())
            stopping = None in items  # the server is stopping
            await response.write(b"".join(_encoded(item) for item in items if item is not None))
    with contextlib.suppress(ConnectionError):
        await response.write_eof()
    return response


async def _tick(app: web.Application, console: Console) -> None:
    """While anyone watches: /api/ps every PS_CHECK_SECONDS (published when it changed), the chart series every
    BUCKET_SECONDS and a heartbeat every HEARTBEAT_SECONDS, each once for all viewers."""
    now = time.monotonic()
    next_series, next_beat = now + BUCKET_SECONDS, now + HEARTBEAT_SECONDS
    try:
        while console.subscribers:
            ps = _ps(app)
            if ps != console.last_ps:
                console.last_ps = ps
                console.subscribers.publish(("ps", ps))
            now = time.monotonic()
            if now >= next_series:
                console.subscribers.publish(("series", console.request_tap.series()))
                next_series = now + BUCKET_SECONDS
            if now >= next_beat:
                console.subscribers.publish((_HEARTBEAT, {}))
                next_beat = now + HEARTBEAT_SECONDS
            await asyncio.sleep(PS_CHECK_SECONDS)
    finally:
        console.last_ps = None  # stale once nobody refreshes it


_HEARTBEAT = ""
_ENCODED: dict[int, tuple[Event, bytes]] = {}  # id(event) -> (event, its bytes): one encoding


def _encoded(item: Event) -> bytes:
    """An event as SSE bytes, encoded once however many viewers write it (the same object reaches every queue)."""
    hit = _ENCODED.get(id(item))
    if hit is not None and hit[0] is item:
        return hit[1]
    data = b": keep-alive\n\n" if item[0] == _HEARTBEAT else _sse(*item)
    if len(_ENCODED) >= 256:
        _ENCODED.clear()
    _ENCODED[id(item)] = (item, data)
    return data


def _ps(app: web.Application) -> dict[str, Any]:
    from ollama_py.server.routes_native import ps_entry

    models = [ps_entry(loaded) for loaded in app[SCHEDULER].loaded.values()]
    models.sort(key=lambda x: x["expires_at"], reverse=True)
    return {"models": models}


def _shown(attr: str, value: Any) -> Any:
    """A setting as the server view shows it: never the API keys themselves."""
    if attr == "api_keys":
        return f"{len(value)} set" if value else "none"
    if isinstance(value, Host):
        return value.url
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    if isinstance(value, float) and math.isinf(value):
        return "forever"
    return value if isinstance(value, (bool, int, float)) or value is None else str(value)


def _server_info(settings: Any) -> dict[str, Any]:
    """Blocking probes (CPU flags, the runner's --list-devices, build-info files): run in a thread."""
    from ollama_py.estimate.devices import LIBRARIES, list_devices
    from ollama_py.estimate.gpus import probe_system_memory
    from ollama_py.runner import variants

    built = variants.built_variants(settings.runners_dir)
    runners = {name: {"path": str(binary), **variants.read_build_info(binary.parent)}
               for name, binary in built.items()}
    try:
        host = variants.probe_host()
        order = variants.candidate_order(host, built, forced=settings.llm_library,
                                         bad=variants.BadVariants(settings.data_dir / "bad-variants.json",
                                                                  settings.runners_dir).load())
        problem = ""
    except OllamaError as e:
        order, problem = [], str(e)
    # The devices as the chosen runner itself sees them (every backend it was built with), as the scheduler does.
    devices = list_devices(built[order[0]], variants.runner_env(built[order[0]], os.environ), timeout=5.0) \
        if order else []
    memory = probe_system_memory()
    shown = {f.env[0]: _shown(f.attr, getattr(settings, f.attr)) for f in SERVER_FIELDS}
    return {
        "version": __version__,
        "runner": {"variant": order[0] if order else "", "order": order, "built": runners, "problem": problem},
        "devices": [{"name": f"{d.name}: {d.description}", "library": LIBRARIES.get(d.backend, d.backend.lower()),
                     "total": d.total, "free": d.free} for d in devices],
        "memory": {"total": memory.total, "free": memory.free},
        "settings": shown,
    }


@routes.get("/ui/api/server")
async def server_info(request: web.Request) -> web.Response:
    info = await asyncio.to_thread(_server_info, request.app[SETTINGS])
    info["loaded"] = len(request.app[SCHEDULER].loaded)
    return web.json_response(info)


@routes.post("/ui/api/modelfile")
async def modelfile_fields(request: web.Request) -> web.Response:
    """The create request a Modelfile typed in the page stands for. A browser cannot send local files, so FROM
    must name a model this server has (or can pull); `ollama-py create -f` handles FROM ./file.gguf."""
    from ollama_py.modelfile import parse_modelfile

    body = await read_json(request)
    text = body.get("modelfile")
    if not isinstance(text, str) or not text.strip():
        raise BadRequest("modelfile is required")
    mf = parse_modelfile(text)  # a ModelfileError names the line; the error table makes it a 400
    source = mf.from_
    if not source:
        raise BadRequest("no FROM line in the Modelfile")
    if source.startswith(("/", "./", "../", "~")) or source.lower().endswith((".gguf", ".safetensors", ".bin")):
        raise BadRequest(f"FROM {source}: the console can only build on a model name; "
                              "for a local file use `ollama-py create NAME -f Modelfile`")
    fields: dict[str, Any] = {"from": source}
    optional = {"template": mf.template, "system": mf.system, "parameters": mf.parameters or None,
                "messages": mf.messages or None, "license": mf.licenses or None, "requires": mf.requires,
                "renderer": mf.renderer, "parser": mf.parser}
    fields.update({k: v for k, v in optional.items() if v is not None})
    return web.json_response(fields)


def setup_console(app: web.Application) -> Console:
    """Register the console on an app: its routes, the log tap on the root logger for the app's lifetime, and
    the end of every live stream at shutdown (so a browser left open does not hold up a stop)."""
    console = Console()
    app[CONSOLE] = console
    app.add_routes(routes)

    async def tap_logs(app: web.Application) -> AsyncIterator[None]:
        root = logging.getLogger()
        if app[SETTINGS].debug:
            console.log_tap.setLevel(logging.DEBUG)
        root.addHandler(console.log_tap)
        try:
            yield
        finally:
            root.removeHandler(console.log_tap)

    async def end_streams(app: web.Application) -> None:
        console.subscribers.close_all()
        if console.ticker is not None:
            console.ticker.cancel()

    app.cleanup_ctx.append(tap_logs)
    app.on_shutdown.append(end_streams)
    return console
