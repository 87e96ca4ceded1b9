"""What a registry may make us do: how much of its answers we read, and where it may send us.

    read_body(resp, limit, what, deadline=) -> bytes   a streamed response's body, at most `limit` bytes decoded
    TargetPolicy(base).check(url)                RegistryError unless the registry at `base` may send us to `url`
    guard_connections(adapter, policy, open)     the same rule when a connection is made; `open` remembers it
    OpenConnections.shutdown()                   ends every read blocked on those connections, from any thread

A registry is whatever host a client names in a model name, so its answers are as trusted as the client:

- Bodies are read raw and capped. A `Content-Encoding` we did not ask for (we send `Accept-Encoding:
  identity`) is decoded here with the cap applied to the decoded bytes, so a 400 KB gzip bomb costs 400 KB,
  not a gigabyte; encodings other than gzip and deflate are refused.
- A redirect (or an upload Location, or a token realm) may point at https, or at http only when the registry
  itself is spoken to over http; never at a loopback, private, link-local or otherwise non-public address
  unless the registry itself is on one (a registry on 127.0.0.1 in tests, one on the LAN). Names are
  resolved to decide; a name that does not resolve is let through (the connection fails on its own).
- The same rule holds when a connection is made (`guard_connections`): for a registry that is not local, a
  host that resolves to a non-public address is refused before connecting, and the connection goes to the
  address that was checked, so a name that answers differently the second time (DNS rebinding) gains
  nothing. Connections through a proxy (HTTPS_PROXY, the operator's choice) are the proxy's business.
- Those connections are also remembered (`OpenConnections`), so another thread can shut them down: a cancelled
  pull, a deadline, or a failed download ends reads that a trickling registry would otherwise hold (a header
  line every 59 s never trips the socket's read timeout).
- At most MAX_REDIRECTS redirects per request, as Ollama (10).
"""

from __future__ import annotations

import http
import ipaddress
import socket
import threading
import time
import weakref
import zlib
from urllib.parse import urlsplit

import requests
import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError

from ollama_py.errors import RegistryError

MAX_MANIFEST_BYTES = 4 << 20  # docker distribution refuses manifests past 4 MiB too
MAX_ERROR_BYTES = 64 << 10  # an error body: enough for {"errors": [...]}, never a page to hold
MAX_TOKEN_BYTES = 256 << 10  # a token server's JSON answer (a JWT is a few KB)
MAX_REDIRECTS = 10
MAX_LAYERS = 1000  # blobs one manifest may name (a model has a handful; each is a file and a download)
REDIRECTS = (301, 302, 303, 307, 308)
_READ = 64 << 10


class BodyTooLarge(RegistryError):
    """A registry's answer was larger than we read."""


def read_body(resp: requests.Response, limit: int, what: str, *, deadline: float | None = None) -> bytes:
    """The body of a response opened with stream=True, decoded, at most `limit` bytes; BodyTooLarge past it,
    and RegistryError when it is still arriving after `deadline` seconds (each read is bounded by the socket's
    read timeout, so a body trickled a byte at a time ends too).

    Transport failures while reading (urllib3's errors, OSError) are the caller's to map."""
    encoding = resp.headers.get("Content-Encoding", "").strip().lower()
    decoder: zlib._Decompress | None
    if encoding in ("", "identity"):
        decoder = None
    elif encoding in ("gzip", "x-gzip"):
        decoder = zlib.decompressobj(16 + zlib.MAX_WBITS)
    elif encoding == "deflate":
        decoder = zlib.decompressobj()
    else:
        raise RegistryError(f"{what}: unsupported Content-Encoding {encoding!r}")
    length = resp.headers.get("Content-Length", "")
    if decoder is None and length.isdigit() and int(length) > limit:
        raise BodyTooLarge(f"{what} is too large ({int(length)} bytes, at most {limit})")
    out = bytearray()
    end = None if deadline is None else time.monotonic() + deadline
    try:
        while True:
            data = resp.raw.read1(_READ, decode_content=False)
            if not data:
                break
            if end is not None and time.monotonic() > end:
                raise RegistryError(too_slow(what, deadline or 0))
            while data:
                if decoder is None:
                    out += data
                    data = b""
                else:
                    # at most one byte past the limit, however much the compressed bytes would expand to
                    out += decoder.decompress(data, limit + 1 - len(out))
                    data = decoder.unconsumed_tail
                if len(out) > limit:
                    raise BodyTooLarge(f"{what} is too large (more than {limit} bytes)")
    except zlib.error as e:
        raise RegistryError(f"{what}: bad {encoding} encoding: {e}") from None
    return bytes(out)


def too_slow(what: str, deadline: float) -> str:
    return f"{what} still arriving after {deadline:.0f}s: the registry is too slow"


