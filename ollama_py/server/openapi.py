"""The OpenAPI 3.1 description of our HTTP API, served at GET /openapi.json.

A hand-kept table (`OPERATIONS`) of every route the gateway serves with its request schema, so a client
generator or a fuzzer (tests/unit/test_openapi.py) knows what each endpoint takes; a test compares the table with
the app's router, so a route added without a line here fails the suite. Schemas are JSON Schema 2020-12 (the
dialect of OpenAPI 3.1) and describe what we accept, Ollama's field names included; unknown fields are ignored
by the server, as Ollama's are, so objects leave `additionalProperties` open.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ollama_py import __version__
from ollama_py.api.options import option_range
from ollama_py.store.quantize import SUPPORTED_TYPES

routes = web.RouteTableDef()

_REF = "#/components/schemas/"


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": _REF + name}


def _obj(required: tuple[str, ...] = (), **props: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = list(required)
    return out


_STR = {"type": "string"}
# api/names.py's grammar as one pattern: [http(s)://][[host/]namespace/]model[:tag][@sha256:<64 hex>]
_NS, _PART = r"[A-Za-z0-9_][A-Za-z0-9_-]{0,79}", r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,79}"
MODEL_NAME_PATTERN = (rf"^(?:https?://)?(?:(?:[A-Za-z0-9_][A-Za-z0-9_.:-]{{0,349}}/)?{_NS}/)?{_PART}(?::{_PART})?"
                      r"(?:@sha256[:-][0-9a-fA-F]{64})?$")
DIGEST_PATTERN = r"^sha256[:-][0-9a-fA-F]{64}$"
_NAME = {"type": "string", "pattern": MODEL_NAME_PATTERN}
_BOOL = {"type": "boolean"}
# Integers are int64, as Go's; a whole float such as 6.0 is one too (JSON Schema 2020-12), and the server takes it.
_INT = {"type": "integer", "minimum": -(1 << 63), "maximum": (1 << 63) - 1}
_NUM = {"type": "number"}
_FLOAT32 = {"type": "number", "minimum": -3.4028234663852886e38, "maximum": 3.4028234663852886e38}
_STRS = {"type": "array", "items": _STR}
_STR_OR_STRS = {"oneOf": [_STR, _STRS]}
_ANTHROPIC_TOOLS = {"type": "array", "items": _obj(("name",), name=_STR, description=_STR,
                                                   input_schema={"type": "object"})}
_GO_DURATION = r"^[+-]?(?:0|(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+|[0-9]+)$"
_KEEP_ALIVE = {"oneOf": [_NUM, {**_STR, "pattern": _GO_DURATION, "maxLength": 16}],
               "description": 'seconds, or a Go duration such as "5m"; negative = forever'}
_FORMAT = {"oneOf": [{"const": "json"}, {"type": "object"}], "description": '"json" or a JSON schema'}
# create's file names: relative paths (Go's fs.ValidPath: no empty, "." or ".." part) without "\\" or ":".
_SEGMENT = r"(?:[^./\\:\x00][^/\\:\x00]*|\.[^./\\:\x00][^/\\:\x00]*|\.\.[^/\\:\x00]+)"
_FILES = {"type": "object", "propertyNames": {"pattern": rf"^(?:{_SEGMENT}/)*{_SEGMENT}$"},
          "additionalProperties": {**_STR, "pattern": DIGEST_PATTERN}}

_OPTIONS: dict[str, dict[str, Any]] = {
    "num_keep": _INT, "seed": _INT, "num_predict": _INT, "top_k": _INT, "top_p": _FLOAT32, "min_p": _FLOAT32,
    "typical_p": _FLOAT32, "repeat_last_n": _INT, "temperature": _FLOAT32, "repeat_penalty": _FLOAT32,
    "presence_penalty": _FLOAT32, "frequency_penalty": _FLOAT32, "stop": _STR_OR_STRS, "num_ctx": _INT,
    "num_batch": _INT, "num_gpu": _INT, "main_gpu": _INT, "use_mmap": _BOOL, "num_thread": _INT,
    "draft_num_predict": _INT, "draft_ngram": _BOOL, "reasoning_budget": _INT,
}


# Anthropic's extended thinking: {"type": "enabled", "budget_tokens": N} (the reasoning_budget option) or disabled
_THINKING = {"type": "object", "properties": {"type": {"enum": ["enabled", "disabled"]},
                                              "budget_tokens": {**_INT, "minimum": 0}}}


def _option(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """An option's schema with the range the server holds it to (api/options.py)."""
    low, high = option_range(name)
    return {**schema, **({} if low is None else {"minimum": low}), **({} if high is None else {"maximum": high})}


