"""OpenAI's Responses API (POST /v1/responses) <-> the native chat path, as Ollama does it: stateless only.

A request becomes native chat messages, options, tools, format and think. Tools as Ollama takes them: a
`namespace` declaration expands to its member functions named `<namespace>.<member>` (and a call of one goes back
to the client as a function_call with that `namespace` and the member's `name`, the form Codex looks tools up
by); a `custom` (freeform) tool becomes a function of one string, `input`, whose description carries the tool's
grammar, and a call of it goes back as a custom_tool_call with that text as its `input` (Codex's apply_patch is
one); a client-run `tool_search` becomes a function whose call goes back as a tool_search_call, and the tools a
`tool_search_output` loaded are offered from then on; other named tools become functions. Tools an
`additional_tools` input item declares are offered with the request's own. The built-in `web_search` is run by
Ollama on ollama.com: ollama-py makes no connection its operator did not choose, so it is accepted, echoed, and
not offered to the model. Fields that change nothing here are accepted and ignored (store, include,
prompt_cache_key, client_metadata, parallel_tool_calls, service_tier, ...). The answer (a Final, or Deltas then a
Final) becomes a `response` object, or the stream of named events the `openai` client's `responses.stream()`
reads: response.created, response.in_progress, output items (reasoning, message, function_call,
custom_tool_call, tool_search_call) with their deltas and `done` events, and response.completed carrying the
whole response.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field as field_
from typing import Any

from ollama_py.api.wire import Message, Tool, ToolCall, ToolFunction
from ollama_py.errors import BadRequest
from ollama_py.server import openai_translate as oai
from ollama_py.server.bodies import field
from ollama_py.server.completion import Final
from ollama_py.template.forced_calls import ForcedCall

_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}

Event = tuple[str, dict[str, Any]]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Offered:
    """How the functions offered to the model map back to the client's tools: namespace members by their
    qualified name ("ns.member" -> (ns, member)), and the custom tools' names (as offered: qualified in a namespace).
    """

    namespaces: dict[str, tuple[str, str]] = field_(default_factory=dict)
    custom: frozenset[str] = frozenset()
    search: str = ""  # the name a client-executed tool_search is offered under ("" when it is not)

    def item(self, item_id: str, call: dict[str, Any]) -> dict[str, Any]:
        """The output item for one call (OpenAI's form, arguments a JSON string): a function_call, or a
        custom_tool_call carrying the text the model wrote."""
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        if name == self.search:  # the client runs the search and sends back the tools it found
            return {"id": item_id.replace("fc_", "ts_", 1), "type": "tool_search_call", "execution": "client",
                    "status": "completed", "call_id": call["id"], "arguments": _object(arguments)}
        if name in self.custom:
            item: dict[str, Any] = {"id": item_id.replace("fc_", "ctc_", 1), "type": "custom_tool_call",
                                    "status": "completed", "call_id": call["id"], "name": name,
                                    "input": _custom_input(arguments)}
        else:
            item = {"id": item_id, "type": "function_call", "status": "completed", "call_id": call["id"],
                    "name": name, "arguments": arguments}
        if name in self.namespaces:  # a namespace member: the client looks it up by (namespace, name)
            item["namespace"], item["name"] = self.namespaces[name]
        return item


def _object(arguments: str) -> dict[str, Any]:
    try:
        args = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return {}
    return args if isinstance(args, dict) else {}


def _custom_input(arguments: str) -> str:
    """A custom tool's text from the function call the model made: its `input`; a model that named the one
    string otherwise still means it; anything else goes as the JSON it wrote."""
    try:
        args = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return arguments
    if isinstance(args, dict):
        if isinstance(args.get("input"), str):
            return args["input"]
        if not args:
            return ""
        if len(args) == 1 and isinstance(next(iter(args.values())), str):
            return next(iter(args.values()))
    return arguments


@dataclass(frozen=True, slots=True)
class ResponsesParams:
    messages: list[Message]
    options: dict[str, Any]
    format: Any
    tools: list[Tool] | None  # in the chat form {"type": "function", "function": {...}}
    think: bool | str | None
    stream: bool
    echo: dict[str, Any]  # the request's settings, repeated in every response object
    offered: Offered = field_(default_factory=Offered)
    forced: ForcedCall | None = None  # tool_choice "required" or a named tool: the answer is a call
    single_call: bool = False  # parallel_tool_calls: false


# -- requests -----------------------------------------------------------------------------------------------
def parse_responses(body: dict[str, Any]) -> ResponsesParams:
    for key in ("previous_response_id", "conversation"):
        if body.get(key) not in (None, ""):
            raise BadRequest(f"{key} is not supported: responses are not stored; send the whole conversation "
                             "as input")
    instructions = field(body, "instructions", str, "") or ""
    messages: list[Message] = [{"role": "system", "content": instructions}] if instructions else []
    messages += _input_messages(body.get("input"))
    if not messages:
        raise BadRequest("input is required")

    options: dict[str, Any] = {"temperature": field(body, "temperature", float, 1.0)}
    if (top_p := field(body, "top_p", float)) is not None:
        options["top_p"] = top_p
    if (max_tokens := field(body, "max_output_tokens", int)) is not None:
        options["num_predict"] = max_tokens

    reasoning = field(body, "reasoning", dict) or {}
    think = oai.think_from_effort(reasoning.get("effort"))

    text = field(body, "text", dict) or {}
    text_format = text.get("format") if isinstance(text.get("format"), dict) else None
    fmt = None
    if text_format and text_format.get("type") == "json_schema" and text_format.get("schema") is not None:
        if not isinstance(text_format["schema"], dict):
            raise BadRequest("text.format.schema must be a JSON schema object")
        fmt = text_format["schema"]

    raw_tools = body.get("tools") or []
    declared, offered = _tools(_declared(raw_tools, body.get("input")))
    tools, forced_call = oai.tool_choice(body.get("tool_choice"), declared)
    echo = {
        "instructions": instructions or None,
        "tools": raw_tools,
        "text": {"format": text_format or {"type": "text"}},
        "reasoning": ({"effort": reasoning.get("effort") or None, "summary": reasoning.get("summary") or None}
                      if reasoning.get("effort") or reasoning.get("summary") else None),
        "temperature": options["temperature"],
        "top_p": options.get("top_p", 1.0),
        "max_output_tokens": options.get("num_predict"),
        "truncation": field(body, "truncation", str) or "disabled",
        "background": field(body, "background", bool, False),
        "prompt_cache_key": field(body, "prompt_cache_key", str),
        "tool_choice": body.get("tool_choice") or "auto",
        "parallel_tool_calls": field(body, "parallel_tool_calls", bool, True),
    }
    return ResponsesParams(messages=messages, options=options, format=fmt, tools=tools, think=think,
                           stream=field(body, "stream", bool, False), echo=echo, offered=offered,
                           forced=forced_call, single_call=not echo["parallel_tool_calls"])


def _input_messages(raw: Any) -> list[Message]:
    """`input`: a string (one user message) or a list of items (messages, function calls and their outputs,
    reasoning) -> native chat messages."""
    if raw is None or raw == "":
        return []
    if isinstance(raw, str):
        return [{"role": "user", "content": raw}]
    if not isinstance(raw, list):
        raise BadRequest("input must be a string or array")
    out: list[Message] = []
    pending_thinking = ""  # a reasoning item belongs to the assistant message after it
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise BadRequest(f"input[{i}] must be an object")
        kind = item.get("type") or ("message" if item.get("role") else "")
        if kind == "message":
            role = _ROLES.get(str(item.get("role", "")).lower())
            if role is None:
                raise BadRequest(f"input[{i}]: invalid role {item.get('role')!r}: "
                                 "must be one of user, system, developer, assistant")
            text, images = _content(item.get("content"), f"input[{i}]")
            msg: Message = {"role": role, "content": text}
            if images:
                msg["images"] = images
            if role == "assistant" and pending_thinking:
                msg["thinking"], pending_thinking = pending_thinking, ""
            out.append(msg)
        elif kind in _CALLS:  # a function's, a custom tool's or a tool search's call: the assistant's tool call
            call = _CALLS[kind](item, i)
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
            if pending_thinking:
                out[-1]["thinking"], pending_thinking = pending_thinking, ""
        elif kind == "tool_search_output":  # its tools are offered from now on (_declared); the model is told which
            msg = {"role": "tool", "content": _found(item.get("tools"))}
            if isinstance(item.get("call_id"), str) and item["call_id"]:
                msg["tool_call_id"], msg["tool_name"] = item["call_id"], TOOL_SEARCH
            out.append(msg)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            output = item.get("output", "")
            text, images = (output, []) if isinstance(output, str) else _content(output, f"input[{i}].output")
            msg = {"role": "tool", "content": text}
            if images:
                msg["images"] = images
            if isinstance(call_id, str) and call_id:
                msg["tool_call_id"] = call_id
                if name := _tool_name(out, call_id):
                    msg["tool_name"] = name
            out.append(msg)
        elif kind == "reasoning":
            content = item.get("encrypted_content")
            pending_thinking = content if isinstance(content, str) else ""
        elif kind == "web_search_call":
            pass  # history of a built-in search: the assistant message after it carries what the model saw
        elif kind == "additional_tools":
            pass  # tools declared in the input: offered with the request's own (_declared)
        elif not kind:
            raise BadRequest(f"input[{i}]: input item missing required 'type' field")
        else:
            raise BadRequest(f"input[{i}]: unknown input item type: {json.dumps(kind)}")
    if pending_thinking:
        out.append({"role": "assistant", "content": "", "thinking": pending_thinking})
    return out


def _content(raw: Any, where: str) -> tuple[str, list[str]]:
    """A message's content (a string, or parts) -> its text and base64 images."""
    if raw is None or isinstance(raw, str):
        return raw or "", []
    if not isinstance(raw, list):
        raise BadRequest(f"{where}: content must be a string or array")
    text, images = "", []
    for j, part in enumerate(raw):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "output_text") and isinstance(part.get("text"), str):
            text += part["text"]
        elif kind == "input_image":
            if part.get("image_url"):  # file_id images are not supported: skipped, as Ollama does
                images.append(oai.image_data(part["image_url"]))
        elif kind == "input_file":
            raise BadRequest("file inputs are not currently supported")
        else:
            raise BadRequest(f"{where}: content[{j}]: unknown content type: {json.dumps(kind)}")
    return text, images


