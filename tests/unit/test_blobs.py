"""The blob store: content addressing, atomic writes, digest checks, pruning."""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time
from pathlib import Path

import pytest

from ollama_py.errors import BadRequest, DigestMismatch, NotFound
from ollama_py.store.blobs import BlobStore

DATA = b"hello, blobs\n" * 1000
DIGEST = "sha256:" + hashlib.sha256(DATA).hexdigest()


@pytest.fixture
def blobs(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path)


def _files(blobs: BlobStore) -> list[str]:
    return sorted(os.listdir(blobs.dir)) if blobs.dir.exists() else []


def test_write_from_stream_is_content_addressed(blobs: BlobStore) -> None:
    digest, size = blobs.write_from(io.BytesIO(DATA))
    assert (digest, size) == (DIGEST, len(DATA))
    assert _files(blobs) == ["sha256-" + DIGEST[7:]]
    assert blobs.path(DIGEST).read_bytes() == DATA
    assert blobs.exists(DIGEST) and blobs.size(DIGEST) == len(DATA)
    assert oct(blobs.path(DIGEST).stat().st_mode & 0o777) == oct(0o644)


def test_write_from_iterable_of_chunks(blobs: BlobStore) -> None:
    chunks = [DATA[i : i + 777] for i in range(0, len(DATA), 777)]
    assert blobs.write_from(iter(chunks), expected=DIGEST) == (DIGEST, len(DATA))


def test_empty_blob(blobs: BlobStore) -> None:
    digest, size = blobs.write_bytes(b"")
    assert size == 0
    assert digest == "sha256:" + hashlib.sha256(b"").hexdigest()
    assert blobs.exists(digest)


def test_mismatch_leaves_nothing_behind(blobs: BlobStore) -> None:
    wrong = "sha256:" + "0" * 64
    with pytest.raises(DigestMismatch) as exc:
        blobs.write_from(io.BytesIO(DATA), expected=wrong)
    assert str(exc.value) == f'digest mismatch, expected "{wrong}", got "{DIGEST}"'
    assert exc.value.status == 400
    assert _files(blobs) == []


def test_reader_failure_leaves_nothing_behind(blobs: BlobStore) -> None:
    def broken():
        yield DATA
        raise ConnectionResetError("client went away")

    with pytest.raises(ConnectionResetError):
        blobs.write_from(broken(), expected=DIGEST)
    assert _files(blobs) == []


def test_expected_digest_accepts_dash_and_uppercase(blobs: BlobStore) -> None:
    upper = "sha256-" + DIGEST[7:].upper()
    assert blobs.write_from(io.BytesIO(DATA), expected=upper) == (DIGEST, len(DATA))
    assert blobs.path(upper) == blobs.path(DIGEST)


@pytest.mark.parametrize("digest", [
    "sha256:abc", "sha256:" + "g" * 64, "md5:" + "a" * 64, "../../etc/passwd", "sha256:" + "a" * 64 + "/..",
    "sha256:" + "a" * 64 + "\n", "",
], ids=["short", "non-hex", "md5", "traversal", "suffix", "newline", "empty"])
def test_invalid_digest_format(blobs: BlobStore, digest: str) -> None:
    for call in (blobs.path, blobs.exists, blobs.delete):
        with pytest.raises(BadRequest, match="^invalid digest format$"):
            call(digest)
    with pytest.raises(BadRequest, match="^invalid digest format$"):
        blobs.write_from(io.BytesIO(DATA), expected=digest)
    assert _files(blobs) == []


def test_size_of_missing_blob_is_not_found(blobs: BlobStore) -> None:
    with pytest.raises(NotFound):
        blobs.size(DIGEST)


def test_write_bytes_twice_keeps_one_file(blobs: BlobStore) -> None:
    blobs.write_bytes(DATA)
    inode = blobs.path(DIGEST).stat().st_ino
    assert blobs.write_bytes(DATA) == (DIGEST, len(DATA))
    assert blobs.path(DIGEST).stat().st_ino == inode
    assert _files(blobs) == ["sha256-" + DIGEST[7:]]


