"""StoreLock: one serve per model store, across processes.

A serve prunes the store when it starts (stale temp files, unreferenced blobs); a second serve on the same
OLLAMA_MODELS would take the first one's in-flight upload and the blob it had just received for a create
whose manifest is not written yet. So serve holds an exclusive fcntl.flock on `<models>/.ollama-py.lock` for
its whole life, and a second one is refused with StoreLocked naming the store and the holder's pid. The kernel
drops the lock when the holder exits, however it exits: a stale lock file never blocks anyone.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from ollama_py.errors import OllamaError

LOCK_NAME = ".ollama-py.lock"


class StoreLocked(OllamaError):
    """Another serve holds this store."""


class StoreLock:
    def __init__(self, root: Path) -> None:
        self.path = Path(root) / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> None:
        """Take the lock or raise StoreLocked at once (never waits)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
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
