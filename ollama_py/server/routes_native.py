"""Ollama's native inference routes: /api/generate, /api/chat, /api/embed, /api/embeddings, /api/ps."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

from aiohttp import web

from ollama_py import OLLAMA_API_VERSION, __version__
from ollama_py.api.wire import (
    ChatResponse,
    EmbedResponse,
    GenerateResponse,
    Message,
    Metrics,
    ProcessModelResponse,
    PromptProgress,
    Tool,
)
from ollama_py.errors import BadRequest, CloudDisabled
from ollama_py.fastjson import dumps
from ollama_py.server import embeddings, logprobs
from ollama_py.server.appkeys import SCHEDULER, SETTINGS
from ollama_py.server.bodies import (
    check_images,
    checked_images,
    field,
    image_chars,
    keep_alive,
    read_json,
    requested_model,
    token_ids,
)
from ollama_py.server.completion import CompletionRequest, Delta, Final, rendered_prompt, run_completion
from ollama_py.server.metrics import queue_counts
from ollama_py.server.model_lookup import check_chat_capabilities, check_media, find_model, merged_options
from ollama_py.server.offload import LONG, count, per_item
from ollama_py.server.rendering import parse_off_loop
from ollama_py.server.streaming import Lane, collect, encode_long, long_context, ndjson, ndjson_line, now_rfc3339
from ollama_py.store.models import rfc3339

if TYPE_CHECKING:
    from ollama_py.scheduler.scheduler import Loaded
    from ollama_py.store.models import Model

routes = web.RouteTableDef()

_ROLES = ("system", "user", "assistant", "tool")
_IMAGES_ON_LOOP = 1 << 20  # characters of base64 images checked on the event loop (~2 ms)


@routes.get("/")
async def root(request: web.Request) -> web.Response:
    return web.Response(text="Ollama is running")


@routes.get("/api/version")
async def version(request: web.Request) -> web.Response:
    """The Ollama API version implemented (clients compare it with the release that added what they use) and,
    beside it, ollama-py's own."""
    return web.json_response({"version": OLLAMA_API_VERSION, "ollama_py": __version__})


@routes.get("/api/status")
async def status(request: web.Request) -> web.Response:
    """Ollama's cloud status, which its CLI and app ask before offering cloud models or web search: ollama-py has
    no ollama.com features, so they are always disabled. `source` says who else turned them off, as Ollama's
    does: "env" (OLLAMA_NO_CLOUD), "config" (`disable_ollama_cloud` in ~/.ollama/server.json, which Ollama's app
    writes), "both", or "none" (nobody: they are off because ollama-py has none)."""
    env = request.app[SETTINGS].no_cloud
    config = await asyncio.to_thread(_config_disables_cloud, Path.home() / ".ollama" / "server.json")
    source = {(True, True): "both", (True, False): "env", (False, True): "config"}.get((env, config), "none")
    return web.json_response({"cloud": {"disabled": True, "source": source}})


def _config_disables_cloud(path: Path) -> bool:
    """Ollama's server config says `disable_ollama_cloud`; a missing or unreadable file says nothing (as Ollama
    reads it: at most a debug line)."""
    try:
        with path.open("rb") as f:
            config = json.loads(f.read(1 << 20))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(config, dict) and config.get("disable_ollama_cloud") is True


# Ollama's built-in model recommendations (its server/model_recommendations.go), which an Ollama with its cloud
# disabled serves as they are (otherwise it refreshes them from ollama.com): its CLI's `launch` and its app list them,
# hiding the cloud ones once /api/status says the cloud is off.
_GB = 1000**3
RECOMMENDATIONS: list[dict[str, Any]] = [
    {"model": "kimi-k2.6:cloud", "description": "State-of-the-art coding, long-horizon execution, and multimodal "
     "agent swarm capability", "context_length": 262_144, "max_output_tokens": 262_144},
    {"model": "glm-5.1:cloud", "description": "Reasoning and code generation", "context_length": 202_752,
     "max_output_tokens": 131_072},
    {"model": "qwen3.5:cloud", "description": "Reasoning, coding, and agentic tool use with vision",
     "context_length": 262_144, "max_output_tokens": 32_768},
    {"model": "minimax-m2.7:cloud", "description": "Fast, efficient coding and real-world productivity",
     "context_length": 204_800, "max_output_tokens": 128_000},
    {"model": "gemma4", "description": "Reasoning and code generation locally", "vram_bytes": 12 * _GB},
    {"model": "qwen3.5", "description": "Reasoning, coding, and visual understanding locally", "vram_bytes": 14 * _GB},
]


