"""The per-token fast path (server/streaming.py Lane) with the real llama-server and SmolLM2: most tokens of a
plain stream are written by the lane, and most of those unparsed (runner/sse.py _PLAIN), and the lane ends the body
from llama-server's stop event. A llama.cpp upgrade that changed the token event's fields or their order, or its
stop event's content, would leave every answer right and only slower, which no other test would notice; this one
fails instead."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ollama_py.server.app import create_app
from ollama_py.server.streaming import Lane
from tests.helpers.app import create_tiny_model, make_settings
from tests.helpers.paths import required_path

pytestmark = pytest.mark.integration

PROMPT = "List twenty animals, one per line, with no other text."
OPTIONS = {"temperature": 0, "num_predict": 64, "seed": 1}


@pytest.fixture
async def client(tmp_path: Path, aiohttp_client: Any) -> Any:
    model = required_path("OLLAMA_PY_TEST_MODEL")
    runners = required_path("OLLAMA_PY_TEST_RUNNERS_DIR")
    settings = make_settings(tmp_path, runners_dir=runners)
    create_tiny_model(settings, model, "smollm2:135m")
    return await aiohttp_client(create_app(settings))


def taken() -> tuple[int, int]:
    return Lane.totals["unparsed"], Lane.totals["parsed"]


def ended() -> int:
    return Lane.totals["ended"]


async def test_most_tokens_of_a_native_stream_take_the_lane_unparsed(client: Any) -> None:
    before, ends = taken(), ended()
    r = await client.post("/api/chat", json={"model": "smollm2:135m", "options": OPTIONS,
                                             "messages": [{"role": "user", "content": PROMPT}]})
    assert r.status == 200
    lines = [json.loads(line) for line in (await r.text()).splitlines()]
    final = lines[-1]
    assert final["done"] is True and final["eval_count"] >= 32 and final["prompt_eval_count"] > 0, final
    assert ended() - ends == 1  # the last chunk, from llama-server's stop event
    unparsed, parsed = (a - b for a, b in zip(taken(), before, strict=True))
    chunks = sum(1 for line in lines[:-1] if line["message"]["content"])
    # Every text chunk (the first too, with the headers) but whatever a slow moment sent the ordinary way.
    assert unparsed + parsed >= 0.8 * chunks, (unparsed, parsed, chunks)
    assert unparsed >= 0.5 * chunks, f"only {unparsed} of {chunks} tokens matched runner/sse.py _PLAIN"


async def test_most_tokens_of_an_openai_stream_take_the_lane(client: Any) -> None:
    before, ends = taken(), ended()
    r = await client.post("/v1/chat/completions", json={
        "model": "smollm2:135m", "stream": True, "temperature": 0, "max_tokens": 64, "seed": 1,
        "messages": [{"role": "user", "content": PROMPT}]})
    assert r.status == 200
    events = [json.loads(line[6:]) for line in (await r.text()).splitlines()
              if line.startswith("data: {")]
    chunks = sum(1 for e in events if e["choices"] and e["choices"][0]["delta"].get("content"))
    unparsed, parsed = (a - b for a, b in zip(taken(), before, strict=True))
    assert chunks >= 32
    assert events[-1]["choices"][0]["finish_reason"] == "length" and ended() - ends == 1
    assert unparsed + parsed >= 0.8 * chunks, (unparsed, parsed, chunks)
    assert unparsed >= 0.5 * chunks, f"only {unparsed} of {chunks} tokens matched runner/sse.py _PLAIN"


async def test_an_openai_text_completion_stream_takes_the_lane_start_to_end(client: Any) -> None:
    before, ends = taken(), ended()
    body = {"model": "smollm2:135m", "stream": True, "temperature": 0, "max_tokens": 48, "seed": 1, "prompt": PROMPT}
    r = await client.post("/v1/completions", json=body)
    assert r.status == 200
    text = await r.text()
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    streamed = "".join(e["choices"][0]["text"] for e in events if e["choices"])
    whole = await (await client.post("/v1/completions", json={**body, "stream": False})).json()
    assert streamed == whole["choices"][0]["text"] and len(streamed) > 40
    assert events[-1]["choices"][0]["finish_reason"] == whole["choices"][0]["finish_reason"]
    assert text.endswith("data: [DONE]\n\n") and ended() - ends == 1
    unparsed, parsed = (a - b for a, b in zip(taken(), before, strict=True))
    chunks = sum(1 for e in events if e["choices"] and e["choices"][0]["text"])
    assert unparsed + parsed >= 0.8 * chunks, (unparsed, parsed, chunks)


async def _counts_in(before: tuple[int, int], ends: int) -> tuple[int, int, int]:
    """The lane's counts since `before` once the response's handler is done (they join the totals then, which may
    be just after the client read the end of the body)."""
    import asyncio

    for _ in range(1000):
        if ended() > ends:
            break
        await asyncio.sleep(0.01)
    unparsed, parsed = (a - b for a, b in zip(taken(), before, strict=True))
    return unparsed, parsed, ended() - ends


async def test_an_anthropic_message_stream_takes_the_lane_start_to_end(client: Any) -> None:
    """Claude Code's route: the message's opening, every text delta and the message's end written by the lane
    (MessageStream's events, as the ordinary way makes them); the same text as the whole message."""
    before, ends = taken(), ended()
    body = {"model": "smollm2:135m", "max_tokens": 48, "temperature": 0, "stream": True,
            "messages": [{"role": "user", "content": PROMPT}]}
    r = await client.post("/v1/messages", json=body)
    assert r.status == 200
    events = [json.loads(line[6:]) for line in (await r.text()).splitlines() if line.startswith("data: {")]
    deltas = [e["delta"]["text"] for e in events if e["type"] == "content_block_delta"]
    assert [e["type"] for e in events[:3]] == ["message_start", "ping", "content_block_start"]
    assert [e["type"] for e in events[-3:]] == ["content_block_stop", "message_delta", "message_stop"]
    unparsed, parsed, ended_bodies = await _counts_in(before, ends)
    whole = await (await client.post("/v1/messages", json={**body, "stream": False})).json()
    assert "".join(deltas) == whole["content"][0]["text"] and len(deltas) >= 24
    assert events[-2]["delta"]["stop_reason"] == whole["stop_reason"] == "max_tokens"
    assert ended_bodies == 1
    assert unparsed + parsed >= 0.8 * len(deltas), (unparsed, parsed, len(deltas))
    assert unparsed >= 0.5 * len(deltas), f"only {unparsed} of {len(deltas)} tokens matched runner/sse.py _PLAIN"


async def test_a_responses_stream_takes_the_lane_start_to_end(client: Any) -> None:
    """Codex's route: each event numbered in order, the text deltas and the response's end written by the lane."""
    before, ends = taken(), ended()
    body = {"model": "smollm2:135m", "max_output_tokens": 48, "temperature": 0, "stream": True, "input": PROMPT}
    r = await client.post("/v1/responses", json=body)
    assert r.status == 200
    events = [json.loads(line[6:]) for line in (await r.text()).splitlines() if line.startswith("data: {")]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert events[-1]["type"] == "response.completed"
    unparsed, parsed, ended_bodies = await _counts_in(before, ends)
    whole = await (await client.post("/v1/responses", json={**body, "stream": False})).json()
    assert "".join(deltas) == whole["output"][0]["content"][0]["text"] and len(deltas) >= 24
    assert ended_bodies == 1
    assert unparsed + parsed >= 0.8 * len(deltas), (unparsed, parsed, len(deltas))
