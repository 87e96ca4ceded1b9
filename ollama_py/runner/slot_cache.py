"""Prompt cache across unloads: a runner's slots saved to disk when it stops, restored when the model loads again.

llama-server writes and reads the files itself (`--slot-save-path DIR`, `POST /slots/{id}?action=save|restore`
with `{"filename": ...}`): a slot's tokens and their KV cache. A restored slot holds its tokens again, and
llama-server gives the next request the idle slot whose tokens share the most with its prompt, so the next turn
of a known conversation starts from its cached prefix instead of the whole prompt.

Layout: `<root>/<weights digest, 16 hex>-<settings, 16 hex>/slot-<id>.bin`. The directory's name is the key
(`key_for`): the weights and every load setting that makes a saved KV state valid for a runner (context, slots, KV
cache types, flash attention, adapters, projectors, runner flags, the build variant); a runner started otherwise
never sees another's files. Bounded: after each save, whole directories least recently used (saved or restored) go
until the total is within the cap. Fail-open: a file llama-server refuses to restore is deleted and logged, a save
that fails is logged, and neither ever reaches a client.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from ollama_py.runner.argv import LaunchSpec

log = logging.getLogger(__name__)

SAVE_TIMEOUT_SECONDS = 120.0  # for all of a runner's slots; past it the runner stops unsaved
RESTORE_TIMEOUT_SECONDS = 120.0


def weights_digest(model: Path) -> str:
    """16 hex digits naming a model's weights: its blob's digest (the store names blobs sha256-<hex>), else a hash
    of the path."""
    name = model.name
    if name.startswith("sha256-") and len(name) > 23:
        return name[7:23]
    return hashlib.sha256(str(model).encode()).hexdigest()[:16]


def key_for(spec: LaunchSpec, variant: str = "") -> str:
    """The directory name of the slots a runner started from `spec` (and this build variant) can use."""
    weights = spec.shards[0] if spec.shards else spec.model
    settings = repr((str(weights), tuple(map(str, spec.adapters)), spec.num_ctx, spec.parallel, spec.kv_cache_type,
                     spec.flash_attention, str(spec.draft_model or ""), spec.extra, variant))
    if spec.projectors:  # a saved slot keeps its images' and sounds' KV, which another projector would not give
        settings += repr(tuple(map(str, spec.projectors)))  # (appended: a model without one keeps its old key)
    return f"{weights_digest(weights)}-{hashlib.sha256(settings.encode()).hexdigest()[:16]}"


class SlotCache:
    """The directories of saved slots under `root`, at most `max_bytes` in all. Blocking file work: call it off
    the event loop."""

    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes

    def directory(self, key: str) -> Path:
        """The directory for one key (created)."""
        path = self.root / key
        path.mkdir(parents=True, exist_ok=True)
        return path

    def trim(self) -> None:
        """Remove whole directories, least recently used first, until the total is within max_bytes."""
        entries = []
        for path in self._directories():
            files = [f for f in path.iterdir() if f.is_file()]
            entries.append((path.stat().st_mtime, path, sum(f.stat().st_size for f in files)))
        total = sum(size for _, _, size in entries)
        for _, path, size in sorted(entries):
            if total <= self.max_bytes:
                break
            log.info("prompt cache on disk over %d MiB: removing %s (%.1f MiB)", self.max_bytes >> 20, path.name,
                     size / 2**20)
            shutil.rmtree(path, ignore_errors=True)
            total -= size

    def forget(self, weights: Path) -> int:
        """Remove every directory of these weights (the model is deleted). The number removed."""
        prefix = weights_digest(weights) + "-"
        gone = 0
        for path in self._directories():
            if path.name.startswith(prefix):
                shutil.rmtree(path, ignore_errors=True)
                gone += 1
        return gone

    def _directories(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return [p for p in self.root.iterdir() if p.is_dir() and not p.is_symlink()]


@dataclass(frozen=True, slots=True)
class RunnerSlots:
    """One runner's saved slots: `directory` is its --slot-save-path, `parallel` its slot count."""

    cache: SlotCache
    directory: Path
    parallel: int

    async def restore(self, base_url: str, headers: dict[str, str]) -> int:
        """Put each saved slot back (before the runner takes requests). The tokens restored; never raises."""
        try:
            return await asyncio.wait_for(self._restore(base_url, headers), RESTORE_TIMEOUT_SECONDS)
        except Exception as e:  # fail-open: the runner simply starts cold
            log.warning("restoring saved slots from %s failed: %s", self.directory, e or type(e).__name__)
            return 0

    async def save(self, base_url: str, headers: dict[str, str]) -> int:
        """Save each slot that holds tokens (before the runner stops). The tokens saved; never raises."""
        try:
            saved = await asyncio.wait_for(self._save(base_url, headers), SAVE_TIMEOUT_SECONDS)
            await asyncio.to_thread(self.cache.trim)
            return saved
        except Exception as e:
            log.warning("saving slots to %s failed: %s", self.directory, e or type(e).__name__)
            return 0

    async def _restore(self, base_url: str, headers: dict[str, str]) -> int:
        restored = 0
        async with aiohttp.ClientSession(headers=headers) as session:
            for slot in range(self.parallel):
                path = self.directory / f"slot-{slot}.bin"
                if not await asyncio.to_thread(path.is_file):
                    continue
                started = time.monotonic()
                async with session.post(f"{base_url}/slots/{slot}", params={"action": "restore"},
                                        json={"filename": path.name}) as resp:
                    body = await resp.json(content_type=None) if resp.content_type == "application/json" else {}
                    if resp.status != 200:
                        error = body.get("error", {}) if isinstance(body, dict) else {}
                        message = error.get("message") if isinstance(error, dict) else None
                        log.warning("saved slot %s refused (%s): deleting it", path, message or resp.status)
                        with contextlib.suppress(OSError):
                            await asyncio.to_thread(path.unlink)
                        continue
                n = int(body.get("n_restored") or 0)
                restored += n
                log.info("restored slot %d from %s: %d tokens in %.0f ms", slot, path, n,
                         (time.monotonic() - started) * 1000)
        if restored:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(os.utime, self.directory)  # recently used: the last to be trimmed
        return restored

    async def _save(self, base_url: str, headers: dict[str, str]) -> int:
        """Each slot to slot-<id>.new, then in place of slot-<id>.bin only when it held tokens: an empty slot (one
        llama-server moved to its RAM cache) keeps the state saved before, which is still valid."""
        await asyncio.to_thread(self.directory.mkdir, parents=True, exist_ok=True)
        saved = 0
        async with aiohttp.ClientSession(headers=headers) as session:
            for slot in range(self.parallel):
                new = self.directory / f"slot-{slot}.new"
                async with session.post(f"{base_url}/slots/{slot}", params={"action": "save"},
                                        json={"filename": new.name}) as resp:
                    body = await resp.json(content_type=None) if resp.content_type == "application/json" else {}
                    if resp.status != 200:
                        log.warning("saving slot %d of %s failed: %s", slot, self.directory.name, body or resp.status)
                        continue
                n = int(body.get("n_saved") or 0)
                if n > 0:
                    await asyncio.to_thread(os.replace, new, self.directory / f"slot-{slot}.bin")
                    saved += n
                else:
                    with contextlib.suppress(OSError):
                        await asyncio.to_thread(new.unlink)
        if saved:
            with contextlib.suppress(OSError):
                await asyncio.to_thread(os.utime, self.directory)
            log.info("saved %d tokens of slots to %s", saved, self.directory)
        return saved