@routes.get("/api/experimental/model-recommendations")
async def model_recommendations(request: web.Request) -> web.Response:
    """The models Ollama's `launch` and app offer first, as an Ollama with its cloud disabled answers (a 404 made
    them fall back to their own copy, the same list)."""
    return web.json_response({"recommendations": RECOMMENDATIONS})


@routes.post("/api/experimental/web_search")
async def web_search(request: web.Request) -> web.Response:
    """Ollama proxies this to ollama.com; with cloud features disabled it answers 403 (after refusing an empty
    body), and here they always are: ollama-py connects nowhere its operator did not choose."""
    return await _cloud_disabled(request, "web search is unavailable")


@routes.post("/api/experimental/web_fetch")
async def web_fetch(request: web.Request) -> web.Response:
    return await _cloud_disabled(request, "web fetch is unavailable")


async def _cloud_disabled(request: web.Request, operation: str) -> NoReturn:
    if not (await request.read()).strip():
        raise BadRequest("missing request body")
    raise CloudDisabled(operation)


def _metrics(final: Final) -> Metrics:
    out: Metrics = {
        "total_duration": final.total_duration,
        "load_duration": final.load_duration,
        "prompt_eval_count": final.prompt_eval_count,
        "prompt_eval_duration": final.prompt_eval_duration,
        "eval_count": final.eval_count,
        "eval_duration": final.eval_duration,
    }
    if final.prompt_truncated:  # the prompt was cut to fit num_ctx (server/truncation.py)
        out["prompt_truncated"] = True
    if final.context_shifted:  # the answer reached the end of num_ctx and went on past a context shift
        out["context_shifted"] = True
    return out


async def _load_or_unload(request: web.Request, model: Model, opts: dict[str, Any], ka: float | None) -> str:
    """An empty prompt loads the model; with keep_alive 0 it unloads it: Ollama's done_reason load/unload."""
    scheduler = request.app[SCHEDULER]
    if ka == 0:
        await scheduler.unload(model)
        return "unload"
    await scheduler.load(model, opts, ka)
    return "load"


def _streaming(body: dict[str, Any]) -> bool:
    return field(body, "stream", bool, True)


def _progress(body: dict[str, Any]) -> bool:
    """Ours: `"prompt_progress": true` streams chunks with llama-server's progress through the prompt before the
    first token (off by default, so Ollama's clients see Ollama's chunks); nothing to show unless streamed."""
    return field(body, "prompt_progress", bool, False) and _streaming(body)


def _progress_entry(progress: dict[str, Any]) -> PromptProgress:
    return {"total": int(progress.get("total", 0)), "cache": int(progress.get("cache", 0)),
            "processed": int(progress.get("processed", 0)), "time_ms": float(progress.get("time_ms", 0))}


async def _reply(request: web.Request, body: dict[str, Any],
                 events: AsyncIterator[GenerateResponse] | AsyncIterator[ChatResponse],
                 lane: Lane | None = None) -> web.StreamResponse:
    if _streaming(body):
        return await ndjson(request, events, lane, ends=_is_done)
    items = await collect(events)
    merged = _merge(items)
    if long_context(merged):  # millions of context ids: encoded a slice at a time, off the loop
        return web.Response(body=await encode_long(json_body, merged), content_type="application/json")
    return web.json_response(merged)


