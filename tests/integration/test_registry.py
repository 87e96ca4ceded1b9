"""Pull and push against a real registry (Debian's docker-registry), through the HTTP API.

Most tests run the real app in-process (runners are the fake llama-server; pulls do not need a runner), so
they can use small download parts and short timeouts. A loopback proxy between the server and the registry
breaks, stalls, slows or corrupts blob downloads on demand and records what was asked for. The restart and
full-disk tests run `ollama-py serve` as a process; the round trip with SmolLM2 uses the live server.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from ollama_py.api.names import parse_name
from ollama_py.store.download import BlobDownload
from ollama_py.store.manifests import CONFIG_V1, MEDIA_LICENSE, MEDIA_MODEL, Layer, Manifest
from ollama_py.store.models import ModelStore
from ollama_py.store.registry import RegistryOptions, push_model
from tests.helpers.serve import start_serve, stop_serve
from tests.registry_fixture import BlobProxy, Rule, auth_registry, free_port, registry, write_credentials

__all__ = ["auth_registry", "registry"]  # fixtures, imported for pytest

pytestmark = [pytest.mark.integration, pytest.mark.registry]

KB = 1024


def publish(reg: Any, tmp: Path, repo_tag: str, model_bytes: int, *, extra: bytes | None = None) -> Manifest:
    """Put a model with random weights on the registry (pushed from a scratch store); its manifest."""
    store = ModelStore(tmp / f"publish-{repo_tag.replace('/', '_').replace(':', '_')}")
    weights, size = store.blobs.write_bytes(os.urandom(model_bytes))
    config, config_size = store.blobs.write_bytes(json.dumps({"model_format": "gguf", "model_family": "test"}).encode())
    layers = [Layer(MEDIA_MODEL, weights, size)]
    if extra is not None:
        digest, n = store.blobs.write_bytes(extra)
        layers.append(Layer(MEDIA_LICENSE, digest, n))
    manifest = Manifest.build(Layer(CONFIG_V1, config, config_size), layers)
    name = parse_name(reg.model(repo_tag))
    store.put_manifest(name, manifest)
    for _ in push_model(store, name, options=RegistryOptions(insecure=True)):
        pass
    return manifest


async def call(client: Any, path: str, **body: Any) -> list[dict[str, Any]]:
    """POST a streaming request; its NDJSON lines."""
    resp = await client.post(path, json=body)
    assert resp.status == 200, await resp.text()
    return [json.loads(line) for line in (await resp.text()).splitlines() if line.strip()]


def statuses(lines: list[dict[str, Any]]) -> list[str]:
    out: list[str] = []
    for line in lines:
        s = line.get("status") or f"error: {line.get('error')}"
        if not out or out[-1] != s:
            out.append(s)
    return out


def blob_files(models: Path, digest: str) -> list[str]:
    """Every file in blobs/ that belongs to `digest`: the blob, its partial data and part state."""
    stem = digest.replace(":", "-")
    blobs = models / "blobs"
    return sorted(n for n in os.listdir(blobs) if n.startswith(stem)) if blobs.is_dir() else []


@pytest.fixture
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Download parts of 64 KiB, a 1 s stall timeout and short backoff, so that tests with small blobs
    exercise the many-parts machinery quickly."""
    monkeypatch.setattr(BlobDownload, "MIN_PART_SIZE", 64 * KB)
    monkeypatch.setattr(BlobDownload, "STALL_TIMEOUT", 1.0)
    monkeypatch.setattr(BlobDownload, "BACKOFF", 0.05)


@pytest.fixture
async def server(fake_app: Any, aiohttp_client: Any) -> Any:
    settings, app = fake_app()
    client = await aiohttp_client(app)
    client.settings = settings
    return client


# -- push and pull -------------------------------------------------------------------------------------------


