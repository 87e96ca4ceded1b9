"""Prompt-processing progress (issue 27): `"prompt_progress": true` on a streamed /api/generate or /api/chat sends
chunks carrying llama-server's progress through the prompt before the first token; without it (or not streamed)
the chunks are exactly Ollama's (fake runner, which reports progress per 512-token batch as llama-server does)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings

LONG = " ".join(f"w{i % 50}" for i in range(1200))


@pytest.fixture
async def client(tmp_path: Path, tiny_gguf: Path, aiohttp_client):
    from ollama_py.server.app import create_app

    settings = make_settings(tmp_path)
    create_tiny_model(settings, tiny_gguf)
    log = tmp_path / "requests.jsonl"
    c = await aiohttp_client(create_app(settings, scheduler=fake_scheduler(settings, {"FAKE_LOG_FILE": str(log)})))
    c.sent = lambda: [json.loads(line) for line in log.read_text().splitlines() if '"prompt"' in line]  # type: ignore
    return c


async def lines(client, path: str, body: dict) -> list[dict]:
    r = await client.post(path, json=body)
    assert r.status == 200, await r.text()
    return [json.loads(x) for x in (await r.text()).splitlines() if x.strip()]


@pytest.mark.parametrize("route", ["generate", "chat"])
async def test_progress_chunks_come_before_the_first_token(client, route: str) -> None:
    ask = {"model": "tiny", "prompt": LONG} if route == "generate" else {
        "model": "tiny", "messages": [{"role": "user", "content": LONG}]}
    out = await lines(client, f"/api/{route}", {**ask, "prompt_progress": True})
    progress = [c["prompt_progress"] for c in out if "prompt_progress" in c]
    assert len(progress) >= 3
    assert [p["processed"] for p in progress] == sorted(p["processed"] for p in progress)
    assert progress[0]["processed"] == 0 and progress[-1]["processed"] == progress[-1]["total"] > 1000
    first_text = next(i for i, c in enumerate(out) if (c.get("response") or c.get("message", {}).get("content")))
    assert all("prompt_progress" in c for c in out[:first_text]) and not any(
        "prompt_progress" in c for c in out[first_text:])
    empty = out[0]["response"] if route == "generate" else out[0]["message"]
    assert empty in ("", {"role": "assistant", "content": ""})
    assert out[-1]["done"] is True
    assert client.sent()[-1]["return_progress"] is True


async def test_off_by_default_and_when_not_streamed(client) -> None:
    out = await lines(client, "/api/generate", {"model": "tiny", "prompt": LONG})
    assert not any("prompt_progress" in c for c in out)
    assert "return_progress" not in client.sent()[-1]
    r = await client.post("/api/chat", json={"model": "tiny", "stream": False, "prompt_progress": True,
                                             "messages": [{"role": "user", "content": LONG}]})
    body = await r.json()
    assert r.status == 200 and "prompt_progress" not in body and body["message"]["content"]
    assert "return_progress" not in client.sent()[-1]


async def test_a_mistyped_flag_is_a_400(client) -> None:
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "prompt_progress": "yes"})
    assert r.status == 400 and "prompt_progress" in (await r.json())["error"]
