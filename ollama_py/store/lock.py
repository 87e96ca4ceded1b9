"""StoreLock: one serve per model store, across processes.

A serve prunes the store when it starts (stale temp files, unreferenced blobs); a second serve on the same
OLLAMA_MODELS would take the first one's in-flight upload and the blob it had just received for a create
whose manifest is not written yet. So serve holds an exclusive fcntl.flock on `<models>/.ollama-py.lock` for
its whole life, and a second one is refused with StoreLocked naming the store and the holder's pid. The kernel
drops the lock when the holder exits, however it exits: a stale lock file never blocks anyone.

A store this process can read but not write (a read-only mount, Ollama's system store owned by its own user)
raises StoreReadOnly instead: serve then runs what is there and writes nothing (store.read_only).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path

from ollama_py.errors import OllamaError

LOCK_NAME = ".ollama-py.lock"


class StoreLocked(OllamaError):
    """Another serve holds this store."""


class StoreReadOnly(Exception):
    """The store cannot be written (a read-only mount, another user's directory): it can only be read."""


_READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)


class StoreLock:
    def __init__(self, root: Path) -> None:
        self.path = Path(root) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise StoreLocked at once (never waits); StoreReadOnly for a store this process may
        read but not write (nothing to lock: it will write nothing there)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            if e.errno in _READ_ONLY and os.access(self.path.parent, os.R_OK | os.X_OK):
                raise StoreReadOnly(f"{self.path.parent}: {(e.strerror or str(e)).lower()}") from None
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            who = f"another ollama-py serve (pid {holder})" if holder else "another ollama-py serve"
            raise StoreLocked(f"the model store {self.path.parent} is in use by {who}; stop it, or set "
                              "OLLAMA_MODELS to another directory") from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing drops the flock

    def __enter__(self) -> StoreLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode().strip()
        return int(text) if text else None
    except (OSError, ValueError):
        return None
