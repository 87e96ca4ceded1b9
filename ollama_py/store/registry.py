"""Pull and push over the registry protocol (Docker Registry HTTP API v2 as Ollama uses it).

    pull_model(store, name, *, options, noprune=False, cancel=None) -> Iterator[progress dict]
    push_model(store, name, *, options, cancel=None) -> Iterator[progress dict]
    RegistryClient(name, options)                  one registry + repository: manifests, blobs, auth

Progress objects are Ollama's, in Ollama's order:

    pull: pulling manifest · pulling <12 hex> {digest,total,completed} · verifying sha256 digest ·
          writing manifest · removing unused layers (only when the old version's blobs became unused) · success
    push: retrieving manifest · pushing <12 hex> {digest,total,completed} · pushing manifest · success

Blobs are downloaded by store/download.py (parallel ranged parts, resumable, verified before they get their
name) and uploaded by store/upload.py. The manifest is written last, with the registry's bytes verbatim,
and only after every blob it names is in the store. Blocking code: the server runs it in a thread.

The registry is whatever host the model name says, so nothing it answers is trusted (store/registry_limits.py):
bodies are read with a cap (a manifest at most 4 MiB once decoded, an error 64 KiB), redirects go only to
https (or http for an http registry) and to public addresses unless the registry is local itself, at most 10
of them, and an error from a host other than the registry says its status and host, never its page. Before
a byte is written, the layers the store lacks must fit on its disk (store/download.py: check_disk_space).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import platform
import re
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter

from ollama_py import __version__
from ollama_py.api.names import ModelName
from ollama_py.errors import ModelNotFound, NotFound, OllamaError, RegistryError, RequestCanceled, Unauthorized
from ollama_py.store.blobs import canonical_digest
from ollama_py.store.manifests import MANIFEST_V2, InvalidManifest, Manifest
from ollama_py.store.registry_auth import RegistryAuth
from ollama_py.store.registry_limits import (
    MAX_ERROR_BYTES,
    MAX_LAYERS,
    MAX_MANIFEST_BYTES,
    MAX_REDIRECTS,
    REDIRECTS,
    OpenConnections,
    TargetPolicy,
    guard_connections,
    host_of,
    read_body,
    reason,
    refusal,
    too_slow,
)

log = logging.getLogger(__name__)

USER_AGENT = f"ollama/{__version__} ({platform.machine().lower()} {platform.system().lower()}) ollama-py/{__version__}"
CONNECT_TIMEOUT = 30.0
READ_TIMEOUT = 60.0
_ERRNO_TEXT = re.compile(r"\[Errno -?\d+\] ([^'\")]+)")


@dataclass(frozen=True, slots=True)
class RegistryOptions:
    """How to reach registries: `insecure` allows plain http (and downgrades https names to http, as Ollama
    does); credentials and the signing key are described in store/registry_auth.py."""

    insecure: bool = False
    credential_files: tuple[Path, ...] = ()
    key_path: Path | None = None
    proxies_from_env: bool = field(default=True)  # HTTPS_PROXY / HTTP_PROXY / NO_PROXY, as requests reads them
    min_rate: int = 8 * 1024  # OLLAMA_PY_PULL_MIN_RATE: a blob download slower than this (bytes/s) fails


class TransportError(RegistryError):
    """The registry could not be reached or the connection broke (worth retrying)."""


class RegistryStatusError(RegistryError):
    """The registry answered with an error status (`code`)."""

    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def describe(exc: BaseException) -> str:
    """A short reason for a transport error: "connection refused", not urllib3's nested repr."""
    if isinstance(exc, (requests.Timeout, urllib3.exceptions.TimeoutError, TimeoutError)) or (
            "timed out" in str(exc).lower()):
        return "timed out"
    text = str(exc)
    m = _ERRNO_TEXT.search(text)
    if m:
        return m.group(1).strip().lower()
    return text


