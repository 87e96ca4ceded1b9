"""OpenAI's Responses API: POST /v1/responses (registered on routes_openai.routes), stateless as in Ollama.

Translation in responses_translate; inference through completion.run_completion like /api/chat; errors raised
for the middleware to write OpenAI's envelope. Streams are named SSE events with no [DONE] marker.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from ollama_py.server import openai_translate as oai
from ollama_py.server import responses_translate as rt
from ollama_py.server.completion import CompletionRequest, Delta, run_completion
from ollama_py.server.keys import SCHEDULER
from ollama_py.server.models import find_model, keep_alive, merged_options
from ollama_py.server.requests import read_json, requested_model
from ollama_py.server.routes_native import chat_messages
from ollama_py.server.streaming import collect, sse


async def responses(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    body = await read_json(request)
    name, raw_name = requested_model(body)
    params = rt.parse_responses(body)
    ka = keep_alive(body)
    model = await find_model(request, name, raw_name)
    oai.check_chat_capabilities(model, raw_name, params.messages, params.tools)
    opts = merged_options(request, model, params.options)
    req = CompletionRequest(model=model, options=opts, keep_alive=ka, format=params.format,
                            messages=chat_messages(model, params.messages), tools=params.tools,
                            think=oai.think_for(params.think, model), started=started)
    response_id, item_id = rt.new_ids()
    events = run_completion(request.app[SCHEDULER], req)

    if not params.stream:
        items = await collect(events)
        return web.json_response(rt.response(response_id, item_id, raw_name, params.echo, items[-1]))

    async def named_events() -> AsyncIterator[tuple[str, dict[str, Any]]]:
        stream = rt.ResponseStream(response_id, item_id, raw_name, params.echo)
        async with contextlib.aclosing(events):
            async for ev in events:
                if stream.start_pending:
                    for out in stream.start():
                        yield out
                if isinstance(ev, Delta):
                    for out in stream.thinking(ev.thinking):
                        yield out
                    if not params.tools:  # with tools, text is only known to be text at the end
                        for out in stream.text(ev.text):
                            yield out
                    continue
                if params.tools and not ev.tool_calls:
                    for out in stream.text(ev.text):
                        yield out
                for out in stream.finish(ev):
                    yield out

    return await sse(request, named_events(), done_marker=False)
