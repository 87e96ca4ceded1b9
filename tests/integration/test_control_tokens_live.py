"""Tool calls and thoughts written in a vocabulary's control tokens, on the real llama-server. Mistral's vocabularies
hold `[TOOL_CALLS]` and `[ARGS]` as control tokens, GLM's its `<tool_call>`, `<arg_key>`... and some `<think>`:
llama-server prints a control token only when the request names it in `preserved_tokens`. The models here are
scripted (tests/fakes/gguf_files.py write_scripted_gguf): whatever they are asked, they answer with the chosen
tokens, so the answer a user gets is all there is to check."""

from __future__ import annotations

import json

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


def chat(url: str, model: str, **req) -> dict:
    r = requests.post(f"{url}/api/chat", json={"model": model, "messages": ASK, "tools": WEATHER, "stream": False,
                                               "options": {"temperature": 0, "num_ctx": 512}, **req}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()["message"]


def calls_of(message: dict) -> list[tuple[str, dict]]:
    return [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]


def test_mistrals_call_in_control_tokens_is_a_tool_call(live_server, tmp_path) -> None:
    model = write_scripted_gguf(tmp_path / "mistral.gguf",
                                ["Checking.", "[TOOL_CALLS]", "get_weather", "[ARGS]", '{"city": "Paris", "days": 2}'],
                                control=("[TOOL_CALLS]", "[ARGS]"), chat_template=MISTRAL_TEMPLATE)
    create_from_file(live_server.url, "scripted-mistral", model)
    try:
        message = chat(live_server.url, "scripted-mistral")
        # before: 'Checking.get_weather{"city": "Paris", "days": 2}' as content
        assert message["content"] == "Checking."
        assert calls_of(message) == [("get_weather", {"city": "Paris", "days": 2})]
        r = requests.post(f"{live_server.url}/v1/chat/completions", timeout=120, json={
            "model": "scripted-mistral", "messages": ASK, "tools": WEATHER, "temperature": 0})
        choice = r.json()["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        assert [(c["function"]["name"], c["function"]["arguments"]) for c in choice["message"]["tool_calls"]] == [
            ("get_weather", '{"city":"Paris","days":2}')]  # compact, as Go marshals Ollama's
    finally:
        live_server.unload("scripted-mistral")


def test_thinking_and_a_glm_call_in_control_tokens_come_apart(live_server, tmp_path) -> None:
    script = ["<think>", "The user wants the weather.", "</think>", "<tool_call>", "get_weather", "<arg_key>", "city",
              "</arg_key>", "<arg_value>", "Paris", "</arg_value>", "</tool_call>"]
    control = ("<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
               "</arg_value>")
    model = write_scripted_gguf(tmp_path / "glm.gguf", script, control=control, chat_template=GLM_TEMPLATE)
    create_from_file(live_server.url, "scripted-glm", model)
    try:
        show = requests.post(f"{live_server.url}/api/show", json={"model": "scripted-glm"}, timeout=60).json()
        assert {"tools", "thinking"} <= set(show["capabilities"])
        message = chat(live_server.url, "scripted-glm", think=True)
        assert message.get("thinking") == "The user wants the weather."
        assert message["content"] == ""
        assert calls_of(message) == [("get_weather", {"city": "Paris"})]
        # without tools or thinking asked for, the control tokens stay out of the text, as llama-server prints it
        r = requests.post(f"{live_server.url}/api/chat", timeout=120, json={
            "model": "scripted-glm", "messages": ASK, "stream": False, "think": False,
            "options": {"temperature": 0}})
        assert r.json()["message"]["content"] == "The user wants the weather.get_weathercityParis"
    finally:
        live_server.unload("scripted-glm")


def test_gemma4s_thinking_and_call_come_apart(live_server, tmp_path) -> None:
    """Gemma 4's own chat template (llama.cpp's copy); its channel and call markers as control tokens."""
    template = (llama_cpp_templates_dir() / "google-gemma-4-31B-it.jinja").read_text()
    script = ["<|channel>", "thought\nThe user wants the weather.", "<channel|>", "<|tool_call>",
              'call:get_weather{city:"Paris",days:2}', "<tool_call|>"]
    model = write_scripted_gguf(tmp_path / "gemma4.gguf", script, chat_template=template,
                                control=("<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>"))
    create_from_file(live_server.url, "scripted-gemma4", model)
    try:
        show = requests.post(f"{live_server.url}/api/show", json={"model": "scripted-gemma4"}, timeout=60).json()
        assert {"tools", "thinking"} <= set(show["capabilities"])
        for _ in range(2):  # the runner's render, then the one made here
            message = chat(live_server.url, "scripted-gemma4")
            assert message.get("thinking") == "The user wants the weather."
            assert message["content"] == ""
            assert calls_of(message) == [("get_weather", {"city": "Paris", "days": 2})]
        message = chat(live_server.url, "scripted-gemma4", think=False)  # what it thinks anyway is not shown
        assert (message.get("thinking", ""), calls_of(message)) == ("", [("get_weather", {"city": "Paris", "days": 2})])
    finally:
        live_server.unload("scripted-gemma4")


def test_ministral_3_reasoning_thinks_and_calls_in_control_tokens(live_server, tmp_path) -> None:
    """Ministral 3 Reasoning's own template (llama.cpp's copy): `[THINK]...[/THINK]` then `[TOOL_CALLS]NAME[ARGS]`,
    all control tokens. Before, it had no thinking capability and its thoughts ran into the content."""
    template = (llama_cpp_templates_dir() / "mistralai-Ministral-3-14B-Reasoning-2512.jinja").read_text()
    script = ["[THINK]", "The user wants the weather.", "[/THINK]", "[TOOL_CALLS]", "get_weather", "[ARGS]",
              '{"city": "Paris"}']
    model = write_scripted_gguf(tmp_path / "ministral.gguf", script, chat_template=template,
                                control=("[THINK]", "[/THINK]", "[TOOL_CALLS]", "[ARGS]"))
    create_from_file(live_server.url, "scripted-ministral", model)
    try:
        show = requests.post(f"{live_server.url}/api/show", json={"model": "scripted-ministral"}, timeout=60).json()
        assert {"tools", "thinking"} <= set(show["capabilities"])
        message = chat(live_server.url, "scripted-ministral")
        assert message.get("thinking") == "The user wants the weather."
        assert (message["content"], calls_of(message)) == ("", [("get_weather", {"city": "Paris"})])
    finally:
        live_server.unload("scripted-ministral")


def test_deepseeks_calls_in_control_tokens(live_server, tmp_path) -> None:
    """DeepSeek V3.1's own template (llama.cpp's copy); its call markers are control tokens (`<｜...｜>`)."""
    template = (llama_cpp_templates_dir() / "deepseek-ai-DeepSeek-V3.1.jinja").read_text()
    markers = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁sep｜>", "<｜tool▁call▁end｜>",
               "<｜tool▁calls▁end｜>")
    script = ["Let me check.", markers[0], markers[1], "get_weather", markers[2], '{"city": "Paris", "days": 2}',
              markers[3], markers[4]]
    model = write_scripted_gguf(tmp_path / "deepseek.gguf", script, chat_template=template, control=markers)
    create_from_file(live_server.url, "scripted-deepseek", model)
    try:
        message = chat(live_server.url, "scripted-deepseek", think=False)
        assert message["content"] == "Let me check."
        assert calls_of(message) == [("get_weather", {"city": "Paris", "days": 2})]
    finally:
        live_server.unload("scripted-deepseek")


