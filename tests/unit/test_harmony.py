"""gpt-oss's harmony answers split into thinking, content and tool calls, streamed in any pieces."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ollama_py.template.harmony import (
    FunctionNames,
    HarmonyParser,
    Header,
    is_harmony,
    parse_header,
    prefill_of,
    reasoning_effort,
)

WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]

# what llama-server prints of gpt-oss's answer with harmony's markers preserved (the prompt ends <|start|>assistant)
THOUGHT_AND_ANSWER = ("<|channel|>analysis<|message|>The user greets. Reply briefly.<|end|>"
                      "<|start|>assistant<|channel|>final<|message|>Hello! How can I help?")
TOOL_CALL = ("<|channel|>analysis<|message|>Need the weather tool.<|end|>"
             "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
             '{"city":"Paris"}')


def whole(text: str, tools: Any = None, prefill: str = "", pieces: list[int] | None = None
          ) -> tuple[str, str, list[Any]]:
    parser = HarmonyParser(tools, prefill)
    thinking, content, calls = [], [], []
    at = 0
    for n in pieces or [len(text)]:
        t, c, k = parser.add(text[at:at + n])
        thinking.append(t), content.append(c), calls.extend(k)
        at += n
    t, c, k = parser.add(text[at:])
    thinking.append(t), content.append(c), calls.extend(k)
    t, c, k = parser.finish()
    thinking.append(t), content.append(c), calls.extend(k)
    return "".join(thinking), "".join(content), calls


def test_thinking_then_answer() -> None:
    assert whole(THOUGHT_AND_ANSWER)[:2] == ("The user greets. Reply briefly.", "Hello! How can I help?")


def test_a_tool_call_with_its_arguments() -> None:
    thinking, content, calls = whole(TOOL_CALL, WEATHER)
    assert thinking == "Need the weather tool."
    assert content == ""
    assert [c["function"]["name"] for c in calls] == ["get_weather"]
    assert calls[0]["function"]["arguments"] == {"city": "Paris"}
    assert calls[0]["id"].startswith("call_")


def test_the_recipient_in_the_role_header_and_an_ending_that_was_printed() -> None:
    text = ('<|channel|>analysis<|message|>x<|end|><|start|>assistant to=functions.get_weather<|channel|>commentary'
            ' json<|message|>{"city": "Oslo"}<|call|>')
    _, content, calls = whole(text, WEATHER)
    assert content == "" and calls[0]["function"]["arguments"] == {"city": "Oslo"}


def test_a_preamble_is_content_and_streams_before_the_call() -> None:
    text = ("<|channel|>commentary<|message|>Let me check.<|end|><|start|>assistant<|channel|>commentary "
            'to=functions.get_weather<|message|>{"city":"Rome"}')
    parser = HarmonyParser(WEATHER)
    _, content, calls = parser.add(text)
    assert content == "Let me check." and calls == []  # the call's end is the answer's end
    _, rest, calls = parser.finish()
    assert rest == "" and calls[0]["function"]["name"] == "get_weather"


def test_nothing_the_model_wrote_is_lost() -> None:
    # a function the request did not declare, and arguments that are no JSON object: the text as written
    text = "<|channel|>commentary to=functions.unknown<|message|>{\"a\": 1}<|end|>"
    assert whole(text, WEATHER) == ("", '{"a": 1}', [])
    truncated = '<|channel|>commentary to=functions.get_weather<|message|>{"city": "Par'
    assert whole(truncated, WEATHER) == ("", '{"city": "Par', [])
    # text outside any message (the model skipped the markers)
    assert whole("<|channel|>final<|message|>Hi<|end|>stray") == ("", "Histray", [])


def test_a_marker_split_across_pieces_is_held_back_not_shown() -> None:
    parser = HarmonyParser()
    assert parser.add("<|channel|>analysis<|mess") == ("", "", [])
    assert parser.add("age|>think<|e") == ("think", "", [])
    assert parser.add("nd|><|start|>assistant<|channel|>final<|message|>An") == ("", "An", [])
    assert parser.add("swer<") == ("", "swer", [])
    assert parser.finish() == ("", "<", [])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=12), max_size=40))
def test_any_split_of_the_stream_gives_the_same_answer(cuts: list[int]) -> None:
    assert whole(THOUGHT_AND_ANSWER, pieces=cuts) == whole(THOUGHT_AND_ANSWER)
    thinking, content, calls = whole(TOOL_CALL, WEATHER, pieces=cuts)
    assert (thinking, content) == ("Need the weather tool.", "")
    assert [c["function"]["arguments"] for c in calls] == [{"city": "Paris"}]


def test_two_calls_get_their_own_indexes() -> None:
    call = '<|start|>assistant<|channel|>commentary to=functions.get_weather<|message|>{"city":"%s"}<|end|>'
    _, _, calls = whole((call % "A")[len("<|start|>assistant"):] + call % "B", WEATHER)
    assert [(c["function"]["index"], c["function"]["arguments"]["city"]) for c in calls] == [(0, "A"), (1, "B")]


def test_prefill_continues_the_last_assistant_message() -> None:
    assert whole(" more of the answer", prefill="final") == ("", " more of the answer", [])
    assert whole(" still thinking<|end|><|start|>assistant<|channel|>final<|message|>ok",
                 prefill="analysis") == (" still thinking", "ok", [])
    assert prefill_of([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "He"}]) == "final"
    assert prefill_of([{"role": "assistant", "content": "", "thinking": "hm"}]) == "analysis"
    assert prefill_of([{"role": "user", "content": "hi"}]) == ""


def test_headers() -> None:
    assert parse_header("assistant<|channel|>analysis") == Header("assistant", "analysis", "")
    assert parse_header("assistant<|channel|>commentary to=functions.f <|constrain|>json") == \
        Header("assistant", "commentary", "functions.f")
    assert parse_header("assistant to=functions.f<|channel|>commentary<|constrain|>json") == \
        Header("assistant", "commentary", "functions.f")


def test_which_models_answer_in_harmony() -> None:
    template = "{{ '<|start|>assistant' }}...{{ '<|end|>' }}"
    assert is_harmony("gpt-oss", template) and is_harmony("gptoss", template)
    assert not is_harmony("gpt-oss", "{{ .Prompt }}")  # given another template: read as that one says
    assert not is_harmony("llama", template)
    assert is_harmony("llama", None, parser="harmony")


def test_reasoning_levels() -> None:
    assert [reasoning_effort(t) for t in ("low", "medium", "high", "max", "HIGH")] == \
        ["low", "medium", "high", "high", "high"]
    assert reasoning_effort(True) is None and reasoning_effort(False) is None and reasoning_effort(None) is None


def test_an_answer_without_the_format_is_content_as_it_comes() -> None:
    # a model that ignores harmony (or a template that renders another format): nothing held back, nothing lost
    parser = HarmonyParser()
    assert parser.add("Hello") == ("", "Hello", [])
    assert parser.add(" world<|e") == ("", " world", [])
    assert parser.finish() == ("", "<|e", [])
    assert whole("<|chan") == ("", "<|chan", [])  # cut short in the first header: the text as written
    assert whole(" to") == ("", " to", [])
    assert whole("<|channel|>final") == ("", "", [])  # a header and nothing written after it


# Ollama's FunctionNameMap cases (harmony/harmonyparser_test.go)
@pytest.mark.parametrize(("name", "shown"), [
    ("get weather", "get_weather"), ("get-weather", "get_weather"), ("get.weather", "get_weather"),
    ("get weather!", "get_weather"), ("a🫠bc", "abc"), ("🫠", "unnamed"), ("123", "_123"), ("$", "$"),
    ("𝓸𝓵𝓵𝓪𝓶𝓪", "𝓸𝓵𝓵𝓪𝓶𝓪"), ("ⓞⓛⓛⓐⓜⓐ123", "_123"), ("get_weather", "get_weather"),
])
def test_a_tool_name_is_shown_as_an_identifier(name: str, shown: str) -> None:
    names = FunctionNames(_tools(name))
    assert [t["function"]["name"] for t in names.tools()] == [shown] and names.original(shown) == name


@pytest.mark.parametrize(("names", "shown"), [
    (["get weather", "get weather"], ["get_weather", "get_weather_2"]),
    (["get weather", "get_weather", "get-weather"], ["get_weather", "get_weather_2", "get_weather_3"]),
    (["a", "a", "b", "a", "a", "b", "a"], ["a", "a_2", "b", "a_3", "a_4", "b_2", "a_5"]),
    (["browser.open", "python", "not.a.built-in.function", "browser.not_a_real_built_in"],
     ["browser.open", "python", "not_a_built_in_function", "browser_not_a_real_built_in"]),
])
def test_names_taken_get_a_number_and_built_ins_keep_theirs(names: list[str], shown: list[str]) -> None:
    tools = _tools(*names)
    renamed = FunctionNames(tools).tools()
    assert [t["function"]["name"] for t in renamed] == shown
    assert [t["function"]["parameters"] for t in renamed] == [t["function"]["parameters"] for t in tools]


def test_a_call_under_the_shown_name_comes_back_under_the_clients() -> None:
    tools = _tools("get-weather", "web.search")
    text = ("<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
            '{"city":"Paris"}<|end|><|start|>assistant<|channel|>commentary to=functions.web_search <|message|>'
            '{"q":"x"}')
    _, _, calls = whole(text, tools)
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("get-weather", {"city": "Paris"}), ("web.search", {"q": "x"})]


def _tools(*names: str) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {}}}}
            for n in names]
