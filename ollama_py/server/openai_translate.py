"""OpenAI wire format <-> the shared inference path: pure translation, no I/O.

Requests become the pieces of a CompletionRequest (messages, Ollama options, format, tools); Delta/Final
events become chat.completion(.chunk) and text_completion objects. The rules follow Ollama's
openai/openai.go: temperature and top_p default to 1.0 when unset, response_format json_object -> "json" and
json_schema -> its schema, a content-part array becomes one message per part (tool calls go on the last),
tool-call arguments travel as JSON strings, finish_reason is "tool_calls" whenever tools were called.

Logprobs map llama-server's `completion_probabilities` (token, logprob, bytes, top_logprobs) to OpenAI's
shapes: chat's `{"content": [...]}` and the legacy completions' `tokens/token_logprobs/top_logprobs/text_offset`.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import struct
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

import orjson

from ollama_py.api.wire import Message, Tool, ToolCall
from ollama_py.errors import BadRequest
from ollama_py.server.bodies import base64_data, field
from ollama_py.server.completion import Final
from ollama_py.server.logprobs import entries as logprob_entries
from ollama_py.template.forced_calls import ForcedCall, forced
from ollama_py.template.gojson import marshal_arguments

if TYPE_CHECKING:
    from ollama_py.store.models import Model

FINGERPRINT = "fp_ollama"
_IMAGE_PREFIXES = ("data:;base64,",) + tuple(f"data:image/{t};base64," for t in ("jpeg", "jpg", "png", "webp"))
_ROLE_ALIASES = {"developer": "system"}  # newer OpenAI clients send system prompts as "developer"
_ROLES = ("system", "user", "assistant", "tool")
_GO_TYPES = {type(None): "<nil>", bool: "bool", int: "float64", float: "float64", dict: "map[string]interface {}",
             list: "[]interface {}", str: "string"}


@dataclass(frozen=True, slots=True)
class ChatParams:
    """A /v1/chat/completions request, translated."""

    messages: list[Message]
    options: dict[str, Any]  # Ollama option names, not yet merged with the model's PARAMETERs
    format: Any  # None | "json" | JSON schema
    tools: list[Tool] | None
    stream: bool
    include_usage: bool
    top_logprobs: int | None  # None: no logprobs; else how many alternatives per token (0..20)
    think: bool | str | None = None  # reasoning_effort / reasoning.effort: a level, False for "none"
    forced: ForcedCall | None = None  # tool_choice "required" or a named function: the answer is a call
    single_call: bool = False  # parallel_tool_calls: false


@dataclass(frozen=True, slots=True)
class CompletionParams:
    """A /v1/completions request, translated."""

    prompt: str
    suffix: str | None
    options: dict[str, Any]
    stream: bool
    include_usage: bool
    logprobs: int | None


@dataclass(frozen=True, slots=True)
class EmbeddingParams:
    inputs: list[str]
    encoding_format: str  # "float" | "base64"
    dimensions: int | None


@dataclass(frozen=True, slots=True)
class ResponseMeta:
    """What every object of one response shares."""

    id: str
    created: int
    model: str


def new_meta(prefix: str, model: str) -> ResponseMeta:
    return ResponseMeta(id=f"{prefix}-{uuid.uuid4().hex[:24]}", created=int(time.time()), model=model)


# -- requests ---------------------------------------------------------------------------------------


def _go_type(value: Any) -> str:
    return _GO_TYPES.get(type(value), type(value).__name__)


def stop_list(value: Any) -> list[str] | None:
    """`stop` as a string or a list of strings."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        for s in value:
            if not isinstance(s, str):
                raise BadRequest(f"invalid type for 'stop' field: {_go_type(s)}")
        return list(value)
    raise BadRequest(f"invalid type for 'stop' field: {_go_type(value)}")


def _include_usage(body: dict[str, Any]) -> bool:
    opts = field(body, "stream_options", dict)
    return bool(opts and field(opts, "include_usage", bool, False))


def sampling_options(body: dict[str, Any], *, max_tokens: int | None) -> dict[str, Any]:
    """Ollama options from the OpenAI sampling fields; temperature and top_p are 1.0 when unset (as Ollama)."""
    opts: dict[str, Any] = {}
    stops = stop_list(body.get("stop"))
    if stops is not None:
        opts["stop"] = stops
    if max_tokens is not None:
        opts["num_predict"] = max_tokens
    opts["temperature"] = field(body, "temperature", float, 1.0)
    if (seed := field(body, "seed", int)) is not None:
        opts["seed"] = seed
    for key in ("frequency_penalty", "presence_penalty"):
        if (value := field(body, key, float)) is not None:
            opts[key] = value
    opts["top_p"] = field(body, "top_p", float, 1.0)
    return opts


