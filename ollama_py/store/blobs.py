"""Content-addressed blobs under OLLAMA_MODELS/blobs, byte-compatible with Ollama's store.

A blob lives at blobs/sha256-<64 lowercase hex>. Every write goes to a temp file in the same directory
(sha256-tmp-<random>), is hashed while it is copied, fsynced, and only then renamed onto its final name with
os.replace, so a reader or a crash never sees a half-written blob under a real name. Every lookup checks
the digest's format first (`^sha256[:-][0-9a-fA-F]{64}$`), which also keeps paths inside the store.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Protocol, cast

from ollama_py.errors import BadRequest, DigestMismatch, NotFound

log = logging.getLogger(__name__)

_DIGEST = re.compile(r"^sha256[:-]([0-9a-fA-F]{64})\Z")
_BLOB_NAME = re.compile(r"^sha256-([0-9a-f]{64})\Z")
# Leftovers that only an interrupted write or download produces: our temp files, Ollama's partials.
_STALE_NAME = re.compile(r"^sha256-(tmp-.*|.*-partial.*)\Z")
_CHUNK = 1 << 20


class Readable(Protocol):
    """What write_from reads from besides an iterable of chunks: a file, or a request body's reader."""

    def read(self, n: int, /) -> bytes: ...


def canonical_digest(digest: str) -> str:
    """"sha256:<lowercase hex>" for any accepted spelling; BadRequest("invalid digest format") otherwise."""
    m = _DIGEST.match(digest) if isinstance(digest, str) else None
    if m is None:
        raise BadRequest("invalid digest format")
    return "sha256:" + m.group(1).lower()


def _fsync_dir(path: Path) -> None:
    # The rename itself must be durable too, or a power cut can leave the old directory entry.
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


PARTIAL_KEEP_SECONDS = 24 * 3600