async def test_push_pull_round_trip(server: Any, registry: Any) -> None:
    remote = registry.model("test/tiny:1")
    resp = await server.post("/api/copy", json={"source": "tiny", "destination": remote})
    assert resp.status == 200
    original = {m["name"]: m["digest"] for m in (await (await server.get("/api/tags")).json())["models"]}[remote]

    pushed = await call(server, "/api/push", model=remote, insecure=True)
    assert statuses(pushed)[0] == "retrieving manifest"
    assert statuses(pushed)[-2:] == ["pushing manifest", "success"]
    last = {p["digest"]: p for p in pushed if "digest" in p}  # each layer's final progress object
    assert set(last) == ModelStore(server.settings.models).manifests.get(parse_name(remote)).digests()
    assert all(p["status"] == f"pushing {d[7:19]}" and p["completed"] == p["total"] for d, p in last.items())

    # Both names share the blobs: delete both, so the pull downloads everything.
    for name in (remote, "tiny"):
        assert (await server.delete("/api/delete", json={"model": name})).status == 200
    assert blob_files(server.settings.models, "sha256") == []

    pulled = await call(server, "/api/pull", model=remote, insecure=True)
    s = statuses(pulled)
    assert s[0] == "pulling manifest"
    assert s[-3:] == ["verifying sha256 digest", "writing manifest", "success"]
    assert all(x.startswith("pulling ") for x in s[1:-3])
    tags = {m["name"]: m["digest"] for m in (await (await server.get("/api/tags")).json())["models"]}
    assert tags == {remote: original}
    store = ModelStore(server.settings.models)
    manifest = store.manifests.get(parse_name(remote))
    assert all(store.blobs.verify(d) for d in manifest.digests())


async def test_second_push_skips_blobs_the_registry_has(server: Any, registry: Any) -> None:
    remote = registry.model("test/again:1")
    assert (await server.post("/api/copy", json={"source": "tiny", "destination": remote})).status == 200
    await call(server, "/api/push", model=remote, insecure=True)
    with BlobProxy(registry.url) as proxy:
        via_proxy = proxy.model("test/again:1")
        assert (await server.post("/api/copy", json={"source": "tiny", "destination": via_proxy})).status == 200
        lines = await call(server, "/api/push", model=via_proxy, insecure=True)
        methods = {(s.method, s.path.rsplit("/", 2)[-2]) for s in proxy.seen}
    assert statuses(lines)[-1] == "success"
    assert not any(m in ("POST", "PATCH") for m, _ in methods), methods  # HEAD said yes: nothing uploaded
    # every layer is reported complete in a single object
    per_layer = [p for p in lines if "digest" in p]
    assert per_layer and all(p["completed"] == p["total"] for p in per_layer)


async def test_push_mounts_a_layer_from_the_repository_it_came_from(server: Any, registry: Any,
                                                                     tmp_path: Path) -> None:
    weights = os.urandom(50 * KB)
    source = ModelStore(tmp_path / "source")
    digest, size = source.blobs.write_bytes(weights)
    config, config_size = source.blobs.write_bytes(b"{}")
    origin = parse_name(registry.model("test/origin:1"))
    source.put_manifest(origin, Manifest.build(Layer(CONFIG_V1, config, config_size),
                                               [Layer(MEDIA_MODEL, digest, size)]))
    for _ in push_model(source, origin, options=RegistryOptions(insecure=True)):
        pass

    with BlobProxy(registry.url) as proxy:
        derived = parse_name(proxy.model("test/derived:1"))
        store = ModelStore(server.settings.models)
        store.blobs.write_bytes(weights)
        store.blobs.write_bytes(b"{}")
        layer = Layer(MEDIA_MODEL, digest, size, from_=proxy.model("test/origin:1"))
        store.put_manifest(derived, Manifest.build(Layer(CONFIG_V1, config, config_size), [layer]))
        lines = await call(server, "/api/push", model=str(derived), insecure=True)
        uploads = [(s.method, s.path) for s in proxy.seen if "/blobs/uploads" in s.path]
    assert statuses(lines)[-1] == "success", lines
    assert ("POST", "/v2/test/derived/blobs/uploads/") in uploads
    assert not any(method == "PATCH" for method, _ in uploads)  # the registry mounted it: no bytes sent
    with BlobProxy(registry.url) as proxy:
        # A blocking HEAD to the registry's proxy (its own threads): the server under test is idle by now.
        head = requests.head(f"{proxy.url}/v2/test/derived/blobs/{digest}", timeout=10)  # noqa: ASYNC210
        assert head.status_code == 200