def response_format(value: Any) -> Any:
    """`response_format` -> Ollama's format: json_object -> "json", json_schema -> the schema, else None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadRequest("response_format must be an object")
    kind = str(value.get("type") or "").strip().lower()
    if kind == "json_object":
        return "json"
    if kind == "json_schema":
        spec = value.get("json_schema")
        if spec is None:
            return None
        if not isinstance(spec, dict) or not isinstance(spec.get("schema", {}), dict):
            raise BadRequest("response_format.json_schema.schema must be a JSON schema object")
        return spec.get("schema")
    return None


def _image(part: dict[str, Any]) -> str:
    """A chat image part ({"image_url": {"url": ...}} or {"image_url": "..."}) -> the base64 payload."""
    raw = part.get("image_url")
    return image_data(raw.get("url") if isinstance(raw, dict) else raw)


def _input_audio(part: dict[str, Any]) -> str:
    """A chat audio part ({"input_audio": {"data": <base64>, "format": "wav" | "mp3"}}) -> the base64 payload, which
    goes with the message's images as Ollama sends it (the sound is told by its bytes, not by `format`)."""
    audio = part.get("input_audio")
    if not isinstance(audio, dict):
        raise BadRequest("invalid input_audio format")
    return base64_data(audio.get("data"), "invalid input_audio format: missing data", "invalid input_audio base64 data")


def image_data(url: Any) -> str:
    """A base64 data URL -> the base64 payload (Ollama accepts jpeg, jpg, png, webp, or no type)."""
    if not isinstance(url, str):
        raise BadRequest("invalid message format")
    for prefix in _IMAGE_PREFIXES:
        if url.startswith(prefix):
            data = url[len(prefix):]
            break
    else:
        raise BadRequest("invalid image input")
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequest("invalid message format") from None
    return data


