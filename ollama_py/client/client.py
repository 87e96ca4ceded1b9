"""A small synchronous HTTP client for the ollama-py (and Ollama) REST API, over `requests`.

The CLI talks to the server only through this class; it is also usable as a library:

    client = Client()                     # OLLAMA_HOST, else http://127.0.0.1:11434
    for chunk in client.chat("smollm2:135m", [{"role": "user", "content": "Hi"}]):
        print(chunk["message"]["content"], end="", flush=True)

Streaming methods (generate, chat, pull, push, create) return a `Stream`: an iterator over the server's NDJSON
objects. It closes its HTTP response when exhausted or on `close()`; closing early is how a caller stops an
answer (the server sees the connection go and cancels the work).

Errors: a status >= 400 raises the ollama_py.errors class for that status (BadRequest, NotFound, ...) carrying the
server's `{"error"}` text and the status; an `{"error"}` line inside a stream raises OllamaError; nothing
listening at the host raises ServerUnreachable.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import requests
from urllib3.exceptions import ConnectTimeoutError, NewConnectionError

from ollama_py import __version__
from ollama_py.config import Host, parse_host
from ollama_py.errors import BadRequest, Forbidden, NotFound, OllamaError, RequestCanceled, ServerBusy, Unauthorized

log = logging.getLogger(__name__)

_UPLOAD_CHUNK = 1 << 20
_NOT_LISTENING = (NewConnectionError, ConnectTimeoutError)  # refused, unknown host, no answer to SYN
_STATUS_ERRORS: dict[int, type[OllamaError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    499: RequestCanceled,
    503: ServerBusy,
}


class ServerUnreachable(OllamaError, ConnectionError):
    """Nothing answered at the client's host (connection refused, unknown host, connect timeout)."""

    def __init__(self, url: str) -> None:
        super().__init__(f"could not connect to ollama-py server at {url}; is it running?")
        self.url = url


def error_for_status(status: int, body: bytes, reason: str = "") -> OllamaError:
    """The exception for an HTTP error response: the class for `status`, the server's `{"error"}` text."""
    message = ""
    try:
        data = json.loads(body)
        if isinstance(data, dict) and isinstance(data.get("error"), str):
            message = data["error"]
        elif isinstance(data, dict) and isinstance(data.get("error"), dict):  # OpenAI-style {"error": {...}}
            message = str(data["error"].get("message", ""))
    except ValueError:
        message = body.decode("utf-8", errors="replace").strip()
    if not message:
        message = f"{status} {reason}".strip()
    exc = _STATUS_ERRORS.get(status, OllamaError)(message)
    exc.status = status
    return exc


