"""Images and sound through the real llama-server. No multimodal GGUF reaches this machine, so the projectors are
synthetic: tiny random-weight encoders (tests/helpers/projectors.py) beside the real SmolLM2, which llama-server
loads with --mmproj as it loads a real model's. Their answers mean nothing; what these tests check is what a user
sees of the path: the capability, the media reaching the runner (the prompt grows by the media's tokens), each
protocol's way of sending media (Ollama's `images`, OpenAI's image_url and input_audio parts, Anthropic's image
blocks, /v1/audio/transcriptions) and the clear errors around them."""

from __future__ import annotations

import base64
import io
import os
import subprocess
import sys
from typing import Any

import anthropic
import openai
import pytest

from tests.helpers.paths import required_path
from tests.helpers.projectors import VISION_TOKENS, png_bytes, wav_bytes, write_audio_projector, write_vision_projector
from tests.helpers.serve import upload_blob

pytestmark = pytest.mark.integration

EYE, EAR = "smol-eye:latest", "smol-ear:latest"
PNG = base64.b64encode(png_bytes()).decode()
WAV = base64.b64encode(wav_bytes()).decode()
GREEDY = {"temperature": 0, "seed": 7, "num_predict": 4}


@pytest.fixture(scope="module")
def media_models(live_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """smol-eye (SmolLM2 + a vision projector) and smol-ear (+ an audio one), created as a user would, from the
    files; unloaded afterwards (the rest of the suite runs beside the live server's own model)."""
    tmp = tmp_path_factory.mktemp("media")
    weights = upload_blob(live_server.url, required_path("OLLAMA_PY_TEST_MODEL"))
    for name, projector in ((EYE, write_vision_projector(tmp / "eye-mmproj.gguf")),
                            (EAR, write_audio_projector(tmp / "ear-mmproj.gguf"))):
        r = live_server.api("POST", "/api/create", json={
            "model": name, "stream": False, "parameters": {"num_predict": 4},  # random weights seldom stop
            "files": {"model.gguf": weights, "mmproj.gguf": upload_blob(live_server.url, projector)}})
        assert r.status_code == 200, r.text
    yield live_server
    for name in (EYE, EAR):
        live_server.unload(name)
        live_server.api("DELETE", "/api/delete", json={"model": name})


@pytest.fixture(scope="module")
def oai(live_server: Any) -> openai.OpenAI:
    return openai.OpenAI(base_url=live_server.url + "/v1", api_key="ollama", max_retries=0, timeout=300)


def _prompt_tokens(oai: openai.OpenAI, model: str, question: str, media: dict[str, Any]) -> tuple[int, int]:
    """OpenAI usage's prompt tokens for the question alone and with the media part before it (usage counts the
    whole prompt, the media's tokens included)."""
    text = [{"type": "text", "text": question}]
    counts = []
    for content in (text, [media, *text]):
        done = oai.chat.completions.create(model=model, messages=[{"role": "user", "content": content}],
                                          max_tokens=4, temperature=0, seed=7)
        assert done.usage is not None
        counts.append(done.usage.prompt_tokens)
    return counts[0], counts[1]


def _chat(server: Any, model: str, message: dict[str, Any]) -> dict[str, Any]:
    r = server.api("POST", "/api/chat", json={"model": model, "messages": [message], "stream": False,
                                              "options": GREEDY})
    assert r.status_code == 200, r.text
    return r.json()


def test_each_projector_gives_its_capability(media_models: Any) -> None:
    eye = media_models.api("POST", "/api/show", json={"model": EYE}).json()
    ear = media_models.api("POST", "/api/show", json={"model": EAR}).json()
    assert "vision" in eye["capabilities"] and "audio" not in eye["capabilities"]
    assert "audio" in ear["capabilities"] and "vision" not in ear["capabilities"]
    # the projector's own metadata, as Ollama's /api/show gives it, and `show` prints it
    assert eye["projector_info"]["clip.projector_type"] == "mlp"
    assert ear["projector_info"]["clip.projector_type"] == "ultravox"
    shown = subprocess.run([sys.executable, "-m", "ollama_py", "show", EYE], capture_output=True, text=True,
                           env={**os.environ, "OLLAMA_HOST": media_models.url}, timeout=60)
    assert shown.returncode == 0, shown.stderr
    projector = shown.stdout.split("  Projector\n")[1].split("\n\n")[0].split("\n")
    assert projector[0].split() == ["architecture", "clip"] and projector[1].split()[0] == "parameters"


def test_an_image_reaches_the_runner_from_each_protocol(media_models: Any, oai: openai.OpenAI) -> None:
    plain, seen = _prompt_tokens(oai, EYE, "What is in the picture?",
                                 {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}})
    assert seen > plain
    # Anthropic: a base64 image block (one message with the image; OpenAI's parts become a message each, as in
    # Ollama, so the two prompts differ by a turn's markup)
    claude = anthropic.Anthropic(base_url=media_models.url, api_key="ollama", max_retries=0, timeout=300)
    words: Any = {"type": "text", "text": "What is in the picture?"}
    block: Any = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    bare = claude.messages.create(model=EYE, max_tokens=4, messages=[{"role": "user", "content": [words]}])
    msg = claude.messages.create(model=EYE, max_tokens=4, messages=[{"role": "user", "content": [block, words]}])
    assert msg.usage.input_tokens > bare.usage.input_tokens
    # two images in one message: each is its own run of the projector's image tokens (and a newline between
    # them: see the next test)
    two = claude.messages.create(model=EYE, max_tokens=4, messages=[{"role": "user",
                                                                    "content": [block, block, words]}])
    assert two.usage.input_tokens - msg.usage.input_tokens == VISION_TOKENS + 1
    # Ollama's own: `images` on a chat message, and on a generate request
    out = _chat(media_models, EYE, {"role": "user", "content": "What is in the picture?", "images": [PNG]})
    assert out["done"] and out["eval_count"] >= 1
    r = media_models.api("POST", "/api/generate", json={"model": EYE, "prompt": "What is in the picture?",
                                                        "images": [PNG], "stream": False, "options": GREEDY})
    assert r.status_code == 200 and r.json()["done"], r.text