def _is_done(chunk: Mapping[str, Any]) -> bool:
    """A completion's last chunk (done: true): it leaves with the end of the body."""
    return chunk.get("done") is True


def json_body(obj: Any) -> bytes:
    return dumps(obj).encode()


def _merge(items: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """stream:false: the final object with the streamed text (and log-probabilities) concatenated."""
    final = dict(items[-1])
    probs = [e for i in items for e in i.get("logprobs", ())]
    if probs:
        final["logprobs"] = probs
    if "response" in final:
        final["response"] = "".join(i.get("response", "") for i in items)
        thinking = "".join(i.get("thinking", "") for i in items)
        if thinking:
            final["thinking"] = thinking
    if "message" in final:
        final["message"] = dict(final["message"])
        final["message"]["content"] = "".join(i["message"].get("content", "") for i in items)
        thinking = "".join(i["message"].get("thinking", "") for i in items)
        if thinking:
            final["message"]["thinking"] = thinking
        calls = [c for i in items for c in i["message"].get("tool_calls", [])]
        if calls:
            final["message"]["tool_calls"] = calls
    return final


@routes.post("/api/generate")
async def generate(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    body = await read_json(request)
    top = logprobs.requested(body)  # checked first, as Ollama does
    name, raw_name = requested_model(body)
    prompt = field(body, "prompt", str, "")
    system = field(body, "system", str)
    template = field(body, "template", str)
    context = await token_ids(body, "context")
    raw = field(body, "raw", bool, False)
    suffix = field(body, "suffix", str)
    render_only = field(body, "_debug_render_only", bool, False)
    images = await checked_images(body.get("images"))
    if raw and (template or system or context):
        raise BadRequest("raw mode does not support template, system, or context")
    ka = keep_alive(body)
    model = await find_model(request, name, raw_name)
    if template:
        await parse_off_loop(template)  # a template that does not parse is a 400, as in Ollama
        # the request's template renders, whatever renderer the model names (Ollama: a template given executes)
        model = dataclasses.replace(model, template=template, config={**model.config, "renderer": ""})
    if "completion" not in model.capabilities:  # an embedding model or a reranker
        raise BadRequest(f'"{raw_name}" does not support generate')
    check_media(model.capabilities, raw_name, images)
    _check_think(body, model, raw_name)
    if suffix and "insert" not in model.capabilities:
        raise BadRequest(f'"{raw_name}" does not support insert')
    opts = merged_options(request, model, body.get("options"))
    if not prompt and not images:
        reason = await _load_or_unload(request, model, opts, ka)
        answer: GenerateResponse = {"model": raw_name, "created_at": now_rfc3339(), "response": "", "done": True,
                                    "done_reason": reason}
        return web.json_response(answer)

    req = CompletionRequest(model=model, options=opts, keep_alive=ka, format=body.get("format"),
                            context=context or None, want_context=not raw, suffix=suffix, images=images,
                            think=_think(body, model), logprobs=top, started=started,
                            truncate=field(body, "truncate", bool, True), shift=field(body, "shift", bool, True),
                            progress=_progress(body))
    if raw:
        req.prompt = prompt
    else:
        sys_text = system if system is not None else model.system
        system_message: list[Message] = [{"role": "system", "content": sys_text}] if sys_text else []
        req.messages = [*system_message, {"role": "user", "content": prompt}]
    if render_only:
        return await _render_only(request, req, raw_name, {"response": ""})

    def chunk(text: str, thinking: str = "", created_at: str = "",
              probs: list[dict[str, Any]] | None = None) -> GenerateResponse:
        at = created_at or now_rfc3339()
        out: GenerateResponse
        if thinking:
            out = {"model": raw_name, "created_at": at, "response": text, "thinking": thinking, "done": False}
        else:
            out = {"model": raw_name, "created_at": at, "response": text, "done": False}
        if probs:
            out["logprobs"] = logprobs.entries(probs, top or 0)
        return out

    def last(final: Final) -> tuple[GenerateResponse]:
        out: GenerateResponse = {"model": raw_name, "created_at": now_rfc3339(), "response": "", "done": True,
                                 "done_reason": final.done_reason}
        if final.context is not None:
            out["context"] = final.context
        out.update(_metrics(final))
        return (out,)

    if _streaming(body) and top is None:  # log-probabilities take the ordinary path
        req.lane = Lane(lambda text, at: ndjson_line(chunk(text, created_at=at)), last,
                        thought=lambda text, at: ndjson_line(chunk("", text, created_at=at)))

    async def events() -> AsyncIterator[GenerateResponse]:
        async for ev in run_completion(request.app[SCHEDULER], req):
            if isinstance(ev, Delta):
                piece = chunk(ev.text, ev.thinking, probs=ev.probs if top is not None else None)
                if ev.progress is not None:
                    piece["prompt_progress"] = _progress_entry(ev.progress)
                yield piece
            else:
                for out in last(ev):
                    yield out

    return await _reply(request, body, events(), req.lane)


async def _render_only(request: web.Request, req: CompletionRequest, model: str,
                       empty: dict[str, Any]) -> web.Response:
    """Ollama's `_debug_render_only`: the prompt the request would send, in one JSON answer (streamed or not), the
    response's other fields (`empty`) empty and not done, as Ollama answers it."""
    prompt, images = await rendered_prompt(request.app[SCHEDULER], req)
    info: dict[str, Any] = {"rendered_template": prompt}
    if images:
        info["image_count"] = images
    return web.json_response({"model": model, "created_at": now_rfc3339(), **empty, "done": False,
                              "_debug_info": info})


def _think(body: dict[str, Any], model: Model) -> bool | str | None:
    """What the template gets as .Think: as asked; a thinking model thinks unless told not to (Ollama)."""
    think = body.get("think")
    if think is None and "thinking" in model.capabilities:
        return True
    return think


def _check_think(body: dict[str, Any], model: Model, raw_name: str) -> None:
    """think: true (or a level) on a model without thinking is refused, as Ollama does; false/absent is fine."""
    think = body.get("think")
    if think is None or think is False:
        return
    if not isinstance(think, (bool, str)) or (isinstance(think, str) and think not in ("low", "medium", "high", "max")):
        raise BadRequest('think must be a boolean or one of "low", "medium", "high", "max"')
    if "thinking" not in model.capabilities:
        raise BadRequest(f'"{raw_name}" does not support thinking')


def _check_messages(messages: Any) -> list[Message]:
    """A client's messages: role, content, images and tool calls checked; the rest passed on as sent."""
    if messages is None:
        return []
    if not isinstance(messages, list):
        raise BadRequest('json: cannot unmarshal messages: expected an array of messages')
    out: list[Message] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise BadRequest(f"messages[{i}] must be an object")
        role = m.get("role")
        if role not in _ROLES:
            if not (isinstance(role, str) and role.lower() in _ROLES):
                raise BadRequest(f"invalid role {role!r} in messages[{i}]: "
                                 "must be one of system, user, assistant, tool")
            m = {**m, "role": role.lower()}  # Ollama's api.Message lowercases the role ("USER", "System")
        content = m.get("content", "")
        if content is not None and not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content must be a string")
        check_images(m.get("images"))
        calls = m.get("tool_calls")
        if calls is not None and (not isinstance(calls, list) or not all(
                isinstance(c, dict) and isinstance(c.get("function"), dict)
                and isinstance(c["function"].get("name"), str) for c in calls)):
            raise BadRequest(f"messages[{i}].tool_calls is invalid")
        out.append(cast(Message, m))
    return out


def _check_tools(tools: Any) -> list[Tool] | None:
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("function"), dict)
                                              for t in tools):
        raise BadRequest("tools must be an array of {\"type\": \"function\", \"function\": {...}} objects")
    return tools


