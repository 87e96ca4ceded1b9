"""Blob downloads: parallel ranged parts, resumable, shared, and verified before the blob gets its name.

    download_blob(client, blobs, layer, *, cancel=None) -> progress objects; returns True for a cache hit

While blobs/sha256-<hex> downloads, its data and per-part state sit beside it as Ollama's partial files
(store/download_state.py), so an interrupted download resumes where its parts stopped, also after a restart.

A blob of `total` bytes is cut into parts of total/16 clamped to [100 MB, 1000 MB] (class attributes, so
tests can use small ones), and into no more than MAX_PARTS parts (bigger ones past 64 GB), fetched with
`Range` requests: at most PARTS_AT_ONCE of one blob at a time, and at most MAX_ACTIVE_PARTS of all downloads
in this process (one thread and one connection each). A part that fails is retried with exponential backoff;
an attempt that made progress (a dropped connection, a stall) is resumed at once and costs no retry. A part is
stalled when no byte arrives for STALL_TIMEOUT seconds (the socket read timeout); the whole blob must also
average at least `min_rate` bytes/s (RegistryOptions, OLLAMA_PY_PULL_MIN_RATE) over every RATE_WINDOW seconds
while its parts run, or it fails (its state stays, to resume), so a registry that trickles cannot hold a pull
forever. The first GET follows redirects on the registry's host and remembers the first other host (a CDN) as
the direct URL; credentials never go there, and every redirect is checked (store/registry_limits.py).

Nothing is written before the blob is known to fit: the manifest's size claims are checked against the free
space of the blobs directory (check_disk_space, for the whole pull and again for each blob), so a registry
claiming a 20 TB layer gets "not enough disk space", not 20,000 part files.

Bytes that arrive in order are hashed on the way in and the file is written back to disk as it grows, so
finishing is cheap: hash whatever arrived out of order, compare, fsync, rename. Only a match gets the
blob's name; a mismatch deletes everything and fails with Ollama's message. A full disk deletes the partial
files (giving the space back) and fails, and so does any failure before the first byte arrived (there is
nothing to resume); a failure after bytes arrived keeps them for the next pull.

Concurrent pulls of one blob share one download (`download_blob` keeps one per blob path); when the last
puller stops waiting, the download is cancelled and its partial files stay for a later resume.
"""

from __future__ import annotations

import errno
import hashlib
import http.client
import logging
import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any

import requests
import urllib3

