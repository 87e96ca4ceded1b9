"""GLM's tool calls (GLM 4.6 and 4.7, Laguna, Ling 3, Hunyuan 3 write them; Ollama's glm-4.7 parser reads them):
`<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>`, streamed in any pieces."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ollama_py.template.tool_calls import ToolCallParser
from tests.helpers.tool_calls import parse_streamed

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "units": {"type": "object"}}}}},
    {"type": "function", "function": {"name": "now", "parameters": {"type": "object", "properties": {}}}}]
CALL = ('Let me check.<tool_call>get_weather<arg_key>city</arg_key><arg_value>Paris</arg_value>'
        '<arg_key>days</arg_key><arg_value>3</arg_value><arg_key>units</arg_key><arg_value>{"t": "C"}</arg_value>'
        '</tool_call>')


def run(text: str, cuts: list[int] | None = None) -> tuple[str, list[Any]]:
    return parse_streamed(TOOLS, "<tool_call>", text, cuts or ())


def test_a_call_with_arguments_typed_by_the_tools_schema() -> None:
    text, calls = run(CALL)
    assert text == "Let me check."
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("get_weather", {"city": "Paris", "days": 3, "units": {"t": "C"}})]


def test_glm_46_newlines_and_a_call_without_arguments() -> None:
    text, calls = run("<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>"
                      "<tool_call>now</tool_call>")
    assert text == ""
    assert [(c["function"]["index"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        (0, "get_weather", {"city": "Oslo"}), (1, "now", {})]


def test_what_names_no_declared_tool_is_text() -> None:
    assert run("<tool_call>rm_rf<arg_key>p</arg_key><arg_value>/</arg_value></tool_call>") == (
        "<tool_call>rm_rf<arg_key>p</arg_key><arg_value>/</arg_value></tool_call>", [])
    assert run("a <tool_call> tag in prose") == ("a <tool_call> tag in prose", [])
    assert run("<tool_call>get_weather<arg_key>city</arg_key><arg_value>Pa") == (
        "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Pa", [])  # never closed


def test_a_name_that_turns_into_no_tools_is_released_as_it_comes() -> None:
    parser = ToolCallParser(TOOLS)
    assert parser.add("<tool_call>get") == ("", [])  # perhaps get_weather
    assert parser.add("away car") == ("<tool_call>getaway car", [])


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=9), max_size=50))
def test_any_split_gives_the_same_calls(cuts: list[int]) -> None:
    (text, calls), (whole_text, whole_calls) = run(CALL, cuts), run(CALL)
    assert text == whole_text and [c["function"] for c in calls] == [c["function"] for c in whole_calls]


async def test_a_glm_model_answers_its_calls_as_tool_calls(fake_app, aiohttp_client, tmp_path) -> None:
    """A model with a GGUF chat template (no Ollama TEMPLATE), as GLM-4.7-Flash from Hugging Face: its calls come
    back as tool_calls on the native and the OpenAI routes."""
    from tests.fakes.gguf_files import write_tiny_gguf
    from tests.helpers.app import create_tiny_model

    settings, app = fake_app({"FAKE_REPLY": CALL})
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if tools %}{{ tools }}{% endif %}"
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "glm.gguf", chat_template=template), name="glm")
    client = await aiohttp_client(app)
    ask = [{"role": "user", "content": "weather in Paris?"}]
    r = await client.post("/api/chat", json={"model": "glm", "messages": ask, "tools": TOOLS, "stream": False})
    body = await r.json()
    assert r.status == 200, body
    assert body["message"]["content"] == "Let me check."
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in body["message"]["tool_calls"]] == [
        ("get_weather", {"city": "Paris", "days": 3, "units": {"t": "C"}})]
    r = await client.post("/v1/chat/completions", json={"model": "glm", "messages": ask, "tools": TOOLS})
    choice = (await r.json())["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