def chat_messages(model: Model, messages: list[Message]) -> list[Message]:
    """The model's MESSAGE layers first; its SYSTEM unless the conversation brings its own."""
    out = list(model.messages or []) + messages
    if model.system and not any(m.get("role") == "system" for m in out):
        out.insert(0, {"role": "system", "content": model.system})
    return out


@routes.post("/api/chat")
async def chat(request: web.Request) -> web.StreamResponse:
    started = time.perf_counter()
    body = await read_json(request)
    top = logprobs.requested(body)  # checked first, as Ollama does
    name, raw_name = requested_model(body)
    raw_messages = body.get("messages")
    n_messages = count(raw_messages)
    if image_chars(raw_messages) > _IMAGES_ON_LOOP or n_messages > LONG:  # a 60 MB image: a second in the check
        messages = await asyncio.to_thread(_check_messages, raw_messages)
    else:
        messages = _check_messages(raw_messages)
    tools = _check_tools(body.get("tools"))
    ka = keep_alive(body)
    render_only = field(body, "_debug_render_only", bool, False)
    model = await find_model(request, name, raw_name)
    await per_item(n_messages, check_chat_capabilities, model, raw_name, messages, tools,
                   lambda: _check_think(body, model, raw_name))
    opts = merged_options(request, model, body.get("options"))
    if not messages:
        reason = await _load_or_unload(request, model, opts, ka)
        answer: ChatResponse = {"model": raw_name, "created_at": now_rfc3339(),
                                "message": {"role": "assistant", "content": ""}, "done": True, "done_reason": reason}
        return web.json_response(answer)
    req = CompletionRequest(model=model, options=opts, keep_alive=ka, format=body.get("format"),
                            messages=await per_item(n_messages, chat_messages, model, messages), tools=tools,
                            think=_think(body, model),
                            logprobs=top, started=started, truncate=field(body, "truncate", bool, True),
                            shift=field(body, "shift", bool, True),
                            progress=_progress(body))
    if render_only:
        return await _render_only(request, req, raw_name, {"message": {"role": "", "content": ""}})

    def chunk(text: str, thinking: str = "", created_at: str = "",
              probs: list[dict[str, Any]] | None = None) -> ChatResponse:
        delta: Message = {"role": "assistant", "content": text}
        if thinking:
            delta["thinking"] = thinking
        out: ChatResponse = {"model": raw_name, "created_at": created_at or now_rfc3339(), "message": delta,
                             "done": False}
        if probs:
            out["logprobs"] = logprobs.entries(probs, top or 0)
        return out

    def last(final: Final) -> tuple[ChatResponse]:
        return ({"model": raw_name, "created_at": now_rfc3339(), "message": {"role": "assistant", "content": ""},
                 "done": True, "done_reason": final.done_reason, **_metrics(final)},)

    if _streaming(body) and top is None:  # log-probabilities take the ordinary path
        req.lane = Lane(lambda text, at: ndjson_line(chunk(text, created_at=at)), last,
                        thought=lambda text, at: ndjson_line(chunk("", text, created_at=at)))

    async def events() -> AsyncIterator[ChatResponse]:
        async for ev in run_completion(request.app[SCHEDULER], req):
            if isinstance(ev, Delta):
                probs = ev.probs if top is not None else None
                out = chunk(ev.text, ev.thinking, probs=probs)
                if ev.tool_calls:  # with tools only what may be a call waits; a call goes out once complete
                    out["message"]["tool_calls"] = ev.tool_calls
                if ev.progress is not None:
                    out["prompt_progress"] = _progress_entry(ev.progress)
                yield out
            else:
                for out in last(ev):
                    yield out

    return await _reply(request, body, events(), req.lane)


