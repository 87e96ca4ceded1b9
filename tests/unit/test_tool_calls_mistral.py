"""Mistral's tool calls (Mistral Small 3.2, Devstral, Magistral, Ministral 3): `[TOOL_CALLS]NAME[ARGS]{...}`, with
`[CALL_ID]ID` before `[ARGS]` in Mistral Small 3.2's, several calls after one tag in Ministral 3's; the tag found in
a Go TEMPLATE that writes the name first, and in a GGUF chat template."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ollama_py.template.tool_calls import gguf_tool_tag, infer_tool_tag
from tests.helpers.tool_calls import parse_streamed

MISTRAL_TAG = "[TOOL_CALLS]"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}}}}}, {"type": "function", "function": {"name": "now", "parameters": {}}}]
TWO = '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]now[CALL_ID]a1b2c3d4e[ARGS]{}'


def run(text: str, cuts: list[int] | None = None) -> tuple[str, list[Any]]:
    return parse_streamed(TOOLS, MISTRAL_TAG, text, cuts or ())


def names_and_args(calls: list[Any]) -> list[tuple[int, str, Any]]:
    return [(c["function"]["index"], c["function"]["name"], c["function"]["arguments"]) for c in calls]


def test_calls_with_and_without_a_call_id() -> None:
    text, calls = run("Checking." + TWO)
    assert text == "Checking."
    assert names_and_args(calls) == [(0, "get_weather", {"city": "Paris"}), (1, "now", {})]


def test_ministral_3_writes_several_calls_after_one_tag() -> None:
    text, calls = run('[TOOL_CALLS]get_weather[ARGS]{"city": "A"}get_weather[ARGS]{"city": "B"}')
    assert text == ""
    assert names_and_args(calls) == [(0, "get_weather", {"city": "A"}), (1, "get_weather", {"city": "B"})]


def test_what_is_no_call_is_text() -> None:
    assert run('[TOOL_CALLS]format_disk[ARGS]{"d": 1}') == ('[TOOL_CALLS]format_disk[ARGS]{"d": 1}', [])
    assert run("[TOOL_CALLS]get_weather[ARGS]not json") == ("[TOOL_CALLS]get_weather[ARGS]not json", [])
    assert run('[TOOL_CALLS]get_weather[ARGS]{"city": "Pa') == ('[TOOL_CALLS]get_weather[ARGS]{"city": "Pa', [])
    # the JSON list form the older Mistral templates write still reads
    _, calls = run('[TOOL_CALLS][{"name": "now", "arguments": {}}]')
    assert names_and_args(calls) == [(0, "now", {})]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=9), max_size=40))
def test_any_split_gives_the_same_calls(cuts: list[int]) -> None:
    text, calls = run(TWO, cuts)
    assert text == "" and names_and_args(calls) == [(0, "get_weather", {"city": "Paris"}), (1, "now", {})]


def test_the_tag_of_a_template_that_writes_the_name_first() -> None:
    go = ('{{- range .Messages }}{{ if eq .Role "user" }}[INST]{{ .Content }}[/INST]{{ else if eq .Role "assistant" }}'
          '{{ if .Content }}{{ .Content }}{{ end }}{{ range .ToolCalls }}[TOOL_CALLS]{{ .Function.Name }}[ARGS]'
          '{{ .Function.Arguments }}{{ end }}</s>{{ end }}{{ end }}')
    assert infer_tool_tag(go) == MISTRAL_TAG
    assert gguf_tool_tag("{{ '[TOOL_CALLS]' + tool_call.function.name }}") == MISTRAL_TAG
    assert gguf_tool_tag("{{ '<tool_call>' }}") == "<tool_call>" and gguf_tool_tag(None) == "<tool_call>"


async def test_a_devstral_gguf_answers_its_calls_as_tool_calls(fake_app, aiohttp_client, tmp_path) -> None:
    """Mistral's vocabularies hold the markers as control tokens: llama-server prints them only when the request
    names them (before, the answer came back as `get_weather{"city": "Paris"}now...`)."""
    import json

    from tests.fakes.gguf_files import write_tiny_gguf
    from tests.helpers.app import create_tiny_model

    pieces = TWO.replace("[", "|[").replace("]", "]|").strip("|")
    settings, app = fake_app({"FAKE_REPLY": pieces, "FAKE_REPLY_SPLIT": "|",
                              "FAKE_CONTROL_TOKENS": json.dumps(["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"])})
    template = ("{% for m in messages %}{{ m['content'] }}{% endfor %}{% for t in tools or [] %}"
                "{{ '[TOOL_CALLS]' + t.function.name }}{% endfor %}")
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "devstral.gguf", chat_template=template), name="devstral")
    client = await aiohttp_client(app)
    r = await client.post("/v1/chat/completions", json={"model": "devstral", "tools": TOOLS,
                                                        "messages": [{"role": "user", "content": "weather?"}]})
    choice = (await r.json())["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert [c["function"]["name"] for c in choice["message"]["tool_calls"]] == ["get_weather", "now"]
