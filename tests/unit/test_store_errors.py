"""What a user sees when a model request names the wrong version, a model that is not there, or hits a server
fault: a 404 in Ollama's words, or a 500 that names the file but never the server's directories."""

from __future__ import annotations

import hashlib

import pytest

from ollama_py.api.names import parse_name
from ollama_py.server.errors import scrub_paths
from ollama_py.store.models import ModelStore


async def test_delete_with_the_wrong_digest_is_a_404_and_deletes_nothing(fake_app, aiohttp_client):
    settings, app = fake_app()
    client = await aiohttp_client(app)
    wrong = "tiny@sha256:" + "0" * 64
    r = await client.delete("/api/delete", json={"model": wrong})
    assert r.status == 404
    assert (await r.json())["error"] == f"model '{wrong}' not found"
    assert [m["name"] for m in (await (await client.get("/api/tags")).json())["models"]] == ["tiny:latest"]
    right = ModelStore(settings.models).manifests.get(parse_name("tiny")).digest
    r = await client.delete("/api/delete", json={"model": f"tiny@{right}"})
    assert r.status == 200
    assert (await (await client.get("/api/tags")).json())["models"] == []


async def test_generate_with_the_wrong_digest_is_a_404(fake_app, aiohttp_client):
    _, app = fake_app()
    client = await aiohttp_client(app)
    wrong = "tiny@sha256:" + "1" * 64
    r = await client.post("/api/generate", json={"model": wrong, "prompt": "hi", "stream": False})
    assert r.status == 404 and (await r.json())["error"] == f"model '{wrong}' not found"


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_push_of_a_missing_model_is_a_404(fake_app, aiohttp_client, stream: bool):
    _, app = fake_app()
    client = await aiohttp_client(app)
    r = await client.post("/api/push", json={"model": "127.0.0.1:9/test/nothere:1", "insecure": True,
                                             "stream": stream})
    assert r.status == 404
    assert (await r.json())["error"] == "model '127.0.0.1:9/test/nothere:1' not found"


async def test_a_server_fault_names_no_server_directory(fake_app, aiohttp_client):
    settings, app = fake_app()
    client = await aiohttp_client(app)
    blobs = settings.models / "blobs"
    for p in blobs.iterdir():
        p.unlink()
    blobs.rmdir()
    blobs.write_text("not a directory")  # the operator broke the store: our fault to report, not the client's
    data = b"some bytes"
    r = await client.post(f"/api/blobs/sha256:{hashlib.sha256(data).hexdigest()}", data=data)
    assert r.status == 500
    error = (await r.json())["error"]
    assert str(settings.models) not in error and "/tmp" not in error
    assert "blobs" in error


@pytest.mark.parametrize(("text", "scrubbed"), [
    ("[Errno 2] No such file or directory: '/root/.ollama/models/blobs/sha256-ab'",
     "[Errno 2] No such file or directory: 'sha256-ab'"),
    ("error loading model /srv/m/blobs/sha256-cd (bad magic)", "error loading model sha256-cd (bad magic)"),
    ("GET http://127.0.0.1:5000/v2/x/manifests/1 failed", "GET http://127.0.0.1:5000/v2/x/manifests/1 failed"),
    ("model 'tiny:latest' not found", "model 'tiny:latest' not found"),
], ids=["errno", "runner", "url-kept", "no-path"])
def test_scrub_paths(text: str, scrubbed: str) -> None:
    assert scrub_paths(text) == scrubbed
