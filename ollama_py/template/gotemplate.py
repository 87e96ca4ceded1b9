"""Go text/template, as Ollama uses it for prompt templates: parse once, execute many times.

    tmpl = parse_template('{{ range .Messages }}<|{{ .Role }}|>{{ .Content }}{{ end }}')
    tmpl.execute({"Messages": [{"Role": "user", "Content": "hi"}]})   # '<|user|>hi'

The pieces: lexer.py (tokens, trim markers), parser.py (tree, grammar in its docstring),
exec.py (evaluation), funcs.py (builtins and Ollama's functions), gofmt.py / gojson.py (how Go
prints and JSON-encodes values), values.py (how Python data stands for Go values) and
ollama_data.py (the typed messages and tools Ollama passes in).

Named templates work as in Go: `{{define "x"}}...{{end}}` at the top level, `{{template "x" .}}`
and `{{block "x" .}}default{{end}}`. Anything we do not support (the `call` builtin; complex numbers)
raises TemplateError naming the construct and where it is — a template is never half rendered.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ollama_py.errors import TemplateError
from ollama_py.template import exec as _exec
from ollama_py.template import nodes
from ollama_py.template.exec import DEFAULT_LIMITS, Limits
from ollama_py.template.funcs import FUNC_NAMES
from ollama_py.template.ollama_data import template_data
from ollama_py.template.parser import parse


@dataclass(frozen=True, slots=True)
class Template:
    """A parsed template: its source, its tree and the templates it names with define and block."""

    text: str
    root: nodes.ListNode
    named: Mapping[str, nodes.ListNode] = field(default_factory=dict, compare=False)

    def execute(self, data: Any, limits: Limits = DEFAULT_LIMITS) -> str:
        """Render with `data` as dot. A dict is Ollama's map[string]any; its `Messages` and `Tools`
        entries are converted to the Go types Ollama passes (see ollama_data.py). A render that passes
        one of `limits` raises TemplateError."""
        return _exec.execute(self.text, self.root, template_data(data), limits, self.named)


MAX_TEMPLATE_CHARS = 1 << 20  # real templates are a few KiB; parsing costs about 5 s per MiB


def parse_template(text: str) -> Template:
    """Parse Go template source; raises TemplateError (Go's message, with its line) if it is
    malformed, longer than MAX_TEMPLATE_CHARS or uses something we do not support. Not cached:
    prompt.parse_prompt_template keeps the templates in use."""
    if not isinstance(text, str):
        raise TemplateError("template must be a string")
    if len(text) > MAX_TEMPLATE_CHARS:
        raise TemplateError(f"template: too long: {len(text)} characters (the limit is {MAX_TEMPLATE_CHARS})")
    try:
        root, named = parse(text, FUNC_NAMES)
        return Template(text, root, named)
    except RecursionError:
        raise TemplateError("template: : nesting too deep") from None
