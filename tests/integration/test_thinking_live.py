"""A thinking budget against the real llama-server (issue 26): SmolLM2 under a template that opens a <think> block
for it never closes the block on its own; with `reasoning_budget` llama-server closes it after that many tokens
and the rest of the answer is content; 0 answers at once. No small real thinking model is in the test budget, so
the thinking here is SmolLM2 writing inside a block the template opened, which is what the budget counts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.serve import create_from_file

pytestmark = pytest.mark.integration

# ChatML as SmolLM2 knows it, plus a thinking block opened for the model when it is asked to think.
TEMPLATE = ("{{- range .Messages }}<|im_start|>{{ .Role }}\n"
            "{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}{{ .Content }}<|im_end|>\n{{ end }}"
            "<|im_start|>assistant\n{{ if .Think }}<think>\n{{ end }}")
ASK = {"model": "smollm2-think", "stream": False, "messages": [{"role": "user", "content": "Why is the sky blue?"}]}
OPTIONS = {"temperature": 0, "seed": 1, "num_predict": 48}


@pytest.fixture(scope="module")
def thinker(live_server) -> str:
    create_from_file(live_server.url, "smollm2-think", Path(os.environ["OLLAMA_PY_TEST_MODEL"]), template=TEMPLATE)
    return "smollm2-think"


def chat(live_server, **options) -> dict:
    """From a freshly loaded runner: a prompt evaluated partly from a slot's cache is batched differently, which
    can tip a near tie at temperature 0 (and the budget test compares two runs' thoughts)."""
    live_server.unload("smollm2-think:latest")
    r = live_server.api("POST", "/api/chat", json={**ASK, "options": {**OPTIONS, **options}})
    assert r.status_code == 200, r.text
    return r.json()


def tokens(live_server, text: str) -> int:
    r = live_server.api("POST", "/api/tokenize", json={"model": "smollm2-think", "content": text})
    assert r.status_code == 200, r.text
    return len(r.json()["tokens"])


def test_without_a_budget_it_thinks_to_the_end(live_server, thinker) -> None:
    done = chat(live_server)
    assert done["message"]["thinking"] and not done["message"]["content"]
    assert done["done_reason"] == "length"


@pytest.mark.parametrize("budget", [5, 8, 12])
def test_a_budget_closes_the_thinking(live_server, thinker, budget: int) -> None:
    unbounded = chat(live_server)["message"]["thinking"]
    done = chat(live_server, reasoning_budget=budget)
    thinking = done["message"]["thinking"]
    assert thinking and unbounded.startswith(thinking), done  # the same thoughts, cut short
    assert tokens(live_server, thinking) <= budget
    # after the forced </think> the model answers, or ends its turn there (SmolLM2 does at some budgets)
    assert done["message"]["content"].strip() or done["done_reason"] == "stop", done


def test_a_zero_budget_answers_at_once(live_server, thinker) -> None:
    message = chat(live_server, reasoning_budget=0)["message"]
    assert not message.get("thinking")
    assert message["content"].strip()
