"""Log-probabilities on /api/generate and /api/chat (issue 23 item 4), over the fake runner, which answers
`n_probs` with per-token probabilities: Ollama's shape in every streamed chunk and in the whole answer, the
refusals Ollama gives, and the official client and ollama-python's two logprobs examples reading them."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from ollama_py.server.app import create_app
from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings

ASK = {"logprobs": True, "top_logprobs": 3}
CHAT = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]}
GENERATE = {"model": "tiny", "prompt": "hello there"}


@pytest.fixture
async def client(tmp_path: Path, tiny_gguf: Path, aiohttp_client):
    """The app over the fake runner; client.sent() is every /completion body the runner got (not /tokenize)."""
    settings = make_settings(tmp_path)
    create_tiny_model(settings, tiny_gguf)
    create_tiny_model(settings, tiny_gguf, "toolish", template="{{ if .Tools }}{{ .Tools }}{{ end }}{{ .Prompt }}")
    log = tmp_path / "requests.jsonl"
    app = create_app(settings, scheduler=fake_scheduler(settings, {"FAKE_LOG_FILE": str(log)}))
    c = await aiohttp_client(app)
    c.sent = lambda: [b for line in log.read_text().splitlines()  # type: ignore[attr-defined]
                      if "cache_prompt" in (b := json.loads(line))]
    return c


async def _lines(client: Any, path: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    r = await client.post(path, json=body)
    assert r.status == 200, await r.text()
    return [json.loads(x) for x in (await r.text()).splitlines()]


def _check_entry(entry: dict[str, Any], top: int) -> None:
    """One token's entry in Ollama's shape: token, logprob <= 0, its UTF-8 bytes, `top` alternatives (the
    chosen token among them) in the same shape, most likely first; nothing else (no llama-server ids)."""
    assert set(entry) <= {"token", "logprob", "bytes", "top_logprobs"}
    assert entry["logprob"] <= 0
    assert entry.get("bytes", []) == list(entry["token"].encode())
    alternatives = entry.get("top_logprobs", [])
    assert len(alternatives) == top
    for alt in alternatives:
        assert set(alt) <= {"token", "logprob", "bytes"} and alt["logprob"] <= 0
    assert [a["logprob"] for a in alternatives] == sorted((a["logprob"] for a in alternatives), reverse=True)
    if top:
        assert alternatives[0]["token"] == entry["token"]


async def test_generate_streams_each_chunks_logprobs(client):
    lines = await _lines(client, "/api/generate", {**GENERATE, **ASK, "options": {"num_predict": 4}})
    chunks, final = lines[:-1], lines[-1]
    assert "".join(c["response"] for c in chunks) == "The quick brown fox"
    for c in chunks:  # one token a chunk: its own entry, whose text is the chunk's text
        assert [e["token"] for e in c["logprobs"]] == [c["response"]]
        _check_entry(c["logprobs"][0], 3)
    assert final["done"] is True and "logprobs" not in final
    assert client.sent()[-1]["n_probs"] == 3


async def test_generate_whole_answer_has_every_tokens_logprobs(client):
    r = await client.post("/api/generate", json={**GENERATE, **ASK, "stream": False, "options": {"num_predict": 5}})
    body = await r.json()
    assert r.status == 200 and body["response"] == "The quick brown fox jumps"
    assert "".join(e["token"] for e in body["logprobs"]) == body["response"]
    assert len(body["logprobs"]) == body["eval_count"] == 5
    for e in body["logprobs"]:
        _check_entry(e, 3)


async def test_chat_streams_logprobs_in_every_chunk_and_the_whole_answer(client):
    lines = await _lines(client, "/api/chat", {**CHAT, **ASK, "options": {"num_predict": 3}})
    for c in lines[:-1]:
        assert [e["token"] for e in c["logprobs"]] == [c["message"]["content"]]
    assert "logprobs" not in lines[-1]
    r = await client.post("/api/chat", json={**CHAT, **ASK, "stream": False, "options": {"num_predict": 3}})
    body = await r.json()
    assert body["message"]["content"] == "The quick brown"
    assert [e["token"] for e in body["logprobs"]] == ["The", " quick", " brown"]
    assert "logprobs" not in body["message"]  # top level, as Ollama's ChatResponse has it


async def test_top_logprobs_zero_gives_the_chosen_tokens_only(client):
    r = await client.post("/api/chat", json={**CHAT, "logprobs": True, "top_logprobs": 0, "stream": False,
                                              "options": {"num_predict": 2}})
    entries = (await r.json())["logprobs"]
    assert [e["token"] for e in entries] == ["The", " quick"]
    for e in entries:  # Ollama leaves out an empty top_logprobs
        assert "top_logprobs" not in e
        _check_entry(e, 0)


async def test_no_logprobs_unless_asked(client):
    for extra in ({}, {"logprobs": False}, {"top_logprobs": 5}):  # top_logprobs alone asks for nothing (Ollama)
        r = await client.post("/api/generate", json={**GENERATE, **extra, "stream": False,
                                                     "options": {"num_predict": 2}})
        assert r.status == 200 and "logprobs" not in await r.json()
        assert "n_probs" not in client.sent()[-1]
        lines = await _lines(client, "/api/chat", {**CHAT, **extra, "options": {"num_predict": 2}})
        assert not any("logprobs" in c for c in lines)


@pytest.mark.parametrize("path,body,error", [
    ("/api/generate", {**GENERATE, "logprobs": True, "top_logprobs": 21}, "top_logprobs must be between 0 and 20"),
    ("/api/chat", {**CHAT, "logprobs": True, "top_logprobs": 21}, "top_logprobs must be between 0 and 20"),
    ("/api/chat", {**CHAT, "logprobs": True, "top_logprobs": -1}, "top_logprobs must be between 0 and 20"),
    ("/api/generate", {**GENERATE, "top_logprobs": 1000}, "top_logprobs must be between 0 and 20"),
    ("/api/generate", {"top_logprobs": 21}, "top_logprobs must be between 0 and 20"),  # before the model
    ("/api/chat", {**CHAT, "logprobs": True, "top_logprobs": "3"}, None),
    ("/api/generate", {**GENERATE, "logprobs": "yes"}, None),
], ids=["generate-21", "chat-21", "chat-negative", "without-logprobs", "checked-first", "string-top", "string-flag"])
async def test_bad_logprobs_requests_are_a_400(client, path, body, error):
    r = await client.post(path, json=body)
    assert r.status == 400
    got = (await r.json())["error"]
    assert got == error if error else got.startswith("json: cannot unmarshal")


async def test_logprobs_with_tools_come_while_the_text_is_held(client):
    """With tools the text waits for the end (it may be a call); each token's log-probabilities do not."""
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    lines = await _lines(client, "/api/chat", {**CHAT, **ASK, "model": "toolish", "tools": tools,
                                               "options": {"num_predict": 3}})
    probs = [e["token"] for c in lines for e in c.get("logprobs", [])]
    assert probs == ["The", " quick", " brown"]
    assert "".join(c["message"]["content"] for c in lines) == "The quick brown"


