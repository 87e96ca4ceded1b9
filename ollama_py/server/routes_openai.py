"""OpenAI-compatible routes: /v1/chat/completions, /v1/responses, /v1/completions, /v1/embeddings, /v1/models.

Each handler translates the request (openai_translate), runs the one inference path (completion.run_completion
or embeddings.embed) and translates the events back; errors are raised and the middleware writes OpenAI's
envelope. Streams are SSE `data:` chunks ending with `data: [DONE]`.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from aiohttp import web

from ollama_py.api.names import ModelName, parse_name
from ollama_py.api.wire import Message
from ollama_py.errors import REMOTE_DETAILS, BadRequest
from ollama_py.server import embeddings
from ollama_py.server import openai_translate as oai
from ollama_py.server import responses_translate as rt
from ollama_py.server.appkeys import CONFIG, SCHEDULER, STORE
from ollama_py.server.bodies import keep_alive, read_json, requested_model
from ollama_py.server.completion import CompletionRequest, Delta, Final, run_completion
from ollama_py.server.model_lookup import check_chat_capabilities, find_model, merged_options
from ollama_py.server.offload import count, per_item
from ollama_py.server.routes_native import chat_messages
from ollama_py.server.streaming import Lane, collect, content_blocks, sse, sse_event

log = logging.getLogger(__name__)

routes = web.RouteTableDef()


async def _chat_request(request: web.Request, body: dict[str, Any], names: tuple[ModelName, str],
                        params: oai.ChatParams | rt.ResponsesParams, started: float,
                        logprobs: int | None = None) -> CompletionRequest:
    """The native chat request for parsed OpenAI params (chat completions or responses: messages, options,
    format, tools, think), refused like /api/chat would refuse them."""
    name, raw_name = names
    ka = keep_alive(body)
    model = await find_model(request, name, raw_name)
    n = len(params.messages)
    await per_item(n, check_chat_capabilities, model, raw_name, params.messages, params.tools)
    opts = merged_options(request, model, params.options)
    return CompletionRequest(model=model, options=opts, keep_alive=ka, format=params.format,
                             messages=await per_item(n, chat_messages, model, params.messages), tools=params.tools,
                             logprobs=logprobs, forced=params.forced, single_call=params.single_call,
                             think=oai.think_for(params.think, model), started=started)


@routes.post("/v1/chat/completions")
async def chat_completions(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    body = await read_json(request)
    names = requested_model(body)
    raw_name = names[1]
    params = await per_item(count(body.get("messages")), oai.parse_chat, body)
    req = await _chat_request(request, body, names, params, started, params.top_logprobs)
    meta = oai.new_meta("chatcmpl", raw_name)
    top = params.top_logprobs

    def last(final: Final) -> list[dict[str, Any]]:  # a Final's chunks: the lane's end, or the generator's
        out = [oai.chat_chunk(meta, {"content": ""}, oai.finish_reason(final))]
        if params.include_usage:
            out.append(oai.usage_chunk(meta, final))
        return out

    if params.stream and top is None:
        req.lane = Lane(lambda text, _at: sse_event(oai.chat_chunk(meta, {"content": text})), last,
                        thought=lambda text, _at: sse_event(oai.chat_chunk(meta, {"content": "", "reasoning": text})))
    events = run_completion(request.app[SCHEDULER], req)

    if not params.stream:
        items = await collect(events)
        final = items[-1]
        probs = oai.chat_logprobs([p for d in items[:-1] for p in d.probs or []], top) if top is not None else None
        return web.json_response(oai.chat_completion(meta, final, probs))

    async def chunks() -> AsyncGenerator[dict[str, Any], None]:
        async with contextlib.aclosing(events):
            async for ev in events:
                if isinstance(ev, Delta):
                    probs = oai.chat_logprobs(ev.probs or [], top) if top is not None else None
                    delta: dict[str, Any] = {"content": ev.text}
                    if ev.thinking:
                        delta["reasoning"] = ev.thinking
                    if ev.tool_calls:  # with tools only what may be a call waits; a call goes out once complete
                        delta["tool_calls"] = oai.tool_calls(ev.tool_calls)
                    yield oai.chat_chunk(meta, delta, None, probs)
                    continue
                for out in last(ev):
                    yield out

    return await sse(request, chunks(), lane=req.lane, ends=oai.last_chunk(params.include_usage))


@routes.post("/v1/responses")
async def responses(request: web.Request) -> web.StreamResponse:
    """OpenAI's Responses API, stateless as in Ollama (translation in responses_translate)."""
    started = time.perf_counter()
    body = await read_json(request)
    names = requested_model(body)
    raw_name = names[1]
    params = rt.parse_responses(body)
    req = await _chat_request(request, body, names, params, started)
    response_id, item_id = rt.new_ids()
    stream = rt.ResponseStream(response_id, item_id, raw_name, params.echo, params.offered)
    if params.stream:  # its text deltas written by the lane, as ResponseStream makes them (streaming.Lane)
        req.lane = Lane(end=stream.finish, blocks=stream)
    events = run_completion(request.app[SCHEDULER], req)

    if not params.stream:
        items = await collect(events)
        return web.json_response(rt.response(response_id, item_id, raw_name, params.echo, items[-1],
                                             params.offered))

    return await sse(request, content_blocks(events, stream), done_marker=False, lane=req.lane, ends=rt.is_last)