def test_a_prompt_that_leaves_the_cached_one_between_two_images(media_models: Any) -> None:
    """A conversation with two images in a turn, then one that shares its first image only: the slot's cached
    prompt is cut right after that image. With the two images' tokens adjacent, llama-server took the cut for the
    middle of an image and failed the request ("Chunk not found", a 500); a newline between them keeps it whole."""
    ask = "What is in the picture?"
    for images in ([PNG, PNG], [PNG], [PNG, PNG], [PNG]):
        out = _chat(media_models, EYE, {"role": "user", "content": ask, "images": images})
        assert out["done"]


def test_a_sound_reaches_the_runner_from_each_protocol(media_models: Any, oai: openai.OpenAI) -> None:
    plain, heard = _prompt_tokens(oai, EAR, "What do you hear?",
                                  {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}})
    assert heard > plain
    # Ollama's native API carries a sound in `images`, as Ollama does
    out = _chat(media_models, EAR, {"role": "user", "content": "What do you hear?", "images": [WAV]})
    assert out["done"] and out["eval_count"] >= 1


def test_a_transcription_through_the_openai_client(media_models: Any, oai: openai.OpenAI) -> None:
    """(The model's PARAMETER num_predict bounds the answer: a transcription request has no max_tokens.)"""
    text = oai.audio.transcriptions.create(model=EAR, file=("clip.wav", io.BytesIO(wav_bytes()), "audio/wav"),
                                           response_format="text")
    assert isinstance(text, str)
    as_json = oai.audio.transcriptions.create(model=EAR, file=("clip.wav", io.BytesIO(wav_bytes()), "audio/wav"))
    assert as_json.text == text  # the same greedy answer, as JSON or as the bare text


def test_media_a_model_cannot_take_is_a_clear_error(media_models: Any, oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        oai.chat.completions.create(model=EYE, max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}]}])
    assert "audio" in str(e.value)
    with pytest.raises(openai.BadRequestError) as e:
        oai.audio.transcriptions.create(model=EYE, file=("clip.wav", io.BytesIO(wav_bytes()), "audio/wav"))
    assert "audio" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model=EAR, max_tokens=4, messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{PNG}"}}]}])


def test_a_runner_that_aborts_on_a_sound_is_a_clear_error_and_is_started_again(
        media_models: Any, tmp_path: Any) -> None:
    """An audio projector that this llama-server cannot run (Ultravox's stack of 8 frames over this tiny encoder:
    clip.cpp makes 188 tokens where it expects 187, and aborts): the request's 500 says the runner died and why,
    streamed or not, and the next request gets a new runner."""
    weights = upload_blob(media_models.url, required_path("OLLAMA_PY_TEST_MODEL"))
    broken = upload_blob(media_models.url, write_audio_projector(tmp_path / "broken.gguf", stack_factor=8))
    r = media_models.api("POST", "/api/create", json={"model": "smol-broken", "stream": False,
                                                      "parameters": {"num_predict": 4},
                                                      "files": {"model.gguf": weights, "mmproj.gguf": broken}})
    assert r.status_code == 200, r.text
    try:
        for stream in (False, True):
            r = media_models.api("POST", "/api/chat", json={"model": "smol-broken", "stream": stream, "messages": [
                {"role": "user", "content": "What do you hear?", "images": [WAV]}]})
            assert r.status_code == 500
            # the cause: the abort's own line, or the error logged just before it when llama-server's log thread
            # wrote it out in time ("clip_encode: expected output 187 tokens, got 188")
            error = r.json()["error"]
            assert error.startswith("llama runner process has terminated: signal: aborted: "), error
            assert error.endswith(("expected output 187 tokens, got 188", "Invalid number of output tokens")), error
        out = _chat(media_models, "smol-broken", {"role": "user", "content": "Say hi"})  # on a new runner
        assert out["done"] and out["eval_count"] >= 1
    finally:
        media_models.unload("smol-broken:latest")
        media_models.api("DELETE", "/api/delete", json={"model": "smol-broken"})