def _function_call(item: dict[str, Any], i: int) -> ToolCall:
    name, args = item.get("name"), item.get("arguments") or ""
    if not isinstance(name, str) or not isinstance(args, str):
        raise BadRequest(f"input[{i}]: a function_call needs a name and arguments (a JSON string)")
    try:
        parsed = json.loads(args) if args.strip() else {}
    except ValueError:
        raise BadRequest(f"input[{i}]: failed to parse function call arguments") from None
    if not isinstance(parsed, dict):
        raise BadRequest(f"input[{i}]: function call arguments must be a JSON object")
    return _call(item, name, parsed)


def _call(item: dict[str, Any], name: str, arguments: dict[str, Any]) -> ToolCall:
    """A history item's call as the assistant's tool call: named as the model was offered it (a namespace
    member's qualified name), with the item's call_id."""
    namespace = item.get("namespace")
    if isinstance(namespace, str) and namespace and not name.startswith(namespace + "."):
        name = f"{namespace}.{name}"
    call: ToolCall = {"function": {"name": name, "arguments": arguments}}
    if isinstance(item.get("call_id"), str):
        call["id"] = item["call_id"]
    return call


TOOL_SEARCH = "tool_search"


def _search_call(item: dict[str, Any], i: int) -> ToolCall:
    """A client-executed tool search in the history: the call of the function it was offered as."""
    args = item.get("arguments")
    if isinstance(args, str):
        args = _object(args)
    if not isinstance(args, dict):
        raise BadRequest(f"input[{i}]: a tool_search_call needs its arguments (an object)")
    return _call({"call_id": item.get("call_id")}, TOOL_SEARCH, args)


