"""A model store serve can read but not write -- Ollama's system store (/usr/share/ollama/.ollama/models, owned by
its own user), a read-only mount, a shared directory: serve starts, lists, shows and runs its models, and refuses
pull, create, copy, delete and uploads at once with one clear line; it writes nothing there (no lock file, no
prune). Before, serve would not start: "Error: Read-only file system: .../.ollama-py.lock"."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from ollama_py.server.model_lookup import READ_ONLY_STORE
from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model, make_settings
from tests.helpers.ports import free_port
from tests.helpers.processes import fake_runners_dir


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root: (size, mtime_ns)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


_READ_ONLY_BIND = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'


def _can_mount_read_only(path: Path) -> bool:
    return subprocess.run(["unshare", "--mount", "sh", "-c", _READ_ONLY_BIND, str(path), "true"],
                          capture_output=True).returncode == 0


@pytest.fixture
def unwritable_store(tmp_path: Path) -> Iterator[tuple[Path, list[str], dict[str, str]]]:
    """(the store, the command prefix under which serve cannot write it, serve's env): a store with the model
    `tiny` written by this process. Root writes anything it may open, so as root serve runs in a mount namespace of
    its own where the store is a read-only bind mount (EROFS, as a read-only volume gives); otherwise the store's
    files and directories lose their write bits (EACCES, as another user's store gives)."""
    settings = make_settings(tmp_path)
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "tiny.gguf"), "tiny")
    env = {**os.environ, "OLLAMA_MODELS": str(settings.models), "OLLAMA_RUNNERS_DIR": str(fake_runners_dir(tmp_path)),
           "OLLAMA_PY_DATA_DIR": str(tmp_path / "data"), "OLLAMA_NOUI": "1"}
    if os.geteuid() == 0:
        if not _can_mount_read_only(settings.models):
            pytest.skip("root here cannot be kept from writing a directory (no mount namespace)")
        yield settings.models, ["unshare", "--mount", "sh", "-c", _READ_ONLY_BIND, str(settings.models)], env
        return
    for p in [settings.models, *settings.models.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        yield settings.models, [], env
    finally:
        for p in [settings.models, *settings.models.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)


def test_serve_runs_a_store_it_cannot_write_and_refuses_to_change_it(unwritable_store):
    store, prefix, env = unwritable_store
    before = _tree(store)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = store.parent / "serve.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*prefix, sys.executable, "-m", "ollama_py", "serve"], stdout=out,
                                stderr=subprocess.STDOUT, env={**env, "OLLAMA_HOST": f"127.0.0.1:{port}"},
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()[-2000:]
            try:
                if requests.get(url + "/api/version", timeout=1).ok:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.1)
        assert [m["name"] for m in requests.get(url + "/api/tags", timeout=10).json()["models"]] == ["tiny:latest"]
        assert requests.post(url + "/api/show", json={"model": "tiny"}, timeout=10).ok
        answer = requests.post(url + "/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False},
                               timeout=60)
        assert answer.status_code == 200 and answer.json()["response"], answer.text  # run: the runner reads the weights

        refused = [
            requests.post(url + "/api/create", json={"model": "x", "from": "tiny"}, timeout=10),
            requests.post(url + "/api/copy", json={"source": "tiny", "destination": "y"}, timeout=10),
            requests.delete(url + "/api/delete", json={"model": "tiny"}, timeout=10),
            requests.post(url + "/api/pull", json={"model": "tiny"}, timeout=10),
            requests.post(url + "/api/blobs/sha256-" + "0" * 64, data=b"x", timeout=10),
        ]
        assert [(r.status_code, r.json()) for r in refused] == [(500, {"error": READ_ONLY_STORE})] * 5
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 0
    assert "the model store is read-only" in log.read_text()
    assert _tree(store) == before  # nothing written: no lock file, nothing pruned
