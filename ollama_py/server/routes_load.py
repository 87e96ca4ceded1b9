"""Load control (ours, not Ollama's): POST /api/load streams a load's progress, POST /api/unload waits for one.

/api/load `{"model", "keep_alive", "options", "stream"}` answers NDJSON: while the model loads, lines of
`{"status": "starting runner" | "loading model" | "warming up", "completed", "total"}` (bytes of the weights
llama-server has read, out of the weights' files: runner/load_progress.py), then the model's /api/ps entry with
`"status": "success"`. A model already loaded gets the last line only; `stream: false` gets the entry alone. An
error after the first line is a last `{"error"}` line, as in every stream of ours.

/api/unload `{"model"}` unloads the model once its current requests end and answers when its runner has stopped:
`{"model", "status": "unloaded" | "not loaded"}`.

Ollama clients need neither: an empty /api/generate or /api/chat still loads a model, keep_alive 0 unloads it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

from ollama_py.runner.load_progress import MODEL_PART, LoadReport, LoadStage
from ollama_py.scheduler.scheduler import Loaded
from ollama_py.server.appkeys import SCHEDULER
from ollama_py.server.bodies import field, keep_alive, read_json, requested_model
from ollama_py.server.model_lookup import find_model, merged_options
from ollama_py.server.routes_native import ps_entry
from ollama_py.server.streaming import collect, ndjson

routes = web.RouteTableDef()


def _part_sizes(loaded: Loaded) -> dict[str, int]:
    """(Blocking: stats.) Bytes of each part llama-server loads: the model, its draft model, its projectors."""
    spec = loaded.plan.spec

    def size(*paths: Path | None) -> int:
        total = 0
        for path in paths:
            if path is not None:
                try:
                    total += os.stat(path).st_size
                except OSError:
                    pass
        return total

    return {MODEL_PART: size(spec.model), "spec_model": size(spec.draft_model), "mmproj_model": size(*spec.projectors)}


@routes.post("/api/load")
async def load(request: web.Request) -> web.StreamResponse:
    body = await read_json(request)
    name, raw_name = requested_model(body)
    ka = keep_alive(body)
    stream = field(body, "stream", bool, True)
    model = await find_model(request, name, raw_name)
    opts = merged_options(request, model, body.get("options"))
    embedding = "embedding" in model.capabilities and "completion" not in model.capabilities
    scheduler = request.app[SCHEDULER]
    reports: asyncio.Queue[tuple[Loaded, LoadReport]] = asyncio.Queue()

    async def events() -> AsyncIterator[dict[str, Any]]:
        task = asyncio.ensure_future(scheduler.load(model, opts, ka, embedding=embedding,
                                                    progress=lambda lo, rep: reports.put_nowait((lo, rep))))
        sizes: dict[str, int] | None = None
        last: dict[str, Any] | None = None
        try:
            while True:
                getter = asyncio.ensure_future(reports.get())
                await asyncio.wait((task, getter), return_when=asyncio.FIRST_COMPLETED)
                if not getter.done():
                    getter.cancel()
                    break
                loaded, report = getter.result()
                if report.stage == LoadStage.READY:
                    continue  # the entry says so
                if sizes is None:
                    sizes = await asyncio.to_thread(_part_sizes, loaded)
                completed, total = report.bytes_done(sizes)
                line = {"status": report.stage.value, "completed": completed, "total": total}
                if line != last:
                    last = line
                    yield line
            loaded = await task
        finally:
            task.cancel()  # a client that hung up: its runner goes on loading and stays for its keep-alive
        yield {"status": "success", **ps_entry(loaded)}

    if stream:
        return await ndjson(request, events())
    entry = (await collect(events()))[-1]
    entry.pop("status")
    return web.json_response(entry)


@routes.post("/api/unload")
async def unload(request: web.Request) -> web.Response:
    body = await read_json(request)
    name, raw_name = requested_model(body)
    model = await find_model(request, name, raw_name)
    found = await request.app[SCHEDULER].unload(model, wait=True)
    return web.json_response({"model": raw_name, "status": "unloaded" if found else "not loaded"})
