"""template.tool_calls: the tag a template opens calls with, and the streamed split into text now and calls."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ollama_py.template.tool_calls import DEFAULT_TAG, JSON_TAG, ToolCallParser, infer_tool_tag, parse_tool_calls

TEMPLATES = Path(__file__).parent / "templates"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},
         {"type": "function", "function": {"name": "get_time"}}]
CALL = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def feed(pieces: list[str], tag: str = DEFAULT_TAG) -> list[tuple[str, list[str]]]:
    """What each piece releases (text, names of the calls completed), then what finish() releases."""
    parser = ToolCallParser(TOOLS, tag)
    steps = [parser.add(p) for p in pieces] + [parser.finish()]
    return [(text, [c["function"]["name"] for c in calls]) for text, calls in steps]


@pytest.mark.parametrize(("pieces", "tag", "expected"), [
    (["Hello", " world", "!"], DEFAULT_TAG, [("Hello", []), (" world", []), ("!", []), ("", [])]),
    (["<tool", "s are fun"], DEFAULT_TAG, [("", []), ("<tools are fun", []), ("", [])]),
    (["It is <tool", "s"], DEFAULT_TAG, [("It is ", []), ("<tools", []), ("", [])]),
    (["{", " is a brace"], DEFAULT_TAG, [("", []), ("{ is a brace", []), ("", [])]),
    (["[", "1, 2]"], DEFAULT_TAG, [("", []), ("[1, 2]", []), ("", [])]),
    (["<tool_call>", CALL, "</tool_call>"], DEFAULT_TAG, [("", []), ("", ["get_weather"]), ("", []), ("", [])]),
    (["Sure, let me check. <tool_", "call>", CALL[:20], CALL[20:], "</tool_call>"], DEFAULT_TAG,
     [("Sure, let me check. ", []), ("", []), ("", []), ("", ["get_weather"]), ("", []), ("", [])]),
    ([CALL[:10], CALL[10:], " Done."], JSON_TAG, [("", []), ("", ["get_weather"]), ("Done.", []), ("", [])]),
    (["  \n", CALL], DEFAULT_TAG, [("", []), ("", ["get_weather"]), ("", [])]),
    (["Hi ", CALL], JSON_TAG, [("Hi ", []), (CALL, []), ("", [])]),
    (["<tool_call>\n" + CALL + "\n</tool_call>\n<tool_call>\n" + CALL + "\n</tool_call>"], DEFAULT_TAG,
     [("", ["get_weather", "get_weather"]), ("", [])]),
    (['[TOOL_CALLS] [{"name": "get_time", "arguments": {}}, ' + CALL + "]"], "[TOOL_CALLS]",
     [("", ["get_time", "get_weather"]), ("", [])]),
    (["```json\n" + CALL + "\n```"], DEFAULT_TAG, [("", ["get_weather"]), ("", [])]),
    (["```python\nprint(1)\n```"], DEFAULT_TAG, [("```python\nprint(1)\n```", []), ("", [])]),
    (["x <tool_call> nothing"], DEFAULT_TAG, [("x <tool_call> nothing", []), ("", [])]),
    (["x <tool_call>" + CALL[:30]], DEFAULT_TAG, [("x ", []), ("<tool_call>" + CALL[:30], [])]),
    (['<tool_call>{"name": "get_weather", "arguments": {"q": "}{\\""}}</tool_call> ok'], DEFAULT_TAG,
     [(" ok", ["get_weather"]), ("", [])]),
], ids=["plain-text", "tag-prefix-then-text", "text-then-tag-prefix-at-end", "brace-then-prose", "json-list-not-call",
        "tagged-call", "text-then-split-tag-then-call", "json-call-then-text", "whitespace-then-call",
        "json-call-after-text-is-text", "two-tagged-calls", "mistral-list", "fenced-json-call", "fenced-code-is-text",
        "tag-without-json", "unfinished-call-is-text", "braces-inside-strings"])
def test_stream_split(pieces: list[str], tag: str, expected: list[tuple[str, list[str]]]) -> None:
    assert feed(pieces, tag) == expected


def test_undeclared_tool_is_text() -> None:
    bogus = '{"name": "launch_rockets", "arguments": {"when": "now"}}'
    assert parse_tool_calls(bogus, TOOLS) == (bogus, [])
    assert parse_tool_calls(f"<tool_call>{bogus}</tool_call>", TOOLS) == (f"<tool_call>{bogus}</tool_call>", [])
    # a JSON answer that merely has a "name" is an answer
    person = '{"name": "Ada", "arguments": {}}'
    assert parse_tool_calls(person, TOOLS) == (person, [])


def test_calls_in_ollama_shape_with_running_indexes() -> None:
    text, calls = parse_tool_calls(
        f'<tool_call>{CALL}</tool_call><tool_call>{{"function": {{"name": "get_time", "arguments": "{{}}"}}}}'
        "</tool_call>", TOOLS)
    assert text == ""
    assert [(c["function"]["index"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        (0, "get_weather", {"city": "Paris"}), (1, "get_time", {})]
    assert all(c["id"].startswith("call_") for c in calls)


@pytest.mark.parametrize(("template", "tag"), [
    ("qwen2.5.gotmpl", "<tool_call>"),
    ("llama3.2.gotmpl", JSON_TAG),
    ("phi4-mini.gotmpl", "<|tool_call|>"),
    ("chatml.gotmpl", DEFAULT_TAG),  # renders no calls: the default
], ids=["qwen2.5", "llama3.2", "phi4-mini", "no-calls"])
def test_infer_tool_tag(template: str, tag: str) -> None:
    assert infer_tool_tag((TEMPLATES / template).read_text()) == tag


def test_infer_tool_tag_without_a_template() -> None:
    assert infer_tool_tag(None) == DEFAULT_TAG
    assert infer_tool_tag("") == DEFAULT_TAG


def test_a_templates_tag_is_worked_out_once_and_then_known() -> None:
    """The tag is found by rendering the template (blocking, in a thread); each request after the first finds it
    known, with no thread hop."""
    from ollama_py.template.tool_calls import known_tool_tag

    template = (TEMPLATES / "qwen2.5.gotmpl").read_text() + "{{/* a copy */}}"
    assert known_tool_tag(template) is None
    tag = infer_tool_tag(template)
    assert tag == "<tool_call>" and known_tool_tag(template) == tag


CALL_XML = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
CALL_MISTRAL = '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]'
CALL_JSON = '{"name": "get_weather", "arguments": {"city": "Paris"}}'
_PIECES = ["<think>", "</think>", "<tool_call>", "</tool_call>", "[TOOL_CALLS]", "[", "TOOL_CALLS]",
           '{"name": "get_weather", "arguments": {"city": "Paris"}}', "Sure", ", let me", " check", "<", "tool",
           "_call>", "\n", " ", "{", "}", "x"]


_THOUGHT_PIECES = [" Let", " me", " think", ".", "\n", " ", "<", "/", "</", "think>", "</think", "x", "\n\n"]


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=8), st.lists(st.sampled_from(_PIECES), max_size=8),
       st.lists(st.integers(0, 400), max_size=12), st.sampled_from(["<tool_call>", "[TOOL_CALLS]", "{", ""]),
       st.booleans(), st.lists(st.sampled_from(_THOUGHT_PIECES), max_size=8))
def test_a_text_the_parsers_call_plain_is_content_and_changes_nothing(before, after, cuts, tag, thinks, inner):
    """The lane writes a token itself when the parsers call it plain (`_Split.plain`) or a plain thought
    (`_Split.thought`): skipping their add() for such tokens and taking each as content, or as a thought, must
    give the same thoughts, text and calls as feeding them all (an answer of thoughts if the model thinks, text, a
    call in the tag's form, more text, cut anywhere; without tools (tag ""), the thinking parser alone)."""
    from ollama_py.server.completion import _Split
    from ollama_py.template.thinking import ThinkingParser

    call = {"<tool_call>": CALL_XML, "[TOOL_CALLS]": CALL_MISTRAL, "{": CALL_JSON, "": CALL_XML}[tag]
    thoughts = "".join(["<think>", " Let me think. ", *inner, "</think>"]) if thinks else ""
    pieces = [thoughts, *before, call, *after]
    text = "".join(pieces)
    thoughts_end = len(thoughts)  # a cut there too: the thinking's end
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, thoughts_end, len(text)})
    chunks = [text[a:b] for a, b in zip(points, points[1:]) if b > a]

    def run(skip: bool) -> tuple[str, str, list[tuple[str, Any]]]:
        split = _Split(ThinkingParser() if thinks else None, ToolCallParser(TOOLS, tag) if tag else None)
        thought, content, calls = [], [], []
        for i, chunk in enumerate(chunks):
            last = i == len(chunks) - 1
            if skip and not last and split.plain(chunk):
                content.append(chunk)
                continue
            if skip and not last and split.thought(chunk):
                thought.append(chunk)
                continue
            t, c, k = split.add(chunk, last)
            thought.append(t)
            content.append(c)
            calls += [(made["function"]["name"], made["function"]["arguments"]) for made in k]
        return "".join(thought), "".join(content), calls

    assert run(True) == run(False)
