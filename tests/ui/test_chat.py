"""The console's chat in a real browser: streaming, stop, conversations kept across a reload, safe markdown.

The fast cases run over the fake llama-server (a fixed reply, a delay per token); the first test chats with the
real SmolLM2 through a live `ollama-py serve`, as a person would.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests
from playwright.sync_api import expect

from tests.helpers.screens import shoot

pytestmark = pytest.mark.browser


def open_chat(page: Any, url: str) -> None:
    page.goto(f"{url}/ui/")
    expect(page.locator("#chat-model option")).not_to_have_count(0)


def send(page: Any, text: str) -> None:
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")


@pytest.mark.integration
def test_chat_with_smollm2_streams_the_answer_and_its_speed(page: Any, live_server: Any) -> None:
    open_chat(page, live_server.url)
    page.select_option("#chat-model", live_server.model)
    send(page, "What is the capital of France? Answer in one sentence.")
    answer = page.locator(".msg.assistant").last
    expect(page.locator("#stop")).to_be_visible()  # the answer is still streaming in
    expect(answer.locator(".content")).not_to_be_empty()
    expect(answer.locator(".stats")).to_contain_text(re.compile(r"\d+ tokens · [\d.]+ tokens/s · first token after"))
    expect(page.locator("#send")).to_be_visible()
    assert answer.locator(".content").inner_text().strip()
    shoot(page, "chat")

    page.reload()  # the conversation lives in localStorage
    expect(page.locator(".msg.user .content")).to_have_text("What is the capital of France? Answer in one sentence.")
    expect(page.locator(".msg.assistant .stats")).to_contain_text("tokens/s")
    expect(page.locator("#chat-list li")).to_have_count(1)

    page.click("nav a[data-view=server]")  # the chat, as the server saw it
    expect(page.locator("#requests-table tbody tr", has_text="/api/chat").first).to_contain_text(live_server.model)
    expect(page.locator("#log")).to_contain_text("path=/api/chat status=200")
    shoot(page, "server")


@pytest.mark.integration
def test_stop_ends_a_smollm2_answer_mid_way(page: Any, live_server: Any) -> None:
    open_chat(page, live_server.url)
    page.select_option("#chat-model", live_server.model)
    send(page, "Write a very long story about a dragon who learns to bake bread. Use at least 800 words.")
    content = page.locator(".msg.assistant").last.locator(".content")
    expect(content).not_to_be_empty()  # the first tokens arrived
    page.click("#stop")
    expect(page.locator(".msg.assistant").last.locator(".note")).to_have_text("stopped")
    expect(page.locator("#send")).to_be_visible()
    stopped_at = content.inner_text()
    page.wait_for_timeout(1000)  # nothing more arrives after Stop
    assert content.inner_text() == stopped_at and stopped_at.strip()
    # the runner is free for the next request (asked through the API: a follow-up in this chat would carry the
    # cut-off story and SmolLM2 can ramble on for minutes)
    r = live_server.api("POST", "/api/generate", json={"model": live_server.model, "prompt": "Say hello.",
                                                       "stream": False, "options": {"num_predict": 4}})
    assert r.status_code == 200 and r.json()["eval_count"] > 0, r.text


def test_stop_ends_the_answer_mid_way(page: Any, fake_console: Any) -> None:
    console = fake_console({"FAKE_TOKENS": "400", "FAKE_TOKEN_DELAY": "0.05"})
    open_chat(page, console.url)
    send(page, "tell me a long story")
    content = page.locator(".msg.assistant .content")
    expect(content).to_contain_text("quick brown fox")  # the first words arrived
    page.click("#stop")
    expect(page.locator(".msg.assistant .note")).to_have_text("stopped")
    expect(page.locator("#send")).to_be_visible()
    words = content.inner_text().split()
    assert 0 < len(words) < 400  # it stopped before the model's 400 words
    expect(page.locator(".msg.assistant .stats")).to_have_count(0)


def test_a_long_prompt_shows_its_progress_until_the_answer_starts(page: Any, fake_console: Any) -> None:
    console = fake_console({"FAKE_REPLY": "Done reading.", "FAKE_TOKEN_DELAY": "1.5"})
    open_chat(page, console.url)
    send(page, " ".join(f"w{i}" for i in range(1500)))  # three of the fake runner's 512-token batches
    note = page.locator(".msg.assistant .prompt-progress")
    expect(note).to_have_text("processing prompt 100 %")  # the runner has read it all; the first token is coming
    expect(page.locator(".msg.assistant .content")).to_contain_text("Done reading.")
    expect(note).to_have_count(0)


def test_conversations_survive_a_reload_and_new_chat_starts_empty(page: Any, fake_console: Any) -> None:
    console = fake_console({"FAKE_REPLY": "Paris is the capital."})
    open_chat(page, console.url)
    send(page, "capital of France?")
    expect(page.locator(".msg.assistant .stats")).to_contain_text("tokens/s")
    page.click("#new-chat")
    expect(page.locator(".msg")).to_have_count(0)
    send(page, "second conversation")
    expect(page.locator(".msg.assistant .stats")).to_have_count(1)

    page.reload()
    expect(page.locator("#chat-list li")).to_have_count(2)
    expect(page.locator(".msg.user .content")).to_have_text("second conversation")
    page.locator("#chat-list li a", has_text="capital of France?").click()
    expect(page.locator(".msg.assistant .content")).to_have_text("Paris is the capital.")


def test_model_output_with_html_is_shown_as_text_and_never_runs(page: Any, fake_console: Any) -> None:
    reply = ('Look: <script>window.pwned = 1</script> <img src="x" onerror="window.pwned = 2"> '
             '<a href="javascript:window.pwned=3">click</a> and **bold** `code`\n\n```\nprint(1)\n```')
    console = fake_console({"FAKE_REPLY": reply})
    open_chat(page, console.url)
    send(page, "say something dangerous")
    content = page.locator(".msg.assistant .content")
    expect(page.locator(".msg.assistant .stats")).to_be_visible()
    expect(content.locator("strong")).to_have_text("bold")  # markdown is rendered...
    expect(content.locator("pre code")).to_have_text("print(1)\n")  # with a copy button on the code block
    expect(content.locator("pre button.copy")).to_have_text("Copy")
    assert content.locator("script").count() == 0  # ...but nothing that runs survives
    assert content.locator("[onerror]").count() == 0
    assert content.locator('a[href^="javascript"]').count() == 0
    page.locator("#chat-list li a").first.click()  # re-render from localStorage: still inert
    page.reload()
    expect(content.locator("strong")).to_have_text("bold")
    assert page.evaluate("window.pwned") is None
    assert not page.errors


def test_a_user_message_with_html_is_plain_text(page: Any, fake_console: Any) -> None:
    console = fake_console()
    open_chat(page, console.url)
    send(page, "<img src=x onerror=\"window.pwned=1\"> <b>not bold</b>")
    expect(page.locator(".msg.user .content")).to_have_text("<img src=x onerror=\"window.pwned=1\"> <b>not bold</b>")
    expect(page.locator(".msg.assistant .stats")).to_be_visible()
    assert page.evaluate("window.pwned") is None


def test_system_prompt_and_options_reach_the_model(page: Any, fake_console: Any, tmp_path: Path) -> None:
    log = tmp_path / "bodies.jsonl"
    console = fake_console({"FAKE_LOG_FILE": str(log)})
    open_chat(page, console.url)
    page.click("#toggle-settings")
    page.fill("#opt-system", "You are a pirate.")
    page.fill("#opt-temperature", "0.3")
    page.fill("#opt-seed", "42")
    send(page, "ahoy")
    expect(page.locator(".msg.assistant .stats")).to_be_visible()
    completions = [b for b in map(json.loads, log.read_text().splitlines()) if "prompt" in b]
    assert completions, "no completion reached the runner"
    body = completions[-1]
    assert (body["temperature"], body["seed"]) == (0.3, 42)
    assert "You are a pirate." in json.dumps(body["prompt"])
    page.reload()  # the settings belong to the conversation
    expect(page.locator("#opt-system")).to_have_value("You are a pirate.")
    expect(page.locator("#opt-seed")).to_have_value("42")


QWEN3_STYLE = ('{{ range .Messages }}<|im_start|>{{ .Role }}\n'
               '{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}{{ .Content }}<|im_end|>\n{{ end }}'
               '<|im_start|>assistant\n{{ if and .IsThinkSet (not .Think) }}<think>\n\n</think>\n\n{{ end }}')


def test_a_thinking_model_shows_its_thinking_folded(page: Any, fake_console: Any) -> None:
    console = fake_console({"FAKE_REPLY": "<think>Paris, surely.</think>The capital is Paris."})
    r = requests.post(f"{console.url}/api/create", json={"model": "thinker", "from": "tiny", "template": QWEN3_STYLE,
                                                         "stream": False}, timeout=60)
    assert r.ok, r.text
    open_chat(page, console.url)
    page.select_option("#chat-model", "thinker:latest")
    page.click("#toggle-settings")
    expect(page.locator("#opt-think")).to_be_checked()  # offered for a thinking model, on by default
    send(page, "capital of France?")
    answer = page.locator(".msg.assistant")
    expect(answer.locator(".content")).to_have_text("The capital is Paris.")
    thinking = answer.locator("details.thinking")
    expect(thinking).not_to_have_attribute("open", "")  # folded
    thinking.locator("summary").click()
    expect(thinking.locator(".thinking-text")).to_have_text("Paris, surely.")


def _multimodal_console(fake_console: Any, tmp_path: Path, tiny_gguf: Path, name: str,
                        encoders: dict[str, object]) -> tuple[Any, Callable[[], list[str]]]:
    """A console whose server has `name`, the tiny model with a projector of those encoders; and the media each
    multimodal request gave the runner, in order."""
    from tests.fakes.gguf_files import write_gguf
    from tests.helpers.serve import upload_blob

    log = tmp_path / "bodies.jsonl"
    console = fake_console({"FAKE_LOG_FILE": str(log)})
    projector = write_gguf(tmp_path / "mmproj.gguf", "clip", encoders, general_type="projector")
    files = {"model.gguf": upload_blob(console.url, tiny_gguf), "mmproj.gguf": upload_blob(console.url, projector)}
    r = requests.post(f"{console.url}/api/create", json={"model": name, "files": files, "stream": False}, timeout=60)
    assert r.ok, r.text

    def sent() -> list[str]:
        bodies = map(json.loads, log.read_text().splitlines())
        return [b["prompt"]["multimodal_data"] for b in bodies if isinstance(b.get("prompt"), dict)]

    return console, sent


def test_an_image_attached_for_a_vision_model_reaches_the_runner(page: Any, fake_console: Any, tmp_path: Path,
                                                                tiny_gguf: Path) -> None:
    console, sent = _multimodal_console(fake_console, tmp_path, tiny_gguf, "seer", {"clip.has_vision_encoder": True})
    image = tmp_path / "cat.png"
    image.write_bytes(b"\x89PNG cat pixels")

    open_chat(page, console.url)
    page.select_option("#chat-model", "tiny:latest")
    expect(page.locator("#attach-label")).to_be_hidden()  # tiny has no projector
    page.select_option("#chat-model", "seer:latest")
    expect(page.locator("#attach-label")).to_be_visible()
    page.set_input_files("#attach", str(image))
    expect(page.locator("#attachments img")).to_have_count(1)
    send(page, "what is this?")
    expect(page.locator(".msg.assistant .stats")).to_be_visible()
    expect(page.locator(".msg.user img.thumb")).to_have_count(1)
    assert sent()[-1] == [base64.b64encode(image.read_bytes()).decode()]


def test_a_sound_attached_for_an_audio_model_reaches_the_runner(page: Any, fake_console: Any, tmp_path: Path,
                                                               tiny_gguf: Path) -> None:
    """An audio model's chat offers an Audio attachment (audio/* files), shows the clip as a player in the
    message, and the runner gets the sound as multimodal data."""
    console, sent = _multimodal_console(fake_console, tmp_path, tiny_gguf, "ear",
                                        {"clip.has_vision_encoder": False, "clip.has_audio_encoder": True})
    sound = tmp_path / "talk.wav"
    sound.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(28))

    open_chat(page, console.url)
    page.select_option("#chat-model", "ear:latest")
    label = page.locator("#attach-label")
    expect(label).to_be_visible()
    expect(label).to_have_text("Audio")
    expect(page.locator("#attach")).to_have_attribute("accept", "audio/*")
    page.set_input_files("#attach", str(sound))
    expect(page.locator("#attachments audio")).to_have_count(1)
    send(page, "what is said?")
    expect(page.locator(".msg.assistant .stats")).to_be_visible()
    expect(page.locator(".msg.user audio.clip")).to_have_count(1)
    assert sent()[-1] == [base64.b64encode(sound.read_bytes()).decode()]
