"""A real registry for tests (Debian's docker-registry, distribution 2.8) and a loopback proxy in front of it.

    start_registry(tmp, credentials=None) -> Registry     docker-registry on a free loopback port, its storage
                                                          in tmp; with credentials, htpasswd Basic auth
    stop_registry(registry)
    registry / auth_registry                              pytest fixtures (module scope) built on those
    BlobProxy(upstream_url)                               an HTTP proxy that can drop, stall, slow down or
                                                          corrupt blob downloads, and records every request
    write_credentials(path, host, user, password)         a registries.json entry (Docker's config format)

Import the fixtures into a test module: `from tests.registry_fixture import registry, auth_registry`.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

DOCKER_REGISTRY = shutil.which("docker-registry") or "/usr/bin/docker-registry"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Registry:
    host: str  # "127.0.0.1:<port>", the host part of model names pushed here
    url: str
    root: Path
    proc: subprocess.Popen
    credentials: tuple[str, str] | None = None
    log_path: Path = field(default_factory=Path)

    def model(self, path: str) -> str:
        """A model name on this registry: model("test/tiny:1") -> "127.0.0.1:<port>/test/tiny:1"."""
        return f"{self.host}/{path}"


def start_registry(tmp: Path, *, credentials: tuple[str, str] | None = None) -> Registry:
    if not os.access(DOCKER_REGISTRY, os.X_OK):
        pytest.fail("docker-registry is not installed: `sudo apt-get install docker-registry` (.ci/run does it)")
    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    auth = ""
    if credentials is not None:
        if shutil.which("htpasswd") is None:
            pytest.fail("htpasswd is not installed: `sudo apt-get install apache2-utils` (.ci/run does it)")
        line = subprocess.run(["htpasswd", "-Bbn", *credentials], check=True, capture_output=True, text=True).stdout
        (tmp / "htpasswd").write_text(line.strip() + "\n")
        auth = f"auth:\n  htpasswd:\n    realm: test-registry\n    path: {tmp / 'htpasswd'}\n"
    (tmp / "config.yml").write_text(
        "version: 0.1\n"
        "log:\n  level: warn\n  accesslog:\n    disabled: true\n"
        f"storage:\n  filesystem:\n    rootdirectory: {tmp / 'data'}\n  delete:\n    enabled: true\n"
        f"http:\n  addr: 127.0.0.1:{port}\n  secret: test-secret\n"
        "health:\n  storagedriver:\n    enabled: false\n" + auth
    )
    log_path = tmp / "registry.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen([DOCKER_REGISTRY, "serve", str(tmp / "config.yml")], stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"docker-registry exited: {log_path.read_text()[-2000:]}")
        with contextlib.suppress(requests.RequestException):
            if requests.get(url + "/v2/", timeout=1).status_code in (200, 401):
                return Registry(f"127.0.0.1:{port}", url, tmp, proc, credentials, log_path)
        time.sleep(0.05)
    proc.kill()
    pytest.fail("docker-registry did not answer GET /v2/ in 30s")


def stop_registry(registry: Registry) -> None:
    if registry.proc.poll() is None:
        registry.proc.terminate()
        try:
            registry.proc.wait(10)
        except subprocess.TimeoutExpired:
            registry.proc.kill()
            registry.proc.wait()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory):
    reg = start_registry(tmp_path_factory.mktemp("registry"))
    try:
        yield reg
    finally:
        stop_registry(reg)


@pytest.fixture(scope="module")
def auth_registry(tmp_path_factory: pytest.TempPathFactory):
    reg = start_registry(tmp_path_factory.mktemp("auth-registry"), credentials=("tester", "s3cret-pass"))
    try:
        yield reg
    finally:
        stop_registry(reg)


def write_credentials(path: Path, host: str, user: str, password: str) -> None:
    """Add (or replace) `host`'s entry in a Docker-format credentials file."""
    config = json.loads(path.read_text()) if path.exists() else {}
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    config.setdefault("auths", {})[host] = {"auth": token}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config))


# -- the proxy -------------------------------------------------------------------------------------------------


