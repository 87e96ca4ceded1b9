"""`serve` as a subprocess over the fake llama-server, and its runner children: find them, wait for them to go.

The reliability tests (no orphans, faults, `run` while a model loads) and the OpenAPI fuzzing share these.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.helpers.app import create_tiny_model, make_settings
from tests.helpers.paths import FAKE_SERVER
from tests.helpers.serve import start_serve

GONE_WAIT_SECONDS = 15.0


def fake_runners_dir(tmp: Path) -> Path:
    """A runners directory with one variant, "cpu", whose llama-server execs the fake."""
    variant = tmp / "runners" / "cpu"
    variant.mkdir(parents=True, exist_ok=True)
    script = variant / "llama-server"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_SERVER}" "$@"\n')
    script.chmod(0o755)
    return tmp / "runners"


def start_fake_serve(tmp: Path, gguf: Path, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, str]:
    """`serve` over the fake runner, with the tiny model created as "tiny"; FAKE_* settings go in env."""
    create_tiny_model(make_settings(tmp), gguf)
    proc, url, _ = start_serve(tmp, {"OLLAMA_RUNNERS_DIR": str(fake_runners_dir(tmp)), **(env or {})})
    return proc, url


def runner_processes(serve_pid: int) -> list[psutil.Process]:
    """serve's llama-server children: the real binary or the fake."""
    try:
        children = psutil.Process(serve_pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    out = []
    for child in children:
        with contextlib.suppress(psutil.Error):
            if child.name() == "llama-server" or any(str(FAKE_SERVER) in part for part in child.cmdline()):
                out.append(child)
    return out


def alive(pid: int) -> bool:
    """Whether a process of that pid exists (a zombie included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def is_gone(proc: psutil.Process) -> bool:
    """Exited: no such process, or a zombie nobody has reaped yet (it runs nothing and holds no port)."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(procs: list[psutil.Process], seconds: float = GONE_WAIT_SECONDS) -> list[psutil.Process]:
    """Those of procs still running after up to `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [p for p in procs if not is_gone(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in procs if not is_gone(p)]


def wait_for_runners(serve_pid: int, count: int, seconds: float = 30.0) -> list[psutil.Process]:
    """serve's runner children once there are at least `count` of them; AssertionError after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = runner_processes(serve_pid)
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"expected {count} runner(s) under serve, found {runner_processes(serve_pid)}")
