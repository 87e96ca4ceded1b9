"""Blob uploads: skip what the registry has, mount across repositories, else a chunked upload session.

    upload_blob(client, blobs, layer, *, cancel=None) -> Iterator[progress dict]

1. `HEAD /v2/<repo>/blobs/<digest>`: present -> one "pushing <12 hex>" object, complete, and done.
2. `POST /v2/<repo>/blobs/uploads/` (with `?mount=<digest>&from=<repo>` when the layer records the model it
   came from on this registry): 201 means the registry mounted it, 202 opens a session at `Location`.
3. `PATCH` parts of total/16 clamped to [100 MB, 1000 MB] in order with `Content-Range: <start>-<end>`
   (and `X-Redirect-Uploads: 1`: a registry may answer 307 to have the part PUT to object storage); the
   next URL comes from `Docker-Upload-Location` or `Location`.
4. `PUT <location>?digest=<digest>` (plus Ollama's `etag` when parts went to object storage).

A failed session is started again from the beginning (MAX_RETRIES times, with backoff). The work runs in
a thread of its own so that progress keeps flowing while a part is on the wire.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import requests

from ollama_py.api.names import parse_name
from ollama_py.errors import InvalidModelName, NotFound, OllamaError, RegistryError, RequestCanceled
from ollama_py.store.blobs import BlobStore, canonical_digest
from ollama_py.store.download_state import MB, plan_parts
from ollama_py.store.manifests import Layer
from ollama_py.store.registry import RegistryClient, RegistryStatusError, TransportError, transfer_progress

log = logging.getLogger(__name__)


def _with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True) + list(params.items())
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), parts.fragment))


class _FileSection:
    """A part of a file as a request body: a length for Content-Length, and 1 MB chunks that count progress."""

    def __init__(self, path: Any, offset: int, size: int, on_bytes: Any, stop: threading.Event) -> None:
        self._path, self._offset, self._size = path, offset, size
        self._on_bytes, self._stop = on_bytes, stop

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[bytes]:
        with open(self._path, "rb") as f:
            f.seek(self._offset)
            left = self._size
            while left > 0:
                if self._stop.is_set():
                    raise RequestCanceled()
                chunk = f.read(min(BlobUpload.CHUNK, left))
                if not chunk:
                    raise OllamaError(f"{self._path} is shorter than its manifest says")
                left -= len(chunk)
                self._on_bytes(len(chunk))
                yield chunk


class BlobUpload:
    PART_COUNT = 16
    MIN_PART_SIZE = 100 * MB
    MAX_PART_SIZE = 1000 * MB
    MAX_RETRIES = 6
    BACKOFF = 1.0
    PROGRESS_INTERVAL = 0.06
    CHUNK = 1 << 20

    def __init__(self, client: RegistryClient, blobs: BlobStore, layer: Layer) -> None:
        self.client = client
        self.layer = layer
        self.digest = canonical_digest(layer.digest)
        self.path = blobs.path(self.digest)
        self.total = self.path.stat().st_size if self.path.is_file() else layer.size
        self.error: BaseException | None = None
        self._completed = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._done = threading.Event()

    def _count(self, n: int) -> None:
        with self._lock:
            self._completed += n

    def run(self, cancel: threading.Event | None) -> Iterator[dict[str, Any]]:
        if not self.path.is_file():
            raise NotFound(f"blob {self.digest} not found")

        def work() -> None:
            try:
                self._upload_with_retries()
            except BaseException as e:
                self.error = e
            finally:
                self._done.set()

        threading.Thread(target=work, name=f"push-{self.digest[7:19]}", daemon=True).start()
        try:
            yield from transfer_progress(f"pushing {self.digest[7:19]}", self.digest, self.total, self._done,
                                         lambda: self._completed, lambda: self.error, cancel, self.PROGRESS_INTERVAL)
        finally:
            self._stop.set()

    def _upload_with_retries(self) -> None:
        for attempt in range(1, self.MAX_RETRIES + 1):
            try:
                self._upload()
                return
            except (TransportError, RegistryStatusError) as e:
                if isinstance(e, RegistryStatusError) and e.code < 500 and e.code not in (408, 429):
                    raise
                if attempt == self.MAX_RETRIES:
                    raise RegistryError(f"max retries exceeded: {e}") from None
                delay = self.BACKOFF * 2 ** (attempt - 1)
                log.info("%s upload attempt %d failed: %s; retrying in %.1fs", self.digest[7:19], attempt, e, delay)
                with self._lock:
                    self._completed = 0
                if self._stop.wait(delay):
                    raise RequestCanceled() from None

    def _upload(self) -> None:
        start = self.client.url("blobs", "uploads") + "/"
        mount_from = self._mount_source()
        if mount_from:
            start = _with_query(start, mount=self.digest, **{"from": mount_from})
        resp = self.client.request("POST", start)
        with resp:
            location = _next_location(self.client, resp, start)
            if resp.status_code == 201:
                log.info("%s mounted from %s", self.digest[7:19], mount_from)
                return
        parts = plan_parts(self.total, count=self.PART_COUNT, min_size=self.MIN_PART_SIZE,
                           max_size=self.MAX_PART_SIZE)
        redirected = False
        for part in parts:
            body = _FileSection(self.path, part.offset, part.size, self._count, self._stop)
            headers = {"Content-Type": "application/octet-stream",
                       "Content-Range": f"{part.offset}-{part.offset + part.size - 1}",
                       "X-Redirect-Uploads": "1"}
            resp = self.client.request("PATCH", location, headers=headers, data=body, allow_redirects=False,
                                       ok=(307,))
            with resp:
                next_location = _next_location(self.client, resp, location)
                if resp.status_code == 307:
                    # the registry wants the bytes in object storage: PUT them there, without our credentials
                    redirected = True
                    target = self.client.follow(location, resp.headers["Location"], "upload")
                    self.client.request("PUT", target, headers={"Content-Type": "application/octet-stream"},
                                        data=_FileSection(self.path, part.offset, part.size, self._count,
                                                          self._stop)).close()
            location = next_location
        params = {"digest": self.digest}
        if redirected:
            params["etag"] = self._etag(parts)
        final = _with_query(location, **params)
        self.client.request("PUT", final, headers={"Content-Type": "application/octet-stream",
                                                   "Content-Length": "0"}).close()

    def _mount_source(self) -> str | None:
        """The repository on this registry that the layer came from (its `from`), if any."""
        if not self.layer.from_:
            return None
        try:
            source = parse_name(self.layer.from_)
        except InvalidModelName:
            return None
        if source.host.lower() != self.client.host.lower() or source.repository == self.client.repository:
            return None
        return source.repository

    def _etag(self, parts: list[Any]) -> str:
        """Ollama's multipart etag: md5 of the concatenated part md5s, then "-<number of parts>"."""
        outer = hashlib.md5()
        with open(self.path, "rb") as f:
            for part in parts:
                f.seek(part.offset)
                inner = hashlib.md5()
                left = part.size
                while left > 0:
                    chunk = f.read(min(self.CHUNK, left))
                    if not chunk:
                        break
                    inner.update(chunk)
                    left -= len(chunk)
                outer.update(inner.digest())
        return f"{outer.hexdigest()}-{len(parts)}"


def _next_location(client: RegistryClient, resp: requests.Response, current: str) -> str:
    """Where the next upload request goes, checked like a redirect (registry_limits: no private hosts)."""
    location = resp.headers.get("Docker-Upload-Location") or resp.headers.get("Location")
    if not location:
        if resp.status_code in (201, 307):
            return current
        raise RegistryError("the registry did not say where to upload (no Location header)")
    return client.follow(current, location, "upload")


def upload_blob(client: RegistryClient, blobs: BlobStore, layer: Layer, *,
                cancel: threading.Event | None = None) -> Iterator[dict[str, Any]]:
    """Make sure the registry has `layer`'s blob, yielding Ollama's "pushing <12 hex>" progress."""
    digest = canonical_digest(layer.digest)
    if client.blob_exists(digest):
        yield {"status": f"pushing {digest[7:19]}", "digest": digest, "total": layer.size, "completed": layer.size}
        return
    yield from BlobUpload(client, blobs, layer).run(cancel)
