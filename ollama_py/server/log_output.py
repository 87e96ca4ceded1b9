"""serve's log lines, written to stderr by a thread of their own, so that a stderr nobody reads never stops serve.

A pipe holds 64 KiB; serve writes a line per request. A parent that pipes serve's stderr and does not read it, or a
terminal paused with Ctrl-S, used to block the first write past that, on the event loop: every client then hung
(400-odd requests after the last read). Here a log call formats its line on the caller's thread (the record's
arguments are read while they are current) and appends it to a bounded buffer; the writer thread hands the buffer to
stderr's file descriptor, a batch per write (after a write it lets lines gather for BATCH_SECONDS: no thread is
woken for each request's line), and blocks there instead of the loop. Past MAX_BYTES of lines waiting for a stalled
stderr, new lines are counted and dropped, and the writer says how many once stderr takes lines again:

    time=... level=WARNING source=ollama_py.server.log_output msg=212 log lines were dropped: stderr was not being read

At exit (logging.shutdown) what is buffered is written for up to FLUSH_SECONDS, never longer: a stopped reader does
not hold up a stop. The thread writes with os.write on the descriptor, holding no lock of Python's stderr object,
so an exit with the thread blocked in a write is clean.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import TextIO

MAX_BYTES = 8 << 20  # characters of log text waiting for stderr, at most (a long session's worth of request lines)
BATCH_SECONDS = 0.1  # after a write the writer lets lines gather this long (a thread wake per request is CPU)
FLUSH_SECONDS = 2.0  # how long an exit waits for stderr to take what is buffered


LINE_FORMAT = "time=%(asctime)s level=%(levelname)s source=%(name)s msg=%(message)s"


class LineFormatter(logging.Formatter):
    """logging.Formatter's lines, with the time's text made once a second: serve writes a line per request, and
    time.localtime and strftime were a third of formatting one."""

    def __init__(self, fmt: str = LINE_FORMAT) -> None:
        super().__init__(fmt)
        self._second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802 - logging's
        if datefmt is not None or self.converter is not time.localtime:
            return super().formatTime(record, datefmt)
        whole = int(record.created)
        second, text = self._second  # (one tuple: a thread that formats meanwhile sees either or the other)
        if second != whole:
            text = time.strftime(self.default_time_format, time.localtime(whole))
            self._second = (whole, text)
        return self.default_msec_format % (text, record.msecs) if self.default_msec_format else text


class BackgroundStderrHandler(logging.Handler):
    """A logging handler whose lines reach `stream` (stderr) from a writer thread; emit never blocks on I/O."""

    def __init__(self, stream: TextIO | None = None, *, max_bytes: int = MAX_BYTES) -> None:
        super().__init__()
        self._stream = stream if stream is not None else sys.stderr  # None: serve was started with stderr closed
        self._max_bytes = max_bytes
        self._lines: list[str] = []
        self._size = 0  # characters in _lines
        self._dropped = 0
        self._writing = False  # the writer holds a batch it has not finished writing
        self._batches = 0  # batches written so far
        self._gave_up_at: int | None = None  # _batches when a flush last timed out
        self._closed = self._stream is None  # then lines have nowhere to go
        self._hurry = False  # a drain() waits: no pause between batches
        self._idle = False  # the writer waits for a line (else it is writing, or pausing between batches)
        self._cond = threading.Condition(threading.Lock())
        self._thread = threading.Thread(target=self._run, name="ollama-py-log", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + "\n"
        except Exception:  # a bad format string in someone's log call: say so, in a line of its own
            line = f"log record from {record.name} could not be formatted: {record.msg!r}\n"
        with self._cond:
            if self._closed:
                return
            if self._size + len(line) > self._max_bytes:
                self._dropped += 1
                return
            self._lines.append(line)
            self._size += len(line)
            if self._idle:
                self._idle = False
                self._cond.notify_all()  # all: a drain() may wait on the same condition

    def handle(self, record: logging.LogRecord) -> bool:
        """As logging.Handler's, without its lock around emit: emit takes the buffer's own."""
        rv: object = self.filter(record)
        if isinstance(rv, logging.LogRecord):  # (Python 3.12+: a filter may give a record in the record's place)
            record = rv
        if rv:
            self.emit(record)
        return bool(rv)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        """Never logging's default (a traceback written to stderr on the caller's thread, which may block)."""

    def flush(self) -> None:
        """What is buffered, written: waits up to FLUSH_SECONDS (logging.shutdown calls it at exit)."""
        self.drain(FLUSH_SECONDS)

    def drain(self, timeout: float) -> bool:
        """Wait until every buffered line is written, up to `timeout` seconds; whether it all was. After a wait
        that timed out, the next returns at once while stderr has taken nothing since (an exit flushes twice)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._hurry = True
            self._cond.notify_all()
            while self._lines or self._writing:
                left = deadline - time.monotonic()
                if left <= 0 or self._gave_up_at == self._batches:
                    self._gave_up_at = self._batches
                    return False
                self._cond.wait(left)
        return True

    def close(self) -> None:
        self.flush()
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        super().close()

    @property
    def dropped(self) -> int:
        """Lines dropped and not yet reported."""
        with self._cond:
            return self._dropped

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._lines and not self._closed:
                    self._idle = True
                    self._cond.wait()
                self._idle = False
                if self._closed and not self._lines:
                    return
                lines, self._lines, self._size = self._lines, [], 0
                dropped, self._dropped = self._dropped, 0
                self._writing = True
            text = "".join(lines)
            if dropped:
                text += self._dropped_line(dropped)
            self._write(text)
            with self._cond:
                self._writing = False
                self._batches += 1
                self._cond.notify_all()  # drain() waits for this
                if not self._closed and not self._hurry:
                    self._cond.wait(BATCH_SECONDS)  # lines gather; drain() and close() cut it short
                self._hurry = False

    def _dropped_line(self, dropped: int) -> str:
        record = logging.LogRecord(__name__, logging.WARNING, __file__, 0,
                                   "%d log lines were dropped: stderr was not being read", (dropped,), None)
        try:
            return self.format(record) + "\n"
        except Exception:
            return f"{dropped} log lines were dropped: stderr was not being read\n"

    def _write(self, text: str) -> None:
        try:
            fd = self._stream.fileno()
        except (AttributeError, OSError, ValueError):  # a stream without a descriptor (a test's capture)
            try:
                self._stream.write(text)
                self._stream.flush()
            except Exception:  # noqa: BLE001 - the writer thread must outlive any stream's failure
                pass
            return
        encoding = getattr(self._stream, "encoding", None) or "utf-8"
        data = memoryview(text.encode(encoding, "backslashreplace"))
        while data:
            try:
                n = os.write(fd, data)
            except InterruptedError:
                continue
            except BlockingIOError:  # a non-blocking descriptor that is full: wait for it
                time.sleep(0.01)
                continue
            except OSError:  # stderr closed (EPIPE, EBADF): the lines have nowhere to go
                return
            data = data[n:]
