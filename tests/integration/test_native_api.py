"""/api/generate, /api/chat, /api/embed against the real llama-server and SmolLM2 (issue 6)."""

from __future__ import annotations

import json
import math
import threading
import time

import ollama
import pytest
import requests

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def client(live_server):
    return ollama.Client(host=live_server.url)


def test_generate_streams_chunks_then_a_final_with_metrics(live_server):
    r = live_server.api("POST", "/api/generate", json={
        "model": live_server.model, "prompt": "Name a color.", "options": {"num_predict": 8, "temperature": 0}},
        stream=True)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("application/x-ndjson")
    chunks = [json.loads(line) for line in r.iter_lines() if line]
    assert len(chunks) >= 2
    assert all(c["done"] is False for c in chunks[:-1])
    final = chunks[-1]
    assert final["done"] is True and final["done_reason"] in ("stop", "length")
    for key in ("total_duration", "load_duration", "prompt_eval_count", "prompt_eval_duration", "eval_count",
                "eval_duration"):
        assert isinstance(final[key], int)
    assert final["eval_count"] <= 8 and final["prompt_eval_count"] > 0
    assert "".join(c["response"] for c in chunks).strip()
    assert isinstance(final["context"], list) and all(isinstance(t, int) for t in final["context"])


def test_what_the_runner_counted_reaches_every_protocol(live_server):
    """The runner's stop event is asked for by field (response_fields): its counts, timings, stop reason and stop
    word still reach the native final chunk and Anthropic's message, streamed and not."""
    ask = {"model": live_server.model, "prompt": "Write a long story about a dragon named", "raw": True,
           "options": {"num_predict": 6, "temperature": 0, "seed": 3}}
    first = live_server.api("POST", "/api/generate", json={**ask, "stream": False}).json()
    assert first["done_reason"] == "length" and first["eval_count"] == 6
    assert first["prompt_eval_count"] > 1 and first["prompt_eval_duration"] > 0 and first["eval_duration"] > 0
    lines = [json.loads(x) for x in live_server.api("POST", "/api/generate", json=ask, stream=True).iter_lines() if x]
    again = lines[-1]
    assert again["done_reason"] == "length" and again["eval_count"] == 6
    assert again["prompt_eval_count"] < first["prompt_eval_count"]  # the cached prefix is not evaluated again
    chat = {"model": live_server.model, "max_tokens": 8, "temperature": 0,
            "messages": [{"role": "user", "content": "Write a long story about a dragon."}]}
    plain = live_server.api("POST", "/v1/messages", json=chat).json()
    assert plain["stop_reason"] == "max_tokens" and plain["stop_sequence"] is None
    words = "".join(b.get("text", "") for b in plain["content"]).split()
    stop = words[min(2, len(words) - 1)]
    msg = live_server.api("POST", "/v1/messages", json={**chat, "stop_sequences": [stop]}).json()
    assert msg["stop_reason"] == "stop_sequence" and msg["stop_sequence"] == stop
    assert stop not in "".join(b.get("text", "") for b in msg["content"])
    assert msg["usage"]["input_tokens"] > 0 and msg["usage"]["output_tokens"] > 0


def test_generate_non_stream_matches_streamed_text(client, live_server):
    opts = {"num_predict": 12, "temperature": 0, "seed": 42}
    one = client.generate(model=live_server.model, prompt="Count to five:", options=opts)
    streamed = "".join(c.response for c in client.generate(model=live_server.model, prompt="Count to five:",
                                                          options=opts, stream=True))
    assert one.done and one.response == streamed


def test_seed_and_zero_temperature_repeat_exactly(client, live_server):
    opts = {"num_predict": 16, "temperature": 0, "seed": 7}
    a = client.chat(model=live_server.model, messages=[{"role": "user", "content": "Tell me a fact."}], options=opts)
    b = client.chat(model=live_server.model, messages=[{"role": "user", "content": "Tell me a fact."}], options=opts)
    assert a.message.content == b.message.content and a.message.content


