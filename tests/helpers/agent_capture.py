"""A capture server for coding agents: it records every request a client sends and answers just enough for the
client to finish one turn. Used once to record Claude Code's and Codex's real first requests (tests/data/agents/).

    python -m tests.helpers.agent_capture --port N --out requests.json [--ollama-version 0.13.5]
        [--tool-call '{"name": "Read", "arguments": {"file_path": "/abs/note.txt"}}']

Every request is kept as {"method", "path", "query", "headers", "body"} (secrets -- Authorization, X-Api-Key,
cookies -- replaced by "<redacted>"; body parsed as JSON when it is JSON) and the list is written to --out after
each request. The answers:
  POST /v1/messages (Anthropic)         one text block "hi", streamed (SSE) when the request says stream
  POST /v1/messages/count_tokens        {"input_tokens": 10}
  POST /v1/responses (OpenAI)           one message "hi", streamed (SSE)
  POST /v1/chat/completions             "hi", streamed when asked
  GET  /v1/models, /api/tags            one model, MODEL
  GET  /api/version                     {"version": --ollama-version}
  POST /api/show, /api/pull             minimal answers in Ollama's shape
anything else                           404 {"error": "not found"} (recorded all the same)
With --tool-call, a /v1/messages or /v1/responses request that carries no tool result yet is answered with that tool
call (Anthropic tool_use, Responses function_call) instead, so the client runs the tool and sends its result back.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from aiohttp import web

SECRET_HEADERS = {"authorization", "x-api-key", "cookie", "set-cookie", "proxy-authorization"}
MODEL = "smollm2"
REPLY = "hi"
RECORDS: web.AppKey[list[dict[str, Any]]] = web.AppKey("records", list)
OUT: web.AppKey[Path | None] = web.AppKey("out", Path)
VERSION: web.AppKey[str] = web.AppKey("version", str)
TOOL_CALL: web.AppKey[dict[str, Any] | None] = web.AppKey("tool_call", dict)


def _has_tool_result(body: Any) -> bool:
    """Whether a request already carries a tool's result (Anthropic tool_result, Responses function_call_output)."""
    if not isinstance(body, dict):
        return False
    blocks = [b for m in body.get("messages") or [] if isinstance(m.get("content"), list) for b in m["content"]]
    raw = body.get("input")
    items: list[Any] = raw if isinstance(raw, list) else []
    return any(isinstance(x, dict) and x.get("type") in ("tool_result", "function_call_output")
               for x in [*blocks, *items])


def _sse(event: str | None, data: dict[str, Any]) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


async def _stream(request: web.Request, chunks: list[bytes]) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    for chunk in chunks:
        await resp.write(chunk)
    await resp.write_eof()
    return resp


async def anthropic_messages(request: web.Request, body: Any) -> web.StreamResponse:
    model = body.get("model", MODEL) if isinstance(body, dict) else MODEL
    message: dict[str, Any] = {"id": "msg_capture", "type": "message", "role": "assistant", "model": model,
                               "content": [], "stop_reason": None, "stop_sequence": None,
                               "usage": {"input_tokens": 10, "output_tokens": 0}}
    call = request.app[TOOL_CALL]
    if call is not None and not _has_tool_result(body):
        block = {"type": "tool_use", "id": "toolu_capture", "name": call["name"], "input": call["arguments"]}
        if not (isinstance(body, dict) and body.get("stream")):
            return web.json_response({**message, "content": [block], "stop_reason": "tool_use"})
        return await _stream(request, [
            _sse("message_start", {"type": "message_start", "message": message}),
            _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                         "content_block": {**block, "input": {}}}),
            _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {
                "type": "input_json_delta", "partial_json": json.dumps(call["arguments"])}}),
            _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
            _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use",
                                                                      "stop_sequence": None},
                                   "usage": {"output_tokens": 1}}),
            _sse("message_stop", {"type": "message_stop"}),
        ])
    if not (isinstance(body, dict) and body.get("stream")):
        return web.json_response({**message, "content": [{"type": "text", "text": REPLY}], "stop_reason": "end_turn",
                                  "usage": {"input_tokens": 10, "output_tokens": 1}})
    return await _stream(request, [
        _sse("message_start", {"type": "message_start", "message": message}),
        _sse("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
        _sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": REPLY}}),
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                               "usage": {"output_tokens": 1}}),
        _sse("message_stop", {"type": "message_stop"}),
    ])