async def test_pull_unknown_model(server: Any, registry: Any) -> None:
    lines = await call(server, "/api/pull", model=registry.model("test/nothing:here"), insecure=True)
    assert lines[0] == {"status": "pulling manifest"}
    assert lines[-1] == {"error": "pull model manifest: file does not exist"}

    resp = await server.post("/api/pull", json={"model": registry.model("test/nothing:here"), "insecure": True,
                                                "stream": False})
    assert resp.status == 404  # Ollama: 500; the registry has no such model, nothing failed here
    assert await resp.json() == {"error": "pull model manifest: file does not exist"}


async def test_http_scheme_needs_insecure(server: Any, registry: Any) -> None:
    resp = await server.post("/api/pull", json={"model": f"http://{registry.model('test/x:1')}"})
    assert resp.status == 400  # Ollama: 500; the request asked for http without insecure
    assert await resp.json() == {"error": "insecure protocol http"}


async def test_pull_not_streamed_answers_last_progress(server: Any, registry: Any, tmp_path: Path) -> None:
    publish(registry, tmp_path, "test/quiet:1", 10 * KB)
    resp = await server.post("/api/pull", json={"model": registry.model("test/quiet:1"), "insecure": True,
                                                "stream": False})
    assert resp.status == 200
    assert await resp.json() == {"status": "success"}


# -- downloads that go wrong -----------------------------------------------------------------------------------


async def test_pull_resumes_after_connection_drops(server: Any, registry: Any, tmp_path: Path,
                                                   small_parts: None) -> None:
    manifest = publish(registry, tmp_path, "test/drop:1", 600 * KB)
    weights = manifest.layers[0].digest
    with BlobProxy(registry.url) as proxy:
        proxy.rules[weights] = Rule(drop_after=20 * KB, times=3)  # the first three responses break
        lines = await call(server, "/api/pull", model=proxy.model("test/drop:1"), insecure=True)
        gets = proxy.blob_gets(weights)
    assert statuses(lines)[-1] == "success", lines
    # each broken part was asked again from where it broke, not from its start
    starts = [int(g.range.split("=")[1].split("-")[0]) for g in gets]
    assert len(gets) > 10  # 600 KiB in 64 KiB parts, plus the three resumptions
    assert sum(g.sent for g in gets) < 600 * KB + 3 * 20 * KB
    assert any(start % (64 * KB) == 20 * KB for start in starts), starts
    store = ModelStore(server.settings.models)
    assert store.blobs.verify(weights)
    assert blob_files(server.settings.models, weights) == [weights.replace(":", "-")]  # no partial files left


async def test_stalled_part_is_restarted(server: Any, registry: Any, tmp_path: Path, small_parts: None) -> None:
    manifest = publish(registry, tmp_path, "test/stall:1", 256 * KB)  # four parts of 64 KiB
    weights = manifest.layers[0].digest
    with BlobProxy(registry.url) as proxy:
        proxy.rules[weights] = Rule(stall_after=10 * KB, stall_seconds=20, times=1)
        lines = await call(server, "/api/pull", model=proxy.model("test/stall:1"), insecure=True)
        gets = proxy.blob_gets(weights)
    assert statuses(lines)[-1] == "success", lines
    # the part that stalled was asked again from where it stopped
    stalled = next(g for g in gets if g.sent == 10 * KB)
    resume_at = int(stalled.range.split("=")[1].split("-")[0]) + 10 * KB
    assert any(g.range.startswith(f"bytes={resume_at}-") for g in gets), [g.range for g in gets]
    assert ModelStore(server.settings.models).blobs.verify(weights)


