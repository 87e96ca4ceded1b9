"""Prompt templates (pure): Go text/template in Python, and Ollama's way of rendering a prompt.

    parse_template(text) -> Template           the Go engine; Template.execute(data) -> str
    render_prompt(template_text, messages=..., tools=..., system=..., suffix=..., think=...)
    template_uses(template_text, "Tools")      capability detection (tools, insert, ...)
"""

from ollama_py.template.gotemplate import Template, parse_template
from ollama_py.template.prompt import collate, parse_prompt_template, render_prompt, template_uses, template_vars

__all__ = [
    "Template",
    "collate",
    "parse_prompt_template",
    "parse_template",
    "render_prompt",
    "template_uses",
    "template_vars",
]
