"""The markers an answer is split at reach the runner as `preserved_tokens`. Many vocabularies hold them as control
tokens (Mistral's `[TOOL_CALLS]`, `[ARGS]`; GLM's `<tool_call>`, `<arg_key>`; some `<think>`), and llama-server
prints a control token only when the request names it, as its own chat route and Ollama's /completion requests
do. Without them the parsers never saw a tag: calls and thoughts came back as run-together content."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ollama_py.template.thinking import ThinkingParser
from ollama_py.template.tool_calls import ToolCallParser
from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model

WEATHER = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]


def test_a_tool_parser_names_its_tag_and_the_markers_of_the_forms_it_reads() -> None:
    assert ToolCallParser(WEATHER, "[TOOL_CALLS]").markers == ["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"]
    # a Go template's tag with JSON punctuation after the token: the token alone is one token
    assert ToolCallParser(WEATHER, "[TOOL_CALLS] [").markers[:2] == ["[TOOL_CALLS] [", "[TOOL_CALLS]"]
    assert ToolCallParser(WEATHER, "<tool_call>").markers == [
        "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"]
    assert ToolCallParser(WEATHER, "<|python_tag|>").markers == ["<|python_tag|>", "<|/python_tag|>"]
    assert ToolCallParser(WEATHER, "<|tool_call_start|>").markers == ["<|tool_call_start|>", "<|tool_call_end|>"]
    assert ToolCallParser(WEATHER, "{").markers == []  # bare JSON: nothing to print


def test_a_thinking_parser_names_its_tags() -> None:
    assert ThinkingParser("[THINK]", "[/THINK]").markers == ["[THINK]", "[/THINK]"]
    assert ThinkingParser().markers == ["<think>", "</think>"]


GLM_TEMPLATE = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
                "{% if tools %}{{ tools | tojson }}{% endif %}<|assistant|>"
                "{# past thoughts: <think>{{ reasoning_content }}</think>; calls: <tool_call>name... #}")
GLM_CONTROL = ["<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
               "</arg_value>"]
GLM_ANSWER = "|".join(["<think>", "Need the weather.", "</think>", "<tool_call>", "get_weather", "<arg_key>", "city",
                       "</arg_key>", "<arg_value>", "Paris", "</arg_value>", "<arg_key>", "days", "</arg_key>",
                       "<arg_value>", "3", "</arg_value>", "</tool_call>"])


def _glm(fake_app, tmp_path: Path, control: list[str]) -> tuple[Any, Path]:
    log = tmp_path / "runner.jsonl"
    settings, app = fake_app({"FAKE_REPLY": GLM_ANSWER, "FAKE_REPLY_SPLIT": "|",
                              "FAKE_CONTROL_TOKENS": json.dumps(control), "FAKE_LOG_FILE": str(log)})
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "glm.gguf", chat_template=GLM_TEMPLATE), name="glm")
    return app, log


async def test_thinking_and_a_glm_call_in_control_tokens_come_apart(fake_app, aiohttp_client, tmp_path) -> None:
    app, log = _glm(fake_app, tmp_path, GLM_CONTROL)
    client = await aiohttp_client(app)
    r = await client.post("/api/chat", json={"model": "glm", "tools": WEATHER, "think": True, "stream": False,
                                             "messages": [{"role": "user", "content": "weather in Paris?"}]})
    message = (await r.json())["message"]
    assert r.status == 200, message
    assert message["thinking"] == "Need the weather."
    assert message["content"] == ""
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == [
        ("get_weather", {"city": "Paris", "days": 3})]
    body = [b for b in map(json.loads, log.read_text().splitlines()) if "prompt" in b][-1]
    assert set(GLM_CONTROL) <= set(body["preserved_tokens"])


async def test_a_request_without_tools_or_thinking_names_no_markers(fake_app, aiohttp_client, tmp_path) -> None:
    """Nothing to split: the runner prints what it always prints (a control token stays out of the text)."""
    app, log = _glm(fake_app, tmp_path, GLM_CONTROL)
    client = await aiohttp_client(app)
    r = await client.post("/api/chat", json={"model": "glm", "think": False, "stream": False,
                                             "messages": [{"role": "user", "content": "weather in Paris?"}]})
    assert r.status == 200
    assert (await r.json())["message"]["content"] == "Need the weather.get_weathercityParisdays3"
    body = [b for b in map(json.loads, log.read_text().splitlines()) if "prompt" in b][-1]
    assert "preserved_tokens" not in body


async def test_mistrals_think_tags_are_a_gguf_templates_thinking(fake_app, aiohttp_client, tmp_path) -> None:
    """Magistral and Ministral 3 Reasoning think in `[THINK]...[/THINK]` (control tokens): a GGUF template that
    writes them gives the model thinking, read at those tags (Ollama's ministral parser)."""
    log = tmp_path / "runner.jsonl"
    settings, app = fake_app({"FAKE_REPLY": "[THINK]|Let me see.|[/THINK]|Paris.", "FAKE_REPLY_SPLIT": "|",
                              "FAKE_CONTROL_TOKENS": json.dumps(["[THINK]", "[/THINK]"]), "FAKE_LOG_FILE": str(log)})
    template = ("{% for m in messages %}[INST]{{ m.content }}[/INST]{% if m.thinking is defined %}[THINK]"
                "{{ m.thinking }}[/THINK]{% endif %}{% endfor %}")
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "magistral.gguf", chat_template=template),
                      name="magistral")
    client = await aiohttp_client(app)
    show = await (await client.post("/api/show", json={"model": "magistral"})).json()
    assert "thinking" in show["capabilities"]
    r = await client.post("/api/chat", json={"model": "magistral", "stream": False,
                                             "messages": [{"role": "user", "content": "Capital of France?"}]})
    message = (await r.json())["message"]
    assert (message["thinking"], message["content"]) == ("Let me see.", "Paris.")
    body = [b for b in map(json.loads, log.read_text().splitlines()) if "prompt" in b][-1]
    assert body["preserved_tokens"] == ["[THINK]", "[/THINK]"]