async def test_server_errors_are_retried(server: Any, registry: Any, tmp_path: Path, small_parts: None) -> None:
    manifest = publish(registry, tmp_path, "test/flaky:1", 128 * KB)
    weights = manifest.layers[0].digest
    with BlobProxy(registry.url) as proxy:
        proxy.rules[weights] = Rule(status=503, times=3)
        lines = await call(server, "/api/pull", model=proxy.model("test/flaky:1"), insecure=True)
        gets = proxy.blob_gets(weights)
    assert statuses(lines)[-1] == "success", lines
    assert len(gets) == 2 + 3  # two parts, three refusals
    assert ModelStore(server.settings.models).blobs.verify(weights)


async def test_persistent_server_errors_give_up(server: Any, registry: Any, tmp_path: Path,
                                                small_parts: None) -> None:
    manifest = publish(registry, tmp_path, "test/down:1", 32 * KB)
    weights = manifest.layers[0].digest
    with BlobProxy(registry.url) as proxy:
        proxy.rules[weights] = Rule(status=503)
        lines = await call(server, "/api/pull", model=proxy.model("test/down:1"), insecure=True)
        gets = proxy.blob_gets(weights)
    assert lines[-1]["error"].startswith("max retries exceeded: 503"), lines
    assert len(gets) == BlobDownload.MAX_RETRIES
    assert all(x != "writing manifest" for x in statuses(lines))


async def test_pull_cancelled_by_client_resumes_later(server: Any, registry: Any, tmp_path: Path,
                                                      small_parts: None) -> None:
    manifest = publish(registry, tmp_path, "test/hangup:1", 512 * KB)
    weights = manifest.layers[0].digest
    with BlobProxy(registry.url) as slow:
        slow.rules[weights] = Rule(rate=32 * KB)  # 64 KiB parts take 2 s each
        resp = await server.post("/api/pull", json={"model": slow.model("test/hangup:1"), "insecure": True})
        while True:
            line = json.loads(await resp.content.readline())
            if line.get("digest") == weights and line["completed"] >= 100 * KB:
                break
        resp.close()  # the client goes away mid-download
        deadline = time.monotonic() + 20
        while len(blob_files(server.settings.models, weights)) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        # the download stops: the proxy sends nothing more, and the partial files stay
        await asyncio.sleep(0.5)
        sent = slow.bytes_sent(weights)
        await asyncio.sleep(0.5)
        assert slow.bytes_sent(weights) == sent < 512 * KB
    files = blob_files(server.settings.models, weights)
    assert weights.replace(":", "-") + "-partial" in files and len(files) > 2, files

    with BlobProxy(registry.url) as proxy:
        lines = await call(server, "/api/pull", model=proxy.model("test/hangup:1"), insecure=True)
        again = proxy.bytes_sent(weights)
    assert statuses(lines)[-1] == "success", lines
    assert again <= 512 * KB - 100 * KB  # what arrived before the hang-up was not fetched again
    assert ModelStore(server.settings.models).blobs.verify(weights)


async def test_corrupted_blob_is_rejected(server: Any, registry: Any, tmp_path: Path, small_parts: None) -> None:
    manifest = publish(registry, tmp_path, "test/corrupt:1", 300 * KB)
    weights = manifest.layers[0].digest
    with BlobProxy(registry.url) as proxy:
        proxy.rules[weights] = Rule(corrupt=True)
        lines = await call(server, "/api/pull", model=proxy.model("test/corrupt:1"), insecure=True)
    error = lines[-1].get("error", "")
    assert error.startswith(f"digest mismatch, file must be downloaded again: want {weights}, got sha256:"), lines
    assert error != f"digest mismatch, file must be downloaded again: want {weights}, got {weights}"
    assert blob_files(server.settings.models, weights) == []  # neither the blob nor its partial files
    assert all("corrupt" not in m["name"] for m in (await (await server.get("/api/tags")).json())["models"])
    assert (await server.head(f"/api/blobs/{weights}")).status == 404