def file_digest(path: Path, chunk: int = _UPLOAD_CHUNK) -> str:
    """`sha256:<hex>` of a file's contents, as /api/blobs names blobs."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return f"sha256:{h.hexdigest()}"


class Stream(Iterator[dict[str, Any]]):
    """The NDJSON objects of one streaming response; `close()` drops the connection."""

    def __init__(self, response: requests.Response, url: str) -> None:
        self._response = response
        self._url = url
        self._objects = _ndjson(response)
        self.closed = False

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> dict[str, Any]:
        if self.closed:
            raise StopIteration
        try:
            item = next(self._objects)
        except StopIteration:
            self.close()
            raise
        except requests.RequestException as e:
            self.close()
            raise OllamaError(f"reading the response from {self._url}: {e}") from None
        except BaseException:
            self.close()
            raise
        if isinstance(item, dict) and item.get("error"):
            self.close()
            raise OllamaError(str(item["error"]))
        if not isinstance(item, dict):
            self.close()
            raise OllamaError(f"unexpected response from {self._url}: {item!r}")
        return item

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self._response.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ndjson(response: requests.Response) -> Iterator[Any]:
    # iter_content(None) yields each chunk as it arrives, so tokens show as soon as the server sends them.
    buf = b""
    for chunk in response.iter_content(chunk_size=None):
        buf += chunk
        while (nl := buf.find(b"\n")) >= 0:
            line, buf = buf[:nl].strip(), buf[nl + 1 :]
            if line:
                yield _loads(line)
    if buf.strip():
        yield _loads(buf.strip())


def _loads(line: bytes) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        raise OllamaError(f"invalid JSON in response: {line[:200]!r}") from None


class _Upload:
    """A file body with a known length (so requests sends Content-Length) that reports bytes as they go."""

    def __init__(self, f: BinaryIO, size: int, progress: Callable[[int], None] | None) -> None:
        self._f, self._size, self._progress = f, size, progress

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[bytes]:
        while block := self._f.read(_UPLOAD_CHUNK):
            yield block
            if self._progress is not None:
                self._progress(len(block))


def _clean(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


class Client:
    """Synchronous client for one server. `host`: an OLLAMA_HOST-style string or a Host; None reads OLLAMA_HOST.
    `api_key`: sent as `Authorization: Bearer` (a server started with OLLAMA_API_KEYS asks for one); None reads
    OLLAMA_API_KEY, as the `ollama` Python client does."""

    def __init__(self, host: str | Host | None = None, *, connect_timeout: float = 5.0,
                 read_timeout: float | None = None, api_key: str | None = None) -> None:
        if host is None:
            host = os.environ.get("OLLAMA_HOST", "")
        if api_key is None:
            api_key = os.environ.get("OLLAMA_API_KEY", "")
        self.host = host if isinstance(host, Host) else parse_host(host)
        self.base_url = self.host.url
        self.timeout = (connect_timeout, read_timeout)
        self._session = requests.Session()
        self._session.headers["User-Agent"] = f"ollama-py/{__version__}"
        if api_key:
            self._session.headers["Authorization"] = f"Bearer {api_key}"
        # Go's client never proxies loopback; requests would send 127.0.0.1 through HTTP_PROXY.
        if self.host.is_loopback:
            self._session.trust_env = False

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport -------------------------------------------------------------------------------------------

    def _send(self, method: str, path: str, *, json_body: Any = None, data: Any = None,
              stream: bool = False, timeout: tuple[float, float | None] | None = None) -> requests.Response:
        url = self.base_url + path
        try:
            response = self._session.request(method, url, json=json_body, data=data, stream=stream,
                                             timeout=timeout or self.timeout)
        except requests.ConnectionError as e:
            log.debug("%s %s: %s", method, url, e)
            reason = getattr(e.args[0], "reason", e.args[0]) if e.args else e
            if isinstance(e, requests.ConnectTimeout) or isinstance(reason, _NOT_LISTENING):
                raise ServerUnreachable(self.base_url) from None
            raise OllamaError(f"{method} {url}: {reason}") from None
        except requests.RequestException as e:
            raise OllamaError(f"{method} {url}: {e}") from None
        if response.status_code >= 400:
            try:
                body = response.content
            except requests.RequestException:
                body = b""
            finally:
                response.close()
            exc = error_for_status(response.status_code, body, response.reason or "")
            if response.status_code == 401 and "Authorization" not in self._session.headers:
                exc.message = f"{exc.message}: this server asks for an API key (set OLLAMA_API_KEY to one of its keys)"
            raise exc
        return response

    def _json(self, method: str, path: str, body: Any = None) -> Any:
        response = self._send(method, path, json_body=body)
        if not response.content:
            return {}
        try:
            return response.json()
        except ValueError:
            raise OllamaError(f"invalid JSON from {method} {path}") from None

    def _stream(self, path: str, body: dict[str, Any]) -> Stream:
        return Stream(self._send("POST", path, json_body=body, stream=True), self.base_url + path)

    # -- server ----------------------------------------------------------------------------------------------

    def heartbeat(self, timeout: float | None = None) -> None:
        """HEAD /: returns when the server answers; ServerUnreachable otherwise."""
        t = (timeout, timeout) if timeout is not None else None
        self._send("HEAD", "/", timeout=t).close()

    def version(self, timeout: float | None = None) -> str:
        t = (timeout, timeout) if timeout is not None else None
        """The server's own version: ollama-py's "ollama_py" field, else (an Ollama server) its "version"."""
        response = self._send("GET", "/api/version", timeout=t)
        body = response.json()
        return str(body.get("ollama_py") or body.get("version", ""))

    # -- inference -------------------------------------------------------------------------------------------

    def generate(self, model: str, prompt: str = "", *, stream: bool = True, **fields: Any) -> Stream:
        """POST /api/generate. `fields`: system, template, format, options, keep_alive, think, images, raw, ..."""
        return self._stream("/api/generate", _clean({"model": model, "prompt": prompt, "stream": stream,
                                                     **fields}))

    def chat(self, model: str, messages: list[dict[str, Any]] | None = None, *, stream: bool = True,
             **fields: Any) -> Stream:
        """POST /api/chat. `fields`: format, options, keep_alive, think, tools, ..."""
        return self._stream("/api/chat", _clean({"model": model, "messages": messages or [], "stream": stream,
                                                 **fields}))

    def embed(self, model: str, input: str | list[str], **fields: Any) -> dict[str, Any]:
        return self._json("POST", "/api/embed", _clean({"model": model, "input": input, **fields}))

    # -- models ----------------------------------------------------------------------------------------------

    def list(self) -> dict[str, Any]:
        """GET /api/tags: {"models": [...]}."""
        return self._json("GET", "/api/tags")

    def ps(self) -> dict[str, Any]:
        """GET /api/ps: {"models": [...]}."""
        return self._json("GET", "/api/ps")

    def load(self, model: str, *, keep_alive: str | float | None = None, **fields: Any) -> Stream:
        """POST /api/load (ollama-py's): {"status", "completed", "total"} lines, then the /api/ps entry."""
        return self._stream("/api/load", _clean({"model": model, "keep_alive": keep_alive, **fields}))

    def unload(self, model: str) -> dict[str, Any]:
        """POST /api/unload (ollama-py's): {"model", "status"} once the model's runner has stopped."""
        return self._json("POST", "/api/unload", {"model": model})

    def show(self, model: str, *, verbose: bool = False, **fields: Any) -> dict[str, Any]:
        """POST /api/show. `fields`: system, template, options."""
        return self._json("POST", "/api/show", _clean({"model": model, "verbose": verbose or None, **fields}))

    def pull(self, model: str, *, insecure: bool = False) -> Stream:
        return self._stream("/api/pull", _clean({"model": model, "insecure": insecure or None, "stream": True}))

    def push(self, model: str, *, insecure: bool = False) -> Stream:
        return self._stream("/api/push", _clean({"model": model, "insecure": insecure or None, "stream": True}))

    def create(self, model: str, **fields: Any) -> Stream:
        """POST /api/create. `fields`: from_ (sent as "from"), files, adapters, template, system, parameters,
        messages, license, quantize, requires, ..."""
        if "from_" in fields:
            fields["from"] = fields.pop("from_")
        return self._stream("/api/create", _clean({"model": model, "stream": True, **fields}))

    def copy(self, source: str, destination: str) -> None:
        self._send("POST", "/api/copy", json_body={"source": source, "destination": destination}).close()

    def delete(self, model: str) -> None:
        self._send("DELETE", "/api/delete", json_body={"model": model}).close()

    # -- blobs -----------------------------------------------------------------------------------------------

    def blob_exists(self, digest: str) -> bool:
        try:
            self._send("HEAD", f"/api/blobs/{digest}").close()
        except NotFound:
            return False
        return True

    def create_blob(self, digest: str, path: str | Path,
                    progress: Callable[[int], None] | None = None) -> None:
        """Upload a file as blob `digest` (`sha256:<hex>`); `progress(n)` is called with each n bytes sent."""
        path = Path(path)
        size = path.stat().st_size
        with open(path, "rb") as f:
            self._send("POST", f"/api/blobs/{digest}", data=_Upload(f, size, progress)).close()