@dataclass
class Rule:
    """What to do to GETs of one blob. `times` limits how many responses it applies to (None: all)."""

    drop_after: int | None = None  # close the connection after sending this many body bytes
    stall_after: int | None = None  # send this many body bytes, then go quiet for `stall_seconds`, then close
    stall_seconds: float = 30.0
    corrupt: bool = False  # flip the first byte of the body
    rate: float | None = None  # bytes per second
    status: int | None = None  # answer this status (an empty body) instead of asking the registry
    times: int | None = None
    applied: int = 0


@dataclass
class Seen:
    method: str
    path: str
    range: str | None
    sent: int = 0  # body bytes sent to the client


class BlobProxy:
    """An HTTP proxy to a registry, on its own loopback port, one thread per connection."""

    def __init__(self, upstream_url: str) -> None:
        self.upstream = urlsplit(upstream_url).netloc
        self.rules: dict[str, Rule] = {}
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                proxy._forward(self)

            do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = do_GET

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.host = f"127.0.0.1:{self._server.server_address[1]}"
        self.url = f"http://{self.host}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def __enter__(self) -> BlobProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def model(self, path: str) -> str:
        return f"{self.host}/{path}"

    def blob_gets(self, digest: str) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.method == "GET" and s.path.endswith("/blobs/" + digest)]

    def bytes_sent(self, digest: str) -> int:
        return sum(s.sent for s in self.blob_gets(digest))

    def _rule_for(self, method: str, path: str) -> Rule | None:
        if method != "GET" or "/blobs/sha256:" not in path:
            return None
        rule = self.rules.get(path.rsplit("/", 1)[1])
        with self._lock:
            if rule is None or (rule.times is not None and rule.applied >= rule.times):
                return None
            rule.applied += 1
            return rule

    def _forward(self, h: BaseHTTPRequestHandler) -> None:
        seen = Seen(h.command, h.path.split("?", 1)[0], h.headers.get("Range"))
        with self._lock:
            self.seen.append(seen)
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else None
        headers = {k: v for k, v in h.headers.items() if k.lower() not in ("host", "connection", "proxy-connection")}
        rule = self._rule_for(h.command, seen.path)
        if rule is not None and rule.status is not None:
            h.send_response(rule.status)
            h.send_header("Content-Length", "0")
            h.send_header("Connection", "close")
            h.end_headers()
            h.close_connection = True
            return
        upstream = http.client.HTTPConnection(self.upstream, timeout=60)
        try:
            upstream.request(h.command, h.path, body=body, headers=headers)
            resp = upstream.getresponse()
            if resp.status not in (200, 206):
                rule = None
            h.send_response(resp.status, resp.reason)
            for k, v in resp.getheaders():
                if k.lower() not in ("connection", "transfer-encoding"):
                    h.send_header(k, v)
            h.send_header("Connection", "close")
            h.end_headers()
            if h.command == "HEAD":
                return
            first = True
            started = time.monotonic()
            while chunk := resp.read(64 * 1024):
                if rule is not None:
                    if rule.corrupt and first:
                        chunk = bytes([chunk[0] ^ 0xFF]) + chunk[1:]
                    for limit in (rule.drop_after, rule.stall_after):
                        if limit is not None and seen.sent + len(chunk) > limit:
                            chunk = chunk[: max(limit - seen.sent, 0)]
                first = False
                # a slowed-down response trickles out in small pieces, as a slow link would deliver it
                step = 4096 if rule is not None and rule.rate else len(chunk)
                for i in range(0, len(chunk), step):
                    piece = chunk[i:i + step]
                    if rule is not None and rule.rate:
                        delay = (seen.sent + len(piece)) / rule.rate - (time.monotonic() - started)
                        if delay > 0:
                            time.sleep(delay)
                    h.wfile.write(piece)
                    h.wfile.flush()
                    seen.sent += len(piece)
                if rule is not None and rule.drop_after is not None and seen.sent >= rule.drop_after:
                    h.connection.shutdown(socket.SHUT_RDWR)  # the connection breaks mid-body
                    return
                if rule is not None and rule.stall_after is not None and seen.sent >= rule.stall_after:
                    time.sleep(rule.stall_seconds)
                    h.connection.shutdown(socket.SHUT_RDWR)
                    return
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # the client hung up (or we hung up on it): nothing more to do
        finally:
            h.close_connection = True
            upstream.close()
