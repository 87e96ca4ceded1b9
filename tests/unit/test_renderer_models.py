"""Models that name one of Ollama's built-in renderers (`RENDERER qwen3-coder`, `qwen3.5`, ...), as Ollama's library
publishes its newest models: a `{{ .Prompt }}` stub for TEMPLATE, the prompt made by Go code in Ollama. Here their
GGUF's own chat template renders the prompt (the format those renderers reproduce), over the fake runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.fake_llama_server import CHATML_TEMPLATE
from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model

CONVERSATION = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
CHATML = "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


@pytest.fixture
async def client(fake_app, aiohttp_client, tmp_path: Path):
    settings, app = fake_app()
    with_template = write_tiny_gguf(tmp_path / "chatml.gguf", chat_template=CHATML_TEMPLATE)
    create_tiny_model(settings, with_template, name="coder", template="{{ .Prompt }}", renderer="qwen3-coder",
                      parser="qwen3-coder", requires="0.12.0")
    create_tiny_model(settings, with_template, name="stub", template="{{ .Prompt }}")
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "bare.gguf"), name="bare-coder",
                      template="[{{ .Prompt }}]", renderer="qwen3-coder")
    return await aiohttp_client(app)


async def rendered(client, path: str, **body) -> str:
    r = await client.post(path, json={**body, "_debug_render_only": True})
    assert r.status == 200, await r.text()
    return (await r.json())["_debug_info"]["rendered_template"]


async def test_a_renderer_models_chat_is_rendered_by_its_gguf_template(client) -> None:
    assert await rendered(client, "/api/chat", model="coder", messages=CONVERSATION) == CHATML
    r = await client.post("/v1/chat/completions", json={"model": "coder", "messages": CONVERSATION,
                                                        "max_tokens": 2})
    assert r.status == 200
    # its Modelfile is still what was created
    show = await (await client.post("/api/show", json={"model": "coder"})).json()
    assert show["template"] == "{{ .Prompt }}"
    assert "\nRENDERER qwen3-coder\nPARSER qwen3-coder\nREQUIRES 0.12.0\n" in show["modelfile"]
    assert show["requires"] == "0.12.0"  # as Ollama shows it
    assert "requires" not in await (await client.post("/api/show", json={"model": "stub"})).json()


async def test_without_a_renderer_or_a_gguf_template_the_template_renders(client) -> None:
    assert await rendered(client, "/api/chat", model="stub", messages=CONVERSATION) == "hi"
    assert await rendered(client, "/api/chat", model="bare-coder", messages=CONVERSATION) == "[hi]"


async def test_a_template_the_request_gives_renders_whatever_the_renderer(client) -> None:
    assert await rendered(client, "/api/generate", model="coder", prompt="hi", template="<{{ .Prompt }}>") == "<hi>"
    assert await rendered(client, "/api/generate", model="coder", prompt="hi") == \
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


CODER_CALL = ("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n"
              "</parameter>\n</function>\n</tool_call>")
WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "the weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]


async def test_a_qwen3_coder_model_answers_its_tool_calls_as_tool_calls(fake_app, aiohttp_client,
                                                                        tmp_path: Path) -> None:
    """Qwen3-Coder writes its calls as XML (Ollama's `PARSER qwen3-coder`): they come back as tool_calls, on the
    native and the OpenAI routes."""
    settings, app = fake_app({"FAKE_REPLY": CODER_CALL})
    template = "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if tools %}{{ tools }}{% endif %}"
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "tools.gguf", chat_template=template), name="coder",
                      template="{{ .Prompt }}", renderer="qwen3-coder", parser="qwen3-coder")
    client = await aiohttp_client(app)
    ask = [{"role": "user", "content": "weather in Paris?"}]
    r = await client.post("/api/chat", json={"model": "coder", "messages": ask, "tools": WEATHER, "stream": False})
    body = await r.json()
    assert r.status == 200, body
    assert body["message"]["content"] == ""
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in body["message"]["tool_calls"]] == [
        ("get_weather", {"city": "Paris", "days": 3})]
    r = await client.post("/v1/chat/completions", json={"model": "coder", "messages": ask, "tools": WEATHER})
    choice = (await r.json())["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"]["arguments"] == '{"city":"Paris","days":3}'