from ollama_py.errors import DigestMismatch, OllamaError, RegistryError, RequestCanceled
from ollama_py.store.blobs import BlobStore, canonical_digest
from ollama_py.store.download_state import (
    MB,
    Part,
    human_bytes,
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
MAX_ACTIVE_PARTS = 32  # part downloads (threads, connections) running at once in this process, all pulls together
_part_slots = threading.BoundedSemaphore(MAX_ACTIVE_PARTS)
DISK_RESERVE = 1 << 30  # a pull leaves this much free (or 5 % of the filesystem, when that is less)


class InsufficientStorage(OllamaError):
    """The blobs a pull needs do not fit on the store's disk (found before anything is written)."""

    status = 507


def _allocated(path: Path) -> int:
    """Bytes on disk of a (sparse) partial data file; 0 when there is none."""
    try:
        st = path.stat()
    except OSError:
        return 0
    return min(st.st_blocks * 512, st.st_size)


def _free_space(directory: Path) -> tuple[int, int]:
    """(free bytes, bytes to leave free) on the filesystem that holds `directory` (or its nearest parent)."""
    for candidate in (directory, *directory.parents):
        try:
            usage = shutil.disk_usage(candidate)
        except OSError:
            continue
        return usage.free, min(DISK_RESERVE, usage.total // 20)
    return 0, 0


def check_disk_space(blobs: BlobStore, layers: Iterable[Layer]) -> None:
    """InsufficientStorage unless the blobs `layers` name that the store lacks fit on its disk, besides what
    the downloads already running still have to write (they share the disk)."""
    with _active_lock:
        running = list(_active.values())
    active = {d.final for d in running}
    need = 0
    for layer in layers:
        path = blobs.path(layer.digest)
        if path in active or path.is_file():
            continue
        need += max(layer.size - _allocated(path.with_name(path.name + "-partial")), 0)
    if need == 0:
        return
    others = sum(max(d.total - d.completed, 0) for d in running)
    free, reserve = _free_space(blobs.dir)
    if need + others > free - reserve:
        busy = f" ({human_bytes(others)} of it for pulls under way)" if others else ""
        raise InsufficientStorage(f"not enough disk space: the model needs {human_bytes(need)}, "
                                  f"{human_bytes(max(free - reserve - others, 0))} free{busy}")


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
    MAX_PARTS = 64  # part files per blob, whatever size it claims (parts grow past 1000 MB beyond 64 GB)
    PARTS_AT_ONCE = 16  # as Ollama's errgroup limit
    MAX_RETRIES = 6
    BACKOFF = 1.0  # seconds before the first retry of a part; doubles with each failure without progress
    STALL_TIMEOUT = 30.0
    RATE_WINDOW = 60.0  # seconds over which a running download must average the minimum rate
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
        self._part_ended = threading.Event()

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
            cancel = self._refs == 0 and not self._done.is_set()
            if cancel:
                self._cancelled = True
        if cancel:
            self._halt()

    def _halt(self) -> None:
        """Stop every part now: the flag they check, and the connections their reads may be blocked on (a
        registry trickling header lines would hold a read for minutes)."""
        self._stop.set()
        self.client.abort()

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
        except BaseException as e:
            if self._completed == 0 or (isinstance(e, OSError) and e.errno == errno.ENOSPC):
                # nothing arrived (nothing to resume), or a full disk (give the space back)
                remove_partial(self.data_path)
            if isinstance(e, _Stopped):
                raise RequestCanceled() from None
            if isinstance(e, OSError):
                reason = "no space left on device" if e.errno == errno.ENOSPC else e.strerror or str(e)
                raise OllamaError(f"write {self.data_path}: {reason}") from None
            raise

    def _prepare(self) -> None:
        self.data_path.parent.mkdir(parents=True, exist_ok=True)
        parts = read_part_state(self.data_path, self.total)
        if parts is None:
            remove_partial(self.data_path)
        need = self.total - (_allocated(self.data_path) if parts is not None else 0)
        free, reserve = _free_space(self.data_path.parent)
        if need > free - reserve:
            raise InsufficientStorage(f"not enough disk space: layer {self.digest[7:19]} needs "
                                      f"{human_bytes(need)}, {human_bytes(max(free - reserve, 0))} free")
        if parts is None:
            parts = plan_parts(self.total, count=self.PART_COUNT, min_size=self.MIN_PART_SIZE,
                               max_size=self.MAX_PART_SIZE, max_parts=self.MAX_PARTS)
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
        """Run the unfinished parts, each on a thread of its own holding one of this blob's PARTS_AT_ONCE and
        one of the process's MAX_ACTIVE_PARTS slots, and watch the blob's rate while any runs."""
        pending = deque(p for p in self.parts if p.completed < p.size)
        failures: list[BaseException] = []
        running = [0]  # parts whose thread has not finished (counted here, not by is_alive: no missed wake-up)
        rate = _RateWatch(self.client.options.min_rate, self.RATE_WINDOW)

        def work(part: Part) -> None:
            try:
                self._download_part(part)
            except BaseException as e:
                with self._lock:
                    failures.append(e)
                if not isinstance(e, _Stopped):
                    self._halt()  # the others stop too: one failed part fails the blob
            finally:
                _part_slots.release()
                with self._lock:
                    running[0] -= 1
                self._part_ended.set()

        def count() -> int:
            with self._lock:
                return running[0]

        while True:
            self._part_ended.clear()
            while (pending and count() < self.PARTS_AT_ONCE and not self._stop.is_set()
                   and _part_slots.acquire(blocking=False)):
                part = pending.popleft()
                with self._lock:
                    running[0] += 1
                try:
                    threading.Thread(target=work, args=(part,), name=f"pull-{self.digest[7:19]}-{part.n}",
                                     daemon=True).start()
                except RuntimeError as e:  # no thread to be had: this part's slot and count go back
                    _part_slots.release()
                    with self._lock:
                        running[0] -= 1
                        failures.append(RegistryError(f"cannot start a download thread: {e}"))
                    self._stop.set()
                    break
            if count() == 0 and (not pending or self._stop.is_set()):
                break
            if count() == 0:
                rate.pause()  # waiting for a slot another download holds is not this registry being slow
            elif (slow := rate.check(time.monotonic(), self._completed)) is not None:
                with self._lock:
                    failures.append(RegistryError(slow))
                self._halt()
            self._part_ended.wait(0.5)
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
                resp = self.client.request("GET", url, headers=headers, allow_redirects=False,
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
                resp.close()
                location = self.client.follow(url, resp.headers["Location"])
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
            encoding = resp.headers.get("Content-Encoding", "").strip().lower()
            if encoding not in ("", "identity"):
                raise RegistryError(f"registry sent the blob with Content-Encoding {encoding[:20]!r}, "
                                    "not the bytes it names")
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


class _RateWatch:
    """The minimum-progress rule: over any `window` seconds of running parts, at least min_rate * window bytes."""

    def __init__(self, min_rate: int, window: float) -> None:
        self.min_rate = min_rate
        self.window = window
        self._samples: deque[tuple[float, int]] = deque()

    def pause(self) -> None:
        self._samples.clear()

    def check(self, now: float, completed: int) -> str | None:
        """None while the rate holds; else why the download is too slow."""
        if self.min_rate <= 0:
            return None
        self._samples.append((now, completed))
        while len(self._samples) > 1 and now - self._samples[1][0] >= self.window:
            self._samples.popleft()
        since, before = self._samples[0]
        if now - since < self.window or completed - before >= self.min_rate * self.window:
            return None
        return (f"download too slow: {human_bytes(completed - before)} in the last {self.window:.0f}s, below the "
                f"minimum of {human_bytes(self.min_rate)}/s (OLLAMA_PY_PULL_MIN_RATE)")


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
