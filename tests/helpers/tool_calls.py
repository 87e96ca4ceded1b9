"""A tool-calling model over the fake llama-server: its templates, a scripted call, the fake's default answer.

The `tools_gguf` and `tools_server` fixtures (tests/unit/conftest.py) serve these models; the tool streaming
tests and langchain-ollama's read what they answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# What the fake says when told FAKE_REPLY=CALL: a call in the <tool_call> form qwen's templates write.
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
WORDS = ["The", " quick", " brown", " fox", " jumps", " over", " the", " lazy"]  # the fake's default answer
# The tool CALL calls, as each API declares it: OpenAI chat (and Ollama), Anthropic, the Responses API.
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]
ANT_TOOLS = [{"name": "get_weather", "description": "The weather in a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
RESP_TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather in a city",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
# A GGUF chat template that mentions tools gives the model the "tools" capability (no TEMPLATE: default tag).
GGUF_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if tools %}{{ tools }}{% endif %}"
# A Go TEMPLATE with tools and thinking, writing past calls after <tool_call> as qwen's does.
THINKING_TEMPLATE = (
    "{{- if .Tools }}Tools:{{ range .Tools }} {{ .Function.Name }}{{ end }}\n{{ end }}"
    "{{- range .Messages }}<|{{ .Role }}|>{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}{{ .Content }}"
    '{{ range .ToolCalls }}<tool_call>{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}'
    "</tool_call>{{ end }}\n{{ end }}<|assistant|>"
)


# ChatML as SmolLM2 knows it, with the request's tools offered in a system turn and calls written as Hermes /
# Qwen do (<tool_call>{"name": ..., "arguments": ...}</tool_call>): a model created with it has "tools".
TOOLS_TEMPLATE = (
    "{{- if .Tools }}<|im_start|>system\nYou may call these tools:{{ range .Tools }}\n{{ json .Function }}{{ end }}"
    '\nCall one as <tool_call>{"name": ..., "arguments": ...}</tool_call><|im_end|>\n{{ end }}'
    "{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}"
    '{{ range .ToolCalls }}<tool_call>{"name": "{{ .Function.Name }}", "arguments": {{ json .Function.Arguments }}}'
    "</tool_call>{{ end }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"
)


def parse_streamed(tools: Sequence[Mapping[str, Any]], tag: str, text: str, cuts: Sequence[int] = ()
                   ) -> tuple[str, list[Any]]:
    """`text` through a ToolCallParser in pieces of the lengths `cuts` (the rest in one), then finish(): the text
    shown and the calls made."""
    from ollama_py.template.tool_calls import ToolCallParser

    parser = ToolCallParser(tools, tag)
    out, calls, at = [], [], 0
    for n in [*cuts, len(text)]:
        piece, found = parser.add(text[at:at + n])
        out.append(piece)
        calls.extend(found)
        at += n
    piece, found = parser.finish()
    return "".join([*out, piece]), [*calls, *found]


def calls_of(calls: list[Any]) -> list[tuple[int, str, Any]]:
    """Calls as (index, name, arguments), to compare."""
    return [(c["function"]["index"], c["function"]["name"], c["function"]["arguments"]) for c in calls]
