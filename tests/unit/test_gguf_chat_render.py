"""A model without an Ollama TEMPLATE chats through its GGUF's Jinja template (issue 38): rendered in-process once
the runner's /apply-template has agreed on a request of the same shape, so later chats skip that round trip;
where the runner renders differently, the runner's prompt is the one sent, every time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ollama_py.server.app import create_app
from tests.fakes.fake_llama_server import CHATML_TEMPLATE
from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings
from tests.helpers.loop import loop_watch

OTHER_TEMPLATE = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
# ChatML, as the fake's /apply-template renders it, that spins ~0.5 s on a message holding "spin"
SPIN_TEMPLATE = CHATML_TEMPLATE.replace(
    "{% for message in messages %}",
    "{% for message in messages %}{% if 'spin' in message['content'] %}{% for i in range(300000) %}{% endfor %}"
    "{% endif %}")


@pytest.fixture
async def client(tmp_path: Path, aiohttp_client):
    """Two models over the fake runner (whose /apply-template renders ChatML): `same`, whose GGUF template is
    that ChatML, and `other`, whose template the runner does not render as it is written."""
    settings = make_settings(tmp_path)
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "same.gguf", chat_template=CHATML_TEMPLATE), "same")
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "other.gguf", chat_template=OTHER_TEMPLATE), "other")
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "plain.gguf"), "plain")  # no template: ChatML
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "spin.gguf", chat_template=SPIN_TEMPLATE), "spin")
    log = tmp_path / "requests.jsonl"
    c = await aiohttp_client(create_app(settings, scheduler=fake_scheduler(settings, {"FAKE_LOG_FILE": str(log)})))

    def sent(kind: str) -> list[dict[str, Any]]:
        bodies = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        if kind == "apply-template":
            return [b for b in bodies if "messages" in b and "cache_prompt" not in b]
        return [b for b in bodies if "cache_prompt" in b]

    c.sent = sent  # type: ignore[attr-defined]
    return c


async def _chat(client: Any, model: str, messages: list[dict[str, Any]], route: str = "/api/chat") -> None:
    body: dict[str, Any] = {"model": model, "messages": messages, "stream": False}
    if route == "/api/chat":
        body["options"] = {"num_predict": 2}
    else:
        body["max_tokens"] = 2
    r = await client.post(route, json=body)
    assert r.status == 200, await r.text()


def chatml(messages: list[dict[str, str]]) -> str:
    return "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages) + \
        "<|im_start|>assistant\n"


async def test_after_one_agreeing_render_the_gguf_template_is_rendered_without_the_runner(client):
    turns = [[{"role": "user", "content": f"question {i}"}] for i in range(4)]
    for i, messages in enumerate(turns):
        await _chat(client, "same", messages, "/api/chat" if i % 2 else "/v1/chat/completions")
    assert len(client.sent("apply-template")) == 1  # the first chat of this shape, to compare
    assert [b["prompt"] for b in client.sent("completion")] == [chatml(m) for m in turns]


async def test_a_new_shape_of_conversation_is_compared_again(client):
    await _chat(client, "same", [{"role": "user", "content": "hi"}])
    with_system = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    await _chat(client, "same", with_system)
    await _chat(client, "same", with_system)
    assert len(client.sent("apply-template")) == 2
    assert client.sent("completion")[-1]["prompt"] == chatml(with_system)


async def test_where_the_runner_renders_differently_the_runner_renders_every_time(client):
    messages = [{"role": "user", "content": "hi"}]
    for _ in range(3):
        await _chat(client, "other", messages)
    assert len(client.sent("apply-template")) == 3
    assert [b["prompt"] for b in client.sent("completion")] == [chatml(messages)] * 3  # the runner's prompt


async def test_a_gguf_without_a_template_renders_llama_servers_chatml_here(client):
    turns = [[{"role": "user", "content": f"question {i}"}] for i in range(3)]
    for messages in turns:
        await _chat(client, "plain", messages)
    assert len(client.sent("apply-template")) == 1
    assert [b["prompt"] for b in client.sent("completion")] == [chatml(m) for m in turns]


async def test_a_cheap_template_that_turns_slow_for_one_request_never_holds_the_loop(client):
    """Small chats with a template known to be cheap render on the loop (no thread hop) under a 3 ms limit; a
    request that makes the same template spin passes that limit and is rendered in the template threads."""
    turns = [[{"role": "user", "content": f"question {i}"}] for i in range(4)]
    for messages in turns:
        await _chat(client, "spin", messages)
    spin = [{"role": "user", "content": "please spin"}]
    async with loop_watch() as gaps:
        await _chat(client, "spin", spin)
        await _chat(client, "spin", turns[0])
    assert gaps[0] < 0.3  # the spinning render (~0.5 s) ran in a thread
    assert [b["prompt"] for b in client.sent("completion")] == [chatml(m) for m in [*turns, spin, turns[0]]]


async def test_small_chats_with_a_cheap_template_render_on_the_loop(client):
    """The thread hop was ~0.2 ms of every chat's first token (issue 38): once the template is known to match the
    runner and to be cheap, a small chat renders on the loop, with no attempt given up."""
    from ollama_py.server.rendering import _POOL

    turns = [[{"role": "user", "content": f"question {i}"}] for i in range(6)]
    await _chat(client, "same", turns[0])  # compared with the runner; rendered in the threads, measured
    await _chat(client, "same", turns[1])
    runs, given_up = _POOL.inline_runs, _POOL.inline_given_up
    for messages in turns[2:]:
        await _chat(client, "same", messages)
    assert _POOL.inline_runs > runs and _POOL.inline_given_up == given_up
    assert [b["prompt"] for b in client.sent("completion")] == [chatml(m) for m in turns]


async def test_a_message_of_megabytes_is_rendered_by_the_runner(client):
    """A message past 4 MiB is rendered by the runner every time, even in a shape rendered here before: a render's
    steps over a message that long are C calls of milliseconds each that hold the GIL, several in a row, and they
    held the event loop ~40-110 ms for a 33 MiB message (bench/results/overhead.md, ninth session); the runner
    renders in its own process. A long conversation of ordinary messages is still rendered here."""
    small = [{"role": "user", "content": "hi"}]
    await _chat(client, "same", small)
    await _chat(client, "same", small)  # the shape is known: rendered here
    long_talk = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i} " + "x" * 4000}
                 for i in range(1201)]  # 4.8 MB in all, no message past 4 KB
    await _chat(client, "same", long_talk)
    await _chat(client, "same", long_talk)
    huge = [{"role": "user", "content": "word " * 900_000}]  # 4.5 MB in one message
    await _chat(client, "same", huge)
    await _chat(client, "same", huge, "/v1/chat/completions")
    sent = [b["messages"] for b in client.sent("apply-template")]
    # the small chat's first (to compare), the long conversation's first (a new shape), and each huge one
    assert [(len(m), len(m[-1]["content"])) for m in sent] == [(1, 2), (1201, 4010), (1, 4_500_000), (1, 4_500_000)]
    prompts = [b["prompt"] for b in client.sent("completion")]
    assert prompts[:2] == [chatml(small)] * 2
    assert prompts.count(chatml(huge)) == 2  # the runner's prompt, sent whole (then cut to the context)
