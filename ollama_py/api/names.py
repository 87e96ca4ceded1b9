"""Model names, as a value.

Grammar (Ollama's types/model/name.go):

    name      := [scheme "://"] [host "/"] [namespace "/"] model [":" tag] ["@" digest]
    host      := part with "." and ":" allowed            1..350 chars
    namespace := part                                    1..80
    model     := part with "." allowed                    1..80
    tag       := part with "." allowed                    1..80
    part      := [A-Za-z0-9_] [A-Za-z0-9_.-]*

The tag is split at the last ":" only when it comes after the last "/"; the rest is split on "/" from
the right. Missing parts take the defaults registry.ollama.ai / library / latest (scheme https).
Anything else — "..", empty parts, absolute paths, backslashes — is not a name: InvalidModelName.
Lookups of existing names are case-insensitive (the store's job); the value keeps the user's case.

A reference may end in a source suffix (Ollama's internal/modelref): `name:cloud` or `name:tag-cloud` asks for
the cloud model `name` / `name:tag`, `name:local` for the local one -- parse_ref splits it off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ollama_py.errors import BadRequest, InvalidModelName
from ollama_py.memo import Memo

DEFAULT_HOST = "registry.ollama.ai"
DEFAULT_NAMESPACE = "library"
DEFAULT_TAG = "latest"

_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*\Z")
_HOST = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-:]*\Z")
_DIGEST = re.compile(r"sha256[:-][0-9a-fA-F]{64}\Z")


@dataclass(frozen=True, slots=True)
class ModelName:
    host: str
    namespace: str
    model: str
    tag: str
    scheme: str = "https"

    def __str__(self) -> str:
        return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"

    @property
    def short(self) -> str:
        """The shortest display form: drops the default host and the library namespace (llama3.2:latest)."""
        if self.host.lower() != DEFAULT_HOST:
            return f"{self.host}/{self.namespace}/{self.model}:{self.tag}"
        if self.namespace.lower() != DEFAULT_NAMESPACE:
            return f"{self.namespace}/{self.model}:{self.tag}"
        return f"{self.model}:{self.tag}"

    @property
    def parts(self) -> tuple[str, str, str, str]:
        """Path components below manifests/."""
        return (self.host, self.namespace, self.model, self.tag)

    @property
    def repository(self) -> str:
        return f"{self.namespace}/{self.model}"

    def key(self) -> tuple[str, str, str, str]:
        """Case-insensitive identity."""
        return (self.host.lower(), self.namespace.lower(), self.model.lower(), self.tag.lower())


def parse_name(raw: str) -> ModelName:
    """Parse and validate a model name, filling defaults. Raises InvalidModelName."""
    return _PARSED(raw) if type(raw) is str else _parse(raw)


def _parse(raw: str) -> ModelName:
    if not isinstance(raw, str):
        raise InvalidModelName()
    s = raw.strip()
    scheme = "https"
    if "://" in s:
        scheme, _, s = s.partition("://")
        if scheme not in ("http", "https"):
            raise InvalidModelName()
    if "@" in s:
        s, _, digest = s.partition("@")
        if not _DIGEST.match(digest):
            raise InvalidModelName()
    tag = DEFAULT_TAG
    colon, slash = s.rfind(":"), s.rfind("/")
    if colon > slash:
        s, tag = s[:colon], s[colon + 1 :]
    pieces = s.split("/")
    if len(pieces) > 3 or not s:
        raise InvalidModelName()
    model = pieces[-1]
    namespace = pieces[-2] if len(pieces) >= 2 else DEFAULT_NAMESPACE
    host = pieces[-3] if len(pieces) == 3 else DEFAULT_HOST
    ok = (
        1 <= len(host) <= 350 and _HOST.match(host)
        and 1 <= len(namespace) <= 80 and _PART.match(namespace) and "." not in namespace
        and 1 <= len(model) <= 80 and _PART.match(model)
        and 1 <= len(tag) <= 80 and _PART.match(tag)
    )
    if not ok or any(p in (".", "..") or p.startswith("..") for p in (host, namespace, model, tag)):
        raise InvalidModelName()
    return ModelName(host, namespace, model, tag, scheme)


# parse_name's answers (a ModelName is immutable): every request names its model
_PARSED: Memo[str, ModelName] = Memo(_parse, 4096)


CLOUD, LOCAL = "cloud", "local"


@dataclass(frozen=True, slots=True)
class ModelRef:
    """A model reference as a client wrote it: the name without its source suffix, and the source asked for
    (CLOUD, LOCAL, or "" when the reference says neither)."""

    base: str
    source: str


def parse_ref(raw: str) -> ModelRef:
    """Split a reference's source suffix off, as Ollama reads it (the base is not checked: parse_name does
    that). Both sources at once (`x:cloud:local`) is a 400."""
    raw = raw.strip()
    base, source = _source_suffix(raw)
    if source and _source_suffix(base)[1]:
        quoted = raw.replace("\\", "\\\\").replace('"', '\\"')
        raise BadRequest(f'use either :local or :cloud, not both: "{quoted}"')
    return ModelRef(base, source)


def _source_suffix(raw: str) -> tuple[str, str]:
    colon = raw.rfind(":")
    if colon < 0:
        return raw, ""
    tail = raw[colon + 1:].strip()
    lowered = tail.lower()
    if lowered in (CLOUD, LOCAL):
        return raw[:colon], lowered
    if "/" not in tail and lowered.endswith("-cloud"):  # name:tag-cloud, the older way to say name:tag:cloud
        return raw[: colon + 1] + tail[: -len("-cloud")], CLOUD
    return raw, ""


def stored_ref(raw: str) -> str:
    """The name under which a pull or a delete finds a reference's model: a cloud model's stub is stored under
    the older suffix (`name:tag:cloud` -> `name:tag-cloud`, `name:cloud` as it is); `:local` is dropped."""
    ref = parse_ref(raw)
    if ref.source != CLOUD:
        return ref.base
    colon, slash = ref.base.rfind(":"), ref.base.rfind("/")
    return ref.base + "-cloud" if colon > slash else ref.base + ":cloud"


def is_valid_digest(digest: str) -> bool:
    return isinstance(digest, str) and bool(_DIGEST.match(digest))


# A split GGUF's file names, as llama.cpp's gguf-split writes them and finds them: NAME-00001-of-00003.gguf ...
_SHARD_FILE = re.compile(r"(.+)-(\d{5})-of-(\d{5})\.gguf")


def shard_file_names(prefix: str, count: int) -> list[str]:
    """Every file name of a split GGUF, in order."""
    return [f"{prefix}-{i:05d}-of-{count:05d}.gguf" for i in range(1, count + 1)]


def shard_set(file_name: str) -> list[str] | None:
    """The file names of the split GGUF that `file_name` is a shard of (itself among them), else None."""
    m = _SHARD_FILE.fullmatch(file_name)
    if m is None or not 1 <= int(m.group(2)) <= int(m.group(3)):
        return None
    return shard_file_names(m.group(1), int(m.group(3)))