class RegistryClient:
    """One repository on one registry. Thread-safe: download parts share it (and its connection pool)."""

    BODY_DEADLINE = 120.0  # seconds a manifest, an error or a token answer may take to arrive, however it trickles

    def __init__(self, name: ModelName, options: RegistryOptions = RegistryOptions()) -> None:
        if name.scheme == "http" and not options.insecure:
            raise RegistryError("insecure protocol http", status=400)
        scheme = "http" if options.insecure or name.scheme == "http" else "https"
        self.name = name
        self.options = options
        self.host = name.host
        self.base = f"{scheme}://{name.host}"
        self.repository = name.repository
        self.targets = TargetPolicy(self.base)
        self.session = requests.Session()
        self.session.trust_env = options.proxies_from_env
        self.session.headers["User-Agent"] = USER_AGENT
        self.session.headers["Accept-Encoding"] = "identity"  # bodies are read raw and capped (registry_limits)
        adapter = HTTPAdapter(pool_connections=4, pool_maxsize=32)
        self._connections = OpenConnections()
        guard_connections(adapter, self.targets, self._connections)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        self.auth = RegistryAuth(name.host, self.session, credential_files=options.credential_files,
                                 key_path=options.key_path, targets=self.targets)
        self._closed = threading.Event()

    def close(self) -> None:
        self._closed.set()
        self.session.close()

    def abort(self) -> None:
        """Shut down every connection in use now, from any thread: a read blocked on the registry ends with a
        transport error (the session stays usable; its pool replaces them)."""
        self._connections.shutdown()

    def __enter__(self) -> RegistryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- URLs --------------------------------------------------------------------------------------------

    def url(self, *parts: str) -> str:
        return f"{self.base}/v2/{self.repository}/" + "/".join(quote(p, safe=":") for p in parts)

    def manifest_url(self, tag: str) -> str:
        return self.url("manifests", tag)

    def blob_url(self, digest: str) -> str:
        return self.url("blobs", canonical_digest(digest))

    def is_registry(self, url: str) -> bool:
        """Whether `url` is on the registry itself (which gets our credentials), not a CDN it sent us to."""
        return urlsplit(url).netloc.lower() == urlsplit(self.base).netloc.lower()

    def follow(self, current: str, location: str, what: str = "redirect") -> str:
        """The absolute URL a Location header names, if the registry may send us there (RegistryError if not)."""
        target = urljoin(current, location)
        self.targets.check(target, what)
        return target

    # -- requests ----------------------------------------------------------------------------------------

    def request(self, method: str, url: str, *, headers: dict[str, str] | None = None, data: Any = None,
                allow_redirects: bool = True, timeout: tuple[float, float] = (CONNECT_TIMEOUT, READ_TIMEOUT),
                ok: Sequence[int] = ()) -> requests.Response:
        """Send a request with the registry's authorization, answering up to two 401 challenges. The response
        is always streamed: read its body with registry_limits.read_body (or close it).

        Redirects are followed here, each checked by `follow` (at most MAX_REDIRECTS); credentials go only
        to the registry's own host. Errors, as Ollama reports them: 404 -> NotFound("file does not exist"); a
        401 that survives the challenge -> Unauthorized; other statuses >= 400 -> RegistryError("<code>:
        <registry message>"), from another host "<code> from <host>"; transport failures ->
        RegistryError('<METHOD> "<url>": <reason>'). Statuses in `ok` are returned.
        """
        challenges = redirects = 0
        while True:
            own = self.is_registry(url)
            send = dict(headers or {})
            auth_header, generation = self.auth.header() if own else (None, 0)
            if auth_header:
                send["Authorization"] = auth_header
            if hasattr(data, "seek"):
                data.seek(0)
            try:
                resp = self.session.request(method, url, headers=send, data=data, stream=True,
                                            allow_redirects=False, timeout=timeout)
            except requests.RequestException as e:
                refused = refusal(e)
                if refused is not None:
                    raise RegistryError(refused) from None
                raise TransportError(f'{method} "{url}": {describe(e)}') from e
            if resp.status_code in ok:
                return resp
            if resp.status_code == 401 and own and challenges < 2:
                challenges += 1
                resp.close()
                self.auth.answer(resp, generation)
                continue
            if allow_redirects and resp.status_code in REDIRECTS and resp.headers.get("Location"):
                resp.close()
                if redirects >= MAX_REDIRECTS:
                    raise RegistryError(f"maximum redirects exceeded ({MAX_REDIRECTS})")
                redirects += 1
                url = self.follow(url, resp.headers["Location"])
                if resp.status_code in (301, 302, 303) and method not in ("GET", "HEAD"):
                    method, data = "GET", None  # what browsers and requests do
                continue
            if resp.status_code < 400:
                return resp
            raise _status_error(resp, own)

    def get_manifest(self, tag: str) -> bytes:
        """The manifest's bytes, at most MAX_MANIFEST_BYTES, all of it (headers too) within BODY_DEADLINE."""
        url = self.manifest_url(tag)
        expired = threading.Event()

        def expire() -> None:
            expired.set()
            self.abort()

        timer = threading.Timer(self.BODY_DEADLINE, expire)
        timer.daemon = True
        timer.start()
        try:
            with self.request("GET", url, headers={"Accept": MANIFEST_V2}) as resp:
                try:
                    body = read_body(resp, MAX_MANIFEST_BYTES, "manifest", deadline=self.BODY_DEADLINE)
                except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as e:
                    raise TransportError(f'GET "{url}": {describe(e)}') from None
        except OllamaError:
            if expired.is_set():
                raise RegistryError(too_slow("manifest", self.BODY_DEADLINE)) from None
            raise
        finally:
            timer.cancel()
        if expired.is_set():  # a connection shut down mid-headers can read as an answer with no body
            raise RegistryError(too_slow("manifest", self.BODY_DEADLINE))
        return body

    def put_manifest(self, tag: str, raw: bytes) -> None:
        self.request("PUT", self.manifest_url(tag), headers={"Content-Type": MANIFEST_V2}, data=raw).close()

    def blob_exists(self, digest: str) -> bool:
        try:
            self.request("HEAD", self.blob_url(digest)).close()
        except NotFound:
            return False
        return True


