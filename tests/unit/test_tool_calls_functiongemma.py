"""FunctionGemma's tool calls: `<start_function_call>call:NAME{key:<escape>text<escape>,n:1}<end_function_call>`
(Ollama's functiongemma parser), for a model whose GGUF chat template writes them (Ollama's `functiongemma` renders
with it). Before, they came back as text."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ollama_py.template.tool_calls import FUNCTIONGEMMA_TAG, ToolCallParser, functiongemma_arguments, gguf_tool_tag
from tests.helpers.tool_calls import calls_of, parse_streamed

END = "<end_function_call>"
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
         for name in ("get_weather", "add", "set_flag")]
WEATHER = f"{FUNCTIONGEMMA_TAG}call:get_weather{{city:<escape>Paris, France<escape>}}{END}"


def run(text: str, cuts: list[int] | None = None) -> tuple[str, list[Any]]:
    return parse_streamed(TOOLS, FUNCTIONGEMMA_TAG, text, cuts or ())


@pytest.mark.parametrize(("text", "content", "calls"), [
    (WEATHER, "", [(0, "get_weather", {"city": "Paris, France"})]),
    ("Let me check." + WEATHER, "Let me check.", [(0, "get_weather", {"city": "Paris, France"})]),
    (f"{FUNCTIONGEMMA_TAG}call:add{{a:1,b:-2.5}}{END}{FUNCTIONGEMMA_TAG}call:set_flag{{enabled:true,v:false}}{END}",
     "", [(0, "add", {"a": 1, "b": -2.5}), (1, "set_flag", {"enabled": True, "v": False})]),
    (f"{FUNCTIONGEMMA_TAG}call:add{{xs:[1,<escape>a,b<escape>],o:{{k:<escape>v<escape>,n:2}},w:bare}}{END}", "",
     [(0, "add", {"xs": [1, "a,b"], "o": {"k": "v", "n": 2}, "w": "bare"})]),
    (f"{FUNCTIONGEMMA_TAG}call:set_flag{{}}{END} Done.", "Done.", [(0, "set_flag", {})]),
])
def test_calls_are_read(text: str, content: str, calls: list[Any]) -> None:
    got_content, got = run(text)
    assert (got_content, calls_of(got)) == (content, calls)


@pytest.mark.parametrize("text", [
    f"{FUNCTIONGEMMA_TAG}call:delete_all{{}}{END}",  # not a declared tool
    f"{FUNCTIONGEMMA_TAG}get_weather(city='Paris'){END}",  # no call:NAME{...}
    f"{FUNCTIONGEMMA_TAG}call:get_weather{{city:<escape>Par",  # cut short
])
def test_what_is_no_call_is_text(text: str) -> None:
    assert run(text) == (text, [])


def test_values_read_as_ollamas_parser_reads_them() -> None:
    assert functiongemma_arguments("a:007,b:+5,c:1e3,d:<escape><escape>,e:x:y,novalue,f:") == {
        "a": 7.0, "b": 5.0, "c": 1000.0, "d": "", "e": "x:y", "f": ""}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(WEATHER)), max_size=6))
def test_any_split_of_the_stream_reads_the_same(cuts: list[int]) -> None:
    assert calls_of(run("Sure." + WEATHER + " ok", sorted(cuts))[1]) == [(0, "get_weather", {"city": "Paris, France"})]


def test_the_tag_comes_from_the_gguf_template_and_its_markers_are_asked_for() -> None:
    template = "{%- if tools %}...{% endif %}<start_function_call>call:{{ name }}{...}<end_function_call>"
    assert gguf_tool_tag(template) == FUNCTIONGEMMA_TAG
    assert ToolCallParser(TOOLS, FUNCTIONGEMMA_TAG).markers == [FUNCTIONGEMMA_TAG, END, "<escape>"]