async def openai_responses(request: web.Request, body: Any) -> web.StreamResponse:
    model = body.get("model", MODEL) if isinstance(body, dict) else MODEL
    item: dict[str, Any] = {"type": "message", "id": "msg_capture", "status": "completed", "role": "assistant",
                            "content": [{"type": "output_text", "text": REPLY, "annotations": []}]}
    call = request.app[TOOL_CALL]
    if call is not None and not _has_tool_result(body):
        item = {"type": "function_call", "id": "fc_capture", "status": "completed", "call_id": "call_capture",
                "name": call["name"], "arguments": json.dumps(call["arguments"])}
    response: dict[str, Any] = {"id": "resp_capture", "object": "response", "created_at": int(time.time()),
                                "model": model, "status": "in_progress", "output": []}
    done = {**response, "status": "completed", "output": [item],
            "usage": {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11,
                      "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}}
    if not (isinstance(body, dict) and body.get("stream")):
        return web.json_response(done)
    where = {"output_index": 0, "item_id": item["id"]}
    middle: list[tuple[str, dict[str, Any]]] = [
        ("response.content_part.added", {**where, "content_index": 0,
                                         "part": {"type": "output_text", "text": "", "annotations": []}}),
        ("response.output_text.delta", {**where, "content_index": 0, "delta": REPLY}),
        ("response.output_text.done", {**where, "content_index": 0, "text": REPLY}),
    ]
    added = {**item, "status": "in_progress", "content": []}
    if item["type"] == "function_call":
        added = {**item, "status": "in_progress", "arguments": ""}
        middle = [("response.function_call_arguments.delta", {**where, "delta": item["arguments"]}),
                  ("response.function_call_arguments.done", {**where, "arguments": item["arguments"]})]
    events: list[tuple[str, dict[str, Any]]] = [
        ("response.created", {"response": response}),
        ("response.output_item.added", {"output_index": 0, "item": added}),
        *middle,
        ("response.output_item.done", {"output_index": 0, "item": item}),
        ("response.completed", {"response": done}),
    ]
    return await _stream(request, [_sse(name, {"type": name, "sequence_number": i, **data})
                                   for i, (name, data) in enumerate(events)])


async def openai_chat(request: web.Request, body: Any) -> web.StreamResponse:
    model = body.get("model", MODEL) if isinstance(body, dict) else MODEL
    base = {"id": "chatcmpl-capture", "created": int(time.time()), "model": model}
    if not (isinstance(body, dict) and body.get("stream")):
        return web.json_response({**base, "object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": REPLY}, "finish_reason": "stop"}]})
    return await _stream(request, [
        _sse(None, {**base, "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {"role": "assistant", "content": REPLY}, "finish_reason": None}]}),
        _sse(None, {**base, "object": "chat.completion.chunk", "choices": [
            {"index": 0, "delta": {}, "finish_reason": "stop"}]}),
        b"data: [DONE]\n\n",
    ])


def _model_entry() -> dict[str, Any]:
    return {"name": f"{MODEL}:latest", "model": f"{MODEL}:latest", "modified_at": "2026-01-01T00:00:00Z",
            "size": 1, "digest": "0" * 64, "details": {"format": "gguf", "family": "llama", "parameter_size": "135M",
                                                        "quantization_level": "Q4_1"}}


async def answer(request: web.Request, body: Any) -> web.StreamResponse:
    path, method = request.path.rstrip("/") or "/", request.method
    if method == "POST" and path == "/v1/messages":
        return await anthropic_messages(request, body)
    if method == "POST" and path == "/v1/messages/count_tokens":
        return web.json_response({"input_tokens": 10})
    if method == "POST" and path == "/v1/responses":
        return await openai_responses(request, body)
    if method == "POST" and path == "/v1/chat/completions":
        return await openai_chat(request, body)
    if method == "GET" and path == "/v1/models":
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0,
                                                              "owned_by": "library"}]})
    if method in ("GET", "HEAD") and path == "/":
        return web.Response(text="Ollama is running")
    if method == "GET" and path == "/api/version":
        return web.json_response({"version": request.app[VERSION]})
    if method == "GET" and path == "/api/tags":
        return web.json_response({"models": [_model_entry()]})
    if method == "GET" and path == "/api/ps":
        return web.json_response({"models": []})
    if method == "POST" and path == "/api/show":
        return web.json_response({"modelfile": "", "template": "{{ .Prompt }}", "details": _model_entry()["details"],
                                  "model_info": {"general.architecture": "llama", "llama.context_length": 8192},
                                  "capabilities": ["completion", "tools"]})
    if method == "POST" and path == "/api/pull":  # read as NDJSON lines: the newline matters
        return web.Response(text=json.dumps({"status": "success"}) + "\n", content_type="application/x-ndjson")
    return web.json_response({"error": "not found"}, status=404)


@web.middleware
async def record(request: web.Request, handler: Any) -> web.StreamResponse:
    raw = await request.read()
    body: Any = None
    if raw:
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode(errors="replace")
    headers = {k: ("<redacted>" if k.lower() in SECRET_HEADERS else v) for k, v in request.headers.items()}
    request.app[RECORDS].append({"method": request.method, "path": request.path, "query": dict(request.query),
                                 "headers": headers, "body": body})
    out = request.app[OUT]
    if out is not None:
        out.write_text(json.dumps(request.app[RECORDS], indent=1) + "\n")
    return await answer(request, body)


async def _unreached(request: web.Request) -> web.Response:
    return web.Response(status=500)  # the middleware answers every request


def create_capture_app(out: Path | None = None, ollama_version: str = "0.13.5",
                       tool_call: dict[str, Any] | None = None) -> web.Application:
    app = web.Application(middlewares=[record], client_max_size=64 << 20)
    app[RECORDS] = []
    app[OUT] = out
    app[VERSION] = ollama_version
    app[TOOL_CALL] = tool_call
    app.router.add_route("*", "/{tail:.*}", _unreached)
    return app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ollama-version", default="0.13.5")
    parser.add_argument("--tool-call", type=json.loads, help='{"name": ..., "arguments": {...}}')
    args = parser.parse_args()
    web.run_app(create_capture_app(args.out, args.ollama_version, args.tool_call), host="127.0.0.1", port=args.port,
                print=lambda *_: None)


if __name__ == "__main__":
    main()