def _status_error(resp: requests.Response, own: bool = True) -> OllamaError:
    """The error for a status >= 400. Only the registry's own structured message is repeated: a host it
    redirected us to is named with its status, and no page of anyone's becomes text a client can read."""
    with resp:
        if resp.status_code == 404 and own:
            return NotFound("file does not exist")
        if resp.status_code == 401 and own:
            return Unauthorized()
        if not own:
            host = host_of(resp.url)
            return RegistryStatusError(f"{resp.status_code} from {host}", resp.status_code)
        text = b""
        if resp.request.method != "HEAD":
            try:
                text = read_body(resp, MAX_ERROR_BYTES, "error", deadline=RegistryClient.BODY_DEADLINE)
            except (RegistryError, urllib3.exceptions.HTTPError, http.client.HTTPException, OSError):
                text = b""  # too long, or broken: the status says enough
    message = _registry_message(text) or reason(resp.status_code)
    return RegistryStatusError(f"{resp.status_code}: {message}", resp.status_code)


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _registry_message(text: bytes) -> str:
    """The registry's own words: `{"errors":[{"code","message"}]}` as "CODE: message", or `{"error": "..."}`,
    at most 200 characters on one line; any other body is not repeated (an error must not become a way to
    read arbitrary pages through the server)."""
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        return ""
    message = ""
    errors = body.get("errors") if isinstance(body, dict) else None
    if isinstance(errors, list) and errors and isinstance(errors[0], dict):
        message = "; ".join(f"{e.get('code', '')}: {e.get('message', '')}".strip(": ") for e in errors
                            if isinstance(e, dict))
    elif isinstance(body, dict) and isinstance(body.get("error"), str):
        message = body["error"]
    return " ".join(message.split())[:200]


# -- pull ---------------------------------------------------------------------------------------------------


def pull_model(store: Any, name: ModelName, *, options: RegistryOptions = RegistryOptions(),
               noprune: bool = False, cancel: threading.Event | None = None) -> Iterator[dict[str, Any]]:
    """Download `name` into `store` (a ModelStore), yielding Ollama's progress objects.

    An http:// name without `insecure` fails before anything is yielded ("insecure protocol http").
    """
    from ollama_py.store.download import check_disk_space, download_blob

    previous: Manifest | None = None
    try:
        previous = store.manifests.get(name)
    except ModelNotFound:
        pass
    except InvalidManifest as e:
        log.warning("pulling %s over an unreadable manifest: %s", name, e)

    with RegistryClient(name, options) as client, _aborted_on(cancel, client):
        yield {"status": "pulling manifest"}
        try:
            manifest = Manifest.parse(_get_manifest(client, name.tag, cancel))
        except Unauthorized as e:
            raise Unauthorized(f"pull model manifest: {e}") from None
        except OllamaError as e:
            # one line, whatever the manifest held (an invalid one may quote a 4 MiB digest)
            raise RegistryError(f"pull model manifest: {_one_line(str(e))}",
                                status=e.status if e.status < 500 else None) from None
        except RecursionError:  # json's answer to 4 MiB of "["
            raise RegistryError("pull model manifest: invalid manifest: nested too deeply") from None

        layers = distinct_blobs(manifest)
        if len(layers) > MAX_LAYERS:
            raise RegistryError(f"pull model manifest: {len(layers)} layers, more than {MAX_LAYERS}")
        check_disk_space(store.blobs, layers)  # before anything is written: the sizes are the registry's word
        for layer in layers:
            yield from download_blob(client, store.blobs, layer, cancel=cancel)

    # Every blob was hashed before it got its name (download.py), so this step only says so.
    yield {"status": "verifying sha256 digest"}
    yield {"status": "writing manifest"}
    store.put_manifest(name, manifest)

    if previous is not None and not noprune:
        orphaned = previous.digests() - manifest.digests()
        if orphaned:
            try:
                unused = orphaned - store.manifests.referenced_digests()
            except InvalidManifest as e:
                log.warning("not removing old layers of %s: %s", name, e)
                unused = set()
            if unused:
                yield {"status": "removing unused layers"}
                store.remove_unreferenced(unused)
    yield {"status": "success"}


