"""The Anthropic-compatible route: POST /v1/messages (registered on routes_openai.routes).

Translation in anthropic_translate; inference through completion.run_completion like /api/chat; errors raised
for the middleware to write Anthropic's envelope {"type": "error", "error": {"type", "message"}}.
Streams are named SSE events with no [DONE] marker.
"""

from __future__ import annotations

import time

from aiohttp import web

from ollama_py.server import anthropic_translate as ant
from ollama_py.server.completion import CompletionRequest, run_completion
from ollama_py.server.keys import SCHEDULER
from ollama_py.server.models import check_chat_capabilities, find_model, keep_alive, merged_options
from ollama_py.server.requests import read_json, requested_model
from ollama_py.server.routes_native import chat_messages
from ollama_py.server.streaming import collect, content_blocks, sse


async def messages(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    body = await read_json(request)
    params = ant.parse_messages(body)
    name, raw_name = requested_model(body)
    ka = keep_alive(body)
    model = await find_model(request, name, raw_name)
    check_chat_capabilities(model, raw_name, params.messages, params.tools)
    caps = model.capabilities
    opts = merged_options(request, model, params.options)
    # Like the OpenAI route, thinking asked of a model without it is dropped rather than refused (Ollama).
    think = (True if params.think is None else params.think) if "thinking" in caps else None
    req = CompletionRequest(model=model, options=opts, keep_alive=ka, messages=chat_messages(model, params.messages),
                            tools=params.tools, think=think, started=started)
    msg_id = ant.new_message_id()
    events = run_completion(request.app[SCHEDULER], req)

    if not params.stream:
        items = await collect(events)
        return web.json_response(ant.message(msg_id, raw_name, items[-1]))

    stream = ant.MessageStream(msg_id, raw_name, params.estimated_input_tokens)
    return await sse(request, content_blocks(events, stream), done_marker=False)
