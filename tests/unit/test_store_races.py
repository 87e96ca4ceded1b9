"""Listing and deleting while other clients copy and delete models: the manifest walk meets files and
directories that vanish under it, and each is skipped; no request is ever a 500."""

from __future__ import annotations

import asyncio
from collections import Counter


async def test_tags_and_delete_never_500_while_models_come_and_go(fake_app, aiohttp_client):
    _, app = fake_app()
    client = await aiohttp_client(app)
    statuses: Counter[tuple[str, int]] = Counter()
    errors: list[str] = []

    async def note(what: str, response) -> None:
        statuses[(what, response.status)] += 1
        if response.status >= 500:
            errors.append(f"{what}: {await response.text()}")

    async def churn(worker: int) -> None:
        for i in range(40):
            # each copy lives in its own namespace, so its directories are made and removed each time
            name = f"ns{worker}x{i % 3}/copy{i % 2}:t{i % 2}"
            await note("copy", await client.post("/api/copy", json={"source": "tiny", "destination": name}))
            await note("delete", await client.delete("/api/delete", json={"model": name}))

    async def lister() -> None:
        for _ in range(60):
            r = await client.get("/api/tags")
            await note("tags", r)
            if r.status == 200:
                assert "tiny:latest" in [m["name"] for m in (await r.json())["models"]]

    await asyncio.gather(*(churn(w) for w in range(3)), lister(), lister())
    assert errors == []
    assert statuses[("tags", 200)] == 120
    assert statuses[("copy", 200)] == 120
    # a delete may find its copy already gone only if another worker deleted it; here names never collide
    assert statuses[("delete", 200)] == 120


def test_store_walks_never_fail_while_other_threads_copy_and_delete(tmp_path, tiny_gguf):
    """The same race at the store, harder: several threads copy and delete (each removing the directories its
    delete empties) while others list, read the references and ask who uses a blob, as /api/tags and
    /api/delete do."""
    import threading

    from ollama_py.api.names import parse_name
    from ollama_py.store.models import ModelStore
    from tests.helpers.app import create_tiny_model, make_settings

    settings = make_settings(tmp_path)
    create_tiny_model(settings, tiny_gguf)
    store = ModelStore(settings.models)
    tiny = parse_name("tiny")
    failures: list[BaseException] = []
    done = threading.Event()

    def churn(worker: int) -> None:
        try:
            for i in range(300):
                name = parse_name(f"ns{worker}x{i % 3}/copy{i % 2}:t{i % 2}")
                store.copy(tiny, name)
                store.delete(name)
        except BaseException as e:
            failures.append(e)

    def walk() -> None:
        while not done.is_set():
            try:
                assert "tiny:latest" in [m["name"] for m in store.list_models()]
                store.manifests.referenced_digests()
                store.only_user(tiny, "sha256:" + "0" * 64)
            except BaseException as e:
                failures.append(e)
                return

    churners = [threading.Thread(target=churn, args=(w,)) for w in range(3)]
    walkers = [threading.Thread(target=walk) for _ in range(2)]
    for t in churners + walkers:
        t.start()
    for t in churners:
        t.join()
    done.set()
    for t in walkers:
        t.join()
    assert failures == []
