"""A model store serve can read but not write -- Ollama's system store (/usr/share/ollama/.ollama/models, owned by
its own user), a read-only mount, a shared directory: serve starts, lists, shows and runs its models, and refuses
pull, create, copy, delete and uploads at once with one clear line; it writes nothing there (no lock file, no
prune). Before, serve would not start: "Error: Read-only file system: .../.ollama-py.lock"."""

from __future__ import annotations

import contextlib
import os
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
from tests.helpers.serve import stop_serve


def _tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root: (size, mtime_ns)."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


_READ_ONLY_BIND = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'


def _can_mount_read_only(path: Path) -> bool:
    return subprocess.run(["unshare", "--mount", "sh", "-c", _READ_ONLY_BIND, str(path), "true"],
                          capture_output=True).returncode == 0


@contextlib.contextmanager
def _unwritable(path: Path) -> Iterator[list[str]]:
    """The command prefix under which a process cannot write `path`. Root writes anything it may open, so as root
    the process runs in a mount namespace of its own where `path` is a read-only bind mount (EROFS, as a read-only
    volume gives); otherwise `path`'s files and directories lose their write bits (EACCES, as another user's
    directory gives)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        if not _can_mount_read_only(path):
            pytest.skip("root here cannot be kept from writing a directory (no mount namespace)")
        yield ["unshare", "--mount", "sh", "-c", _READ_ONLY_BIND, str(path)]
        return
    for p in [path, *path.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        yield []
    finally:
        for p in [path, *path.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)


@pytest.fixture
def tiny_store(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """(the store, serve's env): a store with the model `tiny`, the fake runner, and a data directory."""
    settings = make_settings(tmp_path)
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "tiny.gguf"), "tiny")
    env = {**os.environ, "OLLAMA_MODELS": str(settings.models), "OLLAMA_RUNNERS_DIR": str(fake_runners_dir(tmp_path)),
           "OLLAMA_PY_DATA_DIR": str(tmp_path / "data"), "OLLAMA_NOUI": "1"}
    return settings.models, env


@contextlib.contextmanager
def _serve(prefix: list[str], env: dict[str, str], log: Path) -> Iterator[str]:
    """serve under `prefix`, once it answers; its URL. Stopped with SIGTERM, and it must exit 0."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*prefix, sys.executable, "-m", "ollama_py", "serve"], stdout=out,
                                stderr=subprocess.STDOUT, env={**env, "OLLAMA_HOST": f"127.0.0.1:{port}"},
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, log.read_text()[-2000:]
            with contextlib.suppress(requests.RequestException):
                if requests.get(url + "/api/version", timeout=1).ok:
                    break
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.1)
        yield url
    finally:
        stop_serve(proc)
    assert proc.returncode == 0


def test_serve_runs_a_store_it_cannot_write_and_refuses_to_change_it(tiny_store, tmp_path: Path):
    store, env = tiny_store
    before = _tree(store)
    log = tmp_path / "serve.log"
    with _unwritable(store) as prefix, _serve(prefix, env, log) as url:
        assert [m["name"] for m in requests.get(url + "/api/tags", timeout=10).json()["models"]] == ["tiny:latest"]
        assert requests.post(url + "/api/show", json={"model": "tiny"}, timeout=10).ok
        answer = requests.post(url + "/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False},
                               timeout=60)
        assert answer.status_code == 200 and answer.json()["response"], answer.text  # the runner reads the weights
        refused = [
            requests.post(url + "/api/create", json={"model": "x", "from": "tiny"}, timeout=10),
            requests.post(url + "/api/copy", json={"source": "tiny", "destination": "y"}, timeout=10),
            requests.delete(url + "/api/delete", json={"model": "tiny"}, timeout=10),
            requests.post(url + "/api/pull", json={"model": "tiny"}, timeout=10),
            requests.post(url + "/api/blobs/sha256-" + "0" * 64, data=b"x", timeout=10),
        ]
        assert [(r.status_code, r.json()) for r in refused] == [(500, {"error": READ_ONLY_STORE})] * 5
    assert "the model store is read-only" in log.read_text()
    assert _tree(store) == before  # nothing written: no lock file, nothing pruned


def test_a_data_directory_serve_cannot_write_turns_the_prompt_cache_on_disk_off_not_the_runners(tiny_store,
                                                                                               tmp_path: Path):
    """Before: every generate failed with '[Errno 30] Read-only file system' (the prompt cache's directory could
    not be made) -- a HOME not writable, as a locked-down service has it."""
    _store, env = tiny_store
    data = Path(env["OLLAMA_PY_DATA_DIR"])
    log = tmp_path / "serve.log"
    with _unwritable(data) as prefix, _serve(prefix, {**env, "OLLAMA_PY_PROMPT_CACHE_DISK": "1024"}, log) as url:
        for _ in range(2):
            answer = requests.post(url + "/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False,
                                                                "keep_alive": 0}, timeout=60)
            assert answer.status_code == 200 and answer.json()["response"], answer.text
    said = [line for line in log.read_text().splitlines() if "prompt cache on disk off" in line]
    assert len(said) == 1 and f"{data / 'prompt-cache'} cannot be written" in said[0]  # said once
    assert list(data.iterdir()) == []