async def test_concurrent_pulls_share_one_download(server: Any, registry: Any, tmp_path: Path,
                                                   small_parts: None) -> None:
    manifest = publish(registry, tmp_path, "test/shared:1", 400 * KB)
    weights = manifest.layers[0].digest
    with BlobProxy(registry.url) as proxy:
        proxy.rules[weights] = Rule(rate=100 * KB)  # 64 KiB parts take 0.6 s: the second pull comes mid-way
        first = asyncio.ensure_future(call(server, "/api/pull", model=proxy.model("test/shared:1"), insecure=True))
        while not proxy.blob_gets(weights):
            await asyncio.sleep(0.01)
        second = await call(server, "/api/pull", model=proxy.model("test/shared:1"), insecure=True)
        first_lines = await first
        sent = proxy.bytes_sent(weights)
    assert statuses(first_lines)[-1] == "success"
    assert statuses(second)[-1] == "success"
    # the second pull watched the first one's download: progress below 100%, and the bytes came once
    assert any(p.get("digest") == weights and p["completed"] < p["total"] for p in second)
    assert sent == 400 * KB


async def test_pull_of_new_version_removes_unused_layers(server: Any, registry: Any, tmp_path: Path) -> None:
    old = publish(registry, tmp_path / "v1", "test/versions:latest", 20 * KB, extra=b"shared license")
    name = registry.model("test/versions:latest")
    await call(server, "/api/pull", model=name, insecure=True)
    new = publish(registry, tmp_path / "v2", "test/versions:latest", 20 * KB, extra=b"shared license")
    lines = await call(server, "/api/pull", model=name, insecure=True)
    assert statuses(lines)[-2:] == ["removing unused layers", "success"]
    store = ModelStore(server.settings.models)
    assert not store.blobs.exists(old.layers[0].digest)
    assert store.blobs.exists(new.layers[0].digest)
    assert store.blobs.exists(new.layers[1].digest)  # the license both versions use stays

    # pulling the same version again removes nothing
    again = await call(server, "/api/pull", model=name, insecure=True)
    assert "removing unused layers" not in statuses(again)


async def test_noprune_keeps_old_layers(fake_app: Any, aiohttp_client: Any, registry: Any, tmp_path: Path) -> None:
    settings, app = fake_app(noprune=True)
    server = await aiohttp_client(app)
    old = publish(registry, tmp_path / "v1", "test/keep:latest", 20 * KB)
    await call(server, "/api/pull", model=registry.model("test/keep:latest"), insecure=True)
    publish(registry, tmp_path / "v2", "test/keep:latest", 20 * KB)
    lines = await call(server, "/api/pull", model=registry.model("test/keep:latest"), insecure=True)
    assert statuses(lines)[-2:] == ["writing manifest", "success"]
    assert ModelStore(settings.models).blobs.exists(old.layers[0].digest)


# -- authentication ------------------------------------------------------------------------------------------