async def test_a_thinking_models_every_token_has_its_logprobs(tmp_path: Path, tiny_gguf: Path, aiohttp_client):
    """Thoughts, answer and the tags between them: every generated token's entry, in order, in the stream."""
    settings = make_settings(tmp_path)
    create_tiny_model(settings, tiny_gguf, "thinker", template="{{ .Prompt }}{{ if .Thinking }}{{ end }}")
    reply = "<think> Let me think. </think> Hello there."
    c = await aiohttp_client(create_app(settings, scheduler=fake_scheduler(settings, {"FAKE_REPLY": reply})))
    lines = await _lines(c, "/api/chat", {**CHAT, **ASK, "model": "thinker"})
    assert "".join(x["message"].get("thinking", "") for x in lines) == "Let me think."
    assert "".join(x["message"]["content"] for x in lines) == "Hello there."
    assert "".join(e["token"] for x in lines for e in x.get("logprobs", [])) == reply


async def test_the_ollama_client_reads_logprobs(client):
    import ollama

    url = str(client.make_url("")).rstrip("/")
    oc = ollama.AsyncClient(host=url)
    reply = await oc.chat(model="tiny", messages=CHAT["messages"], logprobs=True, top_logprobs=3,
                          options={"num_predict": 4})
    assert [e.token for e in reply.logprobs] == ["The", " quick", " brown", " fox"]
    assert all(len(e.top_logprobs) == 3 and e.logprob <= 0 for e in reply.logprobs)
    chunks = [c async for c in await oc.generate(model="tiny", prompt="hi", logprobs=True, top_logprobs=1,
                                                 options={"num_predict": 3}, stream=True)]
    assert "".join(e.token for c in chunks for e in c.logprobs or []) == "The quick brown"