def test_num_predict_ends_with_length(client, live_server):
    r = client.generate(model=live_server.model, prompt="Write a long story about a dragon.",
                        options={"num_predict": 5, "temperature": 0})
    assert r.done_reason == "length" and r.eval_count == 5


def test_stop_sequence_cuts_the_text(client, live_server):
    free = client.generate(model=live_server.model, prompt="List the numbers from 1 to 10 separated by commas.",
                           options={"num_predict": 40, "temperature": 0})
    assert "3" in free.response
    cut = client.generate(model=live_server.model, prompt="List the numbers from 1 to 10 separated by commas.",
                          options={"num_predict": 40, "temperature": 0, "stop": ["3"]})
    assert "3" not in cut.response
    assert free.response.startswith(cut.response)
    assert cut.done_reason == "stop"


def test_format_json_schema_gives_valid_json(client, live_server):
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
              "required": ["name", "age"]}
    r = client.chat(model=live_server.model, format=schema, options={"temperature": 0, "num_predict": 60},
                    messages=[{"role": "user", "content": "Invent a person. Answer in JSON with name and age."}])
    data = json.loads(r.message.content)
    assert isinstance(data["name"], str) and isinstance(data["age"], int)


def test_chat_streaming_and_model_system_prompt(client, live_server):
    parts = list(client.chat(model=live_server.model, stream=True, options={"num_predict": 8},
                             messages=[{"role": "user", "content": "Hello!"}]))
    assert parts[-1].done and parts[-1].message.role == "assistant"
    assert "".join(p.message.content for p in parts).strip()


def test_context_continues_a_generation(client, live_server):
    first = client.generate(model=live_server.model, prompt="My name is Ada. Remember it.",
                            options={"num_predict": 8, "temperature": 0})
    assert first.context
    second = client.generate(model=live_server.model, prompt="What is my name?", context=first.context,
                             options={"num_predict": 12, "temperature": 0})
    assert second.context[: len(first.context)] == first.context  # the old context is the new prompt's prefix
    assert len(second.context) > len(first.context) + second.eval_count


def test_embeddings_are_unit_length(client, live_server):
    r = client.embed(model=live_server.model, input=["The sky is blue.", "Grass is green."])
    assert len(r.embeddings) == 2 and r.prompt_eval_count > 0
    for vec in r.embeddings:
        assert len(vec) == 576
        assert math.isclose(math.sqrt(sum(x * x for x in vec)), 1.0, rel_tol=1e-4)
    short = client.embed(model=live_server.model, input="The sky is blue.", dimensions=64)
    assert len(short.embeddings[0]) == 64
    assert math.isclose(math.sqrt(sum(x * x for x in short.embeddings[0])), 1.0, rel_tol=1e-4)


def test_embed_refuses_overlong_input_without_truncate(live_server):
    r = live_server.api("POST", "/api/embed", json={"model": live_server.model, "input": "word " * 9000,
                                                     "truncate": False})
    assert r.status_code == 400
    assert r.json() == {"error": "the input length exceeds the context length"}


def test_embed_of_many_inputs_short_and_past_the_context_matches_one_by_one(live_server):
    """Issue 34: short inputs go to llama-server as text in the one batch, longer ones as their first num_ctx
    tokens (tokenized over a few kept-alive connections): the same vectors as one input at a time."""
    opts = {"num_ctx": 64}
    inputs = [f"Fact number {i}: the sky is blue." for i in range(40)] + [
        " ".join(f"word{i}x{j}" for j in range(60)) for i in range(40)]

    def embed(value: object) -> list[list[float]]:
        r = live_server.api("POST", "/api/embed", json={"model": live_server.model, "input": value, "options": opts})
        assert r.status_code == 200, r.text
        return r.json()["embeddings"]

    batch = embed(inputs)
    assert len(batch) == len(inputs)
    for i in (0, 39, 40, 79):
        (one,) = embed(inputs[i])
        assert max(abs(a - b) for a, b in zip(batch[i], one, strict=True)) < 2e-3, i


