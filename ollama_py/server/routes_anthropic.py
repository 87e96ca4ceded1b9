"""The Anthropic-compatible routes: POST /v1/messages and POST /v1/messages/count_tokens.

Translation in anthropic_translate; inference through completion.run_completion like /api/chat; errors raised
for the middleware to write Anthropic's envelope {"type": "error", "error": {"type", "message"}} (it goes by the
path: everything under /v1/messages). Streams are named SSE events with no [DONE] marker.

    POST /v1/messages               Anthropic's messages request -> a message, or its SSE events
    POST /v1/messages/count_tokens  the same request (max_tokens not needed) -> {"input_tokens": n}: the prompt
                                    exactly as /v1/messages would send it (template, system, tools, BOS), tokenized
                                    by the model's runner
"""

from __future__ import annotations

import time

from aiohttp import web

from ollama_py.errors import RunnerError
from ollama_py.runner.client import UpstreamLost
from ollama_py.server import anthropic_translate as ant
from ollama_py.server.appkeys import SCHEDULER
from ollama_py.server.bodies import field, keep_alive, read_json, requested_model
from ollama_py.server.completion import CompletionRequest, build_prompt, prompt_text, run_completion
from ollama_py.server.model_lookup import check_chat_capabilities, find_model, merged_options
from ollama_py.server.offload import count, per_item
from ollama_py.server.routes_native import chat_messages
from ollama_py.server.streaming import Lane, collect, content_blocks, sse

routes = web.RouteTableDef()


@routes.post("/v1/messages")
async def messages(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    body = await read_json(request)
    n = count(body.get("messages"))
    params = await per_item(n, ant.parse_messages, body, request.content_length)
    name, raw_name = requested_model(body)
    ka = keep_alive(body)
    model = await find_model(request, name, raw_name)
    await per_item(n, check_chat_capabilities, model, raw_name, params.messages, params.tools)
    caps = model.capabilities
    opts = merged_options(request, model, params.options)
    # Like the OpenAI route, thinking asked of a model without it is dropped rather than refused (Ollama).
    think = (True if params.think is None else params.think) if "thinking" in caps else None
    req = CompletionRequest(model=model, options=opts, keep_alive=ka,
                            messages=await per_item(n, chat_messages, model, params.messages),
                            tools=params.tools, think=think, started=started, forced=params.forced,
                            single_call=params.single_call)
    msg_id = ant.new_message_id()
    stream = ant.MessageStream(msg_id, raw_name, params.estimated_input_tokens, params.show_thinking)
    if params.stream:  # its text deltas written by the lane, as MessageStream makes them (streaming.Lane)
        req.lane = Lane(end=stream.finish, blocks=stream)
    events = run_completion(request.app[SCHEDULER], req)

    if not params.stream:
        items = await collect(events)
        return web.json_response(ant.message(msg_id, raw_name, items[-1], params.show_thinking))

    return await sse(request, content_blocks(events, stream), done_marker=False, lane=req.lane, ends=ant.is_last)


@routes.post("/v1/messages/count_tokens")
async def count_tokens(request: web.Request) -> web.Response:
    """The prompt /v1/messages would send, rendered and tokenized by the model's runner."""
    body = await read_json(request)
    # count_tokens takes the messages request without max_tokens
    params = ant.parse_messages({**body, "max_tokens": field(body, "max_tokens", int, None) or 1})
    name, raw_name = requested_model(body)
    model = await find_model(request, name, raw_name)
    check_chat_capabilities(model, raw_name, params.messages, params.tools)
    opts = merged_options(request, model, params.options)
    think = (True if params.think is None else params.think) if "thinking" in model.capabilities else None
    req = CompletionRequest(model=model, options=opts, keep_alive=keep_alive(body),
                            messages=chat_messages(model, params.messages), tools=params.tools, think=think)
    async with request.app[SCHEDULER].use(model, opts, req.keep_alive) as loaded:
        try:
            prompt = await build_prompt(req, loaded)
            tokens = await loaded.client.tokenize(prompt_text(prompt), add_special=True)
        except UpstreamLost as e:
            raise RunnerError(str(e)) from None
    return web.json_response({"input_tokens": len(tokens)})
