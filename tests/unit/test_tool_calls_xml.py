"""Tool calls in Qwen3-Coder's XML (Ollama's qwen3-coder and qwen3.5 PARSERs): what the models that name those
parsers answer with, read into Ollama's tool_calls, streamed or whole."""

from __future__ import annotations

from typing import Any

import pytest

from ollama_py.template.tool_calls import ToolCallParser, parse_tool_calls

TOOLS = [
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object", "properties": {
        "path": {"type": "string"}, "offset": {"type": "integer"}, "limit": {"type": ["integer", "null"]},
        "fast": {"type": "boolean"}, "options": {"type": "object"}, "ranges": {"type": "array"},
        "scale": {"type": "number"}}}}},
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}}}}},
]

ANSWER = ("Let me look.\n<tool_call>\n<function=read_file>\n<parameter=path>\nsrc/main.py\n</parameter>\n"
          "<parameter=offset>\n10\n</parameter>\n<parameter=limit>\n20\n</parameter>\n"
          "<parameter=fast>\nTrue\n</parameter>\n<parameter=options>\n{\"follow\": true}\n</parameter>\n"
          "<parameter=ranges>\n[1, 2]\n</parameter>\n<parameter=scale>\n0.5\n</parameter>\n</function>\n"
          "</tool_call>\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew\nYork\n</parameter>\n"
          "</function>\n</tool_call>")

ARGS = {"path": "src/main.py", "offset": 10, "limit": 20, "fast": True, "options": {"follow": True},
        "ranges": [1, 2], "scale": 0.5}


def calls_of(calls: list[Any]) -> list[tuple[int, str, dict]]:
    return [(c["function"]["index"], c["function"]["name"], c["function"]["arguments"]) for c in calls]


def test_xml_calls_are_read_with_their_schema_types() -> None:
    text, calls = parse_tool_calls(ANSWER, TOOLS)
    assert text == "Let me look.\n"
    assert calls_of(calls) == [(0, "read_file", ARGS), (1, "get_weather", {"city": "New\nYork"})]


@pytest.mark.parametrize("step", [1, 3, 17])
def test_xml_calls_streamed_in_pieces_come_out_whole_and_nothing_else_is_held(step: int) -> None:
    parser = ToolCallParser(TOOLS)
    text, calls = "", []
    for i in range(0, len(ANSWER), step):
        out, found = parser.add(ANSWER[i:i + step])
        text += out
        calls += found
    out, found = parser.finish()
    assert text + out == "Let me look.\n"
    assert calls_of(calls + found) == [(0, "read_file", ARGS), (1, "get_weather", {"city": "New\nYork"})]


def test_a_value_that_does_not_read_as_its_type_stays_text() -> None:
    _, calls = parse_tool_calls("<tool_call>\n<function=read_file>\n<parameter=offset>\nten\n</parameter>\n"
                                "<parameter=unknown>\n{\"a\": 1}\n</parameter>\n</function>\n</tool_call>", TOOLS)
    assert calls_of(calls) == [(0, "read_file", {"offset": "ten", "unknown": "{\"a\": 1}"})]


def test_a_function_no_tool_names_or_one_never_closed_is_text() -> None:
    unknown = "<tool_call>\n<function=rm_rf>\n<parameter=path>\n/\n</parameter>\n</function>\n</tool_call>"
    assert parse_tool_calls(unknown, TOOLS) == (unknown, [])
    cut = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis"
    assert parse_tool_calls(cut, TOOLS) == (cut, [])
    # and JSON after the tag is still read as before
    _, calls = parse_tool_calls('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
                                TOOLS)
    assert calls_of(calls) == [(0, "get_weather", {"city": "Paris"})]