def _arguments(text: str) -> Any:
    """A call's arguments decoded: orjson (an agent's turn repeats every call its conversation made: 20 of them
    4 vs 23 us), json for what orjson refuses (NaN, 1e400, lone surrogates: json takes them as it always did here,
    and says what is wrong with the rest) and for integers of 19 digits or more (past 64 bits orjson reads a
    float)."""
    if _LONG_INTEGER.search(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


_LONG_INTEGER = re.compile(r"[0-9]{19}")


def _tool_calls(calls: Any) -> list[ToolCall]:
    """OpenAI tool calls (arguments as a JSON string) -> native ones (arguments as an object)."""
    if not isinstance(calls, list):
        raise BadRequest("invalid tool calls")
    out: list[ToolCall] = []
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise BadRequest("invalid tool calls")
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = _arguments(args) if args.strip() else {}
            except ValueError:
                raise BadRequest("invalid tool call arguments") from None
        if args is None:
            args = {}
        if not isinstance(args, dict):
            raise BadRequest("invalid tool call arguments")
        native: ToolCall = {"function": {"name": fn["name"], "arguments": args}}
        if isinstance(call.get("id"), str):
            native["id"] = call["id"]
        out.append(native)
    return out


def _tool_names(messages: Sequence[Any]) -> dict[str, str]:
    """Each call id's function name: the last message that calls it wins, as in Ollama (resilient to reused ids),
    and within a message its first call of that id. Made once for a conversation (looked up per tool message, a
    pass over the conversation for each was quadratic in an agent's long ones)."""
    names: dict[str, str] = {}
    for m in messages:
        seen: dict[str, str] = {}
        for call in (m.get("tool_calls") or []) if isinstance(m, dict) else []:
            call_id = call.get("id") if isinstance(call, dict) else None
            if isinstance(call_id, str) and call_id not in seen:  # (a tool message's call_id is a string)
                fn = call.get("function") or {}
                seen[call_id] = fn.get("name", "") if isinstance(fn, dict) else ""
        names.update(seen)
    return names


class _Carried(TypedDict, total=False):
    """What each native message made from one OpenAI message carries besides its role and content."""

    thinking: str
    tool_call_id: str
    tool_name: str


def chat_messages(raw: Any) -> list[Message]:
    """OpenAI messages -> native messages. A content-part array becomes one message per part, as Ollama does."""
    if raw is None or raw == []:
        raise BadRequest("[] is too short - 'messages'")
    if not isinstance(raw, list):
        raise BadRequest("json: cannot unmarshal messages: expected an array of messages")
    out: list[Message] = []
    names: dict[str, str] | None = None  # call ids' function names, once a tool message needs them
    for i, msg in enumerate(raw):
        if not isinstance(msg, dict):
            raise BadRequest(f"messages[{i}] must be an object")
        role = msg.get("role")
        if not isinstance(role, str):
            raise BadRequest(f"messages[{i}].role must be a string")
        role = _ROLE_ALIASES.get(role.lower(), role.lower())
        if role not in _ROLES:
            raise BadRequest(f"invalid role {msg['role']!r} in messages[{i}]: "
                             "must be one of system, developer, user, assistant, tool")
        extra: _Carried = {}
        if role == "assistant" and isinstance(msg.get("reasoning"), str) and msg["reasoning"]:
            extra["thinking"] = msg["reasoning"]  # an earlier answer's thoughts, for templates that show them
        if role == "tool":
            call_id = msg.get("tool_call_id")
            name = msg.get("name")
            if not name and isinstance(call_id, str) and call_id:
                names = _tool_names(raw) if names is None else names
                name = names.get(call_id, "")
            if isinstance(call_id, str) and call_id:
                extra["tool_call_id"] = call_id
            if name:
                extra["tool_name"] = name
        calls = _tool_calls(msg["tool_calls"]) if msg.get("tool_calls") else None
        content = msg.get("content")
        if isinstance(content, str) or (content is None and calls):
            m: Message = {"role": role, "content": content or "", **extra}
            if calls:
                m["tool_calls"] = calls
            out.append(m)
        elif isinstance(content, list):
            parts: list[Message] = []
            for part in content:
                kind = part.get("type") if isinstance(part, dict) else None
                if kind == "text" and isinstance(part.get("text"), str):
                    parts.append({"role": role, "content": part["text"], **extra})
                elif kind == "image_url":
                    parts.append({"role": role, "content": "", "images": [_image(part)], **extra})
                elif kind == "input_audio":
                    parts.append({"role": role, "content": "", "images": [_input_audio(part)], **extra})
                else:
                    raise BadRequest("invalid message format")
            if calls:
                if not parts:
                    parts.append({"role": role, "content": "", **extra})
                parts[-1]["tool_calls"] = calls
            out.extend(parts)
        else:
            raise BadRequest(f"invalid message content type: {_go_type(content)}")
    return out


def check_tools(tools: Any) -> list[Tool] | None:
    if tools is None or tools == []:
        return None
    if not isinstance(tools, list) or not all(
            isinstance(t, dict) and isinstance(t.get("function"), dict) and isinstance(t["function"].get("name"), str)
            for t in tools):
        raise BadRequest('tools must be an array of {"type": "function", "function": {"name": ...}} objects')
    return tools


def tool_choice(choice: Any, tools: list[Tool] | None) -> tuple[list[Tool] | None, ForcedCall | None]:
    """The tools offered and the call forced (template/forced_calls.py) for a request's tool_choice: "none" offers
    none (as Ollama's Responses and Anthropic routes do; Ollama passes the rest over); "required" forces a call of
    any tool, a named one -- chat's {"type": "function", "function": {"name": ...}}, the Responses API's
    {"type": "function" | "custom", "name": ...} -- that one; {"type": "allowed_tools"} offers only the tools it
    lists (chat: under "allowed_tools", Responses: beside "type"), a call of one of them forced in its mode
    "required". "auto" and other shapes (a hosted tool's): the tools as they are, nothing forced."""
    if choice == "none":
        return None, None
    if choice == "required":
        return tools, forced(tools, None)
    if not isinstance(choice, dict):
        return tools, None
    kind = choice.get("type")
    if kind in ("function", "custom"):
        fn = choice.get("function")
        name = fn.get("name") if isinstance(fn, dict) else choice.get("name")
        if not isinstance(name, str):
            raise BadRequest("tool_choice: a function's name is required")
        return tools, forced(tools, name)
    if kind == "allowed_tools":
        inner = choice.get("allowed_tools")
        allowed: dict[str, Any] = inner if isinstance(inner, dict) else choice
        listed = allowed.get("tools")
        if allowed.get("mode") not in ("auto", "required") or not isinstance(listed, list):
            raise BadRequest('tool_choice.allowed_tools needs a mode ("auto" or "required") and a list of tools')
        names = {(t.get("function") or {}).get("name") or t.get("name") for t in listed if isinstance(t, dict)}
        offered = [t for t in tools or [] if t["function"]["name"] in names] or None
        return offered, forced(offered, None) if allowed["mode"] == "required" else None
    return tools, None


def think_for(think: bool | str | None, model: Model) -> bool | str | None:
    """Ollama relaxes thinking for the OpenAI routes: asked of a model without it, it is dropped, not refused;
    a thinking model thinks unless told "none"."""
    if "thinking" not in model.capabilities:
        return None
    return True if think is None else think


def parse_chat(body: dict[str, Any]) -> ChatParams:
    messages = chat_messages(body.get("messages"))
    max_tokens = field(body, "max_completion_tokens", int)
    if max_tokens is None:
        max_tokens = field(body, "max_tokens", int)
    top: int | None = None
    if field(body, "logprobs", bool, False):
        top = field(body, "top_logprobs", int, 0)
        if not 0 <= top <= 20:
            raise BadRequest("top_logprobs must be between 0 and 20")
    tools, forced_call = tool_choice(body.get("tool_choice"), check_tools(body.get("tools")))
    return ChatParams(
        messages=messages,
        options=sampling_options(body, max_tokens=max_tokens),
        format=response_format(body.get("response_format")),
        tools=tools,
        stream=field(body, "stream", bool, False),
        include_usage=_include_usage(body),
        top_logprobs=top,
        think=_reasoning(body),
        forced=forced_call,
        single_call=not field(body, "parallel_tool_calls", bool, True),
    )


# OpenAI's effort scale runs past Ollama's levels at both ends, and clients add tiers of their own (Codex's
# model_reasoning_effort takes minimal..xhigh): Ollama clamps them to its nearest level rather than refusing.
_EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "max", "ultra": "max",
            "max": "max"}


