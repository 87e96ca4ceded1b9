"""One serve per model store: a second serve on the same OLLAMA_MODELS refuses to start, with one line naming
the store, before its start-up prune can take the first one's in-flight upload or a blob it just received."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ollama_py.server.app import create_app
from ollama_py.store.lock import StoreLock, StoreLocked
from tests.helpers.app import fake_scheduler, make_settings
from tests.helpers.paths import ROOT
from tests.helpers.ports import free_port
from tests.helpers.serve import start_serve, stop_serve


def test_second_lock_on_a_store_is_refused_with_the_holders_pid(tmp_path: Path) -> None:
    with StoreLock(tmp_path), pytest.raises(StoreLocked, match=rf"model store {tmp_path} is in use by another "
                                                                  rf"ollama-py serve \(pid {os.getpid()}\)"):
        StoreLock(tmp_path).acquire()
    with StoreLock(tmp_path):  # released: the next one gets it
        pass


async def test_second_app_on_a_store_refuses_and_prunes_nothing(tmp_path: Path, aiohttp_client) -> None:
    settings = make_settings(tmp_path)
    first = await aiohttp_client(create_app(settings, scheduler=fake_scheduler(settings)))
    blobs = settings.models / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    upload = blobs / "sha256-tmp-inflight"  # the first serve is writing this upload now
    upload.write_bytes(b"half an upload")
    received = blobs / ("sha256-" + "ab" * 32)  # uploaded for a create whose manifest is not written yet
    received.write_bytes(b"weights")
    with pytest.raises(StoreLocked, match="is in use by another ollama-py serve"):
        await aiohttp_client(create_app(settings, scheduler=fake_scheduler(settings)))
    assert upload.read_bytes() == b"half an upload" and received.read_bytes() == b"weights"
    assert (await first.get("/api/tags")).status == 200


def test_two_serve_processes_on_one_store(tmp_path: Path) -> None:
    proc, _url, env = start_serve(tmp_path)
    try:
        upload = tmp_path / "models" / "blobs" / "sha256-tmp-inflight"
        upload.parent.mkdir(parents=True, exist_ok=True)
        upload.write_bytes(b"half an upload")
        second = subprocess.run([sys.executable, "-m", "ollama_py", "serve"], cwd=ROOT, capture_output=True,
                                text=True, timeout=60, env={**env, "OLLAMA_HOST": f"127.0.0.1:{free_port()}"})
        assert second.returncode == 1
        last = second.stderr.strip().splitlines()[-1]
        assert last == (f"Error: the model store {tmp_path / 'models'} is in use by another ollama-py serve "
                        f"(pid {proc.pid}); stop it, or set OLLAMA_MODELS to another directory")
        assert "Traceback" not in second.stderr
        assert upload.read_bytes() == b"half an upload"
        assert proc.poll() is None
    finally:
        stop_serve(proc)
