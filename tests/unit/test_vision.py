"""Images: where they go in the prompt (Ollama's [img] rules) and how they reach llama-server (its multimodal
prompt: the text with a media marker per image, and the images), over the fake runner with a projector."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import aiohttp
import openai
import pytest

from ollama_py.api.names import parse_name
from ollama_py.runner.argv import MEDIA_MARKER
from ollama_py.server.app import create_app
from ollama_py.store.create import create_model
from ollama_py.store.models import ModelStore
from tests.fakes.gguf_files import write_gguf
from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings

CAT, DOG = base64.b64encode(b"cat pixels").decode(), base64.b64encode(b"dog pixels!").decode()
M = MEDIA_MARKER


@pytest.fixture
async def client(tmp_path: Path, tiny_gguf: Path, aiohttp_client):
    settings = make_settings(tmp_path)
    projector = write_gguf(tmp_path / "mmproj.gguf", "clip", {"clip.has_vision_encoder": True},
                           general_type="projector")
    store = ModelStore(settings.models)
    model_digest, _ = store.blobs.write_file(tiny_gguf)
    proj_digest, _ = store.blobs.write_file(projector)
    for _ in create_model(store, parse_name("seer"), {"files": {"model.gguf": model_digest,
                                                               "mmproj.gguf": proj_digest}}):
        pass
    create_tiny_model(settings, tiny_gguf, "blind")
    log = tmp_path / "requests.jsonl"
    app = create_app(settings, scheduler=fake_scheduler(settings, {"FAKE_LOG_FILE": str(log)}))
    c = await aiohttp_client(app)
    c.sent = lambda: [b["prompt"] for line in log.read_text().splitlines()  # type: ignore[attr-defined]
                      if isinstance((b := json.loads(line)).get("prompt"), dict)]
    return c


async def test_a_projector_gives_the_vision_capability(client):
    caps = (await (await client.post("/api/show", json={"model": "seer"})).json())["capabilities"]
    assert "vision" in caps


async def test_show_carries_the_projectors_metadata_as_ollama_does(client):
    shown = await (await client.post("/api/show", json={"model": "seer"})).json()
    projector = shown["projector_info"]
    assert projector["general.architecture"] == "clip" and projector["clip.has_vision_encoder"] is True
    assert "general.parameter_count" in projector
    assert "projector_info" not in await (await client.post("/api/show", json={"model": "blind"})).json()


async def test_generate_sends_the_image_with_a_marker_before_the_text(client):
    r = await client.post("/api/generate", json={"model": "seer", "prompt": "What is this?", "images": [CAT],
                                                 "stream": False})
    assert r.status == 200 and (await r.json())["response"]
    sent = client.sent()[-1]
    assert sent["multimodal_data"] == [CAT]
    assert f"{M}What is this?" in sent["prompt_string"] and sent["prompt_string"].count(M) == 1


async def test_chat_images_take_the_place_of_img_tags_in_order(client):
    r = await client.post("/api/chat", json={"model": "seer", "stream": False, "messages": [
        {"role": "user", "content": "Compare [img] with this one.", "images": [CAT, DOG]}]})
    assert r.status == 200
    sent = client.sent()[-1]
    assert sent["multimodal_data"] == [CAT, DOG]
    assert f"{M}Compare {M} with this one." in sent["prompt_string"]


async def test_no_two_images_touch_in_the_prompt(client):
    """A newline between adjacent media markers, wherever they come from (a message's images, [img] tags, a raw
    prompt): llama-server fails a later request cut between two adjacent images (test_media_live.py)."""
    r = await client.post("/api/chat", json={"model": "seer", "stream": False, "messages": [
        {"role": "user", "content": "Compare them.", "images": [CAT, DOG, CAT]}]})
    assert r.status == 200
    assert f"{M}\n{M}\n{M}Compare them." in client.sent()[-1]["prompt_string"]
    r = await client.post("/api/generate", json={"model": "seer", "prompt": "[img][img] and", "raw": True,
                                                 "images": [CAT, DOG], "stream": False})
    assert r.status == 200
    assert client.sent()[-1]["prompt_string"] == f"{M}\n{M}[img][img] and"


async def test_raw_generate_with_images(client):
    r = await client.post("/api/generate", json={"model": "seer", "prompt": "describe", "raw": True,
                                                 "images": [CAT], "stream": False})
    assert r.status == 200
    assert client.sent()[-1] == {"prompt_string": f"{M}describe", "multimodal_data": [CAT]}


async def test_openai_image_url(client):
    r = await client.post("/v1/chat/completions", json={"model": "seer", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is in the picture?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{CAT}"}}]}]})
    assert r.status == 200
    assert client.sent()[-1]["multimodal_data"] == [CAT]


@pytest.mark.parametrize("body,error", [
    ({"model": "blind", "prompt": "x", "images": [CAT]}, '"blind" does not support vision'),
    ({"model": "seer", "prompt": "x", "images": ["not base64!"]}, "illegal base64 data at input byte 3"),
    ({"model": "seer", "prompt": "x", "images": "abcd"}, None),
])
async def test_bad_images_are_a_400(client, body, error):
    r = await client.post("/api/generate", json=body)
    assert r.status == 400
    if error:
        assert (await r.json())["error"] == error


async def test_the_ollama_client_sends_images(client, tmp_path):
    import ollama

    picture = tmp_path / "cat.png"
    picture.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16)
    url = str(client.make_url("")).rstrip("/")
    reply = await ollama.AsyncClient(host=url).chat(model="seer", messages=[
        {"role": "user", "content": "What is this?", "images": [str(picture)]}])
    assert reply.message.content
    sent = client.sent()[-1]
    assert base64.b64decode(sent["multimodal_data"][0]) == picture.read_bytes()


# -- audio: Ollama's "audio" capability and sounds in `images` ------------------------------------------------------

WAV = base64.b64encode(b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(32)).decode()
MP3 = base64.b64encode(b"ID3\x04\x00\x00" + bytes(16)).decode()


@pytest.fixture
async def ears(tmp_path: Path, tiny_gguf: Path, aiohttp_client):
    """"ear": a projector with an audio encoder only; "omni": one with both; "seer": vision only."""
    settings = make_settings(tmp_path)
    store = ModelStore(settings.models)
    model_digest, _ = store.blobs.write_file(tiny_gguf)
    for name, kv in (("ear", {"clip.has_vision_encoder": False, "clip.has_audio_encoder": True}),
                     ("omni", {"clip.has_vision_encoder": True, "clip.has_audio_encoder": True}),
                     ("seer", {"clip.has_vision_encoder": True})):
        projector = write_gguf(tmp_path / f"{name}.gguf", "clip", kv, general_type="projector")
        proj_digest, _ = store.blobs.write_file(projector)
        for _ in create_model(store, parse_name(name), {"files": {"model.gguf": model_digest,
                                                                 "mmproj.gguf": proj_digest}}):
            pass
    log = tmp_path / "requests.jsonl"
    c = await aiohttp_client(create_app(settings, scheduler=fake_scheduler(settings, {"FAKE_LOG_FILE": str(log)})))
    c.sent = lambda: [b["prompt"] for line in log.read_text().splitlines()  # type: ignore[attr-defined]
                      if isinstance((b := json.loads(line)).get("prompt"), dict)]
    return c


@pytest.mark.parametrize(("model", "expected"), [("ear", {"audio"}), ("omni", {"vision", "audio"}),
                                                 ("seer", {"vision"})])
async def test_a_projector_says_what_it_encodes(ears, model, expected):
    caps = (await (await ears.post("/api/show", json={"model": model})).json())["capabilities"]
    assert {"vision", "audio"} & set(caps) == expected


async def test_chat_sends_a_sound_to_an_audio_model(ears):
    r = await ears.post("/api/chat", json={"model": "ear", "stream": False, "messages": [
        {"role": "user", "content": "What is said?", "images": [WAV]}]})
    assert r.status == 200
    sent = ears.sent()[-1]
    assert sent["multimodal_data"] == [WAV] and f"{M}What is said?" in sent["prompt_string"]


async def test_generate_sends_an_mp3_to_an_audio_and_vision_model(ears):
    r = await ears.post("/api/generate", json={"model": "omni", "prompt": "Transcribe", "images": [MP3, CAT],
                                               "stream": False})
    assert r.status == 200
    assert ears.sent()[-1]["multimodal_data"] == [MP3, CAT]


@pytest.mark.parametrize(("model", "item", "error"), [
    ("seer", WAV, '"seer" does not support audio'),
    ("ear", CAT, '"ear" does not support vision'),
])
async def test_media_a_model_cannot_take_is_refused_by_kind(ears, model, item, error):
    for path, body in (("/api/chat", {"messages": [{"role": "user", "content": "hi", "images": [item]}]}),
                       ("/api/generate", {"prompt": "hi", "images": [item]})):
        r = await ears.post(path, json={"model": model, "stream": False, **body})
        assert r.status == 400 and (await r.json())["error"] == error


# -- /v1/audio/transcriptions (Ollama's: the sound as a chat, told to transcribe) -----------------------------------

def oai(client) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=str(client.make_url("/v1")), api_key="x", max_retries=0)


async def test_transcription_through_the_openai_client(ears):
    wav = base64.b64decode(WAV)
    result = await oai(ears).audio.transcriptions.create(model="ear", file=("speech.wav", wav, "audio/wav"),
                                                         language="fr", prompt="A weather report.")
    assert result.text == "The quick brown fox jumps over the lazy"  # the fake's answer, stripped
    sent = ears.sent()[-1]
    assert sent["multimodal_data"] == [WAV]
    assert "Transcribe the audio exactly as spoken." in sent["prompt_string"]
    assert "The audio is in fr. Context: A weather report." in sent["prompt_string"]
    assert f"{M}What exact words are spoken in this audio?" in sent["prompt_string"]


async def test_transcription_as_text(ears):
    text = await oai(ears).audio.transcriptions.create(model="omni", file=("a.mp3", base64.b64decode(MP3)),
                                                       response_format="text")
    assert text.strip() == "The quick brown fox jumps over the lazy"


async def test_transcription_refusals_are_openai_errors(ears):
    client = oai(ears)
    with pytest.raises(openai.BadRequestError) as e:
        await client.audio.transcriptions.create(model="seer", file=("a.wav", base64.b64decode(WAV)))
    assert e.value.body["message"] == '"seer" does not support audio'
    with pytest.raises(openai.NotFoundError):
        await client.audio.transcriptions.create(model="nope", file=("a.wav", base64.b64decode(WAV)))
    with pytest.raises(openai.BadRequestError) as e:
        await client.audio.transcriptions.create(model="ear", file=("a.wav", b""))
    assert e.value.body["message"] == "audio file is empty"
    r = await ears.post("/v1/audio/transcriptions", data=aiohttp.FormData({"model": "ear"}, default_to_multipart=True))
    assert r.status == 400 and (await r.json())["error"]["message"] == "file is required: http: no such file"
    for kw in ({"json": {"model": "ear"}}, {}, {"data": b"--x\r\nnot a form", "headers": {
            "Content-Type": "multipart/form-data; boundary=x"}}):
        r = await ears.post("/v1/audio/transcriptions", **kw)
        assert r.status == 400 and (await r.json())["error"]["message"].startswith("failed to parse multipart form")


async def test_a_transcription_file_past_ollamas_25_mb_is_refused(ears):
    form = aiohttp.FormData()
    form.add_field("model", "ear")
    form.add_field("file", b"RIFF\x00\x00\x00\x00WAVE" + bytes(25 << 20), filename="big.wav")
    r = await ears.post("/v1/audio/transcriptions", data=form)
    assert r.status == 400 and "larger than" in (await r.json())["error"]["message"]


async def test_openai_input_audio_part(ears):
    r = await ears.post("/v1/chat/completions", json={"model": "ear", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is said?"},
        {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}]}]})
    assert r.status == 200
    assert ears.sent()[-1]["multimodal_data"] == [WAV]
    for part, error in (({"type": "input_audio"}, "invalid input_audio format"),
                        ({"type": "input_audio", "input_audio": {"format": "wav"}},
                         "invalid input_audio format: missing data"),
                        ({"type": "input_audio", "input_audio": {"data": "not base64!"}},
                         "invalid input_audio base64 data")):
        r = await ears.post("/v1/chat/completions", json={"model": "ear", "messages": [
            {"role": "user", "content": [part]}]})
        assert r.status == 400 and (await r.json())["error"]["message"].startswith(error)
    r = await ears.post("/v1/chat/completions", json={"model": "seer", "messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": WAV, "format": "wav"}}]}]})
    assert r.status == 400 and (await r.json())["error"]["message"] == '"seer" does not support audio'


async def test_models_on_the_same_weights_with_other_projectors_get_runners_of_their_own(ears):
    """"ear" and "seer" share the weights but not the projector: a runner started with seer's --mmproj cannot
    take ear's sound (llama-server: "Failed to load image or audio file"), so each has its own."""
    for model, item in (("seer", CAT), ("ear", WAV)):
        r = await ears.post("/api/chat", json={"model": model, "stream": False, "messages": [
            {"role": "user", "content": "What is this?", "images": [item]}]})
        assert r.status == 200, await r.text()
    loaded = (await (await ears.get("/api/ps")).json())["models"]
    assert sorted(m["name"] for m in loaded) == ["ear:latest", "seer:latest"]
