"""Model management routes: /api/tags, /api/show, /api/create, /api/copy, /api/delete, /api/blobs/:digest.

Store work is blocking file I/O: it runs in threads (asyncio.to_thread); long work (create) streams progress
from its thread through a queue.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Executor
from typing import Any

from aiohttp import web

from ollama_py.api.names import is_valid_digest, parse_name
from ollama_py.api.options import format_params
from ollama_py.api.wire import ShowResponse
from ollama_py.errors import REMOTE_DETAILS, BadRequest, InvalidModelName, ModelNotFound, NotFound
from ollama_py.modelfile.serializer import build_modelfile, serialize_modelfile
from ollama_py.runner import gguf_compat
from ollama_py.server.appkeys import CONFIG, METRICS, SCHEDULER, SETTINGS, STORE
from ollama_py.server.blob_prune import holds_blobs, sweep_text_only
from ollama_py.server.bodies import field, model_name, read_json, requested_model, stored_model
from ollama_py.server.model_lookup import find_model, store_to_write
from ollama_py.server.streaming import collect, ndjson
from ollama_py.server.transfers import CREATES, receive_blob
from ollama_py.store.gguf_meta import model_info
from ollama_py.store.manifests import MEDIA_MODEL
from ollama_py.store.models import rfc3339

log = logging.getLogger(__name__)
routes = web.RouteTableDef()


async def iterate_in_thread(make: Callable[[], Iterator[dict[str, Any]]],
                            executor: Executor | None = None) -> AsyncIterator[dict[str, Any]]:
    """Run a blocking generator in a thread (of `executor`, else the default one) and yield its items here as
    they come. The worker never blocks on us (the queue is unbounded; progress is low-rate); if we stop early it
    finishes on its own."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()

    def work() -> None:
        try:
            for item in make():
                loop.call_soon_threadsafe(queue.put_nowait, ("item", item))
            loop.call_soon_threadsafe(queue.put_nowait, ("done", None))
        except BaseException as e:  # raised on the event loop side
            loop.call_soon_threadsafe(queue.put_nowait, ("error", e))

    worker = asyncio.ensure_future(loop.run_in_executor(executor, contextvars.copy_context().run, work))
    while True:
        kind, value = await queue.get()
        if kind == "item":
            yield value
        elif kind == "error":
            await worker
            raise value
        else:
            await worker
            return


async def cancellable_in_thread(make: Callable[[threading.Event], Iterator[dict[str, Any]]],
                                executor: Executor | None = None) -> AsyncIterator[dict[str, Any]]:
    """iterate_in_thread for work that stops when asked (a create, a pull, a push): closing this (the client hung
    up) sets the event `make` was given, and the worker closes the generator at its next item, so a converter or
    quantizer child is killed, or a transfer stopped, instead of running to the end for nobody."""
    cancel = threading.Event()

    def closing() -> Iterator[dict[str, Any]]:
        work = make(cancel)
        try:
            for item in work:
                yield item
                if cancel.is_set():
                    break
        finally:
            close = getattr(work, "close", None)
            if close is not None:
                close()

    try:
        async for item in iterate_in_thread(closing, executor):
            yield item
    finally:
        cancel.set()


@routes.get("/api/tags")
async def tags(request: web.Request) -> web.Response:
    models = await asyncio.to_thread(request.app[STORE].list_models)
    if CONFIG in request.app:
        models = request.app[CONFIG].with_aliases(models)  # the config file's aliases, listed as copies
    return web.json_response({"models": models})


COPILOT_CHAT = "GitHubCopilotChat/"  # the User-Agent prefix of VS Code's Copilot Chat


@routes.post("/api/show")
async def show(request: web.Request) -> web.Response:
    body = await read_json(request)
    name, raw = requested_model(body, remote=REMOTE_DETAILS)
    verbose = field(body, "verbose", bool, False)
    store = request.app[STORE]
    model = await find_model(request, name, raw, remote=REMOTE_DETAILS)
    system = field(body, "system", str) or model.system
    template = field(body, "template", str) or model.template
    info = model.info if model.info is not None else (
        await asyncio.to_thread(store.info, model) if model.model_path else None)
    mf = build_modelfile(str(model.model_path) if model.model_path else model.parent_model or raw,
                         more_from=[str(p) for p in model.shards[1:]], template=template, system=system,
                         parameters=model.params, messages=model.messages,
                         licenses=model.licenses, adapters=[str(a) for a in model.adapters],
                         draft=str(model.draft_path) if model.draft_path else None,
                         **{key: value for key in ("renderer", "parser", "requires")
                            if isinstance(value := model.config.get(key), str) and value})
    out: ShowResponse = {
        "license": "\n".join(model.licenses),
        "modelfile": serialize_modelfile(mf, header=model.name.short),
        "parameters": format_params(model.params) if model.params else "",
        "template": template or (info.chat_template if info else "") or "",
        "system": system or "",
        "details": model.details,
        "model_info": {},  # filled in below, in a thread
        "capabilities": model.capabilities,
        "modified_at": rfc3339(model.modified_at),
    }
    if model.messages:
        out["messages"] = model.messages
    if isinstance(requires := model.config.get("requires"), str) and requires:
        out["requires"] = requires  # the Ollama version the model needs (REQUIRES), as Ollama shows it

    copilot = request.headers.get("User-Agent", "").startswith(COPILOT_CHAT)

    def encoded() -> str:
        """(In a thread.) A verbose answer carries the whole vocabulary: megabytes of JSON to build and write."""
        out["model_info"] = model_info(info, verbose) if info else {}
        projector = store.projector_info(model)
        if projector is not None:  # as Ollama: the projector's metadata, its name kept (`show` prints a section)
            out["projector_info"] = model_info(projector, verbose)
            if "general.name" in projector.kv:
                out["projector_info"]["general.name"] = projector.kv["general.name"]
        if copilot:  # VS Code's Copilot Chat names the model by general.basename: the name the user picked, as Ollama
            out["model_info"]["general.basename"] = raw  # (the GGUF's basename is seldom one a user knows)
        if verbose and info:
            out["tensors"] = [{"name": n, "type": t, "shape": list(s)} for n, t, s in info.tensors]
        return json.dumps(out)

    return web.Response(text=await asyncio.to_thread(encoded), content_type="application/json")


