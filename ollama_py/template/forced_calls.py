"""An answer that must be a tool call: OpenAI's tool_choice "required" or a named function, Anthropic's
{"type": "any"} or {"type": "tool", "name": ...}, the Responses API's "required" or named function.

A template cannot make a model call a tool, and a model asked for JSON in its own tool-call syntax may still
answer in prose. So the answer is generated under a JSON schema (llama-server's `json_schema`, a grammar): the
called tool's `parameters` when one tool is named, else `{"name": <one of the tools>, "arguments": ...}`; the JSON
that comes out is the call. Ollama passes tool_choice over; this is how vLLM and llama-server's own chat endpoint
honour it. The prompt still offers every tool, rendered by the model's template as usual.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ollama_py.api.wire import Tool, ToolCall
from ollama_py.errors import BadRequest

_EMPTY_OBJECT: dict[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class ForcedCall:
    """The answer is a call of one of `tools` (one: that tool's; several: the model picks by name)."""

    tools: tuple[Tool, ...]

    def schema(self) -> dict[str, Any]:
        """The JSON schema the answer is generated under."""
        if len(self.tools) == 1:
            return _parameters(self.tools[0])
        return {"anyOf": [{"type": "object",
                           "properties": {"name": {"const": _name(t)}, "arguments": _parameters(t)},
                           "required": ["name", "arguments"]} for t in self.tools]}

    def call(self, text: str) -> ToolCall | None:
        """The call the generated JSON makes; None when it is not one (cut short by the token limit)."""
        try:
            value = json.loads(text)
        except ValueError:
            return None
        name: Any = _name(self.tools[0])
        arguments = value
        if len(self.tools) > 1:
            if not isinstance(value, dict):
                return None
            name, arguments = value.get("name"), value.get("arguments")
        if not isinstance(arguments, dict) or name not in {_name(t) for t in self.tools}:
            return None
        return {"id": f"call_{uuid.uuid4().hex[:8]}", "function": {"index": 0, "name": name, "arguments": arguments}}


def _name(tool: Tool) -> str:
    return tool["function"]["name"]


def _parameters(tool: Tool) -> dict[str, Any]:
    """A tool's parameters as a schema for an object (a tool without any takes `{}`)."""
    params = tool["function"].get("parameters")
    if not isinstance(params, dict) or not params:
        return _EMPTY_OBJECT
    return params if "type" in params else {"type": "object", **params}


def forced(tools: Sequence[Tool] | None, name: str | None) -> ForcedCall | None:
    """The ForcedCall for a request's tools: any of them (`name` None), or the one named -- a name the request did
    not offer is a 400, as OpenAI and Anthropic answer it. None without tools (nothing to call)."""
    if not tools:
        return None
    if name is None:
        return ForcedCall(tuple(tools))
    chosen = [t for t in tools if _name(t) == name]
    if not chosen:
        raise BadRequest(f"tool_choice names the tool {name!r}, which is not in tools")
    return ForcedCall((chosen[0],))
