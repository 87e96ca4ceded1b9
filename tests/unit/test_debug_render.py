"""Ollama's `_debug_render_only` on /api/generate and /api/chat (over the fake runner): the prompt the request
would send, in one JSON answer, and nothing generated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.fake_llama_server import CHATML_TEMPLATE
from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model

TEMPLATE = "{{ range .Messages }}[{{ .Role }}]{{ .Content }}{{ end }}[assistant]"


@pytest.fixture
async def client(fake_app, aiohttp_client, tmp_path: Path):
    settings, app = fake_app({"FAKE_LOG_FILE": str(tmp_path / "runner.log")})
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "t.gguf"), name="templated", template=TEMPLATE,
                      system="be brief")
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "j.gguf", chat_template=CHATML_TEMPLATE), name="jinja")
    return await aiohttp_client(app)


def generated(tmp_path: Path) -> list[dict]:
    """The completion requests the runner was sent (FAKE_LOG_FILE holds every POSTed body; a completion's has
    n_predict, a rendering's or a tokenizing's none)."""
    log = tmp_path / "runner.log"
    bodies = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return [b for b in bodies if "n_predict" in b]


async def test_generate_answers_the_rendered_prompt_and_generates_nothing(client, tmp_path: Path) -> None:
    r = await client.post("/api/generate", json={"model": "templated", "prompt": "hello", "_debug_render_only": True})
    assert r.status == 200 and r.content_type == "application/json"  # one answer, though streaming by default
    body = await r.json()
    assert set(body) == {"model", "created_at", "response", "done", "_debug_info"}
    assert (body["model"], body["response"], body["done"]) == ("templated", "", False)
    assert body["_debug_info"] == {"rendered_template": "[system]be brief[user]hello[assistant]"}
    assert generated(tmp_path) == []
    # raw: the prompt as given
    r = await client.post("/api/generate", json={"model": "templated", "prompt": "as is", "raw": True,
                                                 "_debug_render_only": True})
    assert (await r.json())["_debug_info"]["rendered_template"] == "as is"


async def test_chat_answers_the_rendered_conversation(client, tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "and?"}]
    r = await client.post("/api/chat", json={"model": "templated", "messages": messages, "stream": False,
                                             "_debug_render_only": True})
    body = await r.json()
    assert set(body) == {"model", "created_at", "message", "done", "_debug_info"}
    assert body["message"] == {"role": "", "content": ""} and body["done"] is False
    assert body["_debug_info"]["rendered_template"] == "[system]be brief[user]hi[assistant]hello[user]and?[assistant]"
    # a model without a TEMPLATE: its GGUF's own chat template
    r = await client.post("/api/chat", json={"model": "jinja", "messages": messages[:1], "_debug_render_only": True})
    assert (await r.json())["_debug_info"]["rendered_template"] == \
        "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert generated(tmp_path) == []
    # the flag off: an ordinary answer
    r = await client.post("/api/chat", json={"model": "templated", "messages": messages, "stream": False,
                                             "_debug_render_only": False})
    assert (await r.json())["done"] is True
    assert [b["prompt"] for b in generated(tmp_path)] == ["[system]be brief[user]hi[assistant]hello[user]and?"
                                                          "[assistant]"]


async def test_a_flag_that_is_not_a_boolean_is_a_400(client) -> None:
    for path, extra in (("/api/generate", {"prompt": "x"}), ("/api/chat", {"messages": []})):
        r = await client.post(path, json={"model": "templated", "_debug_render_only": "yes", **extra})
        assert r.status == 400
        assert "_debug_render_only" in (await r.json())["error"]
        assert json.loads(await r.text())  # one JSON object
