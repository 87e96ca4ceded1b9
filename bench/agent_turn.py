"""An agent's turn, as coding agents send it: a long system prompt, twenty tools with real-sized schemas and a
conversation of tool calls and their results, through a Go TEMPLATE of Qwen's shape (tools in the system turn,
calls in <tool_call> tags, results as user turns). bench/gpu_speed_fake.py's `agent` case sends it and compares
with the runner given the very prompt the gateway renders for it, so that what differs is the gateway's own work
on such a request: reading and checking a ~70 KB body, the template over every message, the tool-call parser.
"""

from __future__ import annotations

import random
from typing import Any

AGENT_TEMPLATE = """{{- if .Messages }}
{{- if or .System .Tools }}<|im_start|>system
{{- if .System }}
{{ .System }}
{{- end }}
{{- if .Tools }}

# Tools

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{{- range .Tools }}
{"type": "function", "function": {{ .Function }}}
{{- end }}
</tools>

For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
<tool_call>
{"name": <function-name>, "arguments": <args-json-object>}
</tool_call>
{{- end }}<|im_end|>
{{ end }}
{{- range $i, $_ := .Messages }}
{{- $last := eq (len (slice $.Messages $i)) 1 -}}
{{- if eq .Role "user" }}<|im_start|>user
{{ .Content }}<|im_end|>
{{ else if eq .Role "assistant" }}<|im_start|>assistant
{{ if .Content }}{{ .Content }}
{{- else if .ToolCalls }}<tool_call>
{{ range .ToolCalls }}{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}
{{ end }}</tool_call>
{{- end }}{{ if not $last }}<|im_end|>
{{ end }}
{{- else if eq .Role "tool" }}<|im_start|>user
<tool_response>
{{ .Content }}
</tool_response><|im_end|>
{{ end }}
{{- if and (ne .Role "assistant") $last }}<|im_start|>assistant
{{ end }}
{{- end }}
{{- else }}
{{- if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}{{ if .Prompt }}<|im_start|>user
{{ .Prompt }}<|im_end|>
{{ end }}<|im_start|>assistant
{{ end }}{{ .Response }}{{ if .Response }}<|im_end|>{{ end }}"""


def agent_tools(n: int = 20) -> list[dict[str, Any]]:
    """OpenAI-shaped tools, each with a paragraph of description and eight described parameters."""
    rnd = random.Random(1)
    tools = []
    for i in range(n):
        props = {f"p{j}": {"type": "string", "description": "A parameter, described as agents describe them: "
                           + "detail " * rnd.randint(4, 20)} for j in range(8)}
        tools.append({"type": "function", "function": {
            "name": f"tool_{i}", "description": "Does one of the things an agent does, explained at length. " * 12,
            "parameters": {"type": "object", "properties": props, "required": ["p0"]}}})
    return tools


def agent_messages(turns: int = 20) -> list[dict[str, Any]]:
    """A system prompt of ~10 KB, then `turns` rounds of: the user asks, the assistant calls a tool, the tool
    answers; the user's last question is open."""
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent. Follow the rules. " * 250}]
    for t in range(turns):
        out.append({"role": "user", "content": f"Step {t}: look at the file and change what needs changing. " * 3})
        out.append({"role": "assistant", "content": "", "tool_calls": [{
            "id": f"call_{t}", "type": "function",
            "function": {"name": f"tool_{t % 20}", "arguments": f'{{"p0": "src/module_{t}.py", "p1": "read"}}'}}]})
        out.append({"role": "tool", "tool_call_id": f"call_{t}",
                    "content": "def function():\n    return compute(value) + other(value)\n" * 12})
    out.append({"role": "user", "content": "Now say hi."})
    return out