async def test_registry_with_password(server: Any, auth_registry: Any) -> None:
    remote = auth_registry.model("test/private:1")
    creds = server.settings.data_dir / "registries.json"
    assert (await server.post("/api/copy", json={"source": "tiny", "destination": remote})).status == 200

    denied = await call(server, "/api/push", model=remote, insecure=True)
    assert denied[-1]["error"].startswith("unauthorized: access denied"), denied
    assert str(creds) in denied[-1]["error"]  # it says where the password goes

    write_credentials(creds, auth_registry.host, "tester", "wrong")
    refused = await call(server, "/api/push", model=remote, insecure=True)
    assert refused[-1]["error"].startswith("unauthorized: access denied"), refused

    write_credentials(creds, auth_registry.host, *auth_registry.credentials)
    assert statuses(await call(server, "/api/push", model=remote, insecure=True))[-1] == "success"

    for name in (remote, "tiny"):
        assert (await server.delete("/api/delete", json={"model": name})).status == 200
    creds.unlink()
    lines = await call(server, "/api/pull", model=remote, insecure=True)
    assert lines[-1]["error"].startswith("pull model manifest: unauthorized: access denied"), lines

    write_credentials(creds, auth_registry.host, *auth_registry.credentials)
    lines = await call(server, "/api/pull", model=remote, insecure=True)
    assert statuses(lines)[-1] == "success"
    assert remote in [m["name"] for m in (await (await server.get("/api/tags")).json())["models"]]


# -- a server process: restart and full disk -------------------------------------------------------------------


def _pull_in_background(url: str, model: str) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []

    def run() -> None:
        with contextlib.suppress(requests.RequestException), \
                requests.post(url + "/api/pull", json={"model": model, "insecure": True}, stream=True,
                              timeout=120) as r:
            out.extend(json.loads(line) for line in r.iter_lines() if line)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


def test_pull_resumes_after_server_restart(tmp_path: Path, registry: Any) -> None:
    size = 4 * 1000 * 1000
    manifest = publish(registry, tmp_path, "test/restart:1", size)
    weights = manifest.layers[0].digest
    # partial files survive a restart only when the start-up prune is off
    env = {"OLLAMA_NOPRUNE": "1"}
    with BlobProxy(registry.url) as slow:
        slow.rules[weights] = Rule(rate=1_000_000)
        proc, url, _ = start_serve(tmp_path, env)
        try:
            _thread, _lines = _pull_in_background(url, slow.model("test/restart:1"))
            deadline = time.monotonic() + 60
            while slow.bytes_sent(weights) < size // 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.2)  # past one state save after the halfway mark
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        before_restart = slow.bytes_sent(weights)
    assert size // 2 <= before_restart < size

    with BlobProxy(registry.url) as proxy:
        proc, url, _ = start_serve(tmp_path, env)
        try:
            r = requests.post(url + "/api/pull", json={"model": proxy.model("test/restart:1"), "insecure": True,
                                                       "stream": False}, timeout=120)
            assert r.status_code == 200 and r.json() == {"status": "success"}, r.text
            assert requests.head(f"{url}/api/blobs/{weights}", timeout=10).status_code == 200
        finally:
            stop_serve(proc)
        gets = proxy.blob_gets(weights)
    assert gets and gets[0].range and not gets[0].range.startswith("bytes=0-"), [g.range for g in gets]
    assert proxy.bytes_sent(weights) <= size - size // 2
    assert ModelStore(tmp_path / "models").blobs.verify(weights)