SCHEMAS: dict[str, dict[str, Any]] = {
    "Error": _obj(("error",), error=_STR),
    # A null option is skipped (as Ollama's Options.FromMap skips it), so every option may be null.
    "Options": {"type": "object", "properties": {name: {"oneOf": [_option(name, schema), {"type": "null"}]}
                                                 for name, schema in _OPTIONS.items()}},
    "ToolCall": _obj(("function",), id=_STR, function=_obj(("name",), index=_INT, name=_STR,
                                                               arguments={"type": "object"})),
    "Message": _obj(("role",), role={"enum": ["system", "user", "assistant", "tool"]}, content=_STR,
                    thinking=_STR, images=_STRS, tool_calls={"type": "array", "items": _ref("ToolCall")},
                    tool_name=_STR, tool_call_id=_STR),
    "Tool": _obj(("type", "function"), type={"const": "function"},
                 function=_obj(("name",), name=_STR, description=_STR, parameters={"type": "object"})),
    "GenerateRequest": _obj(
        ("model",), model=_NAME, prompt=_STR, suffix=_STR, system=_STR, template=_STR,
        context={"type": "array", "items": _INT}, stream=_BOOL, raw=_BOOL, format=_FORMAT, images=_STRS,
        keep_alive=_KEEP_ALIVE, options=_ref("Options"), think={"oneOf": [_BOOL, _STR]}, truncate=_BOOL,
        shift=_BOOL, logprobs=_BOOL, top_logprobs={**_INT, "minimum": 0, "maximum": 20}, prompt_progress=_BOOL,
        _debug_render_only=_BOOL,
    ),
    "ChatRequest": _obj(
        ("model",), model=_NAME, messages={"type": "array", "items": _ref("Message")},
        tools={"type": "array", "items": _ref("Tool")}, stream=_BOOL, format=_FORMAT, keep_alive=_KEEP_ALIVE,
        options=_ref("Options"), think={"oneOf": [_BOOL, _STR]}, truncate=_BOOL, shift=_BOOL, logprobs=_BOOL,
        top_logprobs={**_INT, "minimum": 0, "maximum": 20}, prompt_progress=_BOOL, _debug_render_only=_BOOL,
    ),
    "EmbedRequest": _obj(("model",), model=_NAME, input=_STR_OR_STRS, truncate=_BOOL,
                         dimensions={**_INT, "minimum": 1}, keep_alive=_KEEP_ALIVE, options=_ref("Options")),
    "EmbeddingsRequest": _obj(("model",), model=_NAME, prompt=_STR, keep_alive=_KEEP_ALIVE,
                              options=_ref("Options")),
    "ModelRequest": _obj(("model",), model=_NAME, name={**_NAME, "deprecated": True}),
    "LoadRequest": _obj(("model",), model=_NAME, keep_alive=_KEEP_ALIVE, options=_ref("Options"), stream=_BOOL),
    "UnloadRequest": _obj(("model",), model=_NAME),
    "ShowRequest": _obj(("model",), model=_NAME, verbose=_BOOL, system=_STR, template=_STR,
                        options=_ref("Options")),
    # Ollama's web tools (proxied to ollama.com there; cloud features are disabled here: a 403 that says so)
    "WebSearchRequest": _obj(("query",), query=_STR, max_results=_INT),
    "WebFetchRequest": _obj(("url",), url=_STR),
    "CopyRequest": _obj(("source", "destination"), source=_NAME, destination=_NAME),
    # Ollama's 400 "neither 'from' or 'files' was specified" unless one of them names something.
    "CreateRequest": {**_obj(
        ("model",), model=_NAME,
        **{"from": {**_NAME, "description": "a stored model (a local client may give an absolute path on the "
                                            "server instead)"}},
        files={**_FILES, "minProperties": 1}, adapters=_FILES,
        draft_files={"type": "object", "additionalProperties": {**_STR, "pattern": DIGEST_PATTERN},
                     "maxProperties": 1, "description": "the speculative-decoding draft model (Modelfile DRAFT)"},
        draft={**_STR, "description": "a stored model whose weights draft for this one"},
        template=_STR, system=_STR, license=_STR_OR_STRS, parameters={"type": "object"},
        messages={"type": "array", "items": _ref("Message")}, stream=_BOOL,
        quantize={"enum": [*SUPPORTED_TYPES, *(t.lower() for t in SUPPORTED_TYPES)], "description": "any case"},
        draft_quantize={**_STR, "description": "quantize the DRAFT model's weights to this, as quantize does FROM's"},
    ), "anyOf": [{"required": ["from"]}, {"required": ["files"]}]},
    "TransferRequest": _obj(("model",), model=_NAME, insecure=_BOOL, stream=_BOOL),
    "TokenizeRequest": _obj(("model",), model=_NAME, text=_STR, content={**_STR, "description": "alias of text"},
                            keep_alive=_KEEP_ALIVE, options=_ref("Options")),
    "DetokenizeRequest": _obj(("model", "tokens"), model=_NAME,
                              tokens={"type": "array", "items": {**_INT, "minimum": 0, "maximum": 2**31 - 1}},
                              keep_alive=_KEEP_ALIVE, options=_ref("Options")),
    "RerankRequest": _obj(
        ("model", "query", "documents"), model=_NAME, query=_STR,
        documents={"type": "array", "minItems": 1, "items": {"oneOf": [_STR, _obj(("text",), text=_STR)]}},
        top_n={**_INT, "minimum": 1}, return_documents={**_BOOL, "description": "default true"}, truncate=_BOOL,
        keep_alive=_KEEP_ALIVE, options=_ref("Options")),
    "OpenAIRerankRequest": _obj(
        ("model", "query", "documents"), model=_NAME, query=_STR,
        documents={"type": "array", "minItems": 1, "items": {"oneOf": [_STR, _obj(("text",), text=_STR)]}},
        top_n={**_INT, "minimum": 1}, return_documents={**_BOOL, "description": "default false"}, truncate=_BOOL),
    "OpenAIChatRequest": _obj(
        ("model", "messages"), model=_NAME,
        messages={"type": "array", "minItems": 1, "items": _obj(
            ("role",), role={"enum": ["system", "developer", "user", "assistant", "tool"]},
            content={"oneOf": [_STR, {"type": "array"}]}, name=_STR, tool_call_id=_STR)},
        stream=_BOOL, stream_options=_obj(include_usage=_BOOL), max_tokens=_INT, max_completion_tokens=_INT,
        temperature=_NUM, top_p=_NUM, seed=_INT, stop=_STR_OR_STRS, frequency_penalty=_NUM,
        presence_penalty=_NUM, response_format={"type": "object"},
        tools={"type": "array", "items": _obj(("type", "function"), type={"const": "function"}, function=_obj(
            ("name",), name=_STR, description=_STR, parameters={"type": "object"}))}, logprobs=_BOOL,
        top_logprobs={**_INT, "minimum": 0, "maximum": 20}, reasoning_effort=_STR,
    ),
    "OpenAICompletionRequest": _obj(
        ("model", "prompt"), model=_NAME, prompt=_STR, suffix=_STR, stream=_BOOL,
        stream_options=_obj(include_usage=_BOOL), max_tokens=_INT, temperature=_NUM, top_p=_NUM, seed=_INT,
        stop=_STR_OR_STRS, frequency_penalty=_NUM, presence_penalty=_NUM,
        logprobs={**_INT, "minimum": 0, "maximum": 20},
    ),
    "OpenAIEmbeddingRequest": _obj(("model", "input"), model=_NAME,
                                   input={"oneOf": [_STR, {**_STRS, "minItems": 1}]},  # []: 400 invalid input
                                   encoding_format={"enum": ["float", "base64"]},
                                   dimensions={**_INT, "minimum": 1}),
    "OpenAIResponsesRequest": _obj(
        ("model", "input"), model=_NAME,
        input={"oneOf": [{**_STR, "minLength": 1}, {"type": "array", "minItems": 1, "items": {"type": "object"}}]},
        instructions=_STR, stream=_BOOL, temperature=_NUM, top_p=_NUM, max_output_tokens=_INT,
        tools={"type": "array", "items": _obj(("type", "name"), type={"const": "function"}, name=_STR,
                                              description=_STR, parameters={"type": "object"})},
        reasoning={"type": "object"}, text={"type": "object"},
    ),
    "AnthropicMessagesRequest": _obj(
        ("model", "max_tokens", "messages"), model=_NAME, max_tokens={**_INT, "minimum": 1},
        messages={"type": "array", "minItems": 1, "items": _obj(("role", "content"),
                                                                role={"enum": ["user", "assistant"]},
                                                                content={"oneOf": [_STR, {"type": "array"}]})},
        system={"oneOf": [_STR, {"type": "array"}]}, stream=_BOOL, temperature=_NUM, top_p=_NUM, top_k=_INT,
        stop_sequences=_STRS, tools=_ANTHROPIC_TOOLS, thinking=_THINKING,
    ),
    "AnthropicCountTokensRequest": _obj(
        ("model", "messages"), model=_NAME,
        messages={"type": "array", "minItems": 1, "items": _obj(("role", "content"),
                                                                role={"enum": ["user", "assistant"]},
                                                                content={"oneOf": [_STR, {"type": "array"}]})},
        system={"oneOf": [_STR, {"type": "array"}]}, tools=_ANTHROPIC_TOOLS, thinking=_THINKING,
    ),
}


