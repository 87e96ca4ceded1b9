"""A standing fuzz over templates (issue 22, "How to keep it fixed"): random small templates built from the
grammar's pieces -- text, actions, if/with/range (with else, break, continue, variables), define/template/block,
pipelines, printf with random flags, widths, precisions and verbs, every builtin and Ollama's functions -- rendered
with random data, straight and through Ollama's prompt rendering. Every render returns a string or raises our
TemplateError, never another exception, and the executor's limits (set low here) end every render that would run
long or grow large: the test bounds the work, not the clock.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ollama_py.errors import TemplateError
from ollama_py.template import exec as template_exec
from ollama_py.template import parse_template, render_prompt
from ollama_py.template.exec import Limits
from ollama_py.template.funcs import FUNC_NAMES

LIMITS = Limits(iterations=2_000, chars=20_000, seconds=0.5, depth=20)
FIELDS = ["X", "L", "M", "N", "S", "I", "F", "B", "Messages", "Tools", "Missing", "k"]
NAMES = ["a", "b", ""]

# -- data ---------------------------------------------------------------------------------------------------
scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(-(2**70), 2**70), st.sampled_from([0, 1, -1, 2**63 - 1, -(2**63), 2**64, 10**6]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["", "<a&b>", "%d", "{{", "\u0000", "\ud7ff\U0010ffff", "é"]),
    st.binary(max_size=6),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.sampled_from(FIELDS + ["x", "1", ""]), inner, max_size=4)),
    max_leaves=12,
)
messages = st.lists(st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": st.text(max_size=8)},
    optional={"thinking": st.text(max_size=6), "tool_name": st.text(max_size=4),
              "tool_calls": st.lists(st.fixed_dictionaries({"function": st.fixed_dictionaries(
                  {"name": st.text(max_size=4), "arguments": st.dictionaries(st.text(max_size=3), scalars,
                                                                             max_size=2)})}), max_size=2)}),
    max_size=4)
tools = st.lists(st.fixed_dictionaries({"type": st.just("function"), "function": st.fixed_dictionaries(
    {"name": st.text(max_size=4)}, optional={"description": st.text(max_size=6), "parameters": st.fixed_dictionaries(
        {"type": st.just("object")}, optional={"required": st.lists(st.text(max_size=3), max_size=2),
                                               "properties": st.dictionaries(st.text(max_size=3), st.fixed_dictionaries(
                                                   {"type": st.sampled_from(["string", "integer", "array"])}),
                                                   max_size=2)})})}), max_size=2)
datas = st.one_of(
    st.none(), values,
    st.dictionaries(st.sampled_from(FIELDS), values, max_size=6),
    st.fixed_dictionaries({"Messages": messages, "Tools": tools},
                          optional={"System": st.text(max_size=6), "X": values, "L": values}),
)


# -- templates ----------------------------------------------------------------------------------------------
def printf_format(draw: Any) -> str:
    flags = draw(st.text(st.sampled_from("+- #0"), max_size=3))
    width = draw(st.sampled_from(["", "*", "3", "10", "999999", "1000001", "400000000", str(draw(st.integers(0, 50)))]))
    prec = draw(st.sampled_from(["", ".", ".*", ".2", ".0", ".1000001", ".30"]))
    verb = draw(st.sampled_from(list("vdsqxXobeEfFgGtcUTp%") + ["[1]d", "[2]*d", "!", ""]))
    text = draw(st.sampled_from(["", "a", "%", "%%"]))
    return '"' + text + "%" + flags + width + prec + verb + '"'


class Builder:
    """Draws one template: variables only where they are in scope, break/continue only inside a range (the parser's
    refusals are tested elsewhere; here most templates should reach the executor), defines only at the top."""

    def __init__(self, draw: Any) -> None:
        self.draw = draw

    def operand(self, scope: list[str]) -> str:
        d = self.draw
        kind = d(st.integers(0, 9))
        if kind == 0:
            return "." + ".".join(d(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=2)))
        if kind == 1:
            return "."
        if kind == 2 and scope:
            var = d(st.sampled_from(scope))
            return var + (("." + d(st.sampled_from(FIELDS))) if d(st.booleans()) else "")
        if kind == 3:
            return str(d(st.sampled_from([0, 1, 3, -2, 1000, 10**7, 2**62, "1.5", "1e300", "0x1F", "'a'"])))
        if kind == 4:
            return d(st.sampled_from(['"s"', '""', '"%d"', "`raw`", "true", "false", "nil"]))
        if kind == 5:
            return "(" + self.pipeline(scope, depth=1) + ")"
        return "." + d(st.sampled_from(FIELDS))

    def command(self, scope: list[str], depth: int) -> str:
        d = self.draw
        if depth > 1 or d(st.booleans()):
            return self.operand(scope)
        name = d(st.sampled_from(sorted(FUNC_NAMES)))
        args = [self.operand(scope) for _ in range(d(st.integers(0, 3)))]
        if name == "printf":
            args.insert(0, printf_format(d))
        return " ".join([name, *args])

    def pipeline(self, scope: list[str], depth: int = 0) -> str:
        d = self.draw
        cmds = [self.command(scope, depth)]
        for _ in range(d(st.integers(0, 2))):
            name = d(st.sampled_from(sorted(FUNC_NAMES)))
            extra = [self.operand(scope) for _ in range(d(st.integers(0, 1)))]
            cmds.append(" ".join([name, *extra]))
        return " | ".join(cmds)

    def declaring_pipeline(self, scope: list[str], *, in_range: bool = False) -> str:
        """A pipeline that may declare or assign variables (added to scope)."""
        d = self.draw
        pipe = self.pipeline(scope)
        kind = d(st.integers(0, 4))
        if kind == 0:
            var = d(st.sampled_from(["$x", "$y", "$i"]))
            scope.append(var)
            return f"{var} := {pipe}"
        if kind == 1 and scope:
            return f"{d(st.sampled_from(scope))} = {pipe}"
        if kind == 2 and in_range:
            scope.extend(["$i", "$v"])
            return f"$i, $v := {pipe}"
        return pipe

    def items(self, scope: list[str], depth: int, in_range: bool) -> str:
        d = self.draw
        return "".join(self.item(scope, depth, in_range) for _ in range(d(st.integers(0, 3 if depth < 3 else 1))))

    def item(self, scope: list[str], depth: int, in_range: bool) -> str:
        d = self.draw
        kind = d(st.integers(0, 11 if depth < 3 else 3))
        trim_l, trim_r = d(st.sampled_from(["{{", "{{- "])), d(st.sampled_from(["}}", " -}}"]))
        if kind == 0:
            return d(st.sampled_from(["text", " ", "\n", "<|x|>", "é", "}}", "{ "]))
        if kind in (1, 2):
            return trim_l + self.declaring_pipeline(scope) + trim_r
        if kind == 3:
            if in_range and d(st.booleans()):
                return "{{" + d(st.sampled_from(["break", "continue"])) + "}}"
            return "{{/* c */}}"
        if kind == 4:
            return '{{template "' + d(st.sampled_from(NAMES)) + '"' + (
                (" " + self.pipeline(scope)) if d(st.booleans()) else "") + "}}"
        if kind == 5:
            name = d(st.sampled_from(NAMES[:2]))
            return '{{block "' + name + '" ' + self.pipeline(scope) + "}}" + self.items(["$"], depth + 1, False) + \
                "{{end}}"
        word = d(st.sampled_from(["if", "with", "range"]))
        inner = list(scope)
        head = self.declaring_pipeline(inner, in_range=word == "range")
        body = self.items(inner, depth + 1, in_range or word == "range")
        out = trim_l + word + " " + head + trim_r + body
        if word != "range" and d(st.booleans()):
            out += "{{else " + word + " " + self.pipeline(list(scope)) + "}}" + self.items(list(scope), depth + 1,
                                                                                           in_range)
        if d(st.booleans()):
            out += "{{else}}" + self.items(list(scope), depth + 1, in_range)
        return out + "{{end}}"

    def template(self) -> str:
        d = self.draw
        parts = []
        for _ in range(d(st.integers(1, 4))):
            if d(st.integers(0, 4)) == 0:
                parts.append('{{define "' + d(st.sampled_from(NAMES)) + '"}}' + self.items(["$"], 1, False) + "{{end}}")
            else:
                parts.append(self.item(["$"], 0, False))
        return "".join(parts)


@st.composite
def templates(draw: Any) -> str:
    return Builder(draw).template()


def render_or_template_error(render: Any) -> str | None:
    try:
        out = render()
    except TemplateError:
        return None
    assert isinstance(out, str)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=templates(), data=datas)
def test_any_template_renders_or_raises_template_error(text: str, data: Any) -> None:
    try:
        tmpl = parse_template(text)
    except TemplateError:
        return
    out = render_or_template_error(lambda: tmpl.execute(data, LIMITS))
    assert out is None or len(out) <= LIMITS.chars


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=templates(), msgs=messages, tool_list=st.none() | tools, think=st.sampled_from([None, True, False, "high"]),
       suffix=st.sampled_from([None, "", "s"]))
def test_any_template_renders_as_a_prompt_or_raises_template_error(text: str, msgs: list[dict[str, Any]],
                                                                   tool_list: Any, think: Any, suffix: Any) -> None:
    # Ollama's layer on top: collate, one execution per legacy turn, the cut after .Response.
    render_or_template_error(lambda: render_prompt(text, messages=msgs, tools=tool_list, system="sys", suffix=suffix,
                                                   think=think, limits=LIMITS))


def test_the_builder_reaches_the_executor() -> None:
    """Most drawn templates parse, so the fuzz above exercises execution rather than the parser's refusals."""
    tried = parsed = 0

    @settings(max_examples=100, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(templates())
    def count(text: str) -> None:
        nonlocal tried, parsed
        tried += 1
        try:
            parse_template(text)
            parsed += 1
        except TemplateError:
            pass

    count()
    assert parsed >= tried * 0.6


def _outcome(tmpl: Any, data: Any) -> tuple[str, str]:
    try:
        return "output", tmpl.execute(data, LIMITS)
    except TemplateError as e:
        return "error", str(e)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(text=templates(), data=datas)
def test_generated_code_renders_as_the_closures_do(text: str, data: Any) -> None:
    """codegen.py's function for a tree gives what exec.py's closures give: the same output, or the same error
    (its words and the place it names), for any template and data."""
    try:
        tmpl = parse_template(text)
    except TemplateError:
        return
    template_exec.generate_code(False)
    try:
        by_closures = _outcome(tmpl, data)
        template_exec.generate_code(True)
        by_code = _outcome(tmpl, data)
    finally:
        template_exec.generate_code(None)
    assert by_code == by_closures