@routes.post("/api/embed")
async def embed(request: web.Request) -> web.Response:
    started = time.perf_counter()
    body = await read_json(request)
    name, raw_name = requested_model(body)
    inputs = body.get("input")
    if inputs is None or inputs == "":
        inputs = []
    elif isinstance(inputs, str):
        inputs = [inputs]
    elif not isinstance(inputs, list) or not all(isinstance(i, str) for i in inputs):
        raise BadRequest("invalid input type")
    truncate = field(body, "truncate", bool, True)
    dimensions = field(body, "dimensions", int)
    if dimensions is not None and dimensions <= 0:
        raise BadRequest("dimensions must be a positive integer")
    ka = keep_alive(body)
    model = await find_model(request, name, raw_name)
    opts = merged_options(request, model, body.get("options"))
    result = await embeddings.embed(request.app[SCHEDULER], model, opts, ka, inputs, truncate=truncate,
                                    dimensions=dimensions)
    reply: EmbedResponse = {
        "model": raw_name, "embeddings": result.vectors,
        "total_duration": int((time.perf_counter() - started) * 1e9),
        "load_duration": result.load_duration, "prompt_eval_count": result.prompt_tokens,
    }
    return web.json_response(reply)


@routes.post("/api/embeddings")
async def embeddings_legacy(request: web.Request) -> web.Response:
    body = await read_json(request)
    name, raw_name = requested_model(body)
    prompt = field(body, "prompt", str, "")
    ka = keep_alive(body)
    model = await find_model(request, name, raw_name)
    opts = merged_options(request, model, body.get("options"))
    if not prompt:
        if ka != 0:
            await request.app[SCHEDULER].load(model, opts, ka, embedding=True)
        return web.json_response({"embedding": []})
    result = await embeddings.embed(request.app[SCHEDULER], model, opts, ka, [prompt], truncate=True,
                                    dimensions=None)
    return web.json_response({"embedding": result.vectors[0]})


