"""Truncation you can see (Ollama #3839, #4967): a prompt longer than num_ctx is cut to fit and the final chunk
says `prompt_truncated`, or with `truncate: false` it is refused with a 400. Over the fake runner, which refuses
an over-long prompt exactly as llama-server does (400 exceed_context_size_error with the sizes)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from ollama_py.server.app import create_app
from ollama_py.server.truncation import cut_tokens, droppable, room_to_generate
from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings

SMALL = {"num_ctx": 256}  # the fake's slot holds 256 tokens; each word below is one token
LONG = " ".join(f"w{i}" for i in range(400))


@pytest.fixture
async def client(tmp_path: Path, tiny_gguf: Path, aiohttp_client):
    settings = make_settings(tmp_path, num_parallel=1)  # one slot: its context is num_ctx
    create_tiny_model(settings, tiny_gguf)
    log = tmp_path / "requests.jsonl"
    c = await aiohttp_client(create_app(settings, scheduler=fake_scheduler(settings, {"FAKE_LOG_FILE": str(log)})))
    c.prompts = lambda: [b["prompt"] for line in log.read_text().splitlines()  # type: ignore[attr-defined]
                         if "cache_prompt" in (b := json.loads(line))]
    return c


async def _final(client: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = await client.post(path, json=body)
    assert r.status == 200, await r.text()
    return [json.loads(x) for x in (await r.text()).splitlines()][-1]


async def test_generate_cuts_a_long_prompt_and_says_so(client, caplog):
    with caplog.at_level(logging.WARNING, logger="ollama_py.server.truncation"):
        final = await _final(client, "/api/generate", {"model": "tiny", "prompt": LONG, "raw": True,
                                                       "options": SMALL})
    assert final["done"] and final["prompt_truncated"] is True
    assert final["response"] == "" and final["eval_count"] > 0
    sent = client.prompts()[-1]
    assert isinstance(sent, list) and len(sent) <= 256 - 32  # room left to answer: an eighth of the context
    assert "prompt truncated" in caplog.text and "tokens 401 -> 224" in caplog.text


async def test_generate_context_is_the_cut_prompt_and_the_answer(client):
    final = await _final(client, "/api/generate", {"model": "tiny", "prompt": LONG, "options": SMALL})
    assert final["prompt_truncated"] is True
    assert final["context"][:len(client.prompts()[-1])] == client.prompts()[-1]


async def test_truncate_false_refuses_a_prompt_that_does_not_fit(client):
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": LONG, "truncate": False,
                                                 "options": SMALL})
    assert r.status == 400
    assert (await r.json())["error"] == "the input length exceeds the context length"
    r = await client.post("/api/chat", json={"model": "tiny", "messages": [{"role": "user", "content": LONG}],
                                             "truncate": False, "stream": False, "options": SMALL})
    assert r.status == 400
    assert (await r.json())["error"] == "the input length exceeds the context length"


async def test_a_prompt_that_fits_is_not_marked(client):
    final = await _final(client, "/api/generate", {"model": "tiny", "prompt": "short one", "options": SMALL})
    assert "prompt_truncated" not in final


async def test_chat_drops_the_oldest_messages_keeping_system_and_the_latest(client):
    history = []
    for i in range(8):
        history += [{"role": "user", "content": f"question{i} " + "x " * 30},
                    {"role": "assistant", "content": f"answer{i} " + "y " * 30}]
    messages = [{"role": "system", "content": "SYSTEMTEXT"}, *history, {"role": "user", "content": "LATEST"}]
    r = await client.post("/api/chat", json={"model": "tiny", "messages": messages, "stream": False,
                                             "options": SMALL})
    assert r.status == 200, await r.text()
    out = await r.json()
    assert out["prompt_truncated"] is True and out["message"]["content"]
    sent = client.prompts()[-1]
    assert isinstance(sent, str)
    assert "SYSTEMTEXT" in sent and "LATEST" in sent and "answer7" in sent
    assert "question0" not in sent


async def test_a_long_conversation_is_fitted_with_few_runner_calls(client, tmp_path):
    """Issue 34: fit_prompt dropped one message at a time and asked the runner to render and tokenize after each
    (1e5 messages: 1e5 round trips). Now a binary search: about log2(n) of each, and the same messages kept as
    one at a time would keep (the fewest dropped)."""
    n = 300
    messages = [{"role": "system", "content": "SYSTEMTEXT"}]
    messages += [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i} x"} for i in range(n)]
    messages.append({"role": "user", "content": "LATEST"})
    r = await client.post("/api/chat", json={"model": "tiny", "messages": messages, "stream": False,
                                             "options": SMALL})
    assert r.status == 200, await r.text()
    assert (await r.json())["prompt_truncated"] is True
    bodies = [json.loads(line) for line in (tmp_path / "requests.jsonl").read_text().splitlines()]
    tokenizes = [b for b in bodies if "content" in b and "add_special" in b]
    renders = [b for b in bodies if "messages" in b and "cache_prompt" not in b]
    assert len(tokenizes) <= 12 and len(renders) <= 13  # log2(300) is 8.2; one at a time took ~200 of each
    sent = client.prompts()[-1]
    first_kept = next(i for i in range(n) if f"m{i} " in sent)
    assert all(f"m{i} " in sent for i in range(first_kept, n)) and "SYSTEMTEXT" in sent and "LATEST" in sent
    limit = 256 - 256 // 8  # the context less the eighth left to generate
    # fits, and no more was dropped than needed: one more message (3 words) would not have fitted
    assert limit - 3 <= len(sent.split()) <= limit


@pytest.mark.parametrize(("tokens", "limit", "keep", "want"), [
    (list(range(10)), 10, 4, list(range(10))),
    (list(range(10)), 6, 2, [0, 1, 6, 7, 8, 9]),
    (list(range(10)), 4, 0, [6, 7, 8, 9]),
    (list(range(10)), 4, 9, [0, 1, 8, 9]),  # num_keep takes at most half
], ids=["fits", "keeps-head", "no-keep", "keep-capped"])
def test_cut_tokens(tokens, limit, keep, want):
    assert cut_tokens(tokens, limit, keep) == want


@pytest.mark.parametrize(("roles", "want"), [
    (["system", "user", "assistant", "user"], 1),
    (["system", "system", "user"], None),
    (["user"], None),
], ids=["oldest-non-system", "only-system-and-latest", "latest-only"])
def test_droppable(roles, want):
    assert droppable([{"role": r} for r in roles]) == want


@pytest.mark.parametrize(("n_ctx", "num_predict", "want"), [
    (4096, 100, 100), (4096, None, 512), (4096, -1, 512), (4096, 3000, 512)],
    ids=["num-predict", "unset", "unlimited", "too-big"])
def test_room_to_generate(n_ctx, num_predict, want):
    assert room_to_generate(n_ctx, num_predict) == want
