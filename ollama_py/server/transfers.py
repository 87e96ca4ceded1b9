"""Work that a client or a registry paces, kept off the threads every other route shares (issue 34 item 3).

The default executor (min(32, cpus + 4) threads) runs every `asyncio.to_thread` of the gateway: listing models,
reading manifests, loads. A handful of slow clients must not hold all of it.

- An upload (`POST /api/blobs/:digest`) reads its body on the event loop, as aiohttp reads: a client that sends one
  byte every few seconds holds no thread. Its bytes are hashed and written in `BLOB_WRITES` a megabyte at a time
  (disk and CPU only, never waiting on the client), then fsynced and renamed there.
- A pull or a push is blocking code waiting on a registry (store/registry.py): it runs in `TRANSFERS`, at most
  MAX_TRANSFERS at once; one more waits for a thread, and the rest of the gateway never does.
- A create (`POST /api/create`: hashing, a conversion or a quantization that runs for minutes) runs in `CREATES`,
  at most MAX_CREATES at once, for the same reason.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from ollama_py.store.blobs import BlobStore

MAX_TRANSFERS = 8  # pulls and pushes running at once
MAX_CREATES = 4  # creates running at once
BLOB_WRITERS = 2  # threads hashing and writing upload chunks
WRITE_SIZE = 1 << 20  # an upload's bytes are handed to a writer thread in pieces of this size (and at the end)

TRANSFERS: web.AppKey[ThreadPoolExecutor] = web.AppKey("transfers")
CREATES: web.AppKey[ThreadPoolExecutor] = web.AppKey("creates")
BLOB_WRITES: web.AppKey[ThreadPoolExecutor] = web.AppKey("blob_writes")


async def transfer_pools(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx: the pools, for the app's life. At the end, work still waiting for a thread is dropped and
    running work is not waited for (a pull or a create stops at its next step once its client is gone)."""
    app[TRANSFERS] = ThreadPoolExecutor(MAX_TRANSFERS, thread_name_prefix="transfer")
    app[BLOB_WRITES] = ThreadPoolExecutor(BLOB_WRITERS, thread_name_prefix="blob-write")
    app[CREATES] = ThreadPoolExecutor(MAX_CREATES, thread_name_prefix="create")
    try:
        yield
    finally:
        for pool in (app[TRANSFERS], app[BLOB_WRITES], app[CREATES]):
            pool.shutdown(wait=False, cancel_futures=True)


async def receive_blob(request: web.Request, blobs: BlobStore, digest: str) -> None:
    """Store the request body as the blob `digest` (DigestMismatch, and nothing kept, when it is not)."""
    loop = asyncio.get_running_loop()
    pool = request.app[BLOB_WRITES]
    writer = await loop.run_in_executor(pool, blobs.writer)
    try:
        pending = bytearray()
        while chunk := await request.content.read(WRITE_SIZE):
            pending += chunk
            if len(pending) >= WRITE_SIZE:
                await loop.run_in_executor(pool, writer.write, bytes(pending))
                pending.clear()
        if pending:
            await loop.run_in_executor(pool, writer.write, bytes(pending))
        await loop.run_in_executor(pool, writer.commit, digest)
    finally:
        writer.abort()  # closes and unlinks a temp file: no waiting on anything