def _expires_at(loaded: Loaded) -> float:
    """Idle: when its keep-alive runs out. Busy: keep-alive counted from now (it restarts when idle)."""
    if loaded.refcount == 0 or math.isinf(loaded.session_duration):
        return loaded.expires_at if loaded.refcount == 0 else math.inf
    return time.time() + loaded.session_duration


_FOREVER = (2**63 - 1) / 1e9  # Ollama's keep-alive "forever": the longest Go duration, ~292 years


def _expires_rfc3339(ts: float) -> str:
    """store.models.rfc3339, with "forever" as Ollama shows it: now plus the longest Go duration (~292 years
    ahead, what its `time.Now().Add(math.MaxInt64)` gives)."""
    return rfc3339(time.time() + _FOREVER if math.isinf(ts) else ts)


def ps_entry(loaded: Loaded) -> ProcessModelResponse:
    """One loaded model as /api/ps lists it (and /api/load ends with)."""
    m = loaded.model
    queued, active = queue_counts(loaded)
    entry: ProcessModelResponse = {
        "name": loaded.name, "model": loaded.name, "size": _or(loaded.actual_size, loaded.plan.size),
        "digest": m.manifest.digest.removeprefix("sha256:"), "details": m.details,
        "expires_at": _expires_rfc3339(_expires_at(loaded)),
        "size_vram": _or(loaded.actual_vram, loaded.plan.size_vram),
        "context_length": loaded.plan.context_length,
        "state": loaded.state, "queued": queued, "active": active,
        "cache_ram": loaded.plan.cache_ram,  # ours: the host prompt cache's cap, part of size
    }
    if loaded.devices:  # where llama-server put it: CPU, CUDA0, RPC0[host:port], ...
        entry["devices"] = loaded.devices
    if loaded.plan.spec.embedding:  # the same name twice in a list is otherwise a puzzle
        entry["embedding"] = True
    return entry


def _or(actual: int | None, planned: int) -> int:
    """What llama-server allocated, else (before its log says) what the plan estimated."""
    return planned if actual is None else actual


@routes.get("/api/ps")
async def ps(request: web.Request) -> web.Response:
    models = [ps_entry(loaded) for loaded in request.app[SCHEDULER].loaded.values()]
    models.sort(key=lambda x: x["expires_at"], reverse=True)
    return web.json_response({"models": models})