@routes.post("/api/copy")
async def copy(request: web.Request) -> web.Response:
    store = store_to_write(request)
    body = await read_json(request)
    src_raw, dst_raw = body.get("source"), body.get("destination")
    try:
        src = parse_name(src_raw) if isinstance(src_raw, str) and src_raw else None
    except InvalidModelName:
        src = None
    if src is None:
        raise BadRequest(f'source "{src_raw or ""}" is invalid')
    try:
        dst = parse_name(dst_raw) if isinstance(dst_raw, str) and dst_raw else None
    except InvalidModelName:
        dst = None
    if dst is None:
        raise BadRequest(f'destination "{dst_raw or ""}" is invalid')
    try:
        await asyncio.to_thread(store.copy, src, dst)
    except ModelNotFound:
        raise ModelNotFound(str(src_raw), f'model "{src_raw}" not found') from None
    return web.Response(status=200)


@routes.delete("/api/delete")
async def delete(request: web.Request) -> web.Response:
    store = store_to_write(request)
    body = await read_json(request)
    name, raw = stored_model(body)
    model = await find_model(request, name, raw, remote=None)
    scheduler = request.app.get(SCHEDULER)
    weights = model.manifest.layers_of(MEDIA_MODEL)
    # Ollama leaves a deleted model's runner to its keep-alive. We let it go once it is idle (not waiting for
    # that: a stream in progress finishes), but only when no other name uses the same weights: deleting a copy
    # must not unload the original. Decided before the delete, while the weights can still be read.
    if scheduler is not None and weights and await asyncio.to_thread(store.only_user, name, weights[0].digest):
        await scheduler.unload(model, keep_slots=False)
        await scheduler.forget_slots(model)  # its prompt cache on disk goes with it
    await asyncio.to_thread(store.delete, name)
    # a text-only copy of its weights (an Ollama-layout GGUF: runner/gguf_compat.py) goes with them
    await asyncio.to_thread(sweep_text_only, store, request.app[SETTINGS].data_dir / gguf_compat.TEXT_ONLY_DIR)
    request.app[METRICS].forget_model(model.name.short)
    return web.Response(status=200)


def _digest(request: web.Request) -> str:
    digest = request.match_info["digest"]
    if not is_valid_digest(digest):
        raise BadRequest("invalid digest format")
    return digest.replace("-", ":", 1)


@routes.head("/api/blobs/{digest}")
async def blob_exists(request: web.Request) -> web.Response:
    digest = _digest(request)
    if not await asyncio.to_thread(request.app[STORE].blobs.exists, digest):
        raise NotFound(f'blob "{digest}" not found')
    return web.Response(status=200)


@routes.post("/api/blobs/{digest}")
@holds_blobs
async def blob_upload(request: web.Request) -> web.Response:
    digest = _digest(request)
    store = store_to_write(request)
    if await asyncio.to_thread(store.blobs.exists, digest):
        await request.release()
        return web.Response(status=200)
    await receive_blob(request, store.blobs, digest)  # read here, written in its own threads (server/transfers.py)
    return web.Response(status=201)


@routes.post("/api/create")
@holds_blobs
async def create(request: web.Request) -> web.StreamResponse:
    from ollama_py.store.convert import find_converter
    from ollama_py.store.create import create_model

    store = store_to_write(request)
    body = await read_json(request)
    name = model_name(body)
    quantizer = _quantize_binary(request)
    settings = request.app[SETTINGS]
    # `from` paths on the server only inside the operator's OLLAMA_PY_IMPORT_DIRS, whoever asks (a loopback peer
    # may be any client of a reverse proxy on this host); a client that hangs up stops the conversion/quantizing
    events = cancellable_in_thread(lambda cancel: create_model(
        store, name, body, quantizer=quantizer, import_dirs=settings.import_dirs, cancel=cancel,
        converter=find_converter(settings.runners_dir, timeout=settings.convert_timeout)),
        request.app[CREATES])  # its own threads: a create may run for minutes
    if field(body, "stream", bool, True):
        return await ndjson(request, events)
    items = await collect(events)
    return web.json_response(items[-1] if items else {"status": "success"})


def _quantize_binary(request: web.Request):
    from ollama_py.store.quantize import make_quantizer

    runners = request.app[SETTINGS].runners_dir
    for variant in ("cpu_avx2", "cpu", "cuda", "metal"):
        candidate = runners / variant / "llama-quantize"
        if candidate.exists():
            return make_quantizer(candidate)
    return None