def _get_manifest(client: RegistryClient, tag: str, cancel: threading.Event | None) -> bytes:
    """The manifest, or RequestCanceled when the client hung up meanwhile (its connection was shut down: what
    came back, an error or a body cut short, is not the registry's answer)."""
    try:
        raw = client.get_manifest(tag)
    except OllamaError:
        if cancel is not None and cancel.is_set():
            raise RequestCanceled() from None
        raise
    if cancel is not None and cancel.is_set():
        raise RequestCanceled()
    return raw


def distinct_blobs(manifest: Manifest) -> list[Any]:
    """The layers and then the config, each blob once (a manifest may name the same blob twice)."""
    seen: set[str] = set()
    out = []
    for layer in (*manifest.layers, manifest.config):
        digest = canonical_digest(layer.digest)
        if digest not in seen:
            seen.add(digest)
            out.append(layer)
    return out


# -- push ---------------------------------------------------------------------------------------------------


def push_model(store: Any, name: ModelName, *, options: RegistryOptions = RegistryOptions(),
               cancel: threading.Event | None = None) -> Iterator[dict[str, Any]]:
    """Upload `name` from `store` to its registry: blobs the registry lacks, then the manifest (verbatim,
    so a pull gets the same bytes and the same digest)."""
    from ollama_py.store.upload import upload_blob

    yield {"status": "retrieving manifest"}
    with RegistryClient(name, options) as client, _aborted_on(cancel, client):
        try:
            manifest = store.manifests.get(name)
        except ModelNotFound:
            yield {"status": "couldn't retrieve manifest"}
            raise
        for layer in distinct_blobs(manifest):
            yield from upload_blob(client, store.blobs, layer, cancel=cancel)
        yield {"status": "pushing manifest"}
        client.put_manifest(name.tag, manifest.raw)
    yield {"status": "success"}


@contextlib.contextmanager
def _aborted_on(cancel: threading.Event | None, client: RegistryClient) -> Iterator[None]:
    """While inside, a `cancel` (the client hung up) shuts the registry connections down at once, so a thread
    blocked reading from a registry that trickles is freed instead of waiting out its timeouts."""
    if cancel is None:
        yield
        return
    finished = threading.Event()

    def watch() -> None:
        while not finished.is_set():
            if cancel.wait(0.25):
                client.abort()
                return

    threading.Thread(target=watch, name="transfer-cancel", daemon=True).start()
    try:
        yield
    finally:
        finished.set()


def transfer_progress(status: str, digest: str, total: int, done: threading.Event, completed: Callable[[], int],
                      error: Callable[[], BaseException | None], cancel: threading.Event | None,
                      interval: float) -> Iterator[dict[str, Any]]:
    """Ollama's progress objects for one blob transfer running in another thread, every `interval` while
    bytes move, until it is done; its error (or a cancel) is raised here."""
    last = -1
    while True:
        finished = done.wait(interval)
        if cancel is not None and cancel.is_set():
            raise RequestCanceled()
        if finished and error() is not None:
            raise error()  # type: ignore[misc]
        now = total if finished else completed()
        if now != last:
            last = now
            yield {"status": status, "digest": digest, "total": total, "completed": now}
        if finished:
            return