@dataclass(frozen=True, slots=True)
class Operation:
    method: str  # lower case, as OpenAPI spells it
    path: str  # OpenAPI template: {digest}, {model}
    summary: str
    request: str | None = None  # a schema name in SCHEMAS (application/json body)
    streams: str | None = None  # "ndjson" | "sse": the response may be a stream
    text: str | None = None  # the 200 is this text/* media type rather than JSON
    raw_body: bool = False  # application/octet-stream body (blob upload)
    form: dict[str, Any] | None = None  # a multipart/form-data body: this schema (audio transcription)


OPERATIONS: tuple[Operation, ...] = (
    Operation("get", "/", "Health check: `Ollama is running`", text="text/plain"),
    Operation("get", "/api/version", "Server version"),
    Operation("get", "/api/status", "Cloud status: always disabled here (no ollama.com features)"),
    Operation("get", "/api/experimental/model-recommendations",
              "Ollama's built-in model recommendations (its `launch` and app list them)"),
    Operation("post", "/api/experimental/web_search", "Web search (Ollama's, via ollama.com): 403, cloud disabled",
              "WebSearchRequest"),
    Operation("post", "/api/experimental/web_fetch", "Web fetch (Ollama's, via ollama.com): 403, cloud disabled",
              "WebFetchRequest"),
    Operation("post", "/api/generate", "Generate a completion", "GenerateRequest", "ndjson"),
    Operation("post", "/api/chat", "Chat", "ChatRequest", "ndjson"),
    Operation("post", "/api/embed", "Embeddings (batch, normalized)", "EmbedRequest"),
    Operation("post", "/api/embeddings", "Embedding of one prompt (legacy)", "EmbeddingsRequest"),
    Operation("get", "/api/ps", "Loaded models"),
    Operation("post", "/api/load", "Load a model (ours): NDJSON progress {status, completed, total} by bytes of "
              "weights read, then the /api/ps entry", "LoadRequest", "ndjson"),
    Operation("post", "/api/unload", "Unload a model (ours): answers once its runner has stopped",
              "UnloadRequest"),
    Operation("get", "/api/tags", "Local models"),
    Operation("post", "/api/show", "Model details", "ShowRequest"),
    Operation("post", "/api/copy", "Copy a model", "CopyRequest"),
    Operation("delete", "/api/delete", "Delete a model", "ModelRequest"),
    Operation("head", "/api/blobs/{digest}", "Does the blob exist"),
    Operation("post", "/api/blobs/{digest}", "Upload a blob (raw body, streamed; no size limit)", raw_body=True),
    Operation("post", "/api/create", "Create a model", "CreateRequest", "ndjson"),
    Operation("post", "/api/pull", "Pull a model from a registry", "TransferRequest", "ndjson"),
    Operation("post", "/api/push", "Push a model to a registry", "TransferRequest", "ndjson"),
    Operation("post", "/v1/chat/completions", "OpenAI chat completions", "OpenAIChatRequest", "sse"),
    Operation("post", "/v1/completions", "OpenAI completions", "OpenAICompletionRequest", "sse"),
    Operation("post", "/v1/embeddings", "OpenAI embeddings", "OpenAIEmbeddingRequest"),
    Operation("get", "/v1/models", "OpenAI model list"),
    Operation("get", "/v1/models/{model}", "OpenAI model"),
    Operation("post", "/v1/audio/transcriptions", "OpenAI audio transcription (a model with the audio capability)",
              form=_obj(("model", "file"), model=_NAME, file={"type": "string", "contentMediaType":
                        "application/octet-stream"}, response_format=_STR, language=_STR, prompt=_STR)),
    Operation("post", "/v1/responses", "OpenAI responses (stateless)", "OpenAIResponsesRequest", "sse"),
    Operation("post", "/v1/messages", "Anthropic messages", "AnthropicMessagesRequest", "sse"),
    Operation("post", "/v1/messages/count_tokens", "Anthropic: tokens in a messages request's prompt",
              "AnthropicCountTokensRequest"),
    Operation("post", "/api/tokenize", "Text to the model's token ids", "TokenizeRequest"),
    Operation("post", "/api/detokenize", "The model's token ids to text", "DetokenizeRequest"),
    Operation("post", "/api/rerank", "Rerank documents by relevance to a query (reranker models)", "RerankRequest"),
    Operation("post", "/v1/rerank", "Rerank, Cohere/Jina shape (reranker models)", "OpenAIRerankRequest"),
    Operation("get", "/metrics", "Prometheus metrics", text="text/plain"),
    Operation("get", "/openapi.json", "This document"),
)


