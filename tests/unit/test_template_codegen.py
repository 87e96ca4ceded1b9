"""codegen.py: a template's tree as generated Python gives what the closures give, for what the server renders.

The template test modules run on both engines (conftest.both_engines) and a fuzz compares them on random
templates (test_template_fuzz.py); here: an agent's whole turn, the text a client controls, and the trees that
keep their closures.
"""

from __future__ import annotations

import pytest

from bench.agent_turn import AGENT_TEMPLATE, agent_messages, agent_tools
from ollama_py.errors import TemplateError
from ollama_py.server import openai_translate as oai
from ollama_py.template import codegen, parse_template, render_prompt
from ollama_py.template import exec as template_exec
from ollama_py.template.exec import Limits


def _both(render: object) -> tuple[object, object]:
    """render() by the closures, then by generated code."""
    outcomes = []
    for generated in (False, True):
        template_exec.generate_code(generated)
        try:
            outcomes.append(("output", render()))  # type: ignore[operator]
        except TemplateError as e:
            outcomes.append(("error", str(e)))
        finally:
            template_exec.generate_code(None)
    return outcomes[0], outcomes[1]


def test_an_agents_turn_renders_the_same_prompt_both_ways() -> None:
    params = oai.parse_chat({"model": "m", "messages": agent_messages(), "tools": agent_tools()})
    by_closures, by_code = _both(lambda: render_prompt(AGENT_TEMPLATE, messages=params.messages,
                                                       tools=params.tools))
    assert by_closures[0] == "output"
    assert "<tool_call>" in str(by_closures[1]) and str(by_closures[1]).endswith("<|im_start|>assistant\n")
    assert by_code == by_closures


@pytest.mark.parametrize("text", [
    '{{ "\\"); import os; os._exit(1) #" }}',
    "x'''); raise SystemExit(''' {{ .A }}",
    '{{ $x := "a\\nb" }}{{ if eq $x "a\\nb" }}{{ $x }}{{ end }}',
    "{{ range $i, $v := .L }}{{ if eq $v \"}}\" }}{{ break }}{{ end }}{{ $i }}:{{ $v }};{{ end }}",
])
def test_what_a_template_says_is_data_to_the_generated_code(text: str) -> None:
    """Strings, text and names from the template reach the generated function as values, never as code."""
    tmpl = parse_template(text)
    by_closures, by_code = _both(lambda: tmpl.execute({"A": "\"'", "L": ["a", "b", "}}", "c"]}))
    assert by_closures[0] == "output"
    assert by_code == by_closures


def test_errors_name_the_same_place_both_ways() -> None:
    tmpl = parse_template('{{ range .Messages }}{{ if eq .Role "user" }}{{ .Nope }}{{ end }}{{ end }}')
    messages = [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}]
    by_closures, by_code = _both(lambda: render_prompt(tmpl.text, messages=messages))
    assert by_closures == ("error", 'template: :1:48: executing "" at <.Nope>: can\'t evaluate field Nope in type '
                                    "*template.templateMessage")
    assert by_code == by_closures


def test_limits_end_generated_renders_as_they_end_the_closures() -> None:
    looping = parse_template("{{ range $i := .N }}{{ range $.N }}x{{ end }}{{ end }}")
    by_closures, by_code = _both(lambda: looping.execute({"N": 100}, Limits(iterations=5000)))
    assert by_closures[0] == "error" and "range" in str(by_closures[1])
    assert by_code == by_closures
    growing = parse_template("{{ range .N }}{{ $.T }}{{ end }}")
    by_closures, by_code = _both(lambda: growing.execute({"N": 50, "T": "y" * 100}, Limits(chars=1000)))
    assert by_closures == ("error", 'template: :1:17: executing "" at <{{$.T}}>: the output passes the limit of '
                                    "1000 characters")
    assert by_code == by_closures


def test_trees_past_the_size_worth_compiling_keep_their_closures() -> None:
    big = parse_template("{{ if .A }}x{{ .B }}{{ end }}" * (codegen.MAX_NODES // 3 + 1))
    small = parse_template("{{ if .A }}x{{ .B }}{{ end }}")
    assert codegen.generate(big.root) is None
    assert codegen.generate(small.root) is not None
    by_closures, by_code = _both(lambda: big.execute({"A": True, "B": 1}))
    assert by_code == by_closures == ("output", "x1" * (codegen.MAX_NODES // 3 + 1))
