"""Unreferenced blobs removed while serve runs, not only at its start (issue 34: orphans stayed until a restart).

Deleting a model removes the blobs only it used (ModelStore.delete). What else leaves a blob no manifest names --
an upload whose create never came, a create or pull that failed after writing some blobs -- is removed here:
every OLLAMA_PY_PRUNE_INTERVAL seconds (an hour), files untouched for GRACE_SECONDS that no manifest names (a
partial download keeps its day: store/blobs.py). A pass is skipped while anything that writes or needs blobs
before its manifest exists is in progress (an upload, a pull, a push, a create: `holds_blobs`), and
OLLAMA_NOPRUNE turns it off, as it does the prune at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

from aiohttp import web

from ollama_py.runner import gguf_compat
from ollama_py.server.appkeys import SETTINGS, STORE
from ollama_py.store.models import ModelStore

log = logging.getLogger(__name__)

GRACE_SECONDS = 3600.0  # a blob written this recently may be an upload whose create is still to come

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def holds_blobs(handler: Handler) -> Handler:
    """A route whose work writes or needs blobs that no manifest names yet: no prune runs while it does."""
    @functools.wraps(handler)
    async def wrapped(request: web.Request) -> web.StreamResponse:
        with request.app[STORE].blobs.in_use():
            return await handler(request)
    return wrapped


def prune_once(store: ModelStore, *, grace: float = GRACE_SECONDS, text_only: Path | None = None) -> list[str]:
    """(Blocking.) One pass, unless blob work is in progress; the names removed. With `text_only` (the data dir's
    copies of Ollama-layout models: runner/gguf_compat.py), the copies of blobs gone go too."""
    if store.blobs.busy():
        log.debug("blob prune skipped: uploads, pulls or creates in progress")
        return []
    removed = store.prune(older_than=grace)
    if text_only is not None:
        removed += sweep_text_only(store, text_only)
    return removed


def sweep_text_only(store: ModelStore, directory: Path) -> list[str]:
    """(Blocking.) The text-only copies whose model blob is gone, removed (and logged); a directory that cannot be
    written is left as it is (said once per pass)."""
    try:
        removed = gguf_compat.sweep_copies(directory, store.blobs.dir)
    except OSError as e:
        log.warning("text-only copies in %s not swept: %s", directory, e.strerror or e)
        return []
    for name in removed:
        log.info("removed the text-only copy %s: its model is gone", name)
    return removed


async def prune_while_serving(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx: prune_once every settings.prune_interval until serve stops (nothing with OLLAMA_NOPRUNE)."""
    task = None
    if not app[SETTINGS].noprune and not app[STORE].read_only:
        task = asyncio.create_task(_every(app[STORE], app[SETTINGS].prune_interval,
                                          app[SETTINGS].data_dir / gguf_compat.TEXT_ONLY_DIR), name="blob-pruner")
    try:
        yield
    finally:
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _every(store: ModelStore, interval: float, text_only: Path) -> None:
    while True:
        await asyncio.sleep(interval)
        try:
            await asyncio.to_thread(prune_once, store, text_only=text_only)  # what it removes, it logs
        except OSError as e:
            log.warning("blob prune failed: %s", e)
