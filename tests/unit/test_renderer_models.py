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