def think_from_effort(effort: Any) -> bool | str | None:
    """An OpenAI reasoning effort as Ollama's think: None (unset: the model's default), False for "none", else a
    level (Ollama's thinkFromReasoningEffort)."""
    if effort is None or effort == "":
        return None
    if effort == "none":
        return False
    if not isinstance(effort, str) or effort not in _EFFORTS:
        raise BadRequest(f"invalid reasoning value: {json.dumps(effort)} (must be \"minimal\", \"low\", \"medium\", "
                         '"high", "xhigh", "ultra", "max", or "none")')
    return _EFFORTS[effort]


def _reasoning(body: dict[str, Any]) -> bool | str | None:
    """reasoning_effort (or the Responses-style reasoning.effort, which wins as in Ollama) as Ollama's think."""
    effort = body.get("reasoning_effort")
    if isinstance(body.get("reasoning"), dict) and body["reasoning"].get("effort") not in (None, ""):
        effort = body["reasoning"]["effort"]
    return think_from_effort(effort)


def parse_completion(body: dict[str, Any]) -> CompletionParams:
    prompt = field(body, "prompt", str, "")
    opts = sampling_options(body, max_tokens=field(body, "max_tokens", int))
    # Ollama's CompletionRequest holds the penalties as plain floats: always sent, 0 when unset.
    opts.setdefault("frequency_penalty", 0.0)
    opts.setdefault("presence_penalty", 0.0)
    if not opts["top_p"]:
        opts["top_p"] = 1.0
    logprobs = field(body, "logprobs", int)
    if logprobs is not None and not 0 <= logprobs <= 20:
        raise BadRequest("logprobs must be between 0 and 20")
    return CompletionParams(prompt=prompt, suffix=field(body, "suffix", str) or None, options=opts,
                            stream=field(body, "stream", bool, False), include_usage=_include_usage(body),
                            logprobs=logprobs)


def parse_embedding(body: dict[str, Any]) -> EmbeddingParams:
    fmt = field(body, "encoding_format", str, "") or "float"
    if fmt.lower() not in ("float", "base64"):
        raise BadRequest(f"Invalid value for 'encoding_format' = {fmt}. Supported values: ['float', 'base64'].")
    raw = body.get("input")
    if raw == "":
        raw = [""]
    if raw is None or raw == []:
        raise BadRequest("invalid input")
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(s, str) for s in raw):
        raise BadRequest("invalid input type")
    dims = field(body, "dimensions", int)
    if dims is not None and dims <= 0:
        raise BadRequest("dimensions must be a positive integer")
    return EmbeddingParams(inputs=raw, encoding_format=fmt.lower(), dimensions=dims)


# -- responses --------------------------------------------------------------------------------------


def usage(final: Final) -> dict[str, int]:
    return {"prompt_tokens": final.prompt_tokens, "completion_tokens": final.eval_count,
            "total_tokens": final.prompt_tokens + final.eval_count}


def finish_reason(final: Final) -> str:
    return "tool_calls" if final.tool_calls else final.done_reason