def test_write_file_copies_once(blobs: BlobStore, tmp_path: Path) -> None:
    src = tmp_path / "model.gguf"
    src.write_bytes(DATA)
    assert blobs.write_file(src) == (DIGEST, len(DATA))
    mtime = blobs.path(DIGEST).stat().st_mtime_ns
    assert blobs.write_file(src) == (DIGEST, len(DATA))
    assert blobs.path(DIGEST).stat().st_mtime_ns == mtime
    assert src.read_bytes() == DATA  # the source is left alone


def test_concurrent_writers_of_the_same_content(blobs: BlobStore) -> None:
    results: list[tuple[str, int]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def write() -> None:
        try:
            start.wait()
            chunks = (DATA[i : i + 100] for i in range(0, len(DATA), 100))
            results.append(blobs.write_from(chunks, expected=DIGEST))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=write) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert results == [(DIGEST, len(DATA))] * 8
    assert _files(blobs) == ["sha256-" + DIGEST[7:]]
    assert blobs.verify(DIGEST)


def test_verify_detects_corruption(blobs: BlobStore) -> None:
    blobs.write_bytes(DATA)
    assert blobs.verify(DIGEST)
    blobs.path(DIGEST).write_bytes(DATA + b"x")
    assert not blobs.verify(DIGEST)
    assert not blobs.verify("sha256:" + "1" * 64)


def test_digests_lists_only_complete_blobs(blobs: BlobStore) -> None:
    blobs.write_bytes(DATA)
    (blobs.dir / "sha256-tmp-abc").write_bytes(b"half")
    (blobs.dir / f"sha256-{'b' * 64}-partial").write_bytes(b"half")
    assert blobs.digests() == {DIGEST}


def test_delete(blobs: BlobStore) -> None:
    blobs.write_bytes(DATA)
    blobs.delete(DIGEST)
    assert not blobs.exists(DIGEST)
    blobs.delete(DIGEST)  # deleting twice is fine


def test_prune_removes_unreferenced_and_stale_files(blobs: BlobStore) -> None:
    keep, _ = blobs.write_bytes(b"keep")
    drop, _ = blobs.write_bytes(b"drop")
    stale = ["sha256-tmp-x1y2", f"sha256-{'c' * 64}-partial", f"sha256-{'c' * 64}-partial-0"]
    for name in stale:
        (blobs.dir / name).write_bytes(b"junk")
    old = time.time() - 2 * 24 * 3600  # partial downloads are kept for a day, to resume after a restart
    for name in stale[1:]:
        os.utime(blobs.dir / name, (old, old))
    (blobs.dir / "README").write_text("not ours")
    removed = blobs.prune({keep.replace(":", "-")})
    assert sorted(removed) == sorted([drop.replace(":", "-"), *stale])
    assert _files(blobs) == ["README", keep.replace(":", "-")]


def test_prune_keeps_a_recent_partial_download(blobs: BlobStore) -> None:
    partial = [f"sha256-{'d' * 64}-partial", f"sha256-{'d' * 64}-partial-0"]
    for name in partial:
        (blobs.dir.mkdir(parents=True, exist_ok=True) or blobs.dir / name).write_bytes(b"half")
    assert blobs.prune(set()) == []
    assert sorted(_files(blobs)) == sorted(partial)


def test_prune_spares_recent_files_when_asked(blobs: BlobStore) -> None:
    fresh, _ = blobs.write_bytes(b"just uploaded")
    assert blobs.prune(set(), older_than=3600) == []
    assert blobs.exists(fresh)
    assert blobs.prune(set()) == [fresh.replace(":", "-")]


def test_prune_of_missing_directory(blobs: BlobStore) -> None:
    assert blobs.prune(set()) == []
    assert blobs.digests() == set()
