"""Unreferenced blobs are removed while serve runs (issue 34: orphans stayed until a restart), never one that a
manifest names, one written in the last hour, an upload in progress, or anything while blob work is under way."""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from pathlib import Path

from ollama_py.server.appkeys import STORE
from ollama_py.server.blob_prune import GRACE_SECONDS, prune_once
from ollama_py.store.models import ModelStore
from tests.helpers.app import create_tiny_model, make_settings


def stored(store: ModelStore, data: bytes, *, age: float = 0.0) -> Path:
    digest, _ = store.blobs.write_bytes(data)
    path = store.blobs.path(digest)
    if age:
        then = time.time() - age
        os.utime(path, (then, then))
    return path


def test_an_old_orphan_goes_and_everything_else_stays(tmp_path: Path, tiny_gguf: Path) -> None:
    settings = make_settings(tmp_path)
    create_tiny_model(settings, tiny_gguf)
    store = ModelStore(settings.models)
    referenced = set(store.blobs.digests())
    for digest in referenced:  # the model's own blobs, however old
        os.utime(store.blobs.path(digest), (1, 1))
    orphan = stored(store, b"an upload whose create never came", age=2 * GRACE_SECONDS)
    young = stored(store, b"an upload whose create is still to come", age=60)
    writer = store.blobs.writer()  # an upload in progress
    writer.write(b"half")
    try:
        assert prune_once(store) == []  # nothing while an upload is open
        assert orphan.exists()
    finally:
        writer.abort()
    assert prune_once(store) == [orphan.name]
    assert young.exists() and not orphan.exists()
    assert set(store.blobs.digests()) == referenced | {"sha256:" + young.name.removeprefix("sha256-")}


def test_nothing_is_pruned_while_a_pull_or_create_holds_the_blobs(tmp_path: Path) -> None:
    store = ModelStore(make_settings(tmp_path).models)
    orphan = stored(store, b"a blob a create is about to name", age=2 * GRACE_SECONDS)
    with store.blobs.in_use():
        assert prune_once(store) == []
    assert prune_once(store) == [orphan.name]


async def test_serve_prunes_unless_noprune(fake_app, aiohttp_client) -> None:
    def pruners() -> list[str]:
        return [t.get_name() for t in asyncio.all_tasks() if t.get_name() == "blob-pruner"]

    _, app = fake_app()
    client = await aiohttp_client(app)
    assert pruners() == ["blob-pruner"]
    await client.close()
    assert pruners() == []
    _, app = fake_app(noprune=True)
    await aiohttp_client(app)
    assert pruners() == []


async def test_an_upload_in_progress_keeps_the_pruner_off(fake_app, aiohttp_client) -> None:
    _, app = fake_app()
    client = await aiohttp_client(app)
    store = app[STORE]
    orphan = stored(store, b"left by a failed create", age=2 * GRACE_SECONDS)
    release = asyncio.Event()
    body = b"slowly uploaded"

    async def trickle():
        yield body[:1]
        await release.wait()
        yield body[1:]

    upload = asyncio.create_task(client.post(f"/api/blobs/sha256:{hashlib.sha256(body).hexdigest()}",
                                             data=trickle()))
    async with asyncio.timeout(30):
        while not store.blobs.busy():
            await asyncio.sleep(0.01)
    try:
        assert await asyncio.to_thread(prune_once, store) == []
        assert orphan.exists()
    finally:
        release.set()
    assert (await upload).status == 201
    assert await asyncio.to_thread(prune_once, store) == [orphan.name]


async def test_serve_prunes_an_old_orphan_every_prune_interval(fake_app, aiohttp_client) -> None:
    """OLLAMA_PY_PRUNE_INTERVAL (an hour by default): a pass every that many seconds while serve runs."""
    import hashlib
    import os
    import time

    from ollama_py.config import Settings

    assert Settings.from_env({}).prune_interval == 3600
    settings, app = fake_app(prune_interval=0.2)
    client = await aiohttp_client(app)
    data = b"nobody's blob"
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert (await client.post(f"/api/blobs/{digest}", data=data)).status == 201
    path = settings.models / "blobs" / digest.replace(":", "-")
    old = time.time() - 7200
    os.utime(path, (old, old))
    for _ in range(100):
        if not path.exists():
            break
        await asyncio.sleep(0.1)
    assert not path.exists()
    assert (await client.head(f"/api/blobs/{digest}")).status == 404


def test_a_text_only_copy_goes_with_the_blob_it_was_made_from(tmp_path: Path) -> None:
    store = ModelStore(make_settings(tmp_path).models)
    kept = stored(store, b"a model's weights", age=60)
    orphan = stored(store, b"a model deleted meanwhile", age=2 * GRACE_SECONDS)
    copies = tmp_path / "text-only"
    copies.mkdir()
    for blob in (kept, orphan):
        (copies / f"{blob.name}.gguf").write_bytes(b"its text-only copy")
    assert prune_once(store, text_only=copies) == [orphan.name, f"{orphan.name}.gguf"]
    assert [p.name for p in copies.iterdir()] == [f"{kept.name}.gguf"]
    assert prune_once(store, text_only=tmp_path / "never-made") == []  # no copies yet: nothing to do