def host_of(url: str) -> str:
    """host[:port] of a URL, without any user:password@ it carries."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or ""
    return f"[{host}]:{port}" if port and ":" in host else f"{host}:{port}" if port else host


def reason(code: int) -> str:
    """The standard phrase for a status (a server's own reason phrase can be 64 KB of anything)."""
    try:
        return http.HTTPStatus(code).phrase
    except ValueError:
        return "unknown status"


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_global and not ip.is_multicast


def _addresses(host: str, port: int) -> list[str] | None:
    """The addresses `host` stands for; None when it does not resolve."""
    try:
        return [str(ipaddress.ip_address(host.strip("[]")))]
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return None
    return [str(info[4][0]) for info in infos]


class TargetPolicy:
    """Where the registry at `base` (scheme://host[:port]) may send us. Thread-safe; answers are cached."""

    def __init__(self, base: str) -> None:
        parts = urlsplit(base)
        self.scheme = parts.scheme
        self.host = (parts.hostname or "").lower()
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._local: bool | None = None
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, int], bool] = {}

    @property
    def registry_is_local(self) -> bool:
        if self._local is None:
            addresses = _addresses(self.host, self._port)
            self._local = bool(addresses) and not all(_public(a) for a in addresses or ())
        return self._local

    def check(self, url: str, what: str = "redirect") -> None:
        """RegistryError when `url` is not a place this registry may send us (message: scheme and host only)."""
        parts = urlsplit(url)
        scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
        if not host:
            raise RegistryError(f"registry {self.host}: refusing {what} to a URL without a host")
        if scheme != "https" and not (scheme == "http" and self.scheme == "http"):
            raise RegistryError(f"registry {self.host}: refusing {what} to {scheme}://{host} (only https)")
        if self.registry_is_local:
            return
        try:
            port = parts.port or (443 if scheme == "https" else 80)
        except ValueError:
            raise RegistryError(f"registry {self.host}: refusing {what} to {host}: bad port") from None
        key = (host, port)
        with self._lock:
            allowed = self._cache.get(key)
        if allowed is None:
            addresses = _addresses(host, port)
            allowed = addresses is None or all(_public(a) for a in addresses)
            with self._lock:
                self._cache[key] = allowed
        if not allowed:
            raise RegistryError(f"registry {self.host}: refusing {what} to {host}, a local or private address")


class ConnectionRefusedByPolicy(NewConnectionError):
    """A connection the registry's rules do not allow (never retried: the message is the user's answer)."""

    def __init__(self, conn: HTTPConnection, message: str) -> None:
        super().__init__(conn, message)
        self.message = message


def refusal(exc: BaseException) -> str | None:
    """The policy's message when `exc` (as requests raises it) is a refused connection, else None."""
    seen: set[int] = set()
    stack: list[object] = [exc]
    while stack:
        e = stack.pop()
        if id(e) in seen or not isinstance(e, BaseException):
            continue
        seen.add(id(e))
        if isinstance(e, ConnectionRefusedByPolicy):
            return e.message
        stack.extend((getattr(e, "reason", None), e.__cause__, e.__context__, *e.args))
    return None


def _connect_checked(conn: HTTPConnection, policy: TargetPolicy) -> socket.socket:
    """HTTPConnection._new_conn, resolving once and connecting only to addresses the policy allows."""
    try:
        infos = socket.getaddrinfo(conn._dns_host, conn.port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise NameResolutionError(conn.host, conn, e) from e
    addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not policy.registry_is_local and not all(_public(a) for a in addresses):
        raise ConnectionRefusedByPolicy(conn, f"registry {policy.host}: refusing to connect to {conn.host}, "
                                              "a local or private address")
    error: Exception = NewConnectionError(conn, f"no address for {conn.host}")
    for address in addresses:
        try:
            return urllib3.util.connection.create_connection(
                (address, conn.port), conn.timeout, source_address=conn.source_address,
                socket_options=conn.socket_options)
        except TimeoutError:
            error = ConnectTimeoutError(conn, f"Connection to {conn.host} timed out. (connect timeout={conn.timeout})")
        except OSError as e:
            error = NewConnectionError(conn, f"Failed to establish a new connection: {e}")
    raise error


class OpenConnections:
    """The direct connections of one client, shut down together by `shutdown()` from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connections: weakref.WeakSet[HTTPConnection] = weakref.WeakSet()

    def add(self, conn: HTTPConnection) -> None:
        with self._lock:
            self._connections.add(conn)

    def shutdown(self) -> None:
        """A read or write blocked on any of them returns (with an error) now; the pool replaces them."""
        with self._lock:
            connections = list(self._connections)
        for conn in connections:
            sock = conn.sock
            if sock is not None:
                try:
                    # the plain socket's shutdown, also for TLS: the fd is what the blocked read waits on
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:
                    pass  # closed meanwhile, or never connected


def guard_connections(adapter: HTTPAdapter, policy: TargetPolicy, connections: OpenConnections) -> None:
    """Make every direct connection `adapter` opens obey `policy` (see the module docstring), and remember it
    in `connections`."""

    class GuardedHTTP(HTTPConnection):
        def _new_conn(self) -> socket.socket:
            sock = _connect_checked(self, policy)
            connections.add(self)
            return sock

    class GuardedHTTPS(HTTPSConnection):
        def _new_conn(self) -> socket.socket:
            sock = _connect_checked(self, policy)
            connections.add(self)
            return sock

    class GuardedHTTPPool(HTTPConnectionPool):
        ConnectionCls = GuardedHTTP

    class GuardedHTTPSPool(HTTPSConnectionPool):
        ConnectionCls = GuardedHTTPS

    adapter.poolmanager.pool_classes_by_scheme = {"http": GuardedHTTPPool, "https": GuardedHTTPSPool}