def test_legacy_embeddings(live_server):
    r = live_server.api("POST", "/api/embeddings", json={"model": live_server.model, "prompt": "hello"})
    assert r.status_code == 200 and len(r.json()["embedding"]) == 576


def test_unknown_model_is_404(live_server):
    r = live_server.api("POST", "/api/chat", json={"model": "nope:1b", "messages": [{"role": "user", "content": "x"}]})
    assert r.status_code == 404 and r.json() == {"error": "model 'nope:1b' not found"}


def test_client_hangup_frees_the_slot(live_server):
    body = {"model": live_server.model, "prompt": "Write a very long essay about the ocean.",
            "options": {"num_predict": 2000}}
    r = requests.post(live_server.url + "/api/generate", json=body, stream=True, timeout=120)
    lines = r.iter_lines()
    next(lines), next(lines)  # a couple of tokens arrived: the slot is busy
    r.close()  # hang up mid-stream
    # With one slot, this can only finish promptly if the abandoned generation was stopped.
    done = threading.Event()
    result = {}

    def follow_up():
        result["r"] = live_server.api("POST", "/api/generate", json={
            "model": live_server.model, "prompt": "Hi", "stream": False, "options": {"num_predict": 3}}, timeout=120)
        done.set()

    threading.Thread(target=follow_up, daemon=True).start()
    assert done.wait(120), "the follow-up request never got the slot"
    assert result["r"].status_code == 200 and result["r"].json()["eval_count"] <= 3


def test_second_turn_reuses_the_cached_prefix(client, live_server):
    # A system prompt no other test uses, so the first turn's prompt is evaluated in full.
    history = [{"role": "system", "content": "You are the cache test assistant."},
               {"role": "user", "content": "Describe a cat in one sentence."}]
    first = client.chat(model=live_server.model, messages=history, options={"num_predict": 20, "temperature": 0})
    history += [{"role": "assistant", "content": first.message.content},
                {"role": "user", "content": "And a dog?"}]
    second = client.chat(model=live_server.model, messages=history, options={"num_predict": 5, "temperature": 0})
    # The second prompt holds the whole first exchange; only what is new after the cached prefix is evaluated.
    assert second.prompt_eval_count < first.prompt_eval_count
    assert second.prompt_eval_count > 0


def test_empty_prompt_loads_and_keep_alive_zero_unloads(client, live_server):
    loaded = live_server.api("POST", "/api/generate", json={"model": live_server.model}).json()
    assert loaded["done"] is True and loaded["done_reason"] == "load"
    assert any(m["name"] == live_server.model for m in client.ps().models)
    unloaded = live_server.api("POST", "/api/generate", json={"model": live_server.model, "keep_alive": 0}).json()
    assert unloaded["done_reason"] == "unload"
    for _ in range(100):
        if not any(m.name == live_server.model for m in client.ps().models):
            break
        time.sleep(0.1)
    assert not any(m.name == live_server.model for m in client.ps().models)


def test_use_mmap_false_loads_and_answers(live_server):
    # the runner is started with this llama-server's spelling of "no mmap" (it refuses the old --no-mmap)
    r = live_server.api("POST", "/api/generate", json={
        "model": live_server.model, "prompt": "Say hi.", "stream": False,
        "options": {"use_mmap": False, "num_predict": 4, "temperature": 0}})
    assert r.status_code == 200, r.text
    assert r.json()["eval_count"] > 0
    live_server.unload()


def test_a_chat_message_of_megabytes_is_rendered_by_the_runner_and_cut(live_server):
    """A message past 4 MiB is rendered by the runner's /apply-template (server/rendering.py: a render here would
    hold the GIL for long C calls); its prompt is then cut to the context as any other."""
    huge = "The quick brown fox jumps over the lazy dog. " * 100_000  # 4.5 MB
    r = live_server.api("POST", "/api/chat", json={
        "model": live_server.model, "messages": [{"role": "user", "content": huge}], "stream": False,
        "options": {"num_ctx": 512, "num_predict": 4, "temperature": 0}})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["done"] is True and body["prompt_truncated"] is True
    assert 0 < body["prompt_eval_count"] <= 512