def _can_mount_tmpfs() -> bool:
    try:
        return subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /tmp"],
                              capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def test_full_disk_aborts_cleanly(tmp_path: Path, registry: Any) -> None:
    """The server's models directory is a 2 MB tmpfs (in a private mount namespace): a 3 MB blob is refused
    before a byte is written ("not enough disk space"), leaves nothing behind, and a 1 MB model still fits."""
    if not _can_mount_tmpfs():
        pytest.skip("needs `unshare -rm` to give the server a small disk of its own")
    big = publish(registry, tmp_path, "test/big:1", 3 * 1000 * 1000)
    publish(registry, tmp_path, "test/small:1", 1000 * 1000)
    models = tmp_path / "models"
    models.mkdir()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "OLLAMA_HOST": f"127.0.0.1:{port}", "OLLAMA_MODELS": str(models),
           "OLLAMA_PY_DATA_DIR": str(tmp_path / "data")}
    script = f'mount -t tmpfs -o size=2m tmpfs "$OLLAMA_MODELS" && exec "{sys.executable}" -m ollama_py serve'
    with open(tmp_path / "serve.log", "ab") as log:
        proc = subprocess.Popen(["unshare", "-rm", "sh", "-c", script], env=env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-2000:]
            with contextlib.suppress(requests.RequestException):
                if requests.get(url + "/api/version", timeout=1).ok:
                    break
            assert time.monotonic() < deadline, "serve did not start"
            time.sleep(0.1)

        r = requests.post(url + "/api/pull", json={"model": registry.model("test/big:1"), "insecure": True},
                          timeout=120)
        lines = [json.loads(line) for line in r.text.splitlines() if line.strip()]
        assert lines[-1].get("error", "").startswith("not enough disk space: the model needs 3.0 MB, "), lines
        assert not any("digest" in line for line in lines)  # no blob was started
        assert requests.head(f"{url}/api/blobs/{big.layers[0].digest}", timeout=10).status_code == 404
        assert requests.get(url + "/api/tags", timeout=10).json()["models"] == []

        r = requests.post(url + "/api/pull", json={"model": registry.model("test/small:1"), "insecure": True,
                                                   "stream": False}, timeout=120)
        assert r.json() == {"status": "success"}, r.text
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


# -- the real model ------------------------------------------------------------------------------------------


def test_push_pull_smollm2_and_generate(live_server: Any, registry: Any, tmp_path: Path) -> None:
    remote = registry.model("test/smollm2:135m")
    assert live_server.api("POST", "/api/copy", json={"source": live_server.model, "destination": remote}).ok
    original = live_server.api("POST", "/api/show", json={"model": remote}).json()
    pushed = live_server.api("POST", "/api/push", json={"model": remote, "insecure": True, "stream": False})
    assert pushed.status_code == 200 and pushed.json() == {"status": "success"}, pushed.text
    assert live_server.api("DELETE", "/api/delete", json={"model": remote}).status_code == 200

    def manifest_of(models: Path) -> Manifest:
        return ModelStore(models).manifests.get(parse_name(remote))

    # back into the live server (whose smollm2:135m still holds the blobs) ...
    pulled = live_server.api("POST", "/api/pull", json={"model": remote, "insecure": True, "stream": False})
    assert pulled.json() == {"status": "success"}, pulled.text
    # ... and into an empty store, so that every byte comes over the wire
    proc, url, _ = start_serve(tmp_path)
    try:
        r = requests.post(url + "/api/pull", json={"model": remote, "insecure": True}, timeout=300)
        lines = [json.loads(line) for line in r.text.splitlines() if line.strip()]
        assert statuses(lines)[-1] == "success", lines[-3:]
        weights = [p for p in lines if p.get("total", 0) > 90 * 1000 * 1000]  # the 98 MB GGUF
        assert weights and weights[-1]["completed"] == weights[-1]["total"]

        here, there = manifest_of(live_server.models_dir), manifest_of(tmp_path / "models")
        assert here.raw == there.raw and here.digest == there.digest
        assert all(ModelStore(tmp_path / "models").blobs.verify(d) for d in there.digests())
        tags = {m["name"]: m["digest"] for m in requests.get(url + "/api/tags", timeout=10).json()["models"]}
        assert tags[remote] == hashlib.sha256(there.raw).hexdigest()
        assert requests.post(url + "/api/show", json={"model": remote}, timeout=30).json()["details"] == \
            original["details"]

        gen = requests.post(url + "/api/generate", json={"model": remote, "prompt": "Hello", "stream": False,
                                                          "options": {"num_predict": 8}}, timeout=300)
        assert gen.status_code == 200, gen.text
        assert gen.json()["done"] is True and gen.json()["eval_count"] >= 1
    finally:
        stop_serve(proc)
