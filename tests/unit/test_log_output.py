"""serve's log lines when nobody reads its stderr: serve keeps answering, nothing logged is lost until the
buffer's limit, and what is dropped past it is counted (server/log_output.py)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from ollama_py.server.log_output import BackgroundStderrHandler
from tests.helpers.ports import free_port

PIPE_BYTES = 1 << 16  # what a Linux pipe holds before a write blocks


def _record(msg: str, *args: object) -> logging.LogRecord:
    return logging.LogRecord("ollama_py.test", logging.INFO, __file__, 1, msg, args, None)


def _read_all(fd: int) -> str:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks).decode()


def _in_thread(fn, timeout: float = 30.0) -> None:
    """Run fn on a thread; fail if it is still running after `timeout` (it blocked)."""
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "logging blocked on a stderr nobody reads"


@pytest.fixture
def pipe():
    r, w = os.pipe()
    stream = open(w, "w", encoding="utf-8", closefd=True)  # noqa: SIM115 - closed by the test or below
    yield r, stream
    with contextlib.suppress(OSError):
        stream.close()
    with contextlib.suppress(OSError):
        os.close(r)


def test_emit_returns_while_stderr_is_not_read_and_every_line_comes_out_in_order(pipe):
    r, stream = pipe
    handler = BackgroundStderrHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    count = 3 * PIPE_BYTES // 40  # three pipes' worth of lines

    _in_thread(lambda: [handler.emit(_record("request %05d %s", i, "x" * 20)) for i in range(count)])

    reader = threading.Thread(target=lambda: out.append(_read_all(r)))
    out: list[str] = []
    reader.start()
    assert handler.drain(30)
    handler.close()
    stream.close()
    reader.join(30)
    lines = out[0].splitlines()
    assert lines == [f"request {i:05d} {'x' * 20}" for i in range(count)]
    assert handler.dropped == 0


def test_lines_past_the_limit_are_counted_and_the_count_is_logged_once_stderr_reads_again(pipe):
    r, stream = pipe
    handler = BackgroundStderrHandler(stream, max_bytes=PIPE_BYTES)
    handler.setFormatter(logging.Formatter("level=%(levelname)s msg=%(message)s"))
    line = "y" * 99  # 100 characters with its newline, 111 with the prefix
    total = 4 * PIPE_BYTES // 100

    def flood() -> None:
        for _ in range(total):
            handler.emit(_record(line))
    _in_thread(flood)  # the pipe holds 64 KiB, the writer's batch and the buffer as much again: the rest can't wait

    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(_read_all(r)))
    reader.start()  # stderr is read again: what waited is written, and then how many lines were dropped
    assert handler.drain(30)
    handler.emit(_record("after"))
    assert handler.drain(30)
    handler.close()
    stream.close()
    reader.join(30)
    lines = out[0].splitlines()
    kept = [x for x in lines if x.endswith(line)]
    notes = [re.fullmatch(r"level=WARNING msg=(\d+) log lines were dropped: stderr was not being read", x)
             for x in lines if "dropped" in x]
    assert notes and all(notes)
    dropped = sum(int(m.group(1)) for m in notes if m)
    assert dropped > 0
    assert len(kept) + dropped == total  # nothing lost without being counted
    assert lines[-1] == "level=INFO msg=after"
    assert handler.dropped == 0  # all reported


def test_close_gives_up_on_a_stderr_that_never_reads(pipe):
    _r, stream = pipe
    handler = BackgroundStderrHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    for _ in range(2 * PIPE_BYTES // 50):
        handler.emit(_record("z" * 49))
    assert handler.drain(0.2) is False  # stuck: the pipe is full and nobody reads it
    _in_thread(handler.close)  # bounded by FLUSH_SECONDS, never a hang


def test_a_record_that_cannot_be_formatted_is_one_line_and_text_the_stream_cannot_encode_is_escaped():
    stream = io.StringIO()  # no descriptor: written through the stream object
    handler = BackgroundStderrHandler(stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.emit(_record("%d apples", "not a number"))
    handler.emit(_record("plain"))
    assert handler.drain(10)
    assert stream.getvalue().splitlines() == ["log record from ollama_py.test could not be formatted: '%d apples'",
                                              "plain"]

    r, w = os.pipe()
    ascii_stream = open(w, "w", encoding="ascii", closefd=True)  # noqa: SIM115
    handler = BackgroundStderrHandler(ascii_stream)
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.emit(_record("caf\u00e9 \U0001F600"))
    assert handler.drain(10)
    handler.close()
    ascii_stream.close()
    assert _read_all(r) == "caf\\xe9 \\U0001f600\n"
    os.close(r)


def _serve_logging_to_pipe(tmp: Path) -> tuple[subprocess.Popen, str, int]:
    """serve with its stdout and stderr into a pipe this test reads only when it chooses; (proc, url, read end)."""
    port = free_port()
    env = {**os.environ, "OLLAMA_HOST": f"127.0.0.1:{port}", "OLLAMA_MODELS": str(tmp / "models"),
           "OLLAMA_PY_DATA_DIR": str(tmp / "data"), "OLLAMA_NOUI": "1"}
    r, w = os.pipe()
    proc = subprocess.Popen([sys.executable, "-m", "ollama_py", "serve"], env=env, stdout=w, stderr=w,
                            start_new_session=True)
    os.close(w)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(requests.RequestException):
            if requests.get(url + "/api/version", timeout=1).ok:
                return proc, url, r
        if proc.poll() is not None or time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError("serve did not start")
        time.sleep(0.1)


def _list_models(url: str, times: int) -> None:
    with requests.Session() as s:
        for i in range(times):
            got = s.get(url + "/api/tags", params={"n": i}, timeout=10)
            assert got.status_code == 200
            assert got.json() == {"models": []}


def test_serve_keeps_answering_while_nobody_reads_its_stderr_and_its_lines_come_out_after(tmp_path: Path):
    """Before: the 412th request hung (serve's loop blocked writing its access line to a full pipe)."""
    proc, url, r = _serve_logging_to_pipe(tmp_path)
    try:
        requests_made = 1500  # ~150 bytes of access line each: three full pipes
        _list_models(url, requests_made)
        out: list[str] = []
        reader = threading.Thread(target=lambda: out.append(_read_all(r)), daemon=True)
        reader.start()  # stderr is read again: what waited comes out
        time.sleep(1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        reader.join(30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(r)
    access = [x for x in out[0].splitlines() if "path=/api/tags" in x]
    assert len(access) == requests_made
    assert "dropped" not in out[0]


def test_serve_stops_while_nobody_reads_its_stderr(tmp_path: Path):
    proc, url, r = _serve_logging_to_pipe(tmp_path)
    try:
        _list_models(url, 800)  # the pipe is full and lines wait in serve
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0  # the exit gives up on the lines after a moment, cleanly
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        os.close(r)


def test_serve_started_with_stderr_closed_logs_nowhere_and_never_waits(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(sys, "stderr", None)  # what Python sets when fd 2 is closed at start (`2>&-`)
    handler = BackgroundStderrHandler()
    handler.setFormatter(logging.Formatter("%(message)s"))
    handler.emit(_record("lost"))
    assert handler.drain(0.5)
    handler.close()


def test_serves_line_formatter_writes_what_loggings_own_writes():
    """LineFormatter makes the time's text once a second: every line is still logging.Formatter's, across seconds,
    with msecs, with an exception's traceback, from threads at once."""
    from ollama_py.server.log_output import LINE_FORMAT, LineFormatter

    ours, theirs = LineFormatter(), logging.Formatter(LINE_FORMAT)
    start = time.time()
    for i in range(3000):
        record = _record("line %d of %s", i, "many")
        record.created = start + i * 0.0137  # across ~41 seconds, msecs varying
        record.msecs = (record.created - int(record.created)) * 1000
        assert ours.format(record) == theirs.format(record)
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord("ollama_py.test", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    assert ours.format(record) == theirs.format(record)
    assert "ValueError: boom" in ours.format(record)

    seen: list[str] = []

    def many() -> None:
        for k in range(500):
            record = _record("from a thread %d", k)
            record.created = start + k * 0.5
            record.msecs = 0.0
            seen.append(ours.format(record) == theirs.format(record))

    threads = [threading.Thread(target=many) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(seen) == 2000 and all(seen)
