"""Speculative decoding against the real llama-server and SmolLM2 (issue 26): SmolLM2 drafting for itself, and
prompt-lookup (n-gram) speculation, give the text plain decoding gives at temperature 0; a too-long prompt is cut
and marked, or refused with truncate: false."""

from __future__ import annotations

import pytest
import requests

from tests.helpers.serve import upload_blob

pytestmark = pytest.mark.integration

OPTIONS = {"temperature": 0, "seed": 7, "num_predict": 48}
PROMPT = ("Repeat this code exactly, renaming total to acc:\n"
          "def add(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total\n")


def _generate(live_server, model: str, **options) -> dict:
    r = live_server.api("POST", "/api/generate", json={"model": model, "prompt": PROMPT, "stream": False,
                                                       "options": {**OPTIONS, **options}})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture(scope="module")
def self_drafting(live_server) -> str:
    import os
    from pathlib import Path

    digest = upload_blob(live_server.url, Path(os.environ["OLLAMA_PY_TEST_MODEL"]))
    r = requests.post(f"{live_server.url}/api/create", timeout=300, json={
        "model": "smollm2-spec", "files": {"model.gguf": digest}, "draft_files": {"draft.gguf": digest},
        "parameters": {"draft_num_predict": 4}, "stream": False})
    assert r.status_code == 200, r.text
    return "smollm2-spec"


def test_a_draft_model_gives_the_same_text_at_temperature_0(live_server, self_drafting):
    live_server.unload()  # from a fresh runner, as the drafted model's is (see the n-gram test)
    plain = _generate(live_server, live_server.model)
    drafted = _generate(live_server, self_drafting)
    assert drafted["response"] == plain["response"] and plain["response"]
    show = live_server.api("POST", "/api/show", json={"model": self_drafting}).json()
    assert "\nDRAFT " in show["modelfile"]


def test_ngram_speculation_answers_the_same_way(live_server):
    """The whole text, each side from a freshly loaded runner (a prompt evaluated partly from a slot's cache is
    batched differently, which can tip a near tie at temperature 0 whatever the speculation)."""
    live_server.unload()
    plain = _generate(live_server, live_server.model)
    live_server.unload()
    ngram = _generate(live_server, live_server.model, draft_ngram=True)
    assert ngram["response"] == plain["response"] and plain["response"]


def test_a_prompt_longer_than_the_context_is_cut_and_marked(live_server):
    long = "word " * 700
    r = live_server.api("POST", "/api/generate", json={
        "model": live_server.model, "prompt": long, "stream": False,
        "options": {"num_ctx": 512, "num_predict": 4, "temperature": 0}})
    assert r.status_code == 200, r.text
    assert r.json()["prompt_truncated"] is True
    r = live_server.api("POST", "/api/generate", json={
        "model": live_server.model, "prompt": long, "stream": False, "truncate": False,
        "options": {"num_ctx": 512, "num_predict": 4}})
    assert r.status_code == 400
    assert r.json()["error"] == "the input length exceeds the context length"
