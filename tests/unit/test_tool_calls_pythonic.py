"""LFM2's tool calls, written as Python: `<|tool_call_start|>[get_weather(city='Paris'), now()]<|tool_call_end|>`
(Ollama's lfm2 parser), read with Python's parser and never run; and the tags of the other GGUF chat templates that
write JSON calls in tags of their own (Granite 3's `<|tool_call|>`, Nemotron Nano 2's `<TOOLCALL>`, Apriel's
`<tool_calls>`). Before, all of these came back as text."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ollama_py.template.tool_calls import LFM2_TAG, ToolCallParser, gguf_tool_tag, pythonic_calls
from tests.helpers.tool_calls import calls_of, parse_streamed

END = "<|tool_call_end|>"
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
         for name in ("get_weather", "now", "search")]
TWO = f"{LFM2_TAG}[get_weather(city='Paris', days=2, metric=true, note=None), now()]{END}"


def run(text: str, cuts: list[int] | None = None, tag: str = LFM2_TAG) -> tuple[str, list[Any]]:
    return parse_streamed(TOOLS, tag, text, cuts or ())


@pytest.mark.parametrize(("text", "content", "calls"), [
    ("Checking. " + TWO, "Checking. ", [(0, "get_weather", {"city": "Paris", "days": 2, "metric": True,
                                                            "note": None}), (1, "now", {})]),
    (f'{LFM2_TAG}search(query="a \\"b\\"", filters={{"lang": "en", "n": [1, -2.5]}}, k=(1, 2)){END} Done.', "Done.",
     [(0, "search", {"query": 'a "b"', "filters": {"lang": "en", "n": [1, -2.5]}, "k": [1, 2]})]),
    # JSON in the same tags (a system prompt may ask for it)
    (f'{LFM2_TAG}[{{"name": "now", "arguments": {{}}}}]{END}', "", [(0, "now", {})]),
])
def test_calls_are_read(text: str, content: str, calls: list[Any]) -> None:
    got_content, got = run(text)
    assert (got_content, calls_of(got)) == (content, calls)


@pytest.mark.parametrize("text", [
    f"{LFM2_TAG}[delete_all()]{END}",  # not a declared tool
    f"{LFM2_TAG}[get_weather('Paris')]{END}",  # a positional argument has no name
    f"{LFM2_TAG}[get_weather(city=__import__('os').system('id'))]{END}",  # not a literal: never run
    f"{LFM2_TAG}[get_weather(**{{'city': 'Paris'}})]{END}",
    f"{LFM2_TAG}[get_weather(city={{1, 2}})]{END}",  # a set: no JSON value
    f"{LFM2_TAG}[get_weather(city='Par",  # cut short
])
def test_what_is_no_call_is_text(text: str) -> None:
    assert run(text) == (text, [])


def test_pythonic_reads_nothing_else() -> None:
    assert pythonic_calls("print('x'); now()") is None
    assert pythonic_calls("[now(), 1]") is None
    assert pythonic_calls("(" * 100_000) is None  # too deep for the parser: no call, no crash
    assert pythonic_calls("now()" + " " * (1 << 18)) is None  # past the size read
    assert pythonic_calls("tools.now(a=b'x')") is None
    assert pythonic_calls("tools.now(a=1e3)") == [("tools.now", {"a": 1000.0})]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=120), max_size=10))
def test_any_split_gives_the_same_calls(cuts: list[int]) -> None:
    assert calls_of(run("Hi " + TWO, cuts)[1]) == calls_of(run("Hi " + TWO)[1])


@pytest.mark.parametrize(("tag", "text"), [
    ("<|tool_call|>", '<|tool_call|>[{"name": "now", "arguments": {}}]'),
    ("<TOOLCALL>", '<TOOLCALL>[{"name": "now", "arguments": {}}]</TOOLCALL>'),
    ("<tool_calls>", '<tool_calls>[{"name": "now", "arguments": {}}]</tool_calls>'),
])
def test_json_calls_in_those_tags(tag: str, text: str) -> None:
    content, calls = run(text, tag=tag)
    assert (content, calls_of(calls)) == ("", [(0, "now", {})])
    assert tag in ToolCallParser(TOOLS, tag).markers


def test_olmo_3_writes_its_calls_one_a_line() -> None:
    """OLMo 3 (Ollama's olmo3 parser): `<function_calls>NAME(key=value)\\nNAME2()</function_calls>`."""
    text = 'Let me check.<function_calls>get_weather(city="San Francisco")\nnow()</function_calls>'
    content, calls = run(text, tag="<function_calls>")
    assert (content, calls_of(calls)) == ("Let me check.", [(0, "get_weather", {"city": "San Francisco"}),
                                                            (1, "now", {})])
    # statements that are not calls are no calls
    bad = "<function_calls>x = 1\nnow()</function_calls>"
    assert run(bad, tag="<function_calls>") == (bad, [])
    assert ToolCallParser(TOOLS, "<function_calls>").markers == ["<function_calls>", "</function_calls>"]
    assert gguf_tool_tag("{{ '<function_calls>' + calls + '</function_calls>' }}") == "<function_calls>"
