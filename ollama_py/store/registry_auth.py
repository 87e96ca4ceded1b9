"""Registry authentication: challenges, bearer tokens, Basic credentials, Ollama key signing.

A registry answers 401 with a challenge in `WWW-Authenticate`:

    Bearer realm="https://auth.example/token",service="registry.example",scope="repository:ns/m:pull"
    Basic realm="Registry Realm"

For Bearer we fetch a token from `<realm>?scope=…&service=…` (one `scope` per space-separated scope) and
retry with `Authorization: Bearer <token>`; for Basic we retry with the configured username and password.

Credentials live in Docker's config format, read on every challenge (so a file edited while the server
runs takes effect at once), first match wins:

    <data dir>/registries.json      ollama-py's own file (OLLAMA_PY_DATA_DIR, else the platform data dir)
    ~/.docker/config.json           Docker's, so `docker login` credentials work too

    {"auths": {"127.0.0.1:5000": {"auth": "<base64 user:password>"}}}      or {"username": …, "password": …}

Keys are a host[:port], optionally with a scheme and path ("https://host/v1/"). Credential helpers
(`credsStore`, `credHelpers`) are not consulted.

registry.ollama.ai and hf.co answer a challenge with a token only when the token request is signed with
the machine's ed25519 key (~/.ollama/id_ed25519, created on first need): Ollama signs "GET,<token url>,<base64
of the hex sha256 of an empty body>" and sends "<base64 public key>:<base64 signature>" with `ts` and `nonce`
in the URL (store/signing.py).

A token realm is the registry's word, so it is held to the registry's redirect rules (registry_limits.py:
https, public addresses unless the registry is local); the token server's answer is read with a cap and its
redirects are not followed.
"""

from __future__ import annotations

import base64
import binascii
import http.client
import json
import logging
import os
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import requests
import urllib3

from ollama_py.errors import RegistryError, Unauthorized
from ollama_py.store.registry_limits import MAX_TOKEN_BYTES, TargetPolicy, read_body, reason, refusal

log = logging.getLogger(__name__)

# Registries whose tokens are only handed out against a request signed with ~/.ollama/id_ed25519.
SIGNING_HOSTS = frozenset({"registry.ollama.ai", "ollama.com", "hf.co", "huggingface.co"})


@dataclass(frozen=True, slots=True)
class Challenge:
    scheme: str  # lowercase: "bearer" or "basic"
    realm: str = ""
    service: str = ""
    scope: str = ""
    error: str = ""


def parse_challenges(header: str) -> list[Challenge]:
    """Every challenge in a WWW-Authenticate value (RFC 7235: `scheme param=value, param="quoted", …`).

    Several challenges may share one header (requests joins repeated headers with ", "); a bare token
    after a comma starts the next one. Unknown parameters are ignored; a malformed tail ends parsing.
    """
    out: list[Challenge] = []
    scheme: str | None = None
    params: dict[str, str] = {}
    i, n = 0, len(header)

    def flush() -> None:
        if scheme:
            out.append(Challenge(scheme.lower(), params.get("realm", ""), params.get("service", ""),
                                 params.get("scope", ""), params.get("error", "")))

    while i < n:
        while i < n and header[i] in " \t,":
            i += 1
        start = i
        while i < n and header[i] not in " \t,=":
            i += 1
        token = header[start:i]
        if not token:
            break
        j = i
        while j < n and header[j] in " \t":
            j += 1
        if j < n and header[j] == "=":
            # a parameter of the current challenge
            i = j + 1
            while i < n and header[i] in " \t":
                i += 1
            if i < n and header[i] == '"':
                i += 1
                value: list[str] = []
                while i < n and header[i] != '"':
                    if header[i] == "\\" and i + 1 < n:
                        i += 1
                    value.append(header[i])
                    i += 1
                i += 1  # the closing quote
                val = "".join(value)
            else:
                start = i
                while i < n and header[i] not in " \t,":
                    i += 1
                val = header[start:i]
            if scheme is not None:
                params[token.lower()] = val
        else:
            flush()
            scheme, params = token, {}
            i = j
    flush()
    return out


def parse_challenge(header: str) -> Challenge | None:
    """The challenge to answer: Bearer if offered, else Basic, else None."""
    challenges = parse_challenges(header or "")
    for wanted in ("bearer", "basic"):
        for c in challenges:
            if c.scheme == wanted:
                return c
    return None


def token_url(challenge: Challenge, *, ts: int | None = None, nonce: str | None = None) -> str:
    """The token request URL: the realm plus `service`, one `scope` per space-separated scope, and for a
    signed request `ts` and `nonce`. Parameters already in the realm's query are kept."""
    parts = urlsplit(challenge.realm)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise Unauthorized(f"unauthorized: the registry's token realm {challenge.realm!r} is not a URL")
    query = parse_qsl(parts.query, keep_blank_values=True)
    if challenge.service:
        query.append(("service", challenge.service))
    query.extend(("scope", s) for s in challenge.scope.split(" ") if s)
    if ts is not None:
        query.append(("ts", str(ts)))
    if nonce is not None:
        query.append(("nonce", nonce))
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query), ""))


# -- credentials --------------------------------------------------------------------------------------------


def _host_key(key: str) -> str:
    """"https://Host:5000/v1/" -> "host:5000"."""
    key = key.strip()
    if "://" in key:
        key = key.split("://", 1)[1]
    return key.split("/", 1)[0].lower()


