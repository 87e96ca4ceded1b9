"""Uploads and pulls paced by a slow client or registry keep their hands off the threads the other routes share
(issue 34 item 3): with every default-executor thread's worth of them open, /api/tags and /api/show still answer.

The loop's default executor is made 4 threads here (a 2-core machine has 6): six uploads and four pulls outnumber it.
"""

from __future__ import annotations

import asyncio
import hashlib
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

HANG_GUARD = 60  # seconds: only a starved route (the bug) ever waits this long


async def stalling_registry(aiohttp_server, release: asyncio.Event, seen: list[str]):
    """A registry that takes every request and answers nothing until `release`, then 404."""
    async def handler(request: web.Request) -> web.Response:
        seen.append(request.path)
        await release.wait()
        return web.json_response({"errors": [{"code": "MANIFEST_UNKNOWN", "message": "no"}]}, status=404)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return await aiohttp_server(app)


async def until(predicate) -> None:
    async with asyncio.timeout(HANG_GUARD):
        while not predicate():
            await asyncio.sleep(0.02)


async def test_slow_uploads_and_pulls_leave_the_shared_threads_to_other_routes(fake_app, aiohttp_client,
                                                                                aiohttp_server):
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(4))
    settings, app = fake_app()
    client = await aiohttp_client(app)
    release = asyncio.Event()
    bodies = [b"first byte, then a long wait %d" % i for i in range(6)]

    async def trickle(body: bytes):
        yield body[:1]
        await release.wait()
        yield body[1:]

    blobs = settings.models / "blobs"
    uploads = [asyncio.create_task(client.post(f"/api/blobs/sha256:{hashlib.sha256(b).hexdigest()}",
                                               data=trickle(b))) for b in bodies]
    await until(lambda: blobs.is_dir() and len(list(blobs.glob("sha256-tmp-*"))) == len(bodies))

    seen: list[str] = []
    registry = await stalling_registry(aiohttp_server, release, seen)
    pulls = [asyncio.create_task(  # fewer than MAX_TRANSFERS: each gets its thread at once
client.post("/api/pull", json={
        "model": f"127.0.0.1:{registry.port}/library/m{i}:latest", "insecure": True})) for i in range(4)]
    await until(lambda: len(seen) == len(pulls))  # each pull is in its thread, waiting on the registry

    try:
        async with asyncio.timeout(HANG_GUARD):
            tags = await client.get("/api/tags")
            assert tags.status == 200
            assert [m["name"] for m in (await tags.json())["models"]] == ["tiny:latest"]
            show = await client.post("/api/show", json={"model": "tiny"})
            assert show.status == 200
        assert not any(t.done() for t in uploads)  # answered while every upload was still open
        assert len(seen) == len(pulls)
    finally:
        release.set()
    for task in uploads:
        r = await task
        assert r.status == 201, await r.text()
    for body in bodies:
        assert (blobs / f"sha256-{hashlib.sha256(body).hexdigest()}").read_bytes() == body
    for task in pulls:
        (await task).close()


async def test_an_upload_cut_off_leaves_no_temp_file(fake_app, aiohttp_client):
    settings, app = fake_app()
    client = await aiohttp_client(app)

    async def half():
        yield b"some bytes"
        raise ConnectionResetError("client went away")

    digest = "sha256:" + hashlib.sha256(b"some bytes and more").hexdigest()
    try:
        await client.post(f"/api/blobs/{digest}", data=half())
    except Exception:  # noqa: BLE001 - the client's own failure; what matters is the server's state
        pass
    blobs = settings.models / "blobs"
    await until(lambda: not list(blobs.glob("sha256-tmp-*")))
    assert not (blobs / digest.replace(":", "-")).exists()


async def test_an_upload_whose_bytes_do_not_match_the_digest_is_refused(fake_app, aiohttp_client):
    settings, app = fake_app()
    client = await aiohttp_client(app)
    digest = "sha256:" + hashlib.sha256(b"expected").hexdigest()
    r = await client.post(f"/api/blobs/{digest}", data=b"something else")
    assert r.status == 400
    assert "digest mismatch" in (await r.json())["error"]
    assert not list((settings.models / "blobs").glob("sha256-tmp-*"))
