"""DeepSeek's tool calls: `<｜tool▁calls▁begin｜>` then, for each call, `<｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}
<｜tool▁call▁end｜>` (DeepSeek V3.1 and later) or `<｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME` and its arguments
in a ```json fence (R1 and its distills, the deepseek-r1 models), then `<｜tool▁calls▁end｜>`; the markers are
control tokens of DeepSeek's vocabulary (Ollama's deepseek3 parser). Before, these came back as text."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ollama_py.template.tool_calls import DEEPSEEK_TAG, ToolCallParser, gguf_tool_tag, infer_tool_tag
from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model
from tests.helpers.tool_calls import calls_of, parse_streamed

BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}}}}}, {"type": "function", "function": {"name": "now", "parameters": {}}}]
V31 = f'{BEGIN}{CALL}get_weather{SEP}{{"city": "Paris"}}{CALL_END}{CALL}now{SEP}{{}}{CALL_END}{END}'
R1 = f'{BEGIN}{CALL}function{SEP}get_weather\n```json\n{{"city": "Paris"}}\n```{CALL_END}{END}'


def run(text: str, cuts: list[int] | None = None) -> tuple[str, list[Any]]:
    return parse_streamed(TOOLS, DEEPSEEK_TAG, text, cuts or ())


@pytest.mark.parametrize(("text", "content", "calls"), [
    ("Let me check." + V31, "Let me check.", [(0, "get_weather", {"city": "Paris"}), (1, "now", {})]),
    (R1, "", [(0, "get_weather", {"city": "Paris"})]),
    (V31 + " Done.", "Done.", [(0, "get_weather", {"city": "Paris"}), (1, "now", {})]),
    # an answer that stops after a finished call, before the block's end: the finished calls
    (f'{BEGIN}{CALL}now{SEP}{{}}{CALL_END}', "", [(0, "now", {})]),
])
def test_calls_are_read(text: str, content: str, calls: list[Any]) -> None:
    got_content, got = run(text)
    assert (got_content, calls_of(got)) == (content, calls)


@pytest.mark.parametrize("text", [
    f'{BEGIN}{CALL}delete_all{SEP}{{}}{CALL_END}{END}',  # not a declared tool
    f'{BEGIN}{CALL}get_weather{SEP}{{"city": }}{CALL_END}{END}',  # arguments that do not read
    f'{BEGIN}get_weather{SEP}{{}}{END}',  # no call markers
    f'{BEGIN}{CALL}get_weather{SEP}{{"city": "Par',  # cut short inside the only call
])
def test_what_is_no_call_is_text(text: str) -> None:
    assert run(text) == (text, [])


@settings(max_examples=80, deadline=None)
@given(st.sampled_from([V31, R1, "Sure. " + V31]), st.lists(st.integers(min_value=1, max_value=300), max_size=10))
def test_any_split_gives_the_same_calls(text: str, cuts: list[int]) -> None:
    assert calls_of(run(text, cuts)[1]) == calls_of(run(text)[1])
    assert run(text, cuts)[0] == run(text)[0]


# DeepSeek V3.1's template in brief (llama.cpp's copies of the real ones: tests/integration/test_template_tags.py)
TEMPLATE = ("{% for m in messages %}{% if m.role == 'user' %}<｜User｜>{{ m.content }}{% elif m.tool_calls %}"
            "<｜Assistant｜><｜tool▁calls▁begin｜>{% for tool in m.tool_calls %}<｜tool▁call▁begin｜>"
            "{{ tool.function.name }}<｜tool▁sep｜>{{ tool.function.arguments | tojson }}<｜tool▁call▁end｜>"
            "{% endfor %}<｜tool▁calls▁end｜>{% else %}<｜Assistant｜>{{ m.content }}{% endif %}{% endfor %}"
            "<｜Assistant｜></think>")


def test_the_tag_and_markers() -> None:
    assert gguf_tool_tag(TEMPLATE) == DEEPSEEK_TAG
    # a Go template writes the first call's markers right after the tag: the tag is read as DeepSeek's
    go = ('{{ range .Messages }}{{ if eq .Role "user" }}<｜User｜>{{ .Content }}{{ else if eq .Role "assistant" }}'
          '<｜Assistant｜>{{ if .ToolCalls }}<｜tool▁calls▁begin｜>{{ range .ToolCalls }}<｜tool▁call▁begin｜>function'
          '<｜tool▁sep｜>{{ .Function.Name }}\n```json\n{{ .Function.Arguments }}\n```<｜tool▁call▁end｜>{{ end }}'
          '<｜tool▁calls▁end｜>{{ else }}{{ .Content }}{{ end }}<｜end▁of▁sentence｜>{{ end }}{{ end }}<｜Assistant｜>')
    tag = infer_tool_tag(go)
    assert tag.startswith(DEEPSEEK_TAG)
    parser = ToolCallParser(TOOLS, tag)
    assert parser.tag == DEEPSEEK_TAG
    assert parser.markers == [BEGIN, END, CALL, CALL_END, SEP]


async def test_a_deepseek_gguf_answers_its_calls_as_tool_calls(fake_app, aiohttp_client, tmp_path) -> None:
    """Through the OpenAI route over the fake, the markers control tokens the runner prints only when named."""
    pieces = [BEGIN, CALL, "get_weather", SEP, '{"city": "Paris"}', CALL_END, END]
    log = tmp_path / "runner.jsonl"
    settings_, app = fake_app({"FAKE_REPLY": "§".join(pieces), "FAKE_REPLY_SPLIT": "§",
                               "FAKE_CONTROL_TOKENS": json.dumps([BEGIN, CALL, SEP, CALL_END, END]),
                               "FAKE_LOG_FILE": str(log)})
    create_tiny_model(settings_, write_tiny_gguf(tmp_path / "deepseek.gguf", chat_template=TEMPLATE),
                      name="deepseek")
    client = await aiohttp_client(app)
    r = await client.post("/v1/chat/completions", json={"model": "deepseek", "tools": TOOLS,
                                                        "messages": [{"role": "user", "content": "weather?"}]})
    body = await r.json()
    assert r.status == 200, body
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls", choice
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in choice["message"]["tool_calls"]] == [
        ("get_weather", '{"city":"Paris"}')]
    assert choice["message"]["content"] in ("", None)
