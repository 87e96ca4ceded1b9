"""How `run` loads a model before the chat: /api/load's lines on the spinner, and Ollama's empty chat where the
server has no /api/load (against a canned server; the terminal itself is tests/integration/test_run_load.py)."""

from __future__ import annotations

from typing import Any

import pytest

from ollama_py.cli.session import RunOptions, load_model, load_text
from ollama_py.client import Client
from tests.helpers.fake_ollama import FakeOllama

ENTRY = {"status": "success", "name": "smollm2:135m", "model": "smollm2:135m", "state": "ready"}


@pytest.mark.parametrize(("event", "text"), [
    ({"status": "starting runner", "completed": 0, "total": 1000}, "loading smollm2:135m"),
    ({"status": "loading model", "completed": 0, "total": 1000}, "loading smollm2:135m 0 %"),
    ({"status": "loading model", "completed": 455, "total": 1000}, "loading smollm2:135m 45 %"),
    ({"status": "loading model", "completed": 0, "total": 0}, "loading smollm2:135m"),
    ({"status": "warming up", "completed": 1000, "total": 1000}, "warming up smollm2:135m"),
    ({"status": "something new"}, "loading smollm2:135m"),
], ids=["starting", "none-read", "45-percent", "no-total", "warming-up", "unknown-status"])
def test_the_spinner_says_what_is_happening(event: dict[str, Any], text: str) -> None:
    assert load_text("smollm2:135m", event) == text


def test_run_loads_with_api_load(fake: FakeOllama) -> None:
    fake.on("POST", "/api/load", [{"status": "loading model", "completed": 0, "total": 10}, ENTRY])
    with Client(fake.host) as client:
        load_model(client, RunOptions(model="smollm2:135m", keep_alive="10m"), spinner=False)
    assert fake.bodies("POST", "/api/load") == [{"model": "smollm2:135m", "keep_alive": "10m"}]
    assert fake.bodies("POST", "/api/chat") == []


def test_a_server_without_api_load_gets_an_empty_chat(fake: FakeOllama) -> None:
    fake.on("POST", "/api/load", (404, {"error": "404 page not found"}))
    fake.on("POST", "/api/chat", [{"message": {"role": "assistant", "content": ""}, "done": True,
                                   "done_reason": "load"}])
    with Client(fake.host) as client:
        load_model(client, RunOptions(model="smollm2:135m"), spinner=False)
    assert fake.bodies("POST", "/api/chat") == [{"model": "smollm2:135m", "messages": [], "stream": True}]