def _decode_entry(entry: object) -> tuple[str, str] | None:
    if not isinstance(entry, dict):
        return None
    user, password = entry.get("username"), entry.get("password")
    if isinstance(user, str) and isinstance(password, str) and user:
        return user, password
    auth = entry.get("auth")
    if isinstance(auth, str) and auth:
        try:
            user, sep, password = base64.b64decode(auth, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        if sep and user:
            return user, password
    return None


def load_credentials(host: str, files: Sequence[Path]) -> tuple[str, str] | None:
    """(username, password) for `host` from the first credentials file that has an entry for it."""
    want = host.lower()
    for path in files:
        try:
            config = json.loads(Path(path).read_text())
        except FileNotFoundError:
            continue
        except (OSError, ValueError) as e:
            log.warning("ignoring registry credentials file %s: %s", path, e)
            continue
        auths = config.get("auths") if isinstance(config, dict) else None
        if not isinstance(auths, dict):
            continue
        for key, entry in auths.items():
            if isinstance(key, str) and _host_key(key) == want:
                creds = _decode_entry(entry)
                if creds is not None:
                    return creds
                log.warning("ignoring unreadable entry for %s in %s", key, path)
    return None


# -- answering challenges -----------------------------------------------------------------------------------


class RegistryAuth:
    """The Authorization header for one registry host, refreshed when a 401 challenges it.

    Thread-safe: the parallel parts of a download share one instance, so one 401 fetches one token.
    """

    def __init__(self, host: str, session: requests.Session, *, credential_files: Sequence[Path] = (),
                 key_path: Path | None = None, timeout: float = 30.0, targets: TargetPolicy | None = None) -> None:
        self.host = host.lower()
        self._targets = targets
        self._session = session
        self._files = tuple(credential_files)
        self._key_path = key_path
        self._timeout = timeout
        self._lock = threading.Lock()
        self._header: str | None = None
        self._generation = 0

    def header(self) -> tuple[str | None, int]:
        """The current Authorization value (None before any challenge) and its generation."""
        with self._lock:
            return self._header, self._generation

    def answer(self, response: requests.Response, generation: int) -> None:
        """Get new authorization for a 401 `response`; raises Unauthorized when there is none to get.

        `generation` is what header() returned for the failed request: if another thread has refreshed the
        header since, the caller just retries with the new one.
        """
        with self._lock:
            if generation != self._generation:
                return
            challenge = parse_challenge(response.headers.get("WWW-Authenticate", ""))
            if challenge is None:
                raise Unauthorized()
            if challenge.scheme == "basic":
                header = self._basic_header(self._header)
            else:
                header = "Bearer " + self._fetch_token(challenge)
            self._header = header
            self._generation += 1

    def _basic_header(self, current: str | None) -> str:
        creds = load_credentials(self.host, self._files)
        if creds is None:
            raise Unauthorized(f"unauthorized: access denied (registry {self.host} needs a username and "
                               f"password; add them to {self._files[0] if self._files else 'registries.json'})")
        header = "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
        if header == current:
            raise Unauthorized(f"unauthorized: access denied (registry {self.host} refused the configured "
                               "username and password)")
        return header

    def _fetch_token(self, challenge: Challenge) -> str:
        headers: dict[str, str] = {}
        if self.host in SIGNING_HOSTS:
            from ollama_py.store import signing

            url = token_url(challenge, ts=int(time.time()),
                            nonce=base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("="))
            if urlsplit(url).hostname != urlsplit(f"https://{self.host}").hostname:
                raise Unauthorized(f"unauthorized: token realm {urlsplit(url).netloc} is not {self.host}")
            key = signing.load_or_create_key(self._key_path or signing.DEFAULT_KEY)
            headers["Authorization"] = signing.token_request_authorization(key, url)
            return self._request_token(url, headers)
        url = token_url(challenge)
        if self._targets is not None:
            try:
                self._targets.check(url, "token request")
            except RegistryError as e:
                raise Unauthorized(f"unauthorized: {e}") from None
        creds = load_credentials(self.host, self._files)
        if creds is not None:
            headers["Authorization"] = "Basic " + base64.b64encode(f"{creds[0]}:{creds[1]}".encode()).decode()
        return self._request_token(url, headers)

    def _request_token(self, url: str, headers: dict[str, str]) -> str:
        try:
            resp = self._session.get(url, headers=headers, timeout=self._timeout, stream=True,
                                     allow_redirects=False)
        except requests.RequestException as e:
            refused = refusal(e)
            if refused is not None:
                raise Unauthorized(f"unauthorized: {refused}") from None
            raise Unauthorized(f"unauthorized: token request to {urlsplit(url).netloc} failed: {e}") from None
        with resp:
            if resp.status_code in (401, 403):
                raise Unauthorized(self._refused_message())
            if resp.status_code >= 300:
                raise Unauthorized(f"unauthorized: token request failed: {resp.status_code} {reason(resp.status_code)}")
            try:
                body = json.loads(read_body(resp, MAX_TOKEN_BYTES, "token server's answer",
                                           deadline=2 * self._timeout))
            except RegistryError as e:
                raise Unauthorized(f"unauthorized: {e}") from None
            except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as e:
                raise Unauthorized(f"unauthorized: token request to {urlsplit(url).netloc} failed: {e}") from None
            except (ValueError, RecursionError):
                raise Unauthorized("unauthorized: the token server's answer is not JSON") from None
        token = body.get("token") or body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise Unauthorized("unauthorized: the token server's answer has no token")
        return token

    def _refused_message(self) -> str:
        if self.host in SIGNING_HOSTS:
            key = self._key_path or Path("~/.ollama/id_ed25519")
            return (f"unauthorized: access denied ({self.host} refused the token request signed by {key}; "
                    f"add {key}.pub to your account there)")
        return "unauthorized: access denied"
