"""Context shift on the real llama-server (issue 37): with a 256-token context, an answer asked for more tokens
than fit goes on past the end of the context (the runner shifts it, as Ollama's do) unless the request says
"shift": false, which stops it at the end with done_reason "length"."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration

NUM_CTX = 256  # llama.cpp pads a context to a multiple of 256: this one is exact
# A raw continuation the small model keeps going with for hundreds of tokens at temperature 0.
COUNTING = "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,"
OPTIONS = {"num_ctx": NUM_CTX, "num_predict": 400, "temperature": 0, "seed": 1}


def generate(live_server, **extra) -> dict:
    r = live_server.api("POST", "/api/generate", json={
        "model": live_server.model, "prompt": COUNTING, "raw": True, "stream": False, "options": OPTIONS, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_an_answer_goes_on_past_the_end_of_the_context(live_server) -> None:
    live_server.unload()  # a fresh slot: prompt_eval_count is the whole prompt
    body = generate(live_server)
    room = NUM_CTX - body["prompt_eval_count"]
    assert body["eval_count"] > room, body
    assert body["done_reason"] in ("stop", "length") and body["context_shifted"] is True


def test_shift_false_stops_at_the_end_of_the_context(live_server) -> None:
    live_server.unload()
    body = generate(live_server, shift=False)
    assert body["done_reason"] == "length" and "context_shifted" not in body
    assert body["eval_count"] + body["prompt_eval_count"] == NUM_CTX, body
