"""gpt-oss over the fake runner: its harmony answers come back as thinking, content and tool calls on every route,
its reasoning level reaches its template, and its markers are asked for (llama-server prints control tokens only
when the request names them; the fake does the same with FAKE_CONTROL_TOKENS)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model

# the shape of gpt-oss's own template (the whole one is in llama.cpp's models/templates; the fake renders ChatML)
HARMONY_TEMPLATE = ("<|start|>system<|message|>Reasoning: {{ reasoning_effort | default('medium') }}<|end|>"
                    "{% for m in messages %}<|start|>{{ m['role'] }}<|message|>{{ m['content'] }}<|end|>{% endfor %}"
                    "{% if tools %}{{ tools | tojson }}{% endif %}{% if add_generation_prompt %}<|start|>assistant"
                    "{% endif %}")
CONTROL = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>"]
SEP = "§"  # FAKE_REPLY_SPLIT: one token per part, each marker a token of its own
ANSWER = SEP.join(["<|channel|>", "analysis", "<|message|>", "The user", " greets.", "<|end|>", "<|start|>",
                   "assistant", "<|channel|>", "final", "<|message|>", "Hello", " there!"])
CALL = SEP.join(["<|channel|>", "analysis", "<|message|>", "Need", " the tool.", "<|end|>", "<|start|>",
                 "assistant", "<|channel|>", "commentary to=functions.get_weather ", "<|constrain|>", "json",
                 "<|message|>", '{"city":', ' "Paris"}'])
WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "the weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}]
ASK = [{"role": "user", "content": "hi"}]


def _app(fake_app, tmp_path: Path, reply: str) -> tuple[Any, Any, Path]:
    log = tmp_path / "runner.jsonl"
    settings, app = fake_app({"FAKE_REPLY": reply, "FAKE_REPLY_SPLIT": SEP, "FAKE_CONTROL_TOKENS": json.dumps(CONTROL),
                              "FAKE_LOG_FILE": str(log)})
    gguf = write_tiny_gguf(tmp_path / "gpt-oss.gguf", arch="gpt-oss", chat_template=HARMONY_TEMPLATE)
    create_tiny_model(settings, gguf, name="gpt-oss:tiny")
    return settings, app, log


def _posted(log: Path, path_key: str) -> list[dict[str, Any]]:
    return [b for b in map(json.loads, log.read_text().splitlines()) if path_key in b]


@pytest.mark.parametrize("stream", [False, True])
async def test_thinking_and_answer_apart_on_the_native_route(fake_app, aiohttp_client, tmp_path: Path,
                                                             stream: bool) -> None:
    _, app, log = _app(fake_app, tmp_path, ANSWER)
    client = await aiohttp_client(app)
    r = await client.post("/api/chat", json={"model": "gpt-oss:tiny", "messages": ASK, "stream": stream})
    assert r.status == 200
    if stream:
        lines = [json.loads(x) for x in (await r.text()).splitlines()]
        thinking = "".join(x["message"].get("thinking", "") for x in lines)
        content = "".join(x["message"]["content"] for x in lines)
    else:
        message = (await r.json())["message"]
        thinking, content = message["thinking"], message["content"]
    assert (thinking, content) == ("The user greets.", "Hello there!")
    # the runner was asked to print harmony's markers
    assert _posted(log, "n_predict")[-1]["preserved_tokens"] == CONTROL


async def test_a_tool_call_on_the_native_and_openai_routes(fake_app, aiohttp_client, tmp_path: Path) -> None:
    _, app, _ = _app(fake_app, tmp_path, CALL)
    client = await aiohttp_client(app)
    r = await client.post("/api/chat", json={"model": "gpt-oss:tiny", "messages": ASK, "tools": WEATHER,
                                             "stream": False})
    message = (await r.json())["message"]
    assert message["thinking"] == "Need the tool." and message["content"] == ""
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == [
        ("get_weather", {"city": "Paris"})]
    r = await client.post("/v1/chat/completions", json={"model": "gpt-oss:tiny", "messages": ASK, "tools": WEATHER})
    choice = (await r.json())["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] in ("", None)
    assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}


async def test_it_thinks_and_calls_tools_by_its_capabilities(fake_app, aiohttp_client, tmp_path: Path) -> None:
    _, app, _ = _app(fake_app, tmp_path, ANSWER)
    client = await aiohttp_client(app)
    show = await (await client.post("/api/show", json={"model": "gpt-oss:tiny"})).json()
    assert {"completion", "tools", "thinking"} <= set(show["capabilities"])
    # so think levels are taken, and a level reaches the template as its reasoning_effort
    r = await client.post("/api/chat", json={"model": "gpt-oss:tiny", "messages": ASK, "think": "high",
                                             "stream": False})
    assert r.status == 200, await r.text()


async def test_the_think_level_is_the_templates_reasoning_effort(fake_app, aiohttp_client, tmp_path: Path) -> None:
    _, app, log = _app(fake_app, tmp_path, ANSWER)
    client = await aiohttp_client(app)
    for think, effort in (("low", "low"), ("max", "high"), (True, None)):
        r = await client.post("/api/chat", json={"model": "gpt-oss:tiny", "messages": ASK, "think": think,
                                                 "stream": False})
        assert r.status == 200
        asked = _posted(log, "messages")[-1].get("chat_template_kwargs", {})
        assert asked.get("reasoning_effort") == effort, (think, asked)
    r = await client.post("/v1/chat/completions", json={"model": "gpt-oss:tiny", "messages": ASK,
                                                        "reasoning_effort": "low"})
    assert r.status == 200
    assert _posted(log, "messages")[-1]["chat_template_kwargs"]["reasoning_effort"] == "low"


async def test_raw_generate_is_not_parsed(fake_app, aiohttp_client, tmp_path: Path) -> None:
    _, app, log = _app(fake_app, tmp_path, ANSWER)
    client = await aiohttp_client(app)
    r = await client.post("/api/generate", json={"model": "gpt-oss:tiny", "prompt": "x", "raw": True,
                                                 "stream": False})
    body = await r.json()
    assert body["response"] == "analysisThe user greets.assistantfinalHello there!"  # as llama-server prints it
    assert not set(CONTROL) & set(_posted(log, "n_predict")[-1].get("preserved_tokens", []))


async def test_generate_through_the_template_is_parsed(fake_app, aiohttp_client, tmp_path: Path) -> None:
    _, app, _ = _app(fake_app, tmp_path, ANSWER)
    client = await aiohttp_client(app)
    r = await client.post("/api/generate", json={"model": "gpt-oss:tiny", "prompt": "hi", "stream": False})
    body = await r.json()
    assert (body["thinking"], body["response"]) == ("The user greets.", "Hello there!")


async def test_a_format_gets_its_json_as_the_content(fake_app, aiohttp_client, tmp_path: Path) -> None:
    """Under a JSON schema the runner's grammar lets no marker through: the answer is the JSON, as content."""
    _, app, _ = _app(fake_app, tmp_path, SEP.join(['{"a":', ' 1}']))
    client = await aiohttp_client(app)
    r = await client.post("/api/chat", json={"model": "gpt-oss:tiny", "messages": ASK, "stream": False,
                                             "format": {"type": "object"}})
    message = (await r.json())["message"]
    assert json.loads(message["content"]) == {"a": 1}
    assert not message.get("thinking")
