"""Work that used to hold the event loop for most of a second, stalling every client (issue 22.10): reading a
large vocabulary's GGUF header for the first request after a restart, and writing verbose /api/show. Each is
measured by a ticker task's largest gap, under a generous bound (structure, not speed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings
from tests.helpers.loop import loop_watch

VOCAB = 2_000_000  # parsing this header takes over a second on the test machines (about one to write it as JSON)


@pytest.fixture(scope="module")
def big_vocab_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "big-vocab.gguf", vocab=VOCAB, embd=4, scores=True)


@pytest.fixture
async def client(tmp_path: Path, big_vocab_gguf: Path, aiohttp_client):
    """A gateway just started on a store that holds the model: nothing of it is parsed yet."""
    from ollama_py.server.app import create_app

    settings = make_settings(tmp_path)
    create_tiny_model(settings, big_vocab_gguf, name="big")
    return await aiohttp_client(create_app(settings, scheduler=fake_scheduler(settings)))


async def test_the_first_request_after_a_restart_parses_the_weights_header_off_the_loop(client):
    async with loop_watch() as gaps:
        r = await client.post("/api/generate", json={"model": "big", "prompt": "hi", "stream": False,
                                                     "options": {"num_predict": 1}})
        assert r.status == 200, await r.text()
    assert gaps[0] < 1.0


async def test_verbose_show_is_written_off_the_loop(client):
    async with loop_watch() as gaps:
        r = await client.post("/api/show", json={"model": "big", "verbose": True})
        assert r.status == 200
        text = await r.read()  # tens of megabytes: read, not parsed, while the ticker watches
    assert gaps[0] < 1.0
    assert text.count(b'"t1999999"') == 1  # the whole vocabulary is there


async def test_a_huge_body_is_decoded_and_checked_off_the_loop(client):
    # 20 million token ids (40 MB of JSON): decoding and checking them took seconds on the loop
    body = b'{"model": "nope", "prompt": "hi", "context": [' + b"1," * 20_000_000 + b'1]}'
    async with loop_watch() as gaps:
        r = await client.post("/api/generate", data=body, headers={"Content-Type": "application/json"})
        assert r.status == 404, await r.text()  # the body was read whole, then the model looked up
    assert gaps[0] < 1.0