def test_lfm2s_python_style_calls(live_server, tmp_path) -> None:
    """LFM2.5's own template (llama.cpp's copy): `<|tool_call_start|>[NAME(key=value)]<|tool_call_end|>`."""
    template = (llama_cpp_templates_dir() / "LFM2.5-8B-A1B.jinja").read_text()
    script = ["<|tool_call_start|>", "[get_weather(city='Paris', days=2)]", "<|tool_call_end|>"]
    model = write_scripted_gguf(tmp_path / "lfm2.gguf", script, chat_template=template,
                                control=("<|tool_call_start|>", "<|tool_call_end|>"))
    create_from_file(live_server.url, "scripted-lfm2", model)
    try:
        message = chat(live_server.url, "scripted-lfm2", think=False)
        assert (message["content"], calls_of(message)) == ("", [("get_weather", {"city": "Paris", "days": 2})])
    finally:
        live_server.unload("scripted-lfm2")


def test_a_format_lets_a_thinking_model_think_first(live_server, tmp_path) -> None:
    """Structured output of a thinking model on the real runner: its thoughts unconstrained, then its answer under
    the schema's grammar (before, the grammar held from the first token and forbade `<think>`)."""
    script = ["<think>", "The tower is in Paris.", "</think>", '{"city": "Paris"}']
    model = write_scripted_gguf(tmp_path / "thinker.gguf", script, chat_template=GLM_TEMPLATE,
                                control=("<think>", "</think>"))
    create_from_file(live_server.url, "scripted-thinker", model)
    schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
    try:
        r = requests.post(f"{live_server.url}/api/chat", timeout=120, json={
            "model": "scripted-thinker", "messages": ASK, "format": schema, "stream": False,
            "options": {"temperature": 0}})
        message = r.json()["message"]
        assert message.get("thinking") == "The tower is in Paris."
        assert json.loads(message["content"]) == {"city": "Paris"}
    finally:
        live_server.unload("scripted-thinker")
