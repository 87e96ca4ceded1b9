"""The HTTP client against a fake Ollama server (tests/helpers/fake_ollama.py, the `fake` fixture)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ollama_py.client import Client, ServerUnreachable, file_digest
from ollama_py.errors import BadRequest, NotFound, OllamaError, ServerBusy
from tests.helpers.fake_ollama import FakeOllama


@pytest.fixture
def client(fake: FakeOllama) -> Iterator[Client]:
    with Client(fake.host) as c:
        yield c


# -- the client ---------------------------------------------------------------------------------------------------


def test_chat_streams_each_object_in_order(fake: FakeOllama, client: Client) -> None:
    chunks = [{"message": {"role": "assistant", "content": w}, "done": False} for w in ("Hel", "lo")]
    fake.on("POST", "/api/chat", chunks + [{"done": True, "done_reason": "stop", "eval_count": 2}])
    got = list(client.chat("m", [{"role": "user", "content": "hi"}], options={"temperature": 0}))
    assert [c.get("message", {}).get("content") for c in got[:2]] == ["Hel", "lo"]
    assert got[-1]["done_reason"] == "stop"
    assert fake.bodies("POST", "/api/chat") == [{"model": "m", "messages": [{"role": "user", "content": "hi"}],
                                                 "stream": True, "options": {"temperature": 0}}]


def test_generate_leaves_out_fields_that_are_none(fake: FakeOllama, client: Client) -> None:
    fake.on("POST", "/api/generate", [{"response": "x", "done": True}])
    list(client.generate("m", "why?", system=None, keep_alive="5m"))
    assert fake.bodies("POST", "/api/generate") == [{"model": "m", "prompt": "why?", "stream": True,
                                                     "keep_alive": "5m"}]


@pytest.mark.parametrize(
    ("status", "error_class"),
    [(400, BadRequest), (404, NotFound), (503, ServerBusy), (500, OllamaError)],
    ids=["400-bad-request", "404-not-found", "503-busy", "500-other"],
)
def test_error_status_raises_its_class_with_the_server_text(fake: FakeOllama, client: Client, status: int,
                                                            error_class: type) -> None:
    fake.on("POST", "/api/show", (status, {"error": "model 'x' not found"}))
    with pytest.raises(error_class) as info:
        client.show("x")
    assert str(info.value) == "model 'x' not found"
    assert info.value.status == status


def test_error_line_inside_a_stream_raises(fake: FakeOllama, client: Client) -> None:
    fake.on("POST", "/api/pull", [{"status": "pulling manifest"},
                                  {"error": "pull model manifest: file does not exist"}])
    stream = client.pull("nope")
    assert next(stream) == {"status": "pulling manifest"}
    with pytest.raises(OllamaError, match="file does not exist"):
        next(stream)


def test_nothing_listening_raises_server_unreachable() -> None:
    with Client("nonexistent.invalid:11434") as c, pytest.raises(ServerUnreachable) as info:
        c.list()
    assert str(info.value) == ("could not connect to ollama-py server at http://nonexistent.invalid:11434; "
                               "is it running?")


@pytest.mark.parametrize(
    ("raw", "url"),
    [("", "http://127.0.0.1:11434"), ("example.org", "http://example.org:11434"),
     ("example.org:8080", "http://example.org:8080"), ("https://example.org", "https://example.org:443")],
    ids=["default", "host", "host-port", "scheme-host"],
)
def test_host_forms_from_ollama_host(raw: str, url: str) -> None:
    assert Client(raw).base_url == url


def test_blob_upload_sends_the_file_with_its_length_and_reports_progress(fake: FakeOllama, client: Client,
                                                                         tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(range(256)) * 9000)
    digest = file_digest(path)
    assert not client.blob_exists(digest)
    seen: list[int] = []
    client.create_blob(digest, path, progress=seen.append)
    assert client.blob_exists(digest)
    sent = fake.bodies("POST", f"/api/blobs/{digest}")[0]
    assert sent == {"sha256": digest.removeprefix("sha256:"), "length": path.stat().st_size}
    assert sum(seen) == path.stat().st_size


def test_closing_a_stream_early_stops_iteration(fake: FakeOllama, client: Client) -> None:
    fake.on("POST", "/api/generate", [{"response": str(i), "done": False} for i in range(50)])
    stream = client.generate("m", "count")
    assert next(stream)["response"] == "0"
    stream.close()
    assert list(stream) == []


def test_copy_and_delete_send_ollama_bodies(fake: FakeOllama, client: Client) -> None:
    fake.on("POST", "/api/copy", b"")
    fake.on("DELETE", "/api/delete", b"")
    client.copy("a", "b")
    client.delete("b")
    assert fake.bodies("POST", "/api/copy") == [{"source": "a", "destination": "b"}]
    assert fake.bodies("DELETE", "/api/delete") == [{"model": "b"}]


def test_embed_returns_the_json_answer(fake: FakeOllama, client: Client) -> None:
    fake.on("POST", "/api/embed", lambda body: {"model": body["model"], "embeddings": [[0.6, 0.8]]})
    assert client.embed("m", "hello") == {"model": "m", "embeddings": [[0.6, 0.8]]}
    assert fake.bodies("POST", "/api/embed") == [{"model": "m", "input": "hello"}]
