"""One request of a mixed load against the fake runner's `tiny` model (native generate, native chat, OpenAI chat in
turn), as the fault tests and bench/reliability.py send them."""

from __future__ import annotations

import json

import aiohttp

BUSY = "server busy, please try again.  maximum pending requests exceeded"
FAKE_SENTENCE = "The quick brown fox jumps over the lazy dog".split()


async def one_request(session: aiohttp.ClientSession, url: str, i: int) -> str:
    """One of three kinds of request; "ok" for a complete answer, "busy" for a full queue (Ollama's 503 on /api,
    429 with Retry-After on /v1), else what it was."""
    expected = " ".join(FAKE_SENTENCE[:4])
    kind = i % 3
    if kind == 0:
        async with session.post(url + "/api/generate", json={"model": "tiny", "prompt": f"q{i}", "stream": False}) as r:
            body = await r.json()
            if r.status == 200 and body["done"] and body["response"] == expected:
                return "ok"
            return "busy" if r.status == 503 and body == {"error": BUSY} else f"{r.status} {body}"
    if kind == 1:
        async with session.post(url + "/api/chat", json={"model": "tiny", "messages": [
                {"role": "user", "content": f"q{i}"}]}) as r:
            if r.status == 503:
                return "busy" if await r.json() == {"error": BUSY} else f"503 {await r.text()}"
            lines = [json.loads(line) async for line in r.content if line.strip()]
            text = "".join(line.get("message", {}).get("content", "") for line in lines)
            return "ok" if r.status == 200 and lines[-1].get("done") and text == expected else f"{r.status} {lines}"
    async with session.post(url + "/v1/chat/completions", json={"model": "tiny", "messages": [
            {"role": "user", "content": f"q{i}"}]}) as r:
        body = await r.json()
        if r.status == 200 and body["choices"][0]["message"]["content"] == expected:
            return "ok"
        busy = r.status == 429 and r.headers.get("Retry-After") and body["error"]["message"] == BUSY
        return "busy" if busy else f"{r.status} {body}"
