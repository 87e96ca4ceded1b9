"""A GGUF chat template that thinks (Ollama's chatTemplateHasThinkingSupport: <think>...</think> in it) gives its
model the thinking capability, as current Ollama does: thoughts come apart from the answer, and `think` reaches
the template as enable_thinking (over the fake runner)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ollama_py.template.jinja_chat import template_thinks
from tests.fakes.fake_llama_server import CHATML_TEMPLATE
from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model

THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}")


def test_which_templates_think() -> None:
    assert template_thinks(THINKING_TEMPLATE)
    assert template_thinks("{% set c = m.content.split('</think>')[-1] %}{{ c }}")
    assert not template_thinks("{% set c = m.content.split('</think>')[-1] %}{{ m.reasoning_content }}")
    assert not template_thinks(CHATML_TEMPLATE)


@pytest.fixture
async def client(fake_app, aiohttp_client, tmp_path: Path):
    settings, app = fake_app({"FAKE_REPLY": "<think>two and two</think>four", "FAKE_LOG_FILE": str(tmp_path / "log")})
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "t.gguf", chat_template=THINKING_TEMPLATE), name="qwen")
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "c.gguf", chat_template=CHATML_TEMPLATE), name="plain")
    return await aiohttp_client(app)


async def chat(client, model: str, **extra) -> tuple[int, dict]:
    r = await client.post("/api/chat", json={"model": model, "stream": False, **extra,
                                             "messages": [{"role": "user", "content": "2+2?"}]})
    return r.status, await r.json()


async def test_a_thinking_template_gives_thinking_and_its_thoughts_come_apart(client) -> None:
    show = await (await client.post("/api/show", json={"model": "qwen"})).json()
    assert show["capabilities"] == ["completion", "thinking"]
    status, body = await chat(client, "qwen")
    assert status == 200, body
    assert (body["message"]["thinking"], body["message"]["content"]) == ("two and two", "four")


async def test_think_reaches_the_template_as_enable_thinking(client, tmp_path: Path) -> None:
    await chat(client, "qwen", think=False)
    sent = [json.loads(line) for line in (tmp_path / "log").read_text().splitlines()]
    renders = [b for b in sent if "messages" in b]
    assert renders and all(b.get("chat_template_kwargs") == {"enable_thinking": False} for b in renders)
    await chat(client, "qwen")  # thinking, as a thinking model does unless told not to
    sent = [json.loads(line) for line in (tmp_path / "log").read_text().splitlines()]
    assert [b for b in sent if "messages" in b][-1]["chat_template_kwargs"] == {"enable_thinking": True}
    await chat(client, "plain")  # a template that does not think: the runner's default
    sent = [json.loads(line) for line in (tmp_path / "log").read_text().splitlines()]
    assert "chat_template_kwargs" not in [b for b in sent if "messages" in b][-1]


async def test_a_template_that_does_not_think_still_refuses_think(client) -> None:
    status, body = await chat(client, "plain", think=True)
    assert status == 400 and body["error"] == '"plain" does not support thinking'