def tool_calls(native: list[ToolCall]) -> list[dict[str, Any]]:
    """Native tool calls -> OpenAI's, arguments as a JSON string: compact, in the order the model wrote them, as
    Go marshals Ollama's ordered arguments."""
    out = []
    for i, call in enumerate(native):
        fn = call["function"]
        out.append({"id": call.get("id") or f"call_{uuid.uuid4().hex[:8]}", "index": fn.get("index", i),
                    "type": "function",
                    "function": {"name": fn["name"], "arguments": marshal_arguments(fn.get("arguments") or {})}})
    return out


def chat_logprobs(probs: list[dict[str, Any]], top: int) -> list[dict[str, Any]]:
    """llama-server completion_probabilities -> OpenAI chat logprobs.content entries (bytes and top_logprobs
    always there)."""
    return logprob_entries(probs, top, omit_empty=False)  # type: ignore[return-value]


def text_logprobs(probs: list[dict[str, Any]], top: int, offset: int) -> dict[str, Any]:
    """llama-server completion_probabilities -> the legacy completions logprobs object."""
    tokens, logprobs, tops, offsets = [], [], [], []
    for p in probs:
        token = p.get("token", "")
        tokens.append(token)
        logprobs.append(p.get("logprob", 0.0))
        tops.append({t.get("token", ""): t.get("logprob", 0.0) for t in (p.get("top_logprobs") or [])[:top]})
        offsets.append(offset)
        offset += len(token)
    return {"tokens": tokens, "token_logprobs": logprobs, "top_logprobs": tops, "text_offset": offsets}


def chat_chunk(meta: ResponseMeta, delta: dict[str, Any], finish: str | None = None,
               logprobs: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": {"role": "assistant", **delta}, "finish_reason": finish}
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    return {"id": meta.id, "object": "chat.completion.chunk", "created": meta.created, "model": meta.model,
            "system_fingerprint": FINGERPRINT, "choices": [choice]}


def usage_chunk(meta: ResponseMeta, final: Final, obj: str = "chat.completion.chunk") -> dict[str, Any]:
    """stream_options.include_usage: one last chunk with no choices and the usage."""
    return {"id": meta.id, "object": obj, "created": meta.created, "model": meta.model,
            "system_fingerprint": FINGERPRINT, "choices": [], "usage": usage(final)}


def last_chunk(include_usage: bool) -> Callable[[dict[str, Any]], bool]:
    """Which chunk of a stream is its last (it leaves with `data: [DONE]` and the end of the body): the usage
    chunk when asked for, else the one with the finish reason."""
    if include_usage:
        return lambda chunk: "usage" in chunk
    return lambda chunk: bool(chunk["choices"]) and chunk["choices"][0]["finish_reason"] is not None


def chat_completion(meta: ResponseMeta, final: Final, logprobs: list[dict[str, Any]] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": final.text}
    if final.thinking:
        message["reasoning"] = final.thinking
    if final.tool_calls:  # the text before the calls stays the content, as in Ollama
        message["tool_calls"] = tool_calls(final.tool_calls)
    choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish_reason(final)}
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    return {"id": meta.id, "object": "chat.completion", "created": meta.created, "model": meta.model,
            "system_fingerprint": FINGERPRINT, "choices": [choice], "usage": usage(final)}


def text_chunk(meta: ResponseMeta, text: str, finish: str | None = None,
               logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"text": text, "index": 0, "finish_reason": finish}
    if logprobs is not None:
        choice["logprobs"] = logprobs
    return {"id": meta.id, "object": "text_completion", "created": meta.created, "model": meta.model,
            "system_fingerprint": FINGERPRINT, "choices": [choice]}


def text_completion(meta: ResponseMeta, text: str, final: Final | None, finish: str,
                    logprobs: dict[str, Any] | None = None) -> dict[str, Any]:
    out = text_chunk(meta, text, finish, logprobs)
    out["usage"] = usage(final) if final is not None else {"prompt_tokens": 0, "completion_tokens": 0,
                                                            "total_tokens": 0}
    return out


def floats_base64(vec: Sequence[float]) -> str:
    """Little-endian float32, base64: OpenAI's encoding_format=base64."""
    return base64.b64encode(struct.pack(f"<{len(vec)}f", *vec)).decode("ascii")


def embedding_list(model: str, vectors: list[list[float]], prompt_tokens: int, encoding: str) -> dict[str, Any]:
    data = [{"object": "embedding", "embedding": floats_base64(v) if encoding == "base64" else v, "index": i}
            for i, v in enumerate(vectors)]
    return {"object": "list", "data": data, "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens}}


def model_entry(name: str, namespace: str, created: int) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": created, "owned_by": namespace}
