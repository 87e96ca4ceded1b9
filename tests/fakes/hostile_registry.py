"""A registry that lies, bombs, trickles and redirects: an http.server on a loopback port whose every answer is
written by the test's (or bench's) `answer(handler, seen)` function, plus the pieces of a plain registry
(`serve_blobs`: manifests, and blobs with Range support).

It also answers requests in proxy form (`GET http://host/...`), so a test can name the registry by a host that
resolves nowhere and reach it through HTTP_PROXY (`Seen.host` says which host a request was for).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from ollama_py.store.manifests import CONFIG_V1, MANIFEST_V2, MEDIA_MODEL

CONFIG = b'{"model_format":"gguf"}'


@dataclass
class Seen:
    method: str
    host: str  # the Host the request was for (the proxy-form URL's, else the Host header)
    path: str
    headers: dict[str, str]


@dataclass
class HostileRegistry:
    """A loopback HTTP server; `answer(handler, seen)` writes each response (default: 404)."""

    answer: Callable[[BaseHTTPRequestHandler, Seen], None] | None = None
    seen: list[Seen] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _any(self) -> None:
                parts = urlsplit(self.path)
                host = parts.netloc if parts.scheme else self.headers.get("Host", "")
                seen = Seen(self.command, host, parts.path + (f"?{parts.query}" if parts.query else ""),
                            dict(self.headers))
                with registry._lock:
                    registry.seen.append(seen)
                    registry.in_flight += 1
                    registry.max_in_flight = max(registry.max_in_flight, registry.in_flight)
                try:
                    if registry.answer is None:
                        self.send_error(404)
                    else:
                        registry.answer(self, seen)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    with registry._lock:
                        registry.in_flight -= 1

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.host = f"127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def requests_for(self, fragment: str) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if fragment in s.host + s.path]


def reply(h: BaseHTTPRequestHandler, status: int, body: bytes = b"", **headers: str) -> None:
    h.send_response(status)
    for name, value in headers.items():
        h.send_header(name.replace("_", "-"), value)
    if "Content-Length" not in {n.replace("_", "-") for n in headers}:
        h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(body)


def manifest_bytes(layers: list[tuple[str, int]], config: tuple[str, int]) -> bytes:
    return json.dumps({
        "schemaVersion": 2, "mediaType": MANIFEST_V2,
        "config": {"mediaType": CONFIG_V1, "digest": config[0], "size": config[1]},
        "layers": [{"mediaType": MEDIA_MODEL, "digest": d, "size": n} for d, n in layers],
    }).encode()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()



def serve_blobs(h: BaseHTTPRequestHandler, seen: Seen, blobs: dict[str, bytes], manifest: bytes,
                delay: float = 0.0) -> None:
    """A plain registry: the manifest, and blobs with Range support."""
    if "/manifests/" in seen.path:
        reply(h, 200, manifest, Content_Type=MANIFEST_V2)
        return
    digest = seen.path.rsplit("/", 1)[-1]
    data = blobs.get(digest)
    if data is None:
        reply(h, 404, b'{"errors":[{"code":"BLOB_UNKNOWN","message":"blob unknown"}]}')
        return
    time.sleep(delay)
    rng = h.headers.get("Range")
    if rng:
        start, end = (int(x) for x in rng.split("=")[1].split("-"))
        reply(h, 206, data[start:end + 1], Content_Range=f"bytes {start}-{end}/{len(data)}")
    else:
        reply(h, 200, data)
