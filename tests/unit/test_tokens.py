"""/api/tokenize, /api/detokenize and Anthropic's /v1/messages/count_tokens over the fake runner (whose tokenizer
gives each whitespace-led word one id, so a round trip returns the text)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from ollama_py.server.app import create_app
from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings


@pytest.fixture
async def client(tmp_path: Path, tiny_gguf: Path, aiohttp_client):
    settings = make_settings(tmp_path)
    create_tiny_model(settings, tiny_gguf)
    return await aiohttp_client(create_app(settings, scheduler=fake_scheduler(settings)))


async def test_tokenize_then_detokenize_gives_the_text_back(client):
    r = await client.post("/api/tokenize", json={"model": "tiny", "text": "Why is the sky blue?"})
    assert r.status == 200, await r.text()
    out = await r.json()
    assert out["model"] == "tiny"
    assert len(out["tokens"]) == 5 and all(isinstance(t, int) for t in out["tokens"])
    assert out["total_duration"] > 0 and out["load_duration"] >= 0
    r = await client.post("/api/detokenize", json={"model": "tiny", "tokens": out["tokens"]})
    assert r.status == 200, await r.text()
    assert (await r.json())["text"] == "Why is the sky blue?"


async def test_tokenize_takes_content_as_pr_12030_names_it(client):
    r = await client.post("/api/tokenize", json={"model": "tiny", "content": "one two"})
    assert len((await r.json())["tokens"]) == 2


async def test_tokenize_of_nothing_is_no_tokens(client):
    r = await client.post("/api/tokenize", json={"model": "tiny", "text": ""})
    assert (await r.json())["tokens"] == []


@pytest.mark.parametrize("tokens", [[1, "x"], [-1], [True], [2**31]], ids=["string", "negative", "bool", "too-big"])
async def test_detokenize_refuses_what_is_not_a_token_id(client, tokens):
    r = await client.post("/api/detokenize", json={"model": "tiny", "tokens": tokens})
    assert r.status == 400
    assert "token ids" in (await r.json())["error"]


async def test_detokenize_of_an_id_past_the_vocabulary_is_a_400(client):
    """Issue 34: llama-server's vocabulary lookup throws for such an id, and the gateway passed its 500 on."""
    r = await client.post("/api/detokenize", json={"model": "tiny", "tokens": [1, 31999, 32000]})
    assert r.status == 400
    assert (await r.json())["error"] == "token id 32000 is not in the model's vocabulary of 32000 tokens"
    r = await client.post("/api/detokenize", json={"model": "tiny", "tokens": [31999]})
    assert r.status == 200, await r.text()


async def test_tokenize_of_an_unknown_model_is_404(client):
    r = await client.post("/api/tokenize", json={"model": "nope", "text": "x"})
    assert r.status == 404
    assert (await r.json())["error"] == "model 'nope' not found"


async def test_tokenize_without_a_model_is_400(client):
    r = await client.post("/api/tokenize", json={"text": "x"})
    assert r.status == 400


async def test_count_tokens_counts_the_prompt_messages_would_send(client):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hello there"}]}
    r = await client.post("/v1/messages/count_tokens", json=body)
    assert r.status == 200, await r.text()
    short = (await r.json())["input_tokens"]
    body["system"] = "be brief and kind"
    r = await client.post("/v1/messages/count_tokens", json=body)
    longer = (await r.json())["input_tokens"]
    assert short > 2 and longer > short


async def test_count_tokens_errors_in_anthropics_envelope(client):
    r = await client.post("/v1/messages/count_tokens", json={"model": "tiny"})
    assert r.status == 400
    err = await r.json()
    assert err["type"] == "error" and err["error"]["message"] == "messages is required"


async def test_anthropic_client_counts_tokens(client):
    """The official anthropic client's messages.count_tokens."""
    anthropic = pytest.importorskip("anthropic")
    c = anthropic.Anthropic(base_url=str(client.make_url("")).rstrip("/"), api_key="unused")
    count = await asyncio.to_thread(c.messages.count_tokens, model="tiny",
                                    messages=[{"role": "user", "content": "hi there"}])
    assert count.input_tokens > 2


async def test_a_long_text_s_ids_are_the_runner_s_relayed_as_they_came(client):
    """Past 200,000 characters the ids are relayed as llama-server's bytes (never millions of Python ints, whose
    freeing alone held the loop 0.1 s for a 32 MB text): the same ids the runner gives, in Ollama's fields."""
    import aiohttp

    from ollama_py.server.appkeys import SCHEDULER

    text = "".join(f"word{i % 977} " for i in range(60_000))
    r = await client.post("/api/tokenize", json={"model": "tiny", "text": text})
    assert r.status == 200
    answer = await r.json()
    assert list(answer) == ["model", "tokens", "total_duration", "load_duration"]
    assert answer["model"] == "tiny" and answer["total_duration"] > 0
    (loaded,) = client.server.app[SCHEDULER].loaded.values()
    async with aiohttp.ClientSession(headers=loaded.client._headers) as s, \
            s.post(loaded.client.base_url + "/tokenize", json={"content": text}) as direct:
        assert answer["tokens"] == (await direct.json())["tokens"]
    assert len(answer["tokens"]) >= 60_000


@pytest.mark.parametrize("parts, expected", [
    ([b'{"tokens":[1,2,3]}'], [b"[1,2,3]"]),
    ([b'{"tokens": []}\n'], [b"[]"]),
    ([b'{"tok', b'ens":[1,', b"2,3]}"], [b"[1,2,3]"]),
    ([b'{"tokens":[' + b"12345," * 20, b"1," * 100, b"7]}"], [b"[" + b"12345," * 20 + b"1," * 100 + b"7]"]),
    ([b'{"tokens":[{"id":1,"piece":"a"}]}'], None),  # pieces: decoded the ordinary way
    ([b'{"tokens":[1,2],"x":1}'], None),
    ([b'{"error":{"message":"no"}}'], None),
    ([], None),
])
def test_id_array_takes_only_a_plain_array_of_ids(parts, expected):
    from ollama_py.runner.client import id_array

    got = id_array(parts)
    assert (got if got is None else [b"".join(got)]) == expected