@routes.post("/v1/completions")
async def completions(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    body = await read_json(request)
    name, raw_name = requested_model(body)
    params = oai.parse_completion(body)
    ka = keep_alive(body)
    model = await find_model(request, name, raw_name)
    caps = model.capabilities
    if "completion" not in caps:
        raise BadRequest(f'"{raw_name}" does not support generate')
    if params.suffix and "insert" not in caps:
        raise BadRequest(f'"{raw_name}" does not support insert')
    opts = merged_options(request, model, params.options)
    meta = oai.new_meta("cmpl", raw_name)
    if not params.prompt:
        # Ollama's generate with an empty prompt only loads the model (done_reason "load").
        await request.app[SCHEDULER].load(model, opts, ka)
        if params.stream:
            return await sse(request, _one(oai.text_chunk(meta, "", "load")))
        return web.json_response(oai.text_completion(meta, "", None, "load"))
    system: list[Message] = [{"role": "system", "content": model.system}] if model.system else []
    req = CompletionRequest(model=model, options=opts, keep_alive=ka, suffix=params.suffix,
                            messages=[*system, {"role": "user", "content": params.prompt}],
                            logprobs=params.logprobs, started=started)
    top = params.logprobs

    def last(final: Final) -> list[dict[str, Any]]:  # a Final's chunks: the lane's end, or the generator's
        out = [oai.text_chunk(meta, "", final.done_reason)]
        if params.include_usage:
            out.append(oai.usage_chunk(meta, final, "text_completion"))
        return out

    if params.stream and top is None:
        req.lane = Lane(lambda text, _at: sse_event(oai.text_chunk(meta, text)), last)
    events = run_completion(request.app[SCHEDULER], req)

    if not params.stream:
        items = await collect(events)
        final = items[-1]
        probs = ([p for d in items[:-1] for p in d.probs or []])
        lp = oai.text_logprobs(probs, top, 0) if top is not None else None
        return web.json_response(oai.text_completion(meta, final.text, final, final.done_reason, lp))

    async def chunks() -> AsyncGenerator[dict[str, Any], None]:
        offset = 0
        async with contextlib.aclosing(events):
            async for ev in events:
                if isinstance(ev, Delta):
                    lp = oai.text_logprobs(ev.probs or [], top, offset) if top is not None else None
                    offset += len(ev.text)
                    yield oai.text_chunk(meta, ev.text, None, lp)
                    continue
                for out in last(ev):
                    yield out

    return await sse(request, chunks(), lane=req.lane, ends=oai.last_chunk(params.include_usage))


@routes.post("/v1/embeddings")
async def create_embeddings(request: web.Request) -> web.Response:
    body = await read_json(request)
    name, raw_name = requested_model(body)
    params = oai.parse_embedding(body)
    ka = keep_alive(body)
    model = await find_model(request, name, raw_name)
    opts = merged_options(request, model, None)
    result = await embeddings.embed(request.app[SCHEDULER], model, opts, ka, params.inputs, truncate=True,
                                    dimensions=params.dimensions)
    return web.json_response(oai.embedding_list(raw_name, result.vectors, result.prompt_tokens,
                                                params.encoding_format))


def _unix(rfc3339: str) -> int:
    try:
        return int(dt.datetime.fromisoformat(rfc3339).timestamp())
    except ValueError:
        return 0


@routes.get("/v1/models")
async def list_models(request: web.Request) -> web.Response:
    entries = await asyncio.to_thread(request.app[STORE].list_models)
    if CONFIG in request.app:
        entries = request.app[CONFIG].with_aliases(entries)  # the config file's aliases, listed as copies
    data = [oai.model_entry(e["name"], parse_name(e["name"]).namespace, _unix(e["modified_at"])) for e in entries]
    return web.json_response({"object": "list", "data": data})


@routes.get("/v1/models/{model:.+}")
async def retrieve_model(request: web.Request) -> web.Response:
    raw_name = request.match_info["model"]
    name = requested_model({"model": raw_name}, remote=REMOTE_DETAILS)[0]
    model = await find_model(request, name, raw_name, remote=REMOTE_DETAILS)
    return web.json_response(oai.model_entry(raw_name, name.namespace, int(model.modified_at)))


async def _one(item: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    yield item

