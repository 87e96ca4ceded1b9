"""Tool calls and thoughts written in a vocabulary's control tokens, on the real llama-server. Mistral's vocabularies
hold `[TOOL_CALLS]` and `[ARGS]` as control tokens, GLM's its `<tool_call>`, `<arg_key>`... and some `<think>`:
llama-server prints a control token only when the request names it in `preserved_tokens`. The models here are
scripted (tests/fakes/gguf_files.py write_scripted_gguf): whatever they are asked, they answer with the chosen
tokens, so the answer a user gets is all there is to check."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.fakes.gguf_files import write_scripted_gguf
from tests.helpers.paths import llama_cpp_templates_dir
from tests.helpers.serve import create_from_file

pytestmark = pytest.mark.integration

WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                              "parameters": {"type": "object", "required": ["city"], "properties": {
                                                  "city": {"type": "string"}, "days": {"type": "integer"}}}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
MISTRAL_TEMPLATE = ("{% if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{% endif %}"
                    "{% for m in messages %}{% if m.role == 'user' %}[INST]{{ m.content }}[/INST]"
                    "{% elif m.tool_calls %}{% for c in m.tool_calls %}[TOOL_CALLS]{{ c.function.name }}[ARGS]"
                    "{{ c.function.arguments | tojson }}{% endfor %}</s>{% else %}{{ m.content }}</s>{% endif %}"
                    "{% endfor %}")
GLM_TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{% if m.reasoning_content %}<think>{{ m.reasoning_content }}"
                "</think>{% endif %}{{ m.content }}{% endfor %}{% if tools %}<|tools|>{{ tools | tojson }}{% endif %}"
                "<|assistant|>")
# the shape of FunctionGemma's template: tools declared in the developer turn, past calls in its call markers
FUNCTIONGEMMA_TEMPLATE = (
    "{% if tools %}<start_of_turn>developer\n{% for t in tools %}<start_function_declaration>declaration:"
    "{{ t['function']['name'] }}{description:<escape>{{ t['function']['description'] }}<escape>}"
    "<end_function_declaration>{% endfor %}<end_of_turn>\n{% endif %}"
    "{% for m in messages %}<start_of_turn>{{ 'model' if m['role'] == 'assistant' else m['role'] }}\n"
    "{{ m['content'] }}{% for c in m.tool_calls or [] %}<start_function_call>call:{{ c['function']['name'] }}{}"
    "<end_function_call>{% endfor %}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}")


def chat(url: str, model: str, **req) -> dict:
    r = requests.post(f"{url}/api/chat", json={"model": model, "messages": ASK, "tools": WEATHER, "stream": False,
                                               "options": {"temperature": 0, "num_ctx": 512}, **req}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["message"]


def calls_of(message: dict) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]


@contextlib.contextmanager
def scripted(server, tmp_path: Path, name: str, script: list[str], *, control: tuple[str, ...] = (),
             template: str) -> Iterator[str]:
    """A scripted model on the live server (`template`: a chat template, or the name of llama.cpp's copy of one),
    unloaded when the block ends."""
    if template.endswith(".jinja"):
        template = (llama_cpp_templates_dir() / template).read_text()
    create_from_file(server.url, name, write_scripted_gguf(tmp_path / f"{name}.gguf", script, control=control,
                                                           chat_template=template))
    try:
        yield name
    finally:
        server.unload(name)


def capabilities(url: str, model: str) -> set[str]:
    return set(requests.post(f"{url}/api/show", json={"model": model}, timeout=60).json()["capabilities"])


def test_mistrals_call_in_control_tokens_is_a_tool_call(live_server, tmp_path) -> None:
    script = ["Checking.", "[TOOL_CALLS]", "get_weather", "[ARGS]", '{"city": "Paris", "days": 2}']
    with scripted(live_server, tmp_path, "scripted-mistral", script, control=("[TOOL_CALLS]", "[ARGS]"),
                  template=MISTRAL_TEMPLATE) as model:
        message = chat(live_server.url, model)
        # before: 'Checking.get_weather{"city": "Paris", "days": 2}' as content
        assert message["content"] == "Checking."
        assert calls_of(message) == [("get_weather", {"city": "Paris", "days": 2})]
        r = requests.post(f"{live_server.url}/v1/chat/completions", timeout=120, json={
            "model": model, "messages": ASK, "tools": WEATHER, "temperature": 0})
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert [(c["function"]["name"], c["function"]["arguments"]) for c in choice["message"]["tool_calls"]] == [
            ("get_weather", '{"city":"Paris","days":2}')]  # compact, as Go marshals Ollama's


def test_thinking_and_a_glm_call_in_control_tokens_come_apart(live_server, tmp_path) -> None:
    script = ["<think>", "The user wants the weather.", "</think>", "<tool_call>", "get_weather", "<arg_key>", "city",
              "</arg_key>", "<arg_value>", "Paris", "</arg_value>", "</tool_call>"]
    control = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
               "</arg_value>")
    with scripted(live_server, tmp_path, "scripted-glm", script, control=control, template=GLM_TEMPLATE) as model:
        assert {"tools", "thinking"} <= capabilities(live_server.url, model)
        message = chat(live_server.url, model, think=True)
        assert message.get("thinking") == "The user wants the weather."
        assert message["content"] == ""
        assert calls_of(message) == [("get_weather", {"city": "Paris"})]
        # without tools or thinking asked for, the control tokens stay out of the text, as llama-server prints it
        r = requests.post(f"{live_server.url}/api/chat", timeout=120, json={
            "model": model, "messages": ASK, "stream": False, "think": False, "options": {"temperature": 0}})
        assert r.json()["message"]["content"] == "The user wants the weather.get_weathercityParis"


def test_gemma4s_thinking_and_call_come_apart(live_server, tmp_path) -> None:
    """Gemma 4's own chat template (llama.cpp's copy); its channel and call markers as control tokens."""
    script = ["<|channel>", "thought\nThe user wants the weather.", "<channel|>", "<|tool_call>",
              'call:get_weather{city:"Paris",days:2}', "<tool_call|>"]
    with scripted(live_server, tmp_path, "scripted-gemma4", script, template="google-gemma-4-31B-it.jinja",
                  control=("<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>")) as model:
        assert {"tools", "thinking"} <= capabilities(live_server.url, model)
        for _ in range(2):  # the runner's render, then the one made here
            message = chat(live_server.url, model)
            assert message.get("thinking") == "The user wants the weather."
            assert message["content"] == ""
            assert calls_of(message) == [("get_weather", {"city": "Paris", "days": 2})]
        message = chat(live_server.url, model, think=False)  # what it thinks anyway is not shown
        assert (message.get("thinking", ""), calls_of(message)) == ("", [("get_weather", {"city": "Paris", "days": 2})])


def test_ministral_3_reasoning_thinks_and_calls_in_control_tokens(live_server, tmp_path) -> None:
    """Ministral 3 Reasoning's own template (llama.cpp's copy): `[THINK]...[/THINK]` then `[TOOL_CALLS]NAME[ARGS]`,
    all control tokens. Before, it had no thinking capability and its thoughts ran into the content."""
    script = ["[THINK]", "The user wants the weather.", "[/THINK]", "[TOOL_CALLS]", "get_weather", "[ARGS]",
              '{"city": "Paris"}']
    with scripted(live_server, tmp_path, "scripted-ministral", script,
                  template="mistralai-Ministral-3-14B-Reasoning-2512.jinja",
                  control=("[THINK]", "[/THINK]", "[TOOL_CALLS]", "[ARGS]")) as model:
        assert {"tools", "thinking"} <= capabilities(live_server.url, model)
        message = chat(live_server.url, model)
        assert message.get("thinking") == "The user wants the weather."
        assert (message["content"], calls_of(message)) == ("", [("get_weather", {"city": "Paris"})])


def test_deepseeks_calls_in_control_tokens(live_server, tmp_path) -> None:
    """DeepSeek V3.1's own template (llama.cpp's copy); its call markers are control tokens (`<｜...｜>`)."""
    markers = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
               "<｜tool▁calls▁end｜>")
    script = ["Let me check.", markers[0], markers[1], "get_weather", markers[2], '{"city": "Paris", "days": 2}',
              markers[3], markers[4]]
    with scripted(live_server, tmp_path, "scripted-deepseek", script, control=markers,
                  template="deepseek-ai-DeepSeek-V3.1.jinja") as model:
        message = chat(live_server.url, model, think=False)
        assert message["content"] == "Let me check."
        assert calls_of(message) == [("get_weather", {"city": "Paris", "days": 2})]


def test_lfm2s_python_style_calls(live_server, tmp_path) -> None:
    """LFM2.5's own template (llama.cpp's copy): `<|tool_call_start|>[NAME(key=value)]<|tool_call_end|>`."""
    script = ["<|tool_call_start|>", "[get_weather(city='Paris', days=2)]", "<|tool_call_end|>"]
    with scripted(live_server, tmp_path, "scripted-lfm2", script, template="LFM2.5-8B-A1B.jinja",
                  control=("<|tool_call_start|>", "<|tool_call_end|>")) as model:
        message = chat(live_server.url, model, think=False)
        assert (message["content"], calls_of(message)) == ("", [("get_weather", {"city": "Paris", "days": 2})])


def test_functiongemmas_call_in_control_tokens(live_server, tmp_path) -> None:
    """FunctionGemma: `<start_function_call>call:NAME{key:VALUE}<end_function_call>`, its markers control tokens
    llama-server prints only when the request names them. (A string between two `<escape>` tokens is read by the
    unit tests: this one-block model cannot say a token twice.)"""
    script = ["Checking.", "<start_function_call>", "call:get_weather{days:2,metric:true}", "<end_function_call>"]
    with scripted(live_server, tmp_path, "scripted-functiongemma", script, template=FUNCTIONGEMMA_TEMPLATE,
                  control=("<start_function_call>", "<end_function_call>", "<escape>")) as model:
        assert "tools" in capabilities(live_server.url, model)
        message = chat(live_server.url, model)
        # before: "Checking.call:get_weather{days:2,metric:true}" as content
        assert (message["content"], calls_of(message)) == ("Checking.", [("get_weather", {"days": 2, "metric": True})])


def test_a_format_lets_a_thinking_model_think_first(live_server, tmp_path) -> None:
    """Structured output of a thinking model on the real runner: its thoughts unconstrained, then its answer under
    the schema's grammar (before, the grammar held from the first token and forbade `<think>`)."""
    script = ["<think>", "The tower is in Paris.", "</think>", '{"city": "Paris"}']
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    with scripted(live_server, tmp_path, "scripted-thinker", script, control=("<think>", "</think>"),
                  template=GLM_TEMPLATE) as model:
        r = requests.post(f"{live_server.url}/api/chat", timeout=120, json={
            "model": model, "messages": ASK, "format": schema, "stream": False, "options": {"temperature": 0}})
        message = r.json()["message"]
        assert message.get("thinking") == "The tower is in Paris."
        assert json.loads(message["content"]) == {"city": "Paris"}