def _found(tools: Any) -> str:
    """What a tool search found, as the model reads it: the tools' names (their declarations are offered)."""
    names = []
    for t in tools if isinstance(tools, list) else []:
        if not isinstance(t, dict):
            continue
        if t.get("type") == "namespace" and isinstance(t.get("tools"), list):
            names += [f"{t.get('name')}.{m.get('name')}" for m in t["tools"] if isinstance(m, dict)]
        elif t.get("name"):
            names.append(str(t["name"]))
    return "Tools loaded: " + ", ".join(names) if names else "No tools found."


def _custom_call(item: dict[str, Any], i: int) -> ToolCall:
    """A custom tool's call in the history: the function call of one string the model was offered for it."""
    name, text = item.get("name"), item.get("input", "")
    if not isinstance(name, str) or not name or not isinstance(text, str):
        raise BadRequest(f"input[{i}]: a custom_tool_call needs a name and its input (a string)")
    return _call(item, name, {"input": text})


_CALLS = {"function_call": _function_call, "custom_tool_call": _custom_call, "tool_search_call": _search_call}


def _tool_name(messages: list[Message], call_id: str) -> str:
    for m in reversed(messages):
        for call in m.get("tool_calls") or []:
            if call.get("id") == call_id:
                return call["function"]["name"]
    return ""


