"""Context shift (issue 37): an answer that reaches the end of the context goes on -- the runner shifts the
context, keeping num_keep tokens -- until num_predict or EOS, on every route, as Ollama's runners do; a request's
"shift": false stops it at the context's end with done_reason "length". Fake runner (it shifts like llama-server
with --context-shift); the real runner's test is tests/integration/test_context_shift_real.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ollama_py.runner.argv import LaunchSpec, build_argv
from ollama_py.server.completion import bounded_predict

NUM_CTX = 256  # a slot's context (the fake pads to 256 like llama.cpp, so this one is exact)
LONG = 400  # more tokens than the context holds
OPTIONS = {"num_ctx": NUM_CTX, "num_predict": LONG}


def test_runners_start_with_context_shift():
    argv = build_argv(LaunchSpec(model=Path("m.gguf"), num_keep=4), "llama-server", 1234)
    assert "--context-shift" in argv and argv[argv.index("--keep") + 1] == "4"
    assert "--context-shift" not in build_argv(LaunchSpec(model=Path("m.gguf"), context_shift=False), "x", 1)


@pytest.mark.parametrize("num_predict, expected", [
    (-1, 10 * NUM_CTX), (-2, 10 * NUM_CTX), (None, 10 * NUM_CTX), (0, 0), (100, 100), (5000, 2560),
], ids=["open-ended", "fill", "unset", "zero", "some", "more-than-ten-contexts"])
def test_open_ended_answers_get_ten_contexts(num_predict: Any, expected: int):
    assert bounded_predict(num_predict, NUM_CTX) == expected


@pytest.fixture
async def client(fake_app, aiohttp_client, tmp_path: Path):
    log = tmp_path / "runner.jsonl"
    # OLLAMA_CONTEXT_LENGTH: the OpenAI and Anthropic routes, which take no num_ctx, run at the small one too
    _, app = fake_app({"FAKE_TOKENS": "2000", "FAKE_LOG_FILE": str(log)}, num_parallel=1, context_length=NUM_CTX)
    c = await aiohttp_client(app)
    c.bodies = lambda: [b for line in log.read_text().splitlines()  # type: ignore[attr-defined]
                        if "prompt" in (b := json.loads(line))]
    return c


async def generate(client: Any, **extra: Any) -> dict[str, Any]:
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": "tell me a long story", "stream": False,
                                                 "options": OPTIONS, **extra})
    assert r.status == 200, await r.text()
    return await r.json()


async def test_an_answer_goes_on_past_the_end_of_the_context(client):
    body = await generate(client)
    assert body["eval_count"] == LONG > NUM_CTX - body["prompt_eval_count"]
    assert body["done_reason"] == "length" and body["context_shifted"] is True
    assert len(body["response"].split()) == LONG  # every token is there


async def test_shift_false_stops_at_the_end_of_the_context(client):
    body = await generate(client, shift=False)
    assert body["eval_count"] == NUM_CTX - body["prompt_eval_count"]
    assert body["done_reason"] == "length" and "context_shifted" not in body
    streamed = await client.post("/api/chat", json={"model": "tiny", "shift": False, "options": OPTIONS,
                                                    "messages": [{"role": "user", "content": "a long story"}]})
    last = json.loads((await streamed.text()).splitlines()[-1])
    assert last["done_reason"] == "length" and last["eval_count"] < NUM_CTX and "context_shifted" not in last


async def test_an_answer_that_ends_past_the_context_says_stop(fake_app, aiohttp_client):
    _, app = fake_app({"FAKE_TOKENS": "300"}, num_parallel=1)  # EOS after 300 tokens, past a 256-token context
    c = await aiohttp_client(app)
    body = await generate(c, options={"num_ctx": NUM_CTX})
    assert (body["eval_count"], body["done_reason"], body["context_shifted"]) == (301, "stop", True)


async def test_every_route_shifts(client):
    chat = await (await client.post("/api/chat", json={"model": "tiny", "stream": False, "options": OPTIONS,
                                                       "messages": [{"role": "user", "content": "a story"}]})).json()
    assert chat["eval_count"] == LONG and chat["context_shifted"] is True
    oai = await (await client.post("/v1/chat/completions", json={
        "model": "tiny", "max_tokens": LONG, "messages": [{"role": "user", "content": "a story"}]})).json()
    assert (oai["usage"]["completion_tokens"], oai["choices"][0]["finish_reason"]) == (LONG, "length")
    ant = await (await client.post("/v1/messages", json={
        "model": "tiny", "max_tokens": LONG, "messages": [{"role": "user", "content": "a story"}]})).json()
    assert (ant["usage"]["output_tokens"], ant["stop_reason"]) == (LONG, "max_tokens")
    resp = await (await client.post("/v1/responses", json={"model": "tiny", "input": "a story",
                                                           "max_output_tokens": LONG})).json()
    assert resp["usage"]["output_tokens"] == LONG
    streamed = await client.post("/v1/messages", json={"model": "tiny", "max_tokens": LONG, "stream": True,
                                                       "messages": [{"role": "user", "content": "a story"}]})
    usage = [json.loads(line[6:]) for line in (await streamed.text()).splitlines()
             if line.startswith("data: ") and "message_delta" in line][-1]
    assert (usage["usage"]["output_tokens"], usage["delta"]["stop_reason"]) == (LONG, "max_tokens")


async def test_num_keep_reaches_the_runner_and_an_open_ended_answer_is_bounded(client):
    await generate(client, options={"num_ctx": NUM_CTX, "num_keep": 10, "num_predict": 20})
    sent = client.bodies()[-1]
    assert (sent["n_keep"], sent["n_predict"]) == (10, 20)
    await generate(client, options={"num_ctx": NUM_CTX, "num_predict": -1})
    assert client.bodies()[-1]["n_predict"] == 10 * NUM_CTX


async def test_shift_false_refuses_a_prompt_longer_than_the_context(client):
    words = " ".join(["word"] * 300)
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": words, "stream": False, "shift": False,
                                                 "options": {"num_ctx": NUM_CTX}})
    assert r.status == 400 and (await r.json())["error"] == "the input length exceeds the context length"
    cut = await generate(client, prompt=words, options={"num_ctx": NUM_CTX, "num_predict": 8})
    assert cut["prompt_truncated"] is True and cut["eval_count"] == 8  # shifting runners cut a long prompt