_PATH_PARAMS = {"digest": {**_STR, "pattern": DIGEST_PATTERN}, "model": _NAME}


def _parameters(path: str) -> list[dict[str, Any]]:
    names = [part[1:-1] for part in path.split("/") if part.startswith("{") and part.endswith("}")]
    return [{"name": n, "in": "path", "required": True, "schema": _PATH_PARAMS.get(n, _STR)} for n in names]


def _error_responses(path: str) -> dict[str, Any]:
    error = {"description": "error", "content": {"application/json": {"schema": _ref("Error")}}}
    if path.startswith("/v1/"):  # OpenAI's / Anthropic's envelopes
        error = {"description": "error", "content": {"application/json": {"schema": {"type": "object"}}}}
    return {"4XX": error, "5XX": error}


def _operation(op: Operation) -> dict[str, Any]:
    ok: dict[str, Any] = {"description": "success"}
    if op.text is not None:
        ok["content"] = {op.text: {"schema": {"type": "string"}}}
    elif op.method != "head":
        content: dict[str, Any] = {"application/json": {"schema": {}}}
        if op.streams == "ndjson":
            content["application/x-ndjson"] = {"schema": {"type": "string"}}
        elif op.streams == "sse":
            content["text/event-stream"] = {"schema": {"type": "string"}}
        ok["content"] = content
    out: dict[str, Any] = {
        "operationId": op.method + op.path.replace("/", "_").replace("{", "").replace("}", "").replace(".", "_"),
        "summary": op.summary,
        "responses": {"200": ok, **_error_responses(op.path)},
    }
    if params := _parameters(op.path):
        out["parameters"] = params
    if op.request is not None:
        out["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(op.request)}}}
    elif op.form is not None:
        out["requestBody"] = {"required": True, "content": {"multipart/form-data": {"schema": op.form}}}
    elif op.raw_body:
        out["requestBody"] = {"required": True, "content": {"application/octet-stream": {
            "schema": {"type": "string", "contentMediaType": "application/octet-stream"}}}}
        out["responses"]["201"] = {"description": "created"}
    return out


def openapi_document() -> dict[str, Any]:
    """The whole document. Every GET also answers HEAD (aiohttp adds it), and says so here."""
    paths: dict[str, dict[str, Any]] = {}
    for op in OPERATIONS:
        item = paths.setdefault(op.path, {})
        item[op.method] = _operation(op)
        if op.method == "get":
            head = _operation(Operation("head", op.path, op.summary))
            head["operationId"] = "head" + item["get"]["operationId"][3:]
            item["head"] = head
    return {
        "openapi": "3.1.0",
        "info": {"title": "ollama-py", "version": __version__,
                 "description": "Ollama's REST API (plus OpenAI- and Anthropic-compatible routes), served by "
                                "ollama-py. Durations in responses are nanoseconds."},
        "servers": [{"url": "http://127.0.0.1:11434"}],
        "paths": paths,
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "only when the server sets OLLAMA_API_KEYS"}},
        },
    }


@routes.get("/openapi.json")
async def openapi_json(request: web.Request) -> web.Response:
    return web.json_response(openapi_document())