# ollama-python's examples/chat-logprobs.py and examples/generate-logprobs.py, as they are but for the client's
# host (the module-level ollama.chat/generate read OLLAMA_HOST once, at import) and the model's name.
def _print_logprobs(logprobs, label: str) -> None:
    print(f'\n{label}:')
    for entry in logprobs:
        token = entry.get('token', '')
        logprob = entry.get('logprob')
        print(f'  token={token!r:<12} logprob={logprob:.3f}')
        for alt in entry.get('top_logprobs', []):
            if alt['token'] != token:
                print(f'    alt -> {alt["token"]!r:<12} ({alt["logprob"]:.3f})')


def _chat_logprobs_example(ollama: Any) -> None:
    messages = [
        {
            'role': 'user',
            'content': 'hi! be concise.',
        },
    ]

    response = ollama.chat(
        model='tiny',
        messages=messages,
        logprobs=True,
        top_logprobs=3,
    )
    print('Chat response:', response['message']['content'])
    _print_logprobs(response.get('logprobs', []), 'chat logprobs')


def _generate_logprobs_example(ollama: Any) -> None:
    response = ollama.generate(
        model='tiny',
        prompt='hi! be concise.',
        logprobs=True,
        top_logprobs=3,
    )
    print('Generate response:', response['response'])
    _print_logprobs(response.get('logprobs', []), 'generate logprobs')


@pytest.mark.parametrize("example,heading", [(_chat_logprobs_example, "Chat response: "),
                                             (_generate_logprobs_example, "Generate response: ")],
                         ids=["chat-logprobs.py", "generate-logprobs.py"])
async def test_ollama_python_logprobs_examples_run(client, example, heading):
    import ollama

    url = str(client.make_url("")).rstrip("/")
    out = io.StringIO()

    def run() -> None:  # the examples use the blocking client: off the loop that serves them
        with contextlib.redirect_stdout(out):
            example(ollama.Client(host=url))

    await asyncio.to_thread(run)
    printed = out.getvalue().splitlines()
    assert printed[0] == heading + "The quick brown fox jumps over the lazy"
    tokens = [line for line in printed if line.startswith("  token=")]
    assert tokens[0] == "  token='The'        logprob=-0.100"
    assert len(tokens) == 9  # eight words and the end of the text
    assert sum(line.startswith("    alt -> ' alt") for line in printed) == 2 * 9


async def test_the_openai_route_keeps_its_own_shape(client):
    """/v1/chat/completions reads the same runner answer through the same converter, in OpenAI's shape: `bytes`
    and `top_logprobs` always there, even when no alternatives were asked for."""
    r = await client.post("/v1/chat/completions", json={**CHAT, "logprobs": True, "max_tokens": 2})
    content = (await r.json())["choices"][0]["logprobs"]["content"]
    assert [(e["token"], e["bytes"], e["top_logprobs"]) for e in content] == [
        ("The", list(b"The"), []), (" quick", list(b" quick"), [])]
    assert [e["logprob"] for e in content] == pytest.approx([-0.1, -0.15])
