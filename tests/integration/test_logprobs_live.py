"""logprobs / top_logprobs on /api/generate and /api/chat against the real llama-server and SmolLM2 (issue 23)."""

from __future__ import annotations

import json

import ollama
import pytest

pytestmark = pytest.mark.integration

OPTIONS = {"num_predict": 8, "temperature": 0, "seed": 1}


def test_chat_logprobs_from_the_real_runner(live_server):
    reply = ollama.Client(host=live_server.url).chat(
        model=live_server.model, messages=[{"role": "user", "content": "Name a color."}], logprobs=True,
        top_logprobs=2, options=OPTIONS)
    assert reply.logprobs, "no logprobs in the answer"
    assert "".join(e.token for e in reply.logprobs) == reply.message.content
    for e in reply.logprobs:
        assert e.logprob <= 0
        assert len(e.top_logprobs) == 2
        assert e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob


def test_generate_streams_each_tokens_logprobs(live_server):
    r = live_server.api("POST", "/api/generate", json={
        "model": live_server.model, "prompt": "Count to five:", "logprobs": True, "top_logprobs": 0,
        "options": OPTIONS}, stream=True)
    assert r.status_code == 200
    chunks = [json.loads(line) for line in r.iter_lines() if line]
    entries = [e for c in chunks for e in c.get("logprobs", [])]
    assert entries and all(e["logprob"] <= 0 and "top_logprobs" not in e for e in entries)
    assert "".join(e["token"] for e in entries) == "".join(c["response"] for c in chunks)
    assert all(bytes(e["bytes"]).decode("utf-8", "replace").startswith(e["token"]) for e in entries if e["token"])


def test_top_logprobs_out_of_range_is_refused(live_server):
    r = live_server.api("POST", "/api/chat", json={"model": live_server.model, "logprobs": True, "top_logprobs": 21,
                                                  "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 400 and r.json() == {"error": "top_logprobs must be between 0 and 20"}
