"""Registry transfer routes: POST /api/pull and POST /api/push (Ollama's request fields and progress stream).

Request: `model` (legacy `name`), `insecure`, `stream` (default true); `username`/`password` are accepted
and ignored, as Ollama does (credentials come from the files described in store/registry_auth.py).
The transfer itself is blocking code (store/registry.py) run in a thread of the transfers' own bounded pool
(server/transfers.py), never the default executor the other routes share; when the client goes away the
transfer is cancelled, and a download's partial files stay for the next pull to resume.
Non-streamed requests answer the last progress object, or {"error"} with Ollama's text and a 4xx status
(transfer_status): what failed is the registry the request named (its answers, its size, its speed), the
request itself, or the room on disk, never this server. Ollama's waitForStream answers 500 for all of these; its
clients raise on any non-2xx alike, with the same text.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from aiohttp import web

from ollama_py.errors import ModelNotFound, OllamaError
from ollama_py.server.appkeys import SETTINGS, STORE
from ollama_py.server.blob_prune import holds_blobs
from ollama_py.server.bodies import field, model_name, read_json, stored_model
from ollama_py.server.model_lookup import store_to_write
from ollama_py.server.routes_models import cancellable_in_thread
from ollama_py.server.streaming import collect, ndjson
from ollama_py.server.transfers import TRANSFERS
from ollama_py.store.registry import RegistryOptions, pull_model, push_model

log = logging.getLogger(__name__)
routes = web.RouteTableDef()


def registry_options(request: web.Request, insecure: bool) -> RegistryOptions:
    settings = request.app[SETTINGS]
    home = Path.home()
    return RegistryOptions(
        insecure=insecure,
        credential_files=(settings.data_dir / "registries.json", home / ".docker" / "config.json"),
        key_path=home / ".ollama" / "id_ed25519",
        min_rate=settings.pull_min_rate,
    )


async def _respond(request: web.Request, body: dict[str, Any],
                   make: Callable[[threading.Event], Iterator[dict[str, Any]]]) -> web.StreamResponse:
    events = cancellable_in_thread(make, request.app[TRANSFERS])  # the transfers' own pool (client-paced I/O)
    if field(body, "stream", bool, True):
        return await ndjson(request, events)
    try:
        items = await collect(events)
    except OllamaError as e:
        return web.json_response({"error": str(e)}, status=transfer_status(e))
    return web.json_response(items[-1] if items else {"status": "success"})


def transfer_status(e: OllamaError) -> int:
    """The status of a failed non-streamed pull or push: the error's own where it is a client error (a bad name,
    401 from the registry, 404 when the registry has no such model), else 400 (a registry that lied, sent too
    much, was too slow or looped; a model too big for the disk)."""
    return e.status if 400 <= e.status < 500 else 400


async def _transfer(request: web.Request, pulling: bool = False) -> tuple[dict[str, Any], Any, Any]:
    """A pull or push request: its body, the model it names (a pull's a cloud model's stub under its stored
    name, as Ollama pulls one) and the registry options (`insecure` honoured)."""
    body = await read_json(request)
    name = stored_model(body)[0] if pulling else model_name(body)
    return body, name, registry_options(request, field(body, "insecure", bool, False))


@routes.post("/api/pull")
@holds_blobs
async def pull(request: web.Request) -> web.StreamResponse:
    store, noprune = store_to_write(request), request.app[SETTINGS].noprune
    body, name, options = await _transfer(request, pulling=True)
    log.info("pulling %s", name)
    return await _respond(request, body, lambda cancel: pull_model(store, name, options=options, noprune=noprune,
                                                                    cancel=cancel))


@routes.post("/api/push")
@holds_blobs
async def push(request: web.Request) -> web.StreamResponse:
    body, name, options = await _transfer(request)
    store = request.app[STORE]
    if await asyncio.to_thread(store.manifests.resolve, name) is None:
        raise ModelNotFound(body.get("model") or body.get("name") or name.short)
    log.info("pushing %s", name)
    return await _respond(request, body, lambda cancel: push_model(store, name, options=options, cancel=cancel))
