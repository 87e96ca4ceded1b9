"""Ollama's own gpt-oss (architecture `gptoss`, its library's Go TEMPLATE, tests/data/templates/gpt-oss.gotmpl):
rendered here as Ollama renders it -- reasoning level, tools as TypeScript, a tool-calling turn with its analysis,
a prefilled answer left open -- and its answer read as harmony over the fake runner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model
from tests.helpers.paths import ROOT

# every template here rendered by both engines (conftest.both_engines)
pytestmark = pytest.mark.usefixtures("both_engines")

TEMPLATE = (ROOT / "tests" / "data" / "templates" / "gpt-oss.gotmpl").read_text()
CONTROL = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>"]
SEP = "§"
WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                              "parameters": {"type": "object", "required": ["city"],
                                                             "properties": {"city": {"type": "string",
                                                                                     "description": "the city"}}}}}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]


async def _client(fake_app, aiohttp_client, tmp_path: Path, reply: str = "") -> Any:
    env = {"FAKE_REPLY": reply, "FAKE_REPLY_SPLIT": SEP, "FAKE_CONTROL_TOKENS": json.dumps(CONTROL)} if reply else {}
    settings, app = fake_app(env)
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "gptoss.gguf", arch="gptoss"), name="gpt-oss:20b",
                      template=TEMPLATE)
    return await aiohttp_client(app)


async def _rendered(client: Any, **body: Any) -> str:
    r = await client.post("/api/chat", json={"model": "gpt-oss:20b", "_debug_render_only": True, **body})
    assert r.status == 200, await r.text()
    return (await r.json())["_debug_info"]["rendered_template"]


async def test_it_renders_as_ollama_renders_it(fake_app, aiohttp_client, tmp_path: Path) -> None:
    client = await _client(fake_app, aiohttp_client, tmp_path)
    show = await (await client.post("/api/show", json={"model": "gpt-oss:20b"})).json()
    assert {"completion", "tools", "thinking"} <= set(show["capabilities"])
    plain = await _rendered(client, messages=ASK)
    assert "\n\nReasoning: medium\n\n# Valid channels" in plain
    assert plain.endswith("<|end|><|start|>user<|message|>Weather in Paris?<|end|><|start|>assistant")
    assert "\n\nReasoning: high\n\n" in await _rendered(client, messages=ASK, think="high")
    with_tools = await _rendered(client, messages=ASK, tools=WEATHER)
    assert ("<|start|>developer<|message|># Tools\n\n## functions\n\nnamespace functions {\n\n"
            "// The weather in a city\ntype get_weather = (_: {\n  // the city\n  city: string,\n}) => any;\n\n"
            "} // namespace functions<|end|>") in with_tools
    turn = [*ASK, {"role": "assistant", "content": "", "thinking": "Use the tool.",
                   "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
            {"role": "tool", "content": "sunny", "tool_name": "get_weather"}]
    assert (await _rendered(client, messages=turn, tools=WEATHER)).endswith(
        "<|start|>assistant<|channel|>analysis<|message|>Use the tool.<|end|>"
        '<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{"city":"Paris"}'
        "<|call|><|start|>functions.get_weather to=assistant<|message|>sunny<|end|><|start|>assistant")


async def test_its_answer_is_read_as_harmony(fake_app, aiohttp_client, tmp_path: Path) -> None:
    reply = SEP.join(["<|channel|>", "analysis", "<|message|>", "Check", " it.", "<|end|>", "<|start|>", "assistant",
                      "<|channel|>", "commentary to=functions.get_weather ", "<|constrain|>", "json", "<|message|>",
                      '{"city":', '"Paris"}'])
    client = await _client(fake_app, aiohttp_client, tmp_path, reply)
    r = await client.post("/api/chat", json={"model": "gpt-oss:20b", "messages": ASK, "tools": WEATHER,
                                             "stream": False})
    message = (await r.json())["message"]
    assert message["thinking"] == "Check it." and message["content"] == ""
    assert message["tool_calls"][0]["function"] == {"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}


@pytest.mark.parametrize(("last", "reply", "want"), [
    ({"role": "assistant", "content": "The answer is"}, " 42.", ("", " 42.")),  # left open in final
    ({"role": "assistant", "content": "", "thinking": "Let me"},
     SEP.join([" think.", "<|end|>", "<|start|>", "assistant", "<|channel|>", "final", "<|message|>", "Done"]),
     (" think.", "Done")),
])
async def test_a_prefilled_answer_goes_on_where_it_was_left(fake_app, aiohttp_client, tmp_path: Path,
                                                            last: dict, reply: str, want: tuple[str, str]) -> None:
    client = await _client(fake_app, aiohttp_client, tmp_path, reply)
    messages = [{"role": "user", "content": "hi"}, last]
    prompt = await _rendered(client, messages=messages)
    assert not prompt.endswith("<|start|>assistant") and not prompt.endswith("<|end|>")
    r = await client.post("/api/chat", json={"model": "gpt-oss:20b", "messages": messages, "stream": False})
    message = (await r.json())["message"]
    assert (message.get("thinking", ""), message["content"]) == want


async def test_a_tool_name_that_is_no_identifier_is_shown_renamed_and_called_back_by_its_own(
        fake_app, aiohttp_client, tmp_path: Path) -> None:
    """A client's `get-weather` (an MCP server's names often have hyphens or dots) is `get_weather` in the TypeScript
    the model reads, as Ollama shows it; the model's call to functions.get_weather reaches the client as a call to
    `get-weather`, on the native and the OpenAI routes."""
    tools = [{**WEATHER[0], "function": {**WEATHER[0]["function"], "name": "get-weather"}}]
    reply = SEP.join(["<|channel|>", "commentary to=functions.get_weather ", "<|constrain|>", "json", "<|message|>",
                      '{"city":"Paris"}'])
    client = await _client(fake_app, aiohttp_client, tmp_path, reply)
    prompt = await _rendered(client, messages=ASK, tools=tools)
    assert "type get_weather = (_: {" in prompt and "get-weather" not in prompt
    r = await client.post("/api/chat", json={"model": "gpt-oss:20b", "messages": ASK, "tools": tools, "stream": False})
    assert (await r.json())["message"]["tool_calls"][0]["function"]["name"] == "get-weather"
    r = await client.post("/v1/chat/completions", json={"model": "gpt-oss:20b", "messages": ASK, "tools": tools})
    call = (await r.json())["choices"][0]["message"]["tool_calls"][0]["function"]
    assert call["name"] == "get-weather" and json.loads(call["arguments"]) == {"city": "Paris"}
