"""Blob downloads: parallel ranged parts, resumable, shared, and verified before the blob gets its name.

    download_blob(client, blobs, layer, *, cancel=None) -> progress objects; returns True for a cache hit

While blobs/sha256-<hex> downloads, its data and per-part state sit beside it as Ollama's partial files
(store/download_state.py), so an interrupted download resumes where its parts stopped, also after a restart.

A blob of `total` bytes is cut into parts of total/16 clamped to [100 MB, 1000 MB] (class attributes, so
tests can use small ones), fetched concurrently with `Range` requests. A part that fails is retried with
exponential backoff; an attempt that made progress (a dropped connection, a stall) is resumed at once and
costs no retry. A part is stalled when no byte arrives for STALL_TIMEOUT seconds (the socket read timeout).
The first GET follows redirects on the registry's host and remembers the first other host (a CDN) as the
direct URL; credentials never go there.

Bytes that arrive in order are hashed on the way in and the file is written back to disk as it grows, so
finishing is cheap: hash whatever arrived out of order, compare, fsync, rename. Only a match gets the
blob's name; a mismatch deletes everything and fails with Ollama's message. A full disk deletes the partial
files (giving the space back) and fails; any other failure keeps them for the next pull.

Concurrent pulls of one blob share one download (`download_blob` keeps one per blob path); when the last
puller stops waiting, the download is cancelled and its partial files stay for a later resume.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import logging
import os
import threading
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import requests
import urllib3

from ollama_py.errors import DigestMismatch, OllamaError, RegistryError, RequestCanceled
from ollama_py.store.blobs import BlobStore, canonical_digest
from ollama_py.store.download_state import (
    MB,
    Part,
    part_files,
    plan_parts,
    read_part_state,
    remove_partial,
    write_part_state,
)
from ollama_py.store.manifests import Layer
from ollama_py.store.registry import (
    CONNECT_TIMEOUT,
    RegistryClient,
    RegistryStatusError,
    TransportError,
    describe,
    transfer_progress,
)

log = logging.getLogger(__name__)

_REDIRECTS = (301, 302, 303, 307, 308)


class _PrefixHasher:
    """sha256 of the blob's in-order prefix, computed as the bytes arrive.

    Bytes written at exactly the end of the prefix (a single-part download, or part 0) extend it, so a
    download that arrives in order costs no second read; the rest is read back once at the end. (Hashing
    on a thread of its own was tried: on a busy two-core machine the hand-over cost more than it saved.)
    """

    def __init__(self) -> None:
        self.upto = 0  # the hash has seen bytes [0, upto)
        self._sha = hashlib.sha256()
        self._lock = threading.Lock()

    def offer(self, data: memoryview, pos: int) -> None:
        if pos != self.upto:
            return
        with self._lock:
            if pos == self.upto:
                self._sha.update(data)
                self.upto = pos + len(data)

    def finish(self) -> tuple[Any, int]:
        """The hash object and how many bytes it has seen."""
        with self._lock:
            return self._sha, self.upto


class _Flusher:
    """Writes the data file back to disk in the background while the download goes on, so that the fsync
    before the blob gets its name finds little left to do."""

    EVERY = 32 * MB

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._unsynced = 0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closing = False
        self._thread: threading.Thread | None = None

    def wrote(self, n: int) -> None:
        with self._lock:
            self._unsynced += n
            if self._unsynced < self.EVERY or self._closing:
                return
            self._unsynced = 0
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pull-flush", daemon=True)
                self._thread.start()
        self._wake.set()

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._closing:
                return
            try:
                os.fdatasync(self._fd)
            except OSError as e:  # the final fsync reports what matters
                log.debug("background fdatasync failed: %s", e)

    def close(self) -> None:
        with self._lock:
            self._closing = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join()


class _Retry(Exception):
    """A failure worth another attempt (transport error, 5xx, stall, a CDN URL that expired)."""


class _Stopped(Exception):
    pass


class BlobDownload:
    """One blob being downloaded by a thread of its own; any number of pullers watch its progress."""

    PART_COUNT = 16
    MIN_PART_SIZE = 100 * MB
    MAX_PART_SIZE = 1000 * MB
    MAX_RETRIES = 6
    BACKOFF = 1.0  # seconds before the first retry of a part; doubles with each failure without progress
    STALL_TIMEOUT = 30.0
    PROGRESS_INTERVAL = 0.06
    STATE_INTERVAL = 1.0  # how often a running part saves its state
    CHUNK = 1 << 20
    MAX_REDIRECTS = 10

    def __init__(self, client: RegistryClient, blobs: BlobStore, digest: str, total: int) -> None:
        self.client = client
        self.digest = canonical_digest(digest)
        self.total = total
        self.final = blobs.path(self.digest)
        self.data_path = self.final.with_name(self.final.name + "-partial")
        self.parts: list[Part] = []
        self.error: BaseException | None = None
        self._url = client.blob_url(self.digest)
        self._direct_url: str | None = None
        self._lock = threading.Lock()
        self._completed = 0
        self._stop = threading.Event()
        self._cancelled = False
        self._done = threading.Event()
        self._refs = 0
        self._fd = -1
        self._hasher = _PrefixHasher()
        self._flusher: _Flusher | None = None

    # -- watching ------------------------------------------------------------------------------------------

    @property
    def completed(self) -> int:
        return self._completed

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def acquire(self) -> None:
        with self._lock:
            self._refs += 1

    def release(self) -> None:
        """A puller stopped watching; the last one out cancels the download (its partial files stay)."""
        with self._lock:
            self._refs -= 1
            if self._refs == 0 and not self._done.is_set():
                self._cancelled = True
                self._stop.set()

    def wait_done(self, timeout: float | None = None) -> bool:
        return self._done.wait(timeout)

    def progress(self, cancel: threading.Event | None) -> Generator[dict[str, Any], None, None]:
        """Ollama's progress objects every PROGRESS_INTERVAL while bytes arrive, until done (or raise)."""
        yield from transfer_progress(f"pulling {self.digest[7:19]}", self.digest, self.total, self._done,
                                     lambda: self._completed, lambda: self.error, cancel, self.PROGRESS_INTERVAL)

    # -- the download thread ---------------------------------------------------------------------------------

    def start(self, on_exit: Any) -> None:
        def run() -> None:
            try:
                self._run()
            except BaseException as e:  # handed to every puller
                self.error = e
            finally:
                on_exit(self)
                self._done.set()

        threading.Thread(target=run, name=f"pull-{self.digest[7:19]}", daemon=True).start()

    def _run(self) -> None:
        try:
            self._prepare()
            try:
                self._flusher = _Flusher(self._fd)
                try:
                    self._download_parts()
                finally:
                    self._flusher.close()
                self._install()
            finally:
                os.close(self._fd)
        except _Stopped:
            raise RequestCanceled() from None
        except OSError as e:
            if e.errno == errno.ENOSPC:
                remove_partial(self.data_path)  # give the space back; there is nothing to resume into
                raise OllamaError(f"write {self.data_path}: no space left on device") from None
            raise

    def _prepare(self) -> None:
        self.data_path.parent.mkdir(parents=True, exist_ok=True)
        parts = read_part_state(self.data_path, self.total)
        if parts is None:
            remove_partial(self.data_path)
            parts = plan_parts(self.total, count=self.PART_COUNT, min_size=self.MIN_PART_SIZE,
                               max_size=self.MAX_PART_SIZE)
            for part in parts:
                write_part_state(self.data_path, part)
        else:
            done = sum(p.completed for p in parts)
            log.info("resuming %s at %d of %d bytes", self.digest[7:19], done, self.total)
        self.parts = parts
        self._completed = sum(p.completed for p in parts)
        self._fd = os.open(self.data_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            if os.fstat(self._fd).st_size != self.total:
                os.ftruncate(self._fd, self.total)  # sparse: blocks are allocated as bytes land
        except OSError:
            os.close(self._fd)
            raise
        if self.parts:
            log.info("downloading %s in %d part(s) of %d bytes", self.digest[7:19], len(self.parts),
                     self.parts[0].size)

    def _download_parts(self) -> None:
        pending = [p for p in self.parts if p.completed < p.size]
        failures: list[BaseException] = []

        def work(part: Part) -> None:
            try:
                self._download_part(part)
            except BaseException as e:
                with self._lock:
                    failures.append(e)
                self._stop.set()  # the others stop too: one failed part fails the blob

        if len(pending) == 1:
            work(pending[0])  # one part (most blobs under 100 MB): no thread to start and join
        else:
            threads = [threading.Thread(target=work, args=(p,), name=f"pull-{self.digest[7:19]}-{p.n}", daemon=True)
                       for p in pending]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        if self._cancelled:
            raise _Stopped()
        real = [e for e in failures if not isinstance(e, _Stopped)]
        if real:
            # a full disk matters more than whatever it made the other parts fail with
            raise next((e for e in real if isinstance(e, OSError) and e.errno == errno.ENOSPC), real[0])

    def _download_part(self, part: Part) -> None:
        failures = 0
        while part.completed < part.size:
            if self._stop.is_set():
                raise _Stopped()
            before = part.completed
            try:
                self._fetch(part)
            except _Retry as e:
                if part.completed > before:
                    log.info("%s part %d interrupted at %d of %d bytes (%s); resuming", self.digest[7:19], part.n,
                             part.completed, part.size, e)
                    failures = 0
                    continue
                failures += 1
                if failures >= self.MAX_RETRIES:
                    raise RegistryError(f"max retries exceeded: {e}") from None
                delay = self.BACKOFF * 2 ** (failures - 1)
                log.info("%s part %d attempt %d failed: %s; retrying in %.1fs", self.digest[7:19], part.n,
                         failures, e, delay)
                if self._stop.wait(delay):
                    raise _Stopped() from None
            finally:
                write_part_state(self.data_path, part)

    def _open(self, start: int, end: int) -> requests.Response:
        """A streaming response for bytes [start, end], from the direct (CDN) URL once one is known."""
        url = self._direct_url or self._url
        headers = {"Range": f"bytes={start}-{end}"}
        for _ in range(self.MAX_REDIRECTS + 1):
            try:
                resp = self.client.request("GET", url, headers=headers, stream=True, allow_redirects=False,
                                           timeout=(CONNECT_TIMEOUT, self.STALL_TIMEOUT), ok=_REDIRECTS)
            except TransportError as e:
                raise _Retry(str(e)) from None
            except RegistryStatusError as e:
                if not self.client.is_registry(url):
                    self._direct_url = None  # a signed CDN URL may have expired: ask the registry again
                    raise _Retry(str(e)) from None
                if e.code >= 500 or e.code in (408, 429):
                    raise _Retry(str(e)) from None
                raise
            if resp.status_code in _REDIRECTS and "Location" in resp.headers:
                location = urljoin(url, resp.headers["Location"])
                resp.close()
                if not self.client.is_registry(location):
                    self._direct_url = location
                url = location
                continue
            return resp
        raise RegistryError(f"maximum redirects exceeded ({self.MAX_REDIRECTS}) for directURL")

    def _fetch(self, part: Part) -> None:
        pos = part.offset + part.completed
        end = part.offset + part.size
        with self._open(pos, end - 1) as resp:
            if resp.status_code == 206:
                skip = 0
            elif resp.status_code == 200:
                skip = pos  # the server ignored Range: read past the bytes we already have
            else:
                raise _Retry(f"unexpected status {resp.status_code} for a ranged GET")
            saved = time.monotonic()
            read = resp.raw.read1  # whatever has arrived: a broken connection loses nothing already received
            while pos < end:
                try:
                    chunk = read(self.CHUNK)
                except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as e:
                    raise _Retry(describe(e)) from None
                if not chunk:
                    break
                if self._stop.is_set():
                    raise _Stopped()
                view = memoryview(chunk)
                if skip:
                    dropped = min(skip, len(view))
                    view, skip = view[dropped:], skip - dropped
                view = view[: end - pos]
                self._write(view, pos)
                pos += len(view)
                part.completed += len(view)
                with self._lock:
                    self._completed += len(view)
                if time.monotonic() - saved >= self.STATE_INTERVAL:
                    write_part_state(self.data_path, part)
                    saved = time.monotonic()
        if part.completed < part.size:
            raise _Retry("connection closed early")

    def _write(self, data: memoryview, pos: int) -> None:
        written = 0
        while written < len(data):
            written += os.pwrite(self._fd, data[written:], pos + written)
        self._hasher.offer(data, pos)
        if self._flusher is not None:
            self._flusher.wrote(len(data))

    def _install(self) -> None:
        """Hash what was not hashed on the way in; rename a match into place, delete a mismatch."""
        hasher, at = self._hasher.finish()
        while at < self.total:
            chunk = os.pread(self._fd, min(8 << 20, self.total - at), at)
            if not chunk:
                break
            hasher.update(chunk)
            at += len(chunk)
        actual = "sha256:" + hasher.hexdigest()
        if actual != self.digest:
            remove_partial(self.data_path)
            raise DigestMismatch(f"digest mismatch, file must be downloaded again: want {self.digest}, got {actual}")
        os.fsync(self._fd)
        for f in part_files(self.data_path):
            f.unlink(missing_ok=True)
        os.chmod(self.data_path, 0o644)
        os.replace(self.data_path, self.final)
        dir_fd = os.open(self.final.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


# -- sharing downloads between pulls ---------------------------------------------------------------------------

_active: dict[Path, BlobDownload] = {}
_active_lock = threading.Lock()


def _forget(download: BlobDownload) -> None:
    with _active_lock:
        if _active.get(download.final) is download:
            del _active[download.final]


def download_blob(client: RegistryClient, blobs: BlobStore, layer: Layer, *,
                  cancel: threading.Event | None = None) -> Generator[dict[str, Any], None, bool]:
    """Make sure `layer`'s blob is in `blobs`, yielding progress; returns True when it already was.

    A download of the same blob already running (for another pull) is joined rather than repeated.
    """
    digest = canonical_digest(layer.digest)
    path = blobs.path(digest)
    while True:
        if path.is_file():
            size = path.stat().st_size
            yield {"status": f"pulling {digest[7:19]}", "digest": digest, "total": size, "completed": size}
            return True
        with _active_lock:
            download = _active.get(path)
            if download is None and not path.is_file():
                download = BlobDownload(client, blobs, digest, layer.size)
                _active[path] = download
                download.start(on_exit=_forget)
            if download is not None and not download.cancelled:
                download.acquire()
                break
        if download is not None:
            # Its last puller left and it is winding down: wait, then start afresh from its saved state.
            while not download.wait_done(0.1):
                if cancel is not None and cancel.is_set():
                    raise RequestCanceled()
    try:
        yield from download.progress(cancel)
    finally:
        download.release()
    return False