def _declared(raw: Any, items: Any) -> Any:
    """The request's tools, and those an `additional_tools` input item declares (Codex sends its tools so, as a
    developer item, for its newest models) or a client's tool search loaded (`tool_search_output`)."""
    extra: list[Any] = []
    for i, item in enumerate(items if isinstance(items, list) else []):
        if isinstance(item, dict) and item.get("type") in ("additional_tools", "tool_search_output"):
            if not isinstance(item.get("tools"), list):
                raise BadRequest(f"input[{i}]: {item['type']} needs its tools (an array)")
            extra += item["tools"]
    if not extra:
        return raw
    if raw and not isinstance(raw, list):
        raise BadRequest("tools must be an array")
    return [*(raw or []), *extra]


def _tools(raw: Any) -> tuple[list[Tool] | None, Offered]:
    """Responses tools ({"type", "name", "parameters"}) -> chat tools ({"type", "function": {...}}), and what
    maps their calls back (namespaced and custom names)."""
    if not raw:
        return None, Offered()
    if not isinstance(raw, list):
        raise BadRequest("tools must be an array")
    tools: list[Tool] = []
    namespaces: dict[str, tuple[str, str]] = {}
    custom: set[str] = set()
    search = ""
    seen: set[str] = set()
    searching = any(isinstance(t, dict) and t.get("type") == "web_search" for t in raw)
    for i, t in enumerate(raw):
        if not isinstance(t, dict):
            raise BadRequest(f"tools[{i}] must be an object")
        if t.get("type") == "web_search":
            log.debug("responses: built-in web_search not offered to the model: web search is not available")
            continue
        if t.get("type") == "tool_search":
            if t.get("execution") == "client" and TOOL_SEARCH not in seen:
                # the client runs it: a function, whose calls go back as tool_search_call items
                params: dict[str, Any] = t["parameters"] if isinstance(t.get("parameters"), dict) else {
                    "type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
                tools.append({"type": "function", "function": {
                    "name": TOOL_SEARCH, "description": t.get("description") or "Searches for more tools.",
                    "parameters": params}})
                search = TOOL_SEARCH
                seen.add(TOOL_SEARCH)
            else:  # run by OpenAI over the deferred tools: here those are offered as they are
                log.debug("responses: a server-side tool_search not offered: deferred tools are offered directly")
            continue
        ns = t.get("name") if t.get("type") == "namespace" else None
        for tool, freeform in _expand(t, f"tools[{i}]"):
            name = tool["function"]["name"]
            if searching and name == "web_search":
                continue  # the built-in owns the name (Ollama drops the user's function of that name)
            if name in seen:
                continue  # declared again (a tool search loads a tool the request offers): offered once
            seen.add(name)
            tools.append(tool)
            if ns:
                namespaces[name] = (ns, name[len(ns) + 1:])
            if freeform:
                custom.add(name)
    return tools or None, Offered(namespaces, frozenset(custom), search)


def _expand(t: dict[str, Any], where: str) -> list[tuple[Tool, bool]]:
    """One declaration -> the functions it declares, each with whether it stands for a custom tool: a
    namespace's members (namespaces nest) named `<namespace>.<member>`, unless a member's name says so already,
    as Ollama names them."""
    if t.get("type") == "namespace":
        ns, members = t.get("name"), t.get("tools")
        if not isinstance(ns, str) or not isinstance(members, list):
            raise BadRequest(f'{where}: a namespace needs a name and its "tools"')
        out = []
        for j, member in enumerate(members):
            if not isinstance(member, dict):
                raise BadRequest(f"{where}.tools[{j}] must be an object")
            for tool, freeform in _expand(member, f"{where}.tools[{j}]"):
                if ns and not tool["function"]["name"].startswith(ns + "."):
                    tool["function"]["name"] = f"{ns}.{tool['function']['name']}"
                out.append((tool, freeform))
        return out
    name = t.get("name")
    if not isinstance(name, str) or not name:
        log.debug("responses: tool of type %r without a name not offered to the model", t.get("type"))
        return []
    fn: ToolFunction = {"name": name, "description": t.get("description") or ""}
    if t.get("type") == "custom":
        return [({"type": "function", "function": _freeform(fn, t.get("format"), where)}, True)]
    if isinstance(t.get("parameters"), dict):
        fn["parameters"] = t["parameters"]
    elif t.get("parameters") is not None:
        raise BadRequest(f"{where}.parameters must be a JSON schema object")
    return [({"type": "function", "function": fn}, False)]


def _freeform(fn: ToolFunction, fmt: Any, where: str) -> ToolFunction:
    """A custom tool as a function of one string, `input` (the shape Codex gives apply_patch when it offers it
    as a function); a grammar the input must follow is told to the model in the description, since nothing
    here constrains sampling to it."""
    if fmt is not None and not isinstance(fmt, dict):
        raise BadRequest(f"{where}.format must be an object")
    about = "The tool's whole input, as text."
    if fmt and fmt.get("type") == "grammar":
        syntax, definition = fmt.get("syntax"), fmt.get("definition")
        if not isinstance(definition, str) or not isinstance(syntax, str):
            raise BadRequest(f"{where}.format: a grammar needs its syntax and definition")
        about += f" It must match this {syntax} grammar:\n{definition}"
    elif fmt and fmt.get("type") not in (None, "text"):
        raise BadRequest(f"{where}.format.type must be text or grammar")
    fn["parameters"] = {"type": "object", "properties": {"input": {"type": "string", "description": about}},
                        "required": ["input"]}
    return fn


# -- responses ----------------------------------------------------------------------------------------------
def new_ids() -> tuple[str, str]:
    """A response id and its message item's id."""
    return f"resp_{uuid.uuid4().hex[:24]}", f"msg_{uuid.uuid4().hex[:24]}"


def response_object(response_id: str, model: str, echo: dict[str, Any], status: str, output: list[dict[str, Any]],
                    final: Final | None) -> dict[str, Any]:
    """The `response` object: the output items and, once done, the usage."""
    usage = None
    if final is not None:
        usage = {"input_tokens": final.prompt_tokens, "output_tokens": final.eval_count,
                 "total_tokens": final.prompt_tokens + final.eval_count,
                 "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
    return {
        "id": response_id, "object": "response", "created_at": int(time.time()),
        "completed_at": int(time.time()) if status == "completed" else None, "status": status,
        "incomplete_details": None, "model": model, "previous_response_id": None,
        "instructions": echo["instructions"], "output": output, "error": None, "tools": echo["tools"],
        "tool_choice": echo.get("tool_choice") or "auto", "truncation": echo["truncation"],
        "parallel_tool_calls": echo.get("parallel_tool_calls", True), "text": echo["text"],
        "top_p": echo["top_p"], "presence_penalty": 0, "frequency_penalty": 0, "top_logprobs": 0,
        "temperature": echo["temperature"], "reasoning": echo["reasoning"], "usage": usage,
        "max_output_tokens": echo["max_output_tokens"], "max_tool_calls": None, "store": False,
        "background": echo["background"], "service_tier": "default", "metadata": {}, "safety_identifier": None,
        "prompt_cache_key": echo.get("prompt_cache_key"),
    }


def _text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _message_item(item_id: str, text: str, status: str = "completed") -> dict[str, Any]:
    return {"id": item_id, "type": "message", "status": status, "role": "assistant",
            "content": [_text_part(text)] if status == "completed" else []}


def _reasoning_item(item_id: str, thinking: str) -> dict[str, Any]:
    return {"id": item_id, "type": "reasoning", "summary": [{"type": "summary_text", "text": thinking}],
            "encrypted_content": thinking}


def _call_items(response_id: str, final: Final, offered: Offered) -> list[dict[str, Any]]:
    return [offered.item(f"fc_{response_id}_{i}", call)
            for i, call in enumerate(oai.tool_calls(final.tool_calls or []))]


def response(response_id: str, item_id: str, model: str, echo: dict[str, Any], final: Final,
             offered: Offered | None = None) -> dict[str, Any]:
    """stream: false -> the whole response."""
    output = [_reasoning_item(f"rs_{response_id}", final.thinking)] if final.thinking else []
    if final.text or not final.tool_calls:  # the text before the calls is a message item ahead of them
        output.append(_message_item(item_id, final.text))
    output += _call_items(response_id, final, offered or Offered())
    return response_object(response_id, model, echo, "completed", output, final)


def is_last(event: tuple[str, dict[str, Any]]) -> bool:
    """A response stream's last event (it leaves with the end of the body)."""
    return event[0] == "response.completed"


# a call item's field that streams, and its events' prefix
_STREAMED = {"function_call": ("arguments", "response.function_call_arguments"),
             "custom_tool_call": ("input", "response.custom_tool_call_input")}


class ResponseStream:
    """The named events of one streamed response, in order, each with its sequence_number."""

    def __init__(self, response_id: str, item_id: str, model: str, echo: dict[str, Any],
                 offered: Offered | None = None) -> None:
        self.response_id, self.item_id, self.model, self.echo = response_id, item_id, model, echo
        self.offered = offered or Offered()
        self._seq = 0
        self._index = 0  # output_index of the item being written
        # the reasoning's and the message's text so far, in pieces (joined at their ends: a string grown by `+=` on
        # an attribute is copied whole each time, quadratic over a long answer); None until the item is open
        self._thinking: list[str] | None = None
        self._thinking_done = False
        self._text: list[str] | None = None
        self._done_items: list[dict[str, Any]] = []

    def _event(self, kind: str, data: dict[str, Any]) -> Event:
        data = {"type": kind, "sequence_number": self._seq, **data}
        self._seq += 1
        return kind, data

    def _start(self) -> Iterator[Event]:
        """response.created and response.in_progress, before whatever comes first."""
        if self._seq == 0:
            for kind in ("response.created", "response.in_progress"):
                yield self._event(kind, {"response": response_object(self.response_id, self.model, self.echo,
                                                                     "in_progress", [], None)})

    def thinking(self, text: str) -> Iterator[Event]:
        yield from self._start()
        if not text:
            return
        if self._thinking is None:
            self._thinking = []
            yield self._event("response.output_item.added", {
                "output_index": self._index,
                "item": {"id": f"rs_{self.response_id}", "type": "reasoning", "summary": []}})
        self._thinking.append(text)
        self._seq += 1
        yield self.delta_event("thinking", text, self._seq - 1)

    def delta_event(self, kind: str, text: str, number: int) -> Event:
        """The text or reasoning delta of the item being written, numbered `number`."""
        if kind == "text":
            return "response.output_text.delta", {
                "type": "response.output_text.delta", "sequence_number": number, "item_id": self.item_id,
                "output_index": self._index, "content_index": 0, "delta": text, "logprobs": []}
        return "response.reasoning_summary_text.delta", {
            "type": "response.reasoning_summary_text.delta", "sequence_number": number,
            "item_id": f"rs_{self.response_id}", "output_index": self._index, "summary_index": 0, "delta": text}

    def steady_delta(self, kind: str, text: str) -> tuple[tuple[str, int], int] | None:
        """Where `text` (or `thinking`) would give one event, the delta of the open item of its kind: the text
        taken as they take it, and the delta's layout (its kind and output_index) and number (its
        sequence_number); else None, nothing taken. (The lane formats such a delta into its layout:
        streaming._block_putters.)"""
        if not text or not self._seq:
            return None
        if kind == "text":
            if self._text is None or not (self._thinking is None or self._thinking_done):
                return None
            self._text.append(text)
        elif self._thinking is not None:
            self._thinking.append(text)
        else:
            return None
        number = self._seq
        self._seq = number + 1
        return (kind, self._index), number

    def _finish_thinking(self) -> Iterator[Event]:
        if self._thinking is None or self._thinking_done:
            return
        self._thinking_done = True
        thinking = "".join(self._thinking)
        item = _reasoning_item(f"rs_{self.response_id}", thinking)
        yield self._event("response.reasoning_summary_text.done", {
            "item_id": item["id"], "output_index": self._index, "summary_index": 0, "text": thinking})
        yield self._event("response.output_item.done", {"output_index": self._index, "item": item})
        self._done_items.append(item)
        self._index += 1

    def text(self, text: str) -> Iterator[Event]:
        yield from self._start()
        if not text:
            return
        yield from self._finish_thinking()
        if self._text is None:
            self._text = []
            yield self._event("response.output_item.added", {
                "output_index": self._index, "item": _message_item(self.item_id, "", "in_progress")})
            yield self._event("response.content_part.added", {
                "item_id": self.item_id, "output_index": self._index, "content_index": 0, "part": _text_part("")})
        self._text.append(text)
        self._seq += 1
        yield self.delta_event("text", text, self._seq - 1)

    def finish(self, final: Final) -> Iterator[Event]:
        yield from self._start()
        yield from self._finish_thinking()
        if self._text is not None:  # the text (before any calls) first
            text = "".join(self._text)
            item = _message_item(self.item_id, text)
            yield self._event("response.output_text.done", {
                "item_id": self.item_id, "output_index": self._index, "content_index": 0, "text": text,
                "logprobs": []})
            yield self._event("response.content_part.done", {
                "item_id": self.item_id, "output_index": self._index, "content_index": 0,
                "part": _text_part(text)})
            yield self._event("response.output_item.done", {"output_index": self._index, "item": item})
            self._done_items.append(item)
            self._index += 1
        if final.tool_calls:
            for item in _call_items(self.response_id, final, self.offered):
                # a function's arguments, or a custom tool's input, each with its own delta and done events; a
                # tool search whole in its added and done events
                key, events = _STREAMED.get(item["type"], ("", ""))
                added = {**item, "status": "in_progress", **({key: ""} if key else {})}
                yield self._event("response.output_item.added", {"output_index": self._index, "item": added})
                if key and item[key]:
                    yield self._event(f"{events}.delta", {
                        "item_id": item["id"], "output_index": self._index, "delta": item[key]})
                if key:
                    yield self._event(f"{events}.done", {
                        "item_id": item["id"], "output_index": self._index, key: item[key]})
                yield self._event("response.output_item.done", {"output_index": self._index, "item": item})
                self._done_items.append(item)
                self._index += 1
        yield self._event("response.completed", {"response": response_object(
            self.response_id, self.model, self.echo, "completed", self._done_items, final)})
