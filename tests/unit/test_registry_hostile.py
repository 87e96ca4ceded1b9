"""A registry that lies, bombs, trickles and redirects (issue 34 item 5): a pull from it fails with one clear line
and leaves the store, the server's memory and its network reach as they were.

The registry is tests/fakes/hostile_registry.py on a loopback port, answering each request with whatever the
test's `answer` function writes. Reached as `registry.invalid` through HTTP_PROXY (`named_registry`), it is a
registry that is not itself local, so redirects to loopback addresses are foreign to it and must be refused.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from ollama_py.api.names import parse_name
from ollama_py.config import Settings
from ollama_py.errors import OllamaError
from ollama_py.store.download import MAX_ACTIVE_PARTS, BlobDownload
from ollama_py.store.download_state import MB, plan_parts
from ollama_py.store.manifests import CONFIG_V1, MANIFEST_V2, MEDIA_MODEL, Layer, Manifest
from ollama_py.store.models import ModelStore
from ollama_py.store.registry import RegistryClient, RegistryOptions, pull_model, push_model
from ollama_py.store.registry_limits import TargetPolicy
from tests.fakes.hostile_registry import CONFIG, HostileRegistry, Seen, manifest_bytes, reply, serve_blobs, sha

TB = 1000 ** 4


@pytest.fixture
def hostile() -> Iterator[HostileRegistry]:
    reg = HostileRegistry()
    yield reg
    reg.close()


def pull(models: Path, name: str, **options: Any) -> list[dict[str, Any]]:
    """Run a pull as the server does; its progress lines, the last one {"error": ...} if it failed."""
    lines: list[dict[str, Any]] = []
    try:
        for line in pull_model(ModelStore(models), parse_name(name), options=RegistryOptions(insecure=True,
                                                                                              **options)):
            lines.append(line)
    except OllamaError as e:
        lines.append({"error": str(e)})
    return lines


def pull_within(seconds: float, models: Path, name: str, **options: Any) -> list[dict[str, Any]]:
    """pull() on a thread: a pull that does not end within `seconds` fails the test (it would hang)."""
    out: list[list[dict[str, Any]]] = []
    t = threading.Thread(target=lambda: out.append(pull(models, name, **options)), daemon=True)
    t.start()
    t.join(seconds)
    assert out, f"the pull did not end within {seconds}s"
    return out[0]


def store_files(models: Path) -> list[str]:
    blobs = models / "blobs"
    return sorted(os.listdir(blobs)) if blobs.is_dir() else []


# -- sizes the registry claims -----------------------------------------------------------------------------------


async def test_a_layer_larger_than_the_disk_is_refused_before_anything_is_written(fake_app, aiohttp_client,
                                                                                   hostile: HostileRegistry):
    manifest = manifest_bytes([("sha256:" + "a" * 64, 20 * TB)], (sha(CONFIG), len(CONFIG)))
    hostile.answer = lambda h, seen: serve_blobs(h, seen, {sha(CONFIG): CONFIG}, manifest)
    settings, app = fake_app()
    client = await aiohttp_client(app)
    before = store_files(settings.models)

    r = await client.post("/api/pull", json={"model": f"{hostile.host}/evil/huge:1", "insecure": True})
    lines = [json.loads(line) for line in (await r.text()).splitlines()]
    assert lines[0] == {"status": "pulling manifest"}
    assert lines[-1]["error"].startswith("not enough disk space: the model needs 20 TB, "), lines
    assert store_files(settings.models) == before  # not one part file
    assert not hostile.requests_for("/blobs/")  # and not one blob request

    r = await client.post("/api/pull", json={"model": f"{hostile.host}/evil/huge:1", "insecure": True,
                                             "stream": False})
    assert r.status == 400  # Ollama's text; not its 500: nothing failed in the server (issue 34)
    assert (await r.json())["error"].startswith("not enough disk space")


@pytest.mark.parametrize("what, answer, status, error", [
    ("gzip bomb", lambda h, seen: reply(h, 200, gzip.compress(b"{" + b" " * (64 << 20) + b"}"),
                                        Content_Encoding="gzip"), 400, "pull model manifest: manifest is too large"),
    ("redirect loop", lambda h, seen: reply(h, 302, Location=seen.path), 400,
     "pull model manifest: maximum redirects exceeded"),
    ("registry error page", lambda h, seen: reply(h, 500, b"<html>oops</html>", Content_Type="text/html"), 400,
     "pull model manifest: 500"),
    ("no such model", lambda h, seen: reply(h, 404, b'{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest '
                                                     b'unknown"}]}', Content_Type="application/json"), 404, "pull"),
    ("unauthorized", lambda h, seen: reply(h, 401, b'{"errors":[{"code":"UNAUTHORIZED","message":"no"}]}',
                                           Content_Type="application/json"), 401, ""),
], ids=lambda v: v if isinstance(v, str) else "")
async def test_a_failed_non_streamed_pull_is_a_client_error_with_ollama_s_text(
        fake_app, aiohttp_client, hostile: HostileRegistry, what: str, answer: Any, status: int, error: str):
    """Whatever the registry does, a non-streamed pull ends in a 4xx with one line of text (Ollama: 500); the
    streamed pull of the same model ends with the same text in its last line."""
    hostile.answer = answer
    settings, app = fake_app()
    client = await aiohttp_client(app)
    model = f"{hostile.host}/evil/m:1"
    r = await client.post("/api/pull", json={"model": model, "insecure": True, "stream": False})
    body = await r.json()
    assert r.status == status, body
    assert body["error"].startswith(error) and "\n" not in body["error"], body
    r = await client.post("/api/pull", json={"model": model, "insecure": True})
    assert r.status == 200
    assert json.loads((await r.text()).splitlines()[-1]) == body


def test_parts_threads_and_connections_are_bounded(tmp_path: Path, hostile: HostileRegistry,
                                                   monkeypatch: pytest.MonkeyPatch):
    """A blob cut into 1 KB parts: 300 KB would be 300 part files and 300 connections at once."""
    monkeypatch.setattr(BlobDownload, "MIN_PART_SIZE", 1000)
    monkeypatch.setattr(BlobDownload, "MAX_PART_SIZE", 1000)
    data = os.urandom(300 * 1000)
    manifest = manifest_bytes([(sha(data), len(data))], (sha(CONFIG), len(CONFIG)))
    part_files: list[int] = []

    def answer(h: BaseHTTPRequestHandler, seen: Seen) -> None:
        if "/blobs/" in seen.path:
            part_files.append(sum(re.search(r"-partial-\d+\Z", n) is not None
                                  for n in store_files(tmp_path / "models")))
        serve_blobs(h, seen, {sha(data): data, sha(CONFIG): CONFIG}, manifest, delay=0.02)

    hostile.answer = answer
    lines = pull_within(120, tmp_path / "models", f"{hostile.host}/test/many:1")
    assert lines[-1] == {"status": "success"}, lines[-1]
    assert ModelStore(tmp_path / "models").blobs.verify(sha(data))
    assert max(part_files) <= BlobDownload.MAX_PARTS, max(part_files)
    assert hostile.max_in_flight <= BlobDownload.PARTS_AT_ONCE, hostile.max_in_flight


def test_part_downloads_of_all_pulls_together_are_bounded(tmp_path: Path, hostile: HostileRegistry,
                                                          monkeypatch: pytest.MonkeyPatch):
    """Three pulls at once, each of a blob in 100 parts: at most MAX_ACTIVE_PARTS connections in all."""
    monkeypatch.setattr(BlobDownload, "MIN_PART_SIZE", 1000)
    monkeypatch.setattr(BlobDownload, "MAX_PART_SIZE", 1000)
    blobs = {sha(CONFIG): CONFIG}
    manifests = {}
    for i in range(3):
        data = os.urandom(100 * 1000)
        blobs[sha(data)] = data
        manifests[f"m{i}"] = manifest_bytes([(sha(data), len(data))], (sha(CONFIG), len(CONFIG)))

    def answer(h: BaseHTTPRequestHandler, seen: Seen) -> None:
        name = seen.path.split("/")[3] if seen.path.count("/") > 3 else ""
        serve_blobs(h, seen, blobs, manifests.get(name, b""), delay=0.05)

    hostile.answer = answer
    results: list[list[dict[str, Any]]] = []
    threads = [threading.Thread(target=lambda i=i: results.append(pull(tmp_path / "models",
                                                                       f"{hostile.host}/test/m{i}:1")))
               for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert [r[-1] for r in results] == [{"status": "success"}] * 3, [r[-1] for r in results]
    assert hostile.max_in_flight <= MAX_ACTIVE_PARTS, hostile.max_in_flight


@pytest.mark.parametrize(("total", "count"), [
    pytest.param(5 * MB, 1, id="small-one-part"),
    pytest.param(16 * 1000 * MB, 16, id="16GB-16-parts"),
    pytest.param(64 * 1000 * MB, 64, id="64GB-64-parts"),
    pytest.param(2 * TB, 64, id="2TB-still-64"),
    pytest.param(20 * TB, 64, id="20TB-still-64"),
])
def test_plan_parts_never_makes_more_than_max_parts(total: int, count: int):
    parts = plan_parts(total, max_parts=64)
    assert len(parts) == count
    assert sum(p.size for p in parts) == total


def test_a_manifest_naming_thousands_of_blobs_is_refused(tmp_path: Path, hostile: HostileRegistry):
    layers = [(sha(str(i).encode()), 1) for i in range(5000)]  # 5,000 one-byte files in the store
    manifest = manifest_bytes(layers, (sha(CONFIG), len(CONFIG)))
    hostile.answer = lambda h, seen: serve_blobs(h, seen, {sha(CONFIG): CONFIG}, manifest)
    lines = pull_within(60, tmp_path / "models", f"{hostile.host}/test/layers:1")
    assert lines[-1] == {"error": "pull model manifest: 5001 layers, more than 1000"}
    assert not hostile.requests_for("/blobs/")


def test_a_failed_download_with_nothing_received_leaves_no_files(tmp_path: Path, hostile: HostileRegistry):
    data = os.urandom(5000)
    manifest = manifest_bytes([(sha(data), len(data))], (sha(CONFIG), len(CONFIG)))

    def answer(h: BaseHTTPRequestHandler, seen: Seen) -> None:
        if sha(data) in seen.path:
            reply(h, 403, b'{"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]}')
        else:
            serve_blobs(h, seen, {sha(CONFIG): CONFIG}, manifest)

    hostile.answer = answer
    lines = pull_within(60, tmp_path / "models", f"{hostile.host}/test/denied:1")
    assert lines[-1] == {"error": "403: DENIED: requested access to the resource is denied"}
    assert not any("partial" in n for n in store_files(tmp_path / "models"))


# -- bodies ------------------------------------------------------------------------------------------------------


def bomb_manifest() -> bytes:
    """A valid manifest padded with 64 MiB of spaces, gzipped to ~64 KB."""
    padded = manifest_bytes([(sha(b"x"), 1)], (sha(CONFIG), len(CONFIG)))[:-1] + b" " * (64 << 20) + b"}"
    return gzip.compress(padded, compresslevel=9)


def test_a_gzip_bomb_manifest_is_refused(tmp_path: Path, hostile: HostileRegistry):
    bomb = bomb_manifest()
    assert len(bomb) < 200_000

    def answer(h: BaseHTTPRequestHandler, seen: Seen) -> None:
        reply(h, 200, bomb, Content_Type=MANIFEST_V2, Content_Encoding="gzip")

    hostile.answer = answer
    lines = pull_within(60, tmp_path / "models", f"{hostile.host}/test/bomb:1")
    assert lines[-1] == {"error": "pull model manifest: manifest is too large (more than 4194304 bytes)"}
    assert hostile.seen[0].headers.get("Accept-Encoding") == "identity"


def test_an_endless_manifest_is_cut_off(tmp_path: Path, hostile: HostileRegistry):
    sent = []

    def answer(h: BaseHTTPRequestHandler, seen: Seen) -> None:
        h.send_response(200)
        h.send_header("Content-Type", MANIFEST_V2)
        h.end_headers()  # no length: the body ends when the connection does, here after 64 MiB
        chunk = b" " * (1 << 20)
        for _ in range(64):
            h.wfile.write(chunk)
            sent.append(len(chunk))

    hostile.answer = answer
    lines = pull_within(60, tmp_path / "models", f"{hostile.host}/test/endless:1")
    assert lines[-1] == {"error": "pull model manifest: manifest is too large (more than 4194304 bytes)"}
    assert sum(sent) < 64 << 20  # we hung up


def test_an_endless_chunked_manifest_is_cut_off(tmp_path: Path, hostile: HostileRegistry):
    sent = []

    def answer(h: BaseHTTPRequestHandler, seen: Seen) -> None:
        h.send_response(200)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        chunk = b" " * (1 << 20)
        for _ in range(64):
            h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            sent.append(len(chunk))

    hostile.answer = answer
    lines = pull_within(60, tmp_path / "models", f"{hostile.host}/test/chunked:1")
    assert lines[-1] == {"error": "pull model manifest: manifest is too large (more than 4194304 bytes)"}
    assert sum(sent) < 64 << 20


def test_a_trickled_manifest_has_a_deadline(tmp_path: Path, hostile: HostileRegistry,
                                            monkeypatch: pytest.MonkeyPatch):
    """A byte every 50 ms never trips the socket's read timeout; the body's deadline ends it."""
    monkeypatch.setattr(RegistryClient, "BODY_DEADLINE", 1.0)
    stop = threading.Event()

    def answer(h: BaseHTTPRequestHandler, seen: Seen) -> None:
        h.send_response(200)
        h.send_header("Content-Length", "100000")
        h.end_headers()
        while not stop.wait(0.05):
            h.wfile.write(b" ")
            h.wfile.flush()

    hostile.answer = answer
    try:
        lines = pull_within(30, tmp_path / "models", f"{hostile.host}/test/trickle:1")
    finally:
        stop.set()
    assert lines[-1] == {"error": "pull model manifest: manifest still arriving after 1s: the registry is too slow"}


def trickled_headers(stop: threading.Event, gone: threading.Event, lines: int = 300) -> Any:
    """An answer that sends a header line every 0.2 s (each well inside the socket's read timeout)."""

    def answer(h: BaseHTTPRequestHandler, seen: Seen) -> None:
        h.wfile.write(b"HTTP/1.1 200 OK\r\n")
        try:
            for i in range(lines):
                if stop.wait(0.2):
                    return
                h.wfile.write(b"X-Trickle-%d: 1\r\n" % i)
                h.wfile.flush()
        except OSError:
            gone.set()  # the server hung up on us

    return answer


def test_trickled_manifest_headers_have_a_deadline(tmp_path: Path, hostile: HostileRegistry,
                                                   monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(RegistryClient, "BODY_DEADLINE", 1.0)
    stop, gone = threading.Event(), threading.Event()
    hostile.answer = trickled_headers(stop, gone, lines=90)
    try:
        lines = pull_within(15, tmp_path / "models", f"{hostile.host}/test/headers:1")
    finally:
        stop.set()
    assert lines[-1] == {"error": "pull model manifest: manifest still arriving after 1s: the registry is too slow"}


async def test_a_client_hanging_up_frees_the_pull_at_once(fake_app, aiohttp_client, hostile: HostileRegistry):
    """The pull's thread is blocked reading a header line; the client goes away: the server closes its
    connection to the registry now, not after the 60 s the trickle would take (holding a transfer thread)."""
    stop, gone = threading.Event(), threading.Event()
    hostile.answer = trickled_headers(stop, gone)
    _, app = fake_app()
    client = await aiohttp_client(app)
    try:
        resp = await client.post("/api/pull", json={"model": f"{hostile.host}/test/hangup:1", "insecure": True})
        assert json.loads(await resp.content.readline()) == {"status": "pulling manifest"}
        while not hostile.seen:
            await asyncio.sleep(0.05)
        resp.close()
        assert await asyncio.to_thread(gone.wait, 20), "the registry connection stayed open"
    finally:
        stop.set()


def test_an_invalid_manifest_is_one_short_line(tmp_path: Path, hostile: HostileRegistry):
    digest = "sha256:" + "z" * 1_000_000
    manifest = manifest_bytes([(digest, 1)], (sha(CONFIG), len(CONFIG)))
    hostile.answer = lambda h, seen: reply(h, 200, manifest, Content_Type=MANIFEST_V2)
    lines = pull_within(60, tmp_path / "models", f"{hostile.host}/test/invalid:1")
    assert lines[-1]["error"].startswith("pull model manifest: invalid manifest: bad digest 'sha256:zzz")
    assert len(lines[-1]["error"]) < 400  # not the megabyte it quoted


@pytest.mark.parametrize("status", [200, 500], ids=["manifest", "error"])
def test_deeply_nested_json_is_an_invalid_answer(tmp_path: Path, hostile: HostileRegistry, status: int):
    hostile.answer = lambda h, seen: reply(h, status, b"[" * 60_000, Content_Type="application/json")
    lines = pull_within(60, tmp_path / "models", f"{hostile.host}/test/nested:1")
    assert lines[-1] == {"error": "pull model manifest: invalid manifest: nested too deeply" if status == 200
                         else "pull model manifest: 500: Internal Server Error"}


def test_a_compressed_manifest_within_the_limit_is_read(tmp_path: Path, hostile: HostileRegistry):
    """A registry may gzip a manifest although we ask for identity (Go clients accept gzip): it still works."""
    data = os.urandom(1000)
    manifest = manifest_bytes([(sha(data), len(data))], (sha(CONFIG), len(CONFIG)))

    def answer(h: BaseHTTPRequestHandler, seen: Seen) -> None:
        if "/manifests/" in seen.path:
            reply(h, 200, gzip.compress(manifest), Content_Type=MANIFEST_V2, Content_Encoding="gzip")
        else:
            serve_blobs(h, seen, {sha(data): data, sha(CONFIG): CONFIG}, manifest)

    hostile.answer = answer
    lines = pull_within(60, tmp_path / "models", f"{hostile.host}/test/zipped:1")
    assert lines[-1] == {"status": "success"}, lines
    stored = ModelStore(tmp_path / "models").manifests.get(parse_name(f"{hostile.host}/test/zipped:1"))
    assert stored.raw == manifest


def test_an_error_page_is_not_repeated_to_the_client(tmp_path: Path, hostile: HostileRegistry):
    page = b"<html>" + b"internal admin page: token=SECRET " * 3000 + b"</html>"
    hostile.answer = lambda h, seen: reply(h, 500, page, Content_Type="text/html")
    lines = pull_within(60, tmp_path / "models", f"{hostile.host}/test/page:1")
    assert lines[-1] == {"error": "pull model manifest: 500: Internal Server Error"}


def test_a_compressed_blob_is_refused(tmp_path: Path, hostile: HostileRegistry):
    data = b"weights " * 1000
    manifest = manifest_bytes([(sha(data), len(data))], (sha(CONFIG), len(CONFIG)))

    def answer(h: BaseHTTPRequestHandler, seen: Seen) -> None:
        if sha(data) in seen.path:
            reply(h, 200, gzip.compress(data), Content_Encoding="gzip")
        else:
            serve_blobs(h, seen, {sha(CONFIG): CONFIG}, manifest)

    hostile.answer = answer
    lines = pull_within(60, tmp_path / "models", f"{hostile.host}/test/zipped-blob:1")
    assert lines[-1] == {"error": "registry sent the blob with Content-Encoding 'gzip', not the bytes it names"}
    assert not any("partial" in n for n in store_files(tmp_path / "models"))


# -- slow blobs --------------------------------------------------------------------------------------------------


def test_a_trickled_blob_fails_at_the_minimum_rate(tmp_path: Path, hostile: HostileRegistry,
                                                   monkeypatch: pytest.MonkeyPatch):
    """A byte every 50 ms never trips the per-read stall timeout; the minimum-rate rule ends it."""
    monkeypatch.setattr(BlobDownload, "RATE_WINDOW", 1.0)
    data = os.urandom(100_000)
    manifest = manifest_bytes([(sha(data), len(data))], (sha(CONFIG), len(CONFIG)))
    stop = threading.Event()

    def answer(h: BaseHTTPRequestHandler, seen: Seen) -> None:
        if sha(data) not in seen.path:
            serve_blobs(h, seen, {sha(CONFIG): CONFIG}, manifest)
            return
        h.send_response(200)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        for i in range(len(data)):
            if stop.wait(0.05):
                return
            h.wfile.write(data[i:i + 1])
            h.wfile.flush()

    hostile.answer = answer
    try:
        lines = pull_within(30, tmp_path / "models", f"{hostile.host}/test/trickle:1", min_rate=1000)
    finally:
        stop.set()
    assert lines[-1]["error"].startswith("download too slow: "), lines[-1]
    assert "below the minimum of 1.0 KB/s (OLLAMA_PY_PULL_MIN_RATE)" in lines[-1]["error"]
    # bytes arrived: the partial download stays, to resume (its size fit on the disk)
    assert any(n.endswith("-partial") for n in store_files(tmp_path / "models"))


async def test_the_minimum_rate_is_the_server_s_setting(fake_app, aiohttp_client, hostile: HostileRegistry,
                                                       monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(BlobDownload, "RATE_WINDOW", 1.0)
    data = os.urandom(50_000)
    manifest = manifest_bytes([(sha(data), len(data))], (sha(CONFIG), len(CONFIG)))

    def answer(h: BaseHTTPRequestHandler, seen: Seen) -> None:
        if sha(data) not in seen.path:
            serve_blobs(h, seen, {sha(CONFIG): CONFIG}, manifest)
            return
        h.send_response(200)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data[:1000])  # 1 KB, then 1 KB/s: under the 2 KB/s the server asks for
        for i in range(1000, len(data), 1000):
            time.sleep(1.0)
            h.wfile.write(data[i:i + 1000])

    hostile.answer = answer
    settings, app = fake_app(pull_min_rate=2000)
    assert Settings.from_env({"OLLAMA_PY_PULL_MIN_RATE": "2000"}).pull_min_rate == 2000
    client = await aiohttp_client(app)
    r = await client.post("/api/pull", json={"model": f"{hostile.host}/test/slow:1", "insecure": True})
    lines = [json.loads(line) for line in (await r.text()).splitlines()]
    assert "below the minimum of 2.0 KB/s (OLLAMA_PY_PULL_MIN_RATE)" in lines[-1]["error"], lines[-1]


# -- redirects ---------------------------------------------------------------------------------------------------


def test_a_redirect_target_s_page_is_not_repeated_to_the_client(tmp_path: Path, hostile: HostileRegistry,
                                                                monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(BlobDownload, "BACKOFF", 0.01)
    other = HostileRegistry(answer=lambda h, seen: reply(h, 403, b"<h1>router admin</h1> password=SECRET"))
    data = os.urandom(1000)
    manifest = manifest_bytes([(sha(data), len(data))], (sha(CONFIG), len(CONFIG)))

    def answer(h: BaseHTTPRequestHandler, seen: Seen) -> None:
        if sha(data) in seen.path:
            reply(h, 307, Location=f"http://admin:hunter2@{other.host}/admin")
        else:
            serve_blobs(h, seen, {sha(CONFIG): CONFIG}, manifest)

    hostile.answer = answer
    try:
        lines = pull_within(60, tmp_path / "models", f"{hostile.host}/test/cdn:1")
    finally:
        other.close()
    assert lines[-1] == {"error": f"max retries exceeded: 403 from {other.host}"}


def test_redirects_are_capped_at_ten(tmp_path: Path, hostile: HostileRegistry):
    hostile.answer = lambda h, seen: reply(h, 302, Location=seen.path)
    lines = pull_within(60, tmp_path / "models", f"{hostile.host}/test/loop:1")
    assert lines[-1] == {"error": "pull model manifest: maximum redirects exceeded (10)"}
    assert len(hostile.seen) == 11


@pytest.fixture
def named_registry(hostile: HostileRegistry, monkeypatch: pytest.MonkeyPatch) -> str:
    """The hostile registry as `registry.invalid` (reached through it as an HTTP proxy): a registry that is
    not itself on a local address, so a local address is foreign to it."""
    monkeypatch.setenv("HTTP_PROXY", f"http://{hostile.host}")
    monkeypatch.setenv("http_proxy", f"http://{hostile.host}")
    for name in ("NO_PROXY", "no_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    return "registry.invalid"


def test_a_redirect_to_a_local_address_is_refused(tmp_path: Path, hostile: HostileRegistry, named_registry: str):
    data = os.urandom(1000)
    manifest = manifest_bytes([(sha(data), len(data))], (sha(CONFIG), len(CONFIG)))

    def answer(h: BaseHTTPRequestHandler, seen: Seen) -> None:
        if sha(data) in seen.path:
            reply(h, 307, Location="http://127.0.0.1:6379/internal")
        else:
            serve_blobs(h, seen, {sha(CONFIG): CONFIG}, manifest)

    hostile.answer = answer
    lines = pull_within(60, tmp_path / "models", f"{named_registry}/test/ssrf:1")
    assert lines[-1] == {"error": "registry registry.invalid: refusing redirect to 127.0.0.1, a local or private "
                                  "address"}, lines
    assert not hostile.requests_for("127.0.0.1:6379")
    assert not any("partial" in n for n in store_files(tmp_path / "models"))


def test_a_token_realm_on_a_local_address_is_refused(tmp_path: Path, hostile: HostileRegistry, named_registry: str):
    def answer(h: BaseHTTPRequestHandler, seen: Seen) -> None:
        reply(h, 401, WWW_Authenticate='Bearer realm="http://169.254.169.254/latest/meta-data",service="x"')

    hostile.answer = answer
    lines = pull_within(60, tmp_path / "models", f"{named_registry}/test/realm:1")
    assert lines[-1] == {"error": "pull model manifest: unauthorized: registry registry.invalid: refusing token "
                                  "request to 169.254.169.254, a local or private address"}, lines
    assert not hostile.requests_for("169.254.169.254")


def test_an_upload_location_on_a_local_address_is_refused(tmp_path: Path, hostile: HostileRegistry,
                                                          named_registry: str):
    store = ModelStore(tmp_path / "models")
    weights, size = store.blobs.write_bytes(os.urandom(2000))
    config, config_size = store.blobs.write_bytes(CONFIG)
    name = parse_name(f"{named_registry}/test/push:1")
    store.put_manifest(name, Manifest.build(Layer(CONFIG_V1, config, config_size), [Layer(MEDIA_MODEL, weights, size)]))

    def answer(h: BaseHTTPRequestHandler, seen: Seen) -> None:
        if seen.method == "POST":
            reply(h, 202, Location="http://127.0.0.1:6379/upload", Docker_Upload_UUID="u")
        else:
            reply(h, 404)  # HEAD: the registry lacks the blob

    hostile.answer = answer
    with pytest.raises(OllamaError) as e:
        for _ in push_model(store, name, options=RegistryOptions(insecure=True)):
            pass
    assert str(e.value) == "registry registry.invalid: refusing upload to 127.0.0.1, a local or private address"
    assert not hostile.requests_for("127.0.0.1:6379")


def test_connections_to_local_addresses_are_refused_when_the_registry_is_not_local(hostile: HostileRegistry):
    """What a name that resolved to a public address when its redirect was checked and to 127.0.0.1 when the
    connection is made (DNS rebinding) meets: the connection itself is checked, before a byte is sent."""
    hostile.answer = lambda h, seen: reply(h, 200, b"internal")
    client = RegistryClient(parse_name("8.8.8.8/test/m:1"), RegistryOptions(proxies_from_env=False))
    with client, pytest.raises(OllamaError) as e:
        client.request("GET", f"http://{hostile.host}/internal")
    assert str(e.value) == "registry 8.8.8.8: refusing to connect to 127.0.0.1, a local or private address"
    assert hostile.seen == []


def test_a_local_registry_connects_as_before(hostile: HostileRegistry):
    hostile.answer = lambda h, seen: reply(h, 200, b"ok")
    client = RegistryClient(parse_name(f"{hostile.host}/test/m:1"), RegistryOptions(insecure=True))
    with client, client.request("GET", f"http://{hostile.host}/v2/") as resp:
        assert resp.status_code == 200


@pytest.mark.parametrize(("base", "target", "allowed"), [
    pytest.param("https://registry.invalid", "https://8.8.8.8/blob", True, id="public-https"),
    pytest.param("https://registry.invalid", "http://8.8.8.8/blob", False, id="http-from-https"),
    pytest.param("http://registry.invalid", "http://8.8.8.8/blob", True, id="http-from-http"),
    pytest.param("https://registry.invalid", "ftp://8.8.8.8/blob", False, id="ftp"),
    pytest.param("https://registry.invalid", "https://127.0.0.1/x", False, id="loopback"),
    pytest.param("https://registry.invalid", "https://10.1.2.3/x", False, id="private-10"),
    pytest.param("https://registry.invalid", "https://192.168.1.1/x", False, id="private-192"),
    pytest.param("https://registry.invalid", "https://169.254.169.254/x", False, id="link-local-metadata"),
    pytest.param("https://registry.invalid", "https://[::1]/x", False, id="ipv6-loopback"),
    pytest.param("https://registry.invalid", "https://[::ffff:127.0.0.1]/x", False, id="ipv4-mapped-loopback"),
    pytest.param("https://registry.invalid", "https://[fe80::1]/x", False, id="ipv6-link-local"),
    pytest.param("https://registry.invalid", "https://0.0.0.0/x", False, id="unspecified"),
    pytest.param("https://registry.invalid", "https://localhost/x", False, id="localhost-name"),
    pytest.param("http://127.0.0.1:5000", "http://127.0.0.1:9999/x", True, id="local-registry-may"),
    pytest.param("http://10.0.0.5:5000", "https://192.168.0.9/x", True, id="lan-registry-may"),
])
def test_target_policy(base: str, target: str, allowed: bool):
    policy = TargetPolicy(base)
    try:
        policy.check(target)
    except OllamaError as e:
        assert not allowed, e
    else:
        assert allowed