class BlobStore:
    """The blobs directory of one store root."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.dir = self.root / "blobs"
        self._writing: set[str] = set()  # names of in-progress temp files
        self._writing_lock = threading.Lock()
        self._users = 0  # work in progress that may need blobs no manifest names yet (in_use)

    # -- lookups -------------------------------------------------------------------------------------

    def path(self, digest: str) -> Path:
        """Where the blob lives (whether or not it exists). Uppercase hex maps to the same file."""
        return self.dir / canonical_digest(digest).replace(":", "-", 1)

    def exists(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def size(self, digest: str) -> int:
        try:
            return self.path(digest).stat().st_size
        except FileNotFoundError:
            raise NotFound(f'blob "{digest}" not found') from None

    def digests(self) -> set[str]:
        """Every complete blob, as "sha256:<hex>"."""
        if not self.dir.is_dir():
            return set()
        return {"sha256:" + m.group(1) for e in os.scandir(self.dir) if (m := _BLOB_NAME.match(e.name))}

    def verify(self, digest: str) -> bool:
        """Re-hash the blob and compare with its name; False for a missing or corrupt blob."""
        path = self.path(digest)
        try:
            with path.open("rb") as f:
                actual = hashlib.file_digest(f, "sha256").hexdigest()
        except FileNotFoundError:
            return False
        return "sha256:" + actual == canonical_digest(digest)

    # -- writes --------------------------------------------------------------------------------------

    def write_from(self, reader: Readable | Iterable[bytes], expected: str | None = None) -> tuple[str, int]:
        """Copy a stream into the store, hashing as it goes; ("sha256:<hex>", size).

        With `expected`, a stream whose hash differs raises DigestMismatch and leaves no file behind.
        """
        writer = self.writer()
        try:
            for chunk in _chunks(reader):
                writer.write(chunk)
            return writer.commit(expected)
        finally:
            writer.abort()

    def writer(self) -> BlobWriter:
        """A blob written piece by piece (an upload whose bytes arrive over time); see BlobWriter."""
        return BlobWriter(self)

    @contextlib.contextmanager
    def in_use(self) -> Iterator[None]:
        """Mark work that writes or needs blobs before a manifest names them (an upload, a pull, a create): a
        prune while the server runs waits until there is none (`busy`)."""
        with self._writing_lock:
            self._users += 1
        try:
            yield
        finally:
            with self._writing_lock:
                self._users -= 1

    def busy(self) -> bool:
        with self._writing_lock:
            return self._users > 0 or bool(self._writing)

    def writing(self) -> set[str]:
        """The temp files of writes in progress (a prune leaves them alone)."""
        with self._writing_lock:
            return set(self._writing)

    def write_bytes(self, data: bytes) -> tuple[str, int]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if self.exists(digest):
            return digest, len(data)
        return self.write_from([data], expected=digest)

    def write_file(self, path: Path) -> tuple[str, int]:
        """Hash a file, then copy it in unless the store already holds that content."""
        with Path(path).open("rb") as f:
            digest = "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()
            size = f.tell()
            if self.exists(digest):
                return digest, size
            f.seek(0)
            # Hashing again while copying catches a file that changed between the two reads.
            return self.write_from(f, expected=digest)

    def move_in(self, path: Path) -> tuple[str, int]:
        """Adopt a finished file that already sits in the blobs directory (a quantizer's output)."""
        path = Path(path)
        if path.parent.resolve() != self.dir.resolve():
            raise ValueError(f"{path} is not in {self.dir}")
        try:
            with path.open("rb") as f:
                digest = "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()
                size = f.tell()
                os.fsync(f.fileno())
            self._install(path, digest)
            return digest, size
        finally:
            path.unlink(missing_ok=True)

    def _install(self, tmp: Path, digest: str) -> None:
        final = self.path(digest)
        if final.exists():
            # Same content is already there; keeping its inode leaves any open mmap of it untouched.
            return
        os.chmod(tmp, 0o644)
        os.replace(tmp, final)
        _fsync_dir(self.dir)

    # -- removal -------------------------------------------------------------------------------------

    def delete(self, digest: str) -> None:
        self.path(digest).unlink(missing_ok=True)

    def prune(self, referenced: set[str], *, older_than: float = 0.0) -> list[str]:
        """Remove blobs not in `referenced` and stale temp/partial files; returns the names removed.

        `older_than` (seconds) spares files modified more recently, so a prune while the server runs does
        not take a blob that was just uploaded for a create that has not written its manifest yet.
        """
        if not self.dir.is_dir():
            return []
        keep = {canonical_digest(d) for d in referenced}
        cutoff = time.time() - older_than
        removed: list[str] = []
        writing = self.writing()
        for entry in os.scandir(self.dir):
            if entry.name in writing:
                continue  # an upload in progress, however long it has been quiet
            m = _BLOB_NAME.match(entry.name)
            if m is not None:
                if "sha256:" + m.group(1) in keep:
                    continue
            elif not _STALE_NAME.match(entry.name):
                continue  # not ours: leave files we do not understand alone
            # A partial download younger than a day is kept so a pull resumes after a restart.
            limit = min(cutoff, time.time() - PARTIAL_KEEP_SECONDS) if "-partial" in entry.name else cutoff
            try:
                if not entry.is_file(follow_symlinks=False) or entry.stat().st_mtime > limit:
                    continue
                os.unlink(entry.path)
            except FileNotFoundError:
                continue
            removed.append(entry.name)
        if removed:
            log.info("pruned %d unused blob file(s): %s", len(removed), ", ".join(sorted(removed)))
        return removed


class BlobWriter:
    """One blob written as its bytes come: a temp file in the blobs directory (sha256-tmp-*, left alone by a
    prune while it is open), hashed as it is written. `commit` checks the digest, fsyncs and renames it onto its
    name; `abort` (a no-op after commit) removes it. Blocking: call from a worker thread."""

    def __init__(self, store: BlobStore) -> None:
        store.dir.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix="sha256-tmp-", dir=store.dir)
        self._store, self._tmp = store, Path(name)
        self._out = os.fdopen(fd, "wb")
        self._sha = hashlib.sha256()
        self.size = 0
        with store._writing_lock:
            store._writing.add(self._tmp.name)

    def write(self, chunk: bytes) -> None:
        self._sha.update(chunk)
        self._out.write(chunk)
        self.size += len(chunk)

    def commit(self, expected: str | None = None) -> tuple[str, int]:
        """Install the blob: ("sha256:<hex>", size). DigestMismatch (and nothing installed) when `expected`
        differs from what was written."""
        want = canonical_digest(expected) if expected is not None else None
        self._out.flush()
        os.fsync(self._out.fileno())
        self._out.close()
        actual = "sha256:" + self._sha.hexdigest()
        if want is not None and actual != want:
            raise DigestMismatch(f'digest mismatch, expected "{expected}", got "{actual}"')
        self._store._install(self._tmp, actual)
        return actual, self.size

    def abort(self) -> None:
        """Drop the temp file (whatever is left of it after a commit)."""
        self._out.close()
        self._tmp.unlink(missing_ok=True)
        with self._store._writing_lock:
            self._store._writing.discard(self._tmp.name)


def _chunks(reader: Readable | Iterable[bytes]) -> Iterable[bytes]:
    read = getattr(reader, "read", None)
    if read is None:
        yield from (bytes(c) for c in cast(Iterable[bytes], reader) if c)
        return
    while chunk := read(_CHUNK):
        yield chunk
