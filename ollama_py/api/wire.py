"""Ollama's native wire shapes, as the server reads and writes them: TypedDicts named after Ollama's Go types
(api/types.go), with the fields this implementation really sends or reads.

    Message                 a chat message: /api/chat's messages and response `message`, a model's MESSAGE layer,
                            what the OpenAI / Anthropic / Responses translators make of theirs
      ToolCall              message.tool_calls[i]: {"id"?, "function": ToolCallFunction}
    Tool                    a request's tools[i]: {"type": "function", "function": ToolFunction}
    Metrics                 the counts and timings on a final chunk (absent from the others)
    GenerateResponse        one /api/generate chunk (or the whole answer with stream: false)
    ChatResponse            one /api/chat chunk
    EmbedResponse           /api/embed
    ModelDetails            `details` of a model, in /api/tags, /api/ps and /api/show
    ListModelResponse       one /api/tags entry
    ProcessModelResponse    one /api/ps entry (and /api/load's last line)
    ShowResponse            /api/show

Optional keys are `NotRequired` where Go's `omitempty` leaves them out. A client's message is checked for its
role, content, images and tool calls (server/routes_native.py, the translators) and otherwise passed on as sent:
a field may be missing there, or null (Ollama's Go decoding reads both as empty), so read the optional ones as
`m.get(key) or <empty>`. Raw request bodies stay `dict[str, Any]` until a route has checked them.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

from ollama_py.api.logprobs import Logprob


# -- messages and tools ---------------------------------------------------------------------------------------------
class ToolCallFunction(TypedDict):
    name: str
    arguments: dict[str, Any]  # an object on the native API (OpenAI's wire carries it as a JSON string)
    index: NotRequired[int]  # the call's place in the answer; set on the calls a model makes


class ToolCall(TypedDict):
    function: ToolCallFunction
    id: NotRequired[str]  # ours "call_<8 hex>"; a client's (OpenAI tool_call_id, Anthropic tool_use id) kept


class Message(TypedDict):
    role: str  # "system" | "user" | "assistant" | "tool" (lower-cased on the way in)
    content: NotRequired[str]  # always sent by us; a client's may leave it out or send null
    thinking: NotRequired[str]
    images: NotRequired[list[str]]  # base64
    tool_calls: NotRequired[list[ToolCall]]
    tool_name: NotRequired[str]  # a tool message: the tool that answered
    tool_call_id: NotRequired[str]  # a tool message: the call it answers


class ToolFunction(TypedDict):
    name: str
    description: NotRequired[str]
    parameters: NotRequired[dict[str, Any]]  # a JSON schema


class Tool(TypedDict):
    function: ToolFunction
    type: NotRequired[str]  # "function"


# -- inference responses --------------------------------------------------------------------------------------------
class Metrics(TypedDict, total=False):
    """On the final chunk only (durations in nanoseconds)."""

    total_duration: int
    load_duration: int
    prompt_eval_count: int
    prompt_eval_duration: int
    eval_count: int
    eval_duration: int
    prompt_truncated: bool  # ours: the prompt was cut to fit num_ctx (server/truncation.py); absent when not
    context_shifted: bool  # ours: the answer reached the end of num_ctx, shifted past it (shift); absent when not


class PromptProgress(TypedDict):
    """Ours (a request's `"prompt_progress": true`): llama-server's progress through a long prompt, in tokens."""

    total: int  # the prompt's tokens
    cache: int  # of them, reused from the slot's cache
    processed: int  # evaluated so far (cache included)
    time_ms: float


class GenerateResponse(Metrics):
    model: str  # the name as the request wrote it
    created_at: str  # RFC 3339, UTC
    response: str
    done: bool
    thinking: NotRequired[str]
    done_reason: NotRequired[str]  # "stop" | "length" | "load" | "unload" (final chunk)
    context: NotRequired[list[int]]  # the deprecated context, unless raw (final chunk)
    logprobs: NotRequired[list[Logprob]]
    prompt_progress: NotRequired[PromptProgress]  # ours, asked for: chunks before the first token


class ChatResponse(Metrics):
    model: str
    created_at: str
    message: Message  # role "assistant"
    done: bool
    done_reason: NotRequired[str]
    logprobs: NotRequired[list[Logprob]]
    prompt_progress: NotRequired[PromptProgress]  # ours, asked for: chunks before the first token


class EmbedResponse(TypedDict):
    model: str
    embeddings: list[list[float]]
    total_duration: int
    load_duration: int
    prompt_eval_count: int


# -- models ------------------------------------------------------------------------------------------------------------
class ModelDetails(TypedDict):
    parent_model: str
    format: str  # "gguf"
    family: str
    families: list[str] | None  # null, as Go writes a nil slice
    parameter_size: str
    quantization_level: str


class ListModelResponse(TypedDict):
    name: str
    model: str
    remote_model: NotRequired[str]  # a stub of a remote model (Ollama's cloud models): its name there
    remote_host: NotRequired[str]
    modified_at: str  # RFC 3339, local time with its offset
    size: int
    digest: str  # hex, without "sha256:"
    details: ModelDetails


class ProcessModelResponse(TypedDict):
    name: str
    model: str
    size: int  # bytes it takes (what llama-server reported once loaded, else our estimate)
    digest: str
    details: ModelDetails
    expires_at: str
    size_vram: int
    context_length: int
    state: str  # ours: "loading" | "ready" | "stopping"
    queued: int  # ours: requests waiting for a slot
    active: int  # ours: requests holding one
    cache_ram: NotRequired[int]  # ours: bytes the runner's host prompt cache may hold (--cache-ram), part of size
    devices: NotRequired[dict[str, int]]  # ours: bytes llama-server put on each device (CPU, CUDA0, RPC0[host:port])
    embedding: NotRequired[bool]  # ours, when true: the model's embeddings runner (llama-server --embeddings serves
    # nothing else), beside its runner for generation when both were asked for


class Tensor(TypedDict):
    name: str
    type: str
    shape: list[int]


class ShowResponse(TypedDict):
    license: str
    modelfile: str
    parameters: str
    template: str
    system: str
    details: ModelDetails
    model_info: dict[str, Any]  # GGUF metadata keys -> values
    capabilities: list[str]
    modified_at: str
    messages: NotRequired[list[Message]]  # the model's MESSAGE layer
    tensors: NotRequired[list[Tensor]]  # verbose only
    projector_info: NotRequired[dict[str, Any]]  # a multimodal model's projector's metadata, as model_info
    requires: NotRequired[str]  # the Ollama version the model needs (REQUIRES)
