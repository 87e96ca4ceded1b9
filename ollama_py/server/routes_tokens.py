"""The model's tokenizer over HTTP: /api/tokenize, /api/detokenize (the shapes of Ollama's open PRs for #12031).
Both go through the model's own runner (loaded on demand, kept for its keep-alive like any request), so the ids
are the ones generation uses; Anthropic's /v1/messages/count_tokens (routes_anthropic.py) does too.

    POST /api/tokenize    {"model", "text" (or "content"), "keep_alive"?, "options"?}
                          -> {"model", "tokens": [int], "total_duration", "load_duration"}
    POST /api/detokenize  {"model", "tokens": [int], "keep_alive"?, "options"?}
                          -> {"model", "text", "total_duration", "load_duration"}

Tokenize adds no BOS and parses special tokens, as Ollama's runner tokenizes. Detokenize refuses (400) an id
past the model's vocabulary (its runner's n_vocab), which llama-server would answer with a 500.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ollama_py import bigjson
from ollama_py.errors import BadRequest, RunnerError
from ollama_py.runner.client import UpstreamLost
from ollama_py.server.appkeys import SCHEDULER
from ollama_py.server.bodies import field, keep_alive, read_json, requested_model, token_ids
from ollama_py.server.model_lookup import find_model, merged_options

if TYPE_CHECKING:
    from ollama_py.scheduler.scheduler import Loaded
    from ollama_py.store.models import Model

routes = web.RouteTableDef()


def _load_ns(loaded: Loaded, waited_since: float) -> int:
    if loaded.requests_served == 0 and loaded.runner.load_duration:
        return int(min(loaded.runner.load_duration, time.perf_counter() - waited_since) * 1e9)
    return 0


async def _model_for(request: web.Request, body: dict[str, Any]) -> tuple[Model, str, dict[str, Any], float | None]:
    name, raw_name = requested_model(body)
    ka = keep_alive(body)
    model = await find_model(request, name, raw_name)
    if model.model_path is None:
        raise BadRequest(f'"{raw_name}" has no weights to tokenize with')
    return model, raw_name, merged_options(request, model, body.get("options")), ka


@routes.post("/api/tokenize")
async def tokenize(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    body = await read_json(request)
    text = field(body, "text", str)
    if text is None:
        text = field(body, "content", str, "")  # PR #12030's name for it
    model, raw_name, opts, ka = await _model_for(request, body)
    embedding = "completion" not in model.capabilities
    async with request.app[SCHEDULER].use(model, opts, ka, embedding=embedding) as loaded:
        try:
            array = await loaded.client.tokenize_array(text) if len(text) > _TEXT_RELAYED else None
            tokens = await loaded.client.tokenize(text, add_special=False) if text and array is None else []
        except UpstreamLost as e:
            raise RunnerError(str(e)) from None
        load_ns = _load_ns(loaded, started)
    if array is not None:  # a long text's ids, relayed as llama-server wrote them
        head = b'{"model":%s,"tokens":' % json.dumps(raw_name).encode()
        tail = b',"total_duration":%d,"load_duration":%d}' % (int((time.perf_counter() - started) * 1e9), load_ns)
        resp = web.StreamResponse(headers={"Content-Type": "application/json; charset=utf-8"})
        resp.content_length = len(head) + sum(len(p) for p in array) + len(tail)
        await resp.prepare(request)
        for piece in [head, *array, tail]:
            await resp.write(piece)
        await resp.write_eof()
        return resp
    answer = {"model": raw_name, "tokens": tokens, "total_duration": int((time.perf_counter() - started) * 1e9),
              "load_duration": load_ns}
    if len(tokens) > _TOKENS_ON_LOOP:  # millions of ids: encoded in a thread, in slices, and written a piece at a
        # time (json.dumps of them held the loop for seconds)
        chunks = await asyncio.to_thread(bigjson.dumps_chunks, answer)
        resp = web.StreamResponse(headers={"Content-Type": "application/json; charset=utf-8"})
        resp.content_length = sum(len(c) for c in chunks)
        await resp.prepare(request)
        for chunk in chunks:
            await resp.write(chunk)
        await resp.write_eof()
        return resp
    return web.json_response(answer)


_TOKENS_ON_LOOP = 50_000
_TEXT_RELAYED = 200_000  # characters of text whose ids are relayed as the runner's bytes (tokenize_array)


@routes.post("/api/detokenize")
async def detokenize(request: web.Request) -> web.Response:
    started = time.perf_counter()
    body = await read_json(request)
    tokens = await token_ids(body, "tokens") or []
    model, raw_name, opts, ka = await _model_for(request, body)
    embedding = "completion" not in model.capabilities
    async with request.app[SCHEDULER].use(model, opts, ka, embedding=embedding) as loaded:
        try:
            n_vocab = await loaded.client.vocab_size() if tokens else None
            if n_vocab is not None and max(tokens) >= n_vocab:  # llama-server answers such an id with a 500
                raise BadRequest(f"token id {max(tokens)} is not in the model's vocabulary of {n_vocab} tokens")
            text = await loaded.client.detokenize(tokens) if tokens else ""
        except UpstreamLost as e:
            raise RunnerError(str(e)) from None
        load_ns = _load_ns(loaded, started)
    return web.json_response({"model": raw_name, "text": text,
                              "total_duration": int((time.perf_counter() - started) * 1e9),
                              "load_duration": load_ns})
