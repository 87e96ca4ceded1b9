"""Manifests: what a model name points at, stored as Ollama stores them.

    OLLAMA_MODELS/manifests/<host>/<namespace>/<model>/<tag>

Each file is a Docker distribution v2 manifest (written compact, with a trailing newline, as Go's
json.Encoder does) whose config is the image-v1 JSON blob and whose layers are blobs with
application/vnd.ollama.image.* media types. The manifest's digest is the sha256 of the file's bytes.
Writes go to a dot-named temp file beside the target and are renamed into place, so a name either points
at a complete manifest or at nothing. Lookups of existing names ignore case, like Ollama's.
"""

from __future__ import annotations

import builtins
import contextlib
import hashlib
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ollama_py.api.names import ModelName, parse_name
from ollama_py.errors import InvalidModelName, ModelNotFound, OllamaError
from ollama_py.store.blobs import canonical_digest

log = logging.getLogger(__name__)

MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_V1 = "application/vnd.docker.container.image.v1+json"

MEDIA_MODEL = "application/vnd.ollama.image.model"
MEDIA_ADAPTER = "application/vnd.ollama.image.adapter"
MEDIA_PROJECTOR = "application/vnd.ollama.image.projector"
MEDIA_DRAFT = "application/vnd.ollama.image.draft"  # the speculative-decoding draft model (Modelfile DRAFT)
MEDIA_TEMPLATE = "application/vnd.ollama.image.template"
MEDIA_PROMPT = "application/vnd.ollama.image.prompt"  # the legacy name of the template layer
MEDIA_SYSTEM = "application/vnd.ollama.image.system"
MEDIA_PARAMS = "application/vnd.ollama.image.params"
MEDIA_MESSAGES = "application/vnd.ollama.image.messages"
MEDIA_LICENSE = "application/vnd.ollama.image.license"

_TEMP_PREFIX = ".tmp-"  # a tag cannot start with ".", so a temp file is never mistaken for a manifest


class InvalidManifest(OllamaError):
    """A manifest file that is not a v2 manifest we can read (500: the store, not the request, is wrong)."""


def _dumps(obj: Any) -> bytes:
    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=False) + "\n").encode()


@dataclass(frozen=True, slots=True)
class Layer:
    media_type: str
    digest: str
    size: int
    from_: str | None = None
    name: str | None = None  # Ollama's safetensors layers carry one; kept so a round trip loses nothing

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mediaType": self.media_type, "digest": self.digest, "size": self.size}
        if self.from_:
            out["from"] = self.from_
        if self.name:
            out["name"] = self.name
        return out

    @classmethod
    def from_json(cls, obj: object) -> Layer:
        if not isinstance(obj, dict):
            raise InvalidManifest("invalid manifest: a layer is not an object")
        media_type, digest, size = obj.get("mediaType"), obj.get("digest"), obj.get("size")
        if not isinstance(media_type, str) or not isinstance(digest, str):
            raise InvalidManifest("invalid manifest: a layer lacks mediaType or digest")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise InvalidManifest(f"invalid manifest: bad size for layer {digest}")
        try:
            canonical_digest(digest)
        except OllamaError:
            raise InvalidManifest(f"invalid manifest: bad digest {digest!r}") from None
        from_, name = obj.get("from"), obj.get("name")
        return cls(media_type, digest, size, from_ if isinstance(from_, str) else None,
                   name if isinstance(name, str) else None)


@dataclass(frozen=True)
class Manifest:
    config: Layer
    layers: tuple[Layer, ...]
    raw: bytes
    digest: str  # "sha256:" + sha256(raw)

    @classmethod
    def build(cls, config: Layer, layers: tuple[Layer, ...] | list[Layer]) -> Manifest:
        layers = tuple(layers)
        raw = _dumps({
            "schemaVersion": 2,
            "mediaType": MANIFEST_V2,
            "config": config.to_json(),
            "layers": [layer.to_json() for layer in layers],
        })
        return cls(config, layers, raw, "sha256:" + hashlib.sha256(raw).hexdigest())

    @classmethod
    def parse(cls, raw: bytes) -> Manifest:
        try:
            obj = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise InvalidManifest(f"invalid manifest: {e}") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("layers", []), list):
            raise InvalidManifest("invalid manifest: not a v2 image manifest")
        if "config" not in obj:
            raise InvalidManifest("invalid manifest: no config")
        config = Layer.from_json(obj["config"])
        layers = tuple(Layer.from_json(layer) for layer in obj.get("layers") or [])
        return cls(config, layers, bytes(raw), "sha256:" + hashlib.sha256(raw).hexdigest())

    def layers_of(self, media_type: str) -> list[Layer]:
        return [layer for layer in self.layers if layer.media_type == media_type]

    def digests(self) -> set[str]:
        """Config and layer digests, canonical ("sha256:<lowercase hex>")."""
        return {canonical_digest(layer.digest) for layer in (self.config, *self.layers)}

    @property
    def size(self) -> int:
        """What Ollama reports as a model's size: every layer plus the config."""
        return self.config.size + sum(layer.size for layer in self.layers)


class ManifestStore:
    """The manifests directory of one store root."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.dir = self.root / "manifests"

    def path(self, name: ModelName) -> Path:
        """The file for exactly this name (its case as given). Refuses anything that would leave the store."""
        parts = name.parts
        for part in parts:
            if not part or part in (".", "..") or "/" in part or "\\" in part or "\0" in part:
                raise InvalidModelName()
        path = self.dir.joinpath(*parts)
        base = self.dir.resolve()
        if not path.resolve().is_relative_to(base) or path.resolve() == base:
            raise InvalidModelName()
        return path

    def resolve(self, name: ModelName) -> ModelName | None:
        """The stored name that matches `name` ignoring case (with its stored case), or None."""
        exact = self.path(name)
        if exact.is_file():
            return name
        found = _find_ignoring_case(self.dir, name.parts)
        if found is None:
            return None
        host, namespace, model, tag = found
        return ModelName(host, namespace, model, tag, name.scheme)

    def get(self, name: ModelName) -> Manifest:
        stored = self.resolve(name)
        if stored is None:
            raise ModelNotFound(name.short)
        try:
            return Manifest.parse(self.path(stored).read_bytes())
        except FileNotFoundError:  # deleted between resolve and read
            raise ModelNotFound(name.short) from None

    def mtime(self, name: ModelName) -> float:
        stored = self.resolve(name)
        if stored is None:
            raise ModelNotFound(name.short)
        return self.path(stored).stat().st_mtime

    def put(self, name: ModelName, manifest: Manifest) -> ModelName:
        """Point `name` (or the existing name it matches ignoring case) at `manifest`, atomically."""
        target_name = self.resolve(name) or name
        target = self.path(target_name)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=_TEMP_PREFIX, dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(manifest.raw)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp_name, 0o644)
            os.replace(tmp_name, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp_name)
        with contextlib.suppress(OSError):
            dir_fd = os.open(target.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        return target_name

    def delete(self, name: ModelName) -> ModelName:
        """Remove the name (ModelNotFound when absent) and any directories it leaves empty."""
        stored = self.resolve(name)
        if stored is None:
            raise ModelNotFound(name.short)
        path = self.path(stored)
        try:
            path.unlink()
        except FileNotFoundError:
            raise ModelNotFound(name.short) from None
        parent = path.parent
        while parent != self.dir and parent.is_relative_to(self.dir):
            try:
                parent.rmdir()
            except OSError:  # not empty (or gone): stop climbing
                break
            parent = parent.parent
        return stored

    def list(self) -> list[tuple[ModelName, Manifest, float]]:
        """Every readable manifest with its name and mtime; unreadable ones are logged and skipped."""
        out: list[tuple[ModelName, Manifest, float]] = []
        for name, path in self._walk():
            try:
                raw = path.read_bytes()
                mtime = path.stat().st_mtime
                out.append((name, Manifest.parse(raw), mtime))
            except FileNotFoundError:
                continue
            except InvalidManifest as e:
                log.warning("skipping manifest %s: %s", path, e)
        return out

    def referenced_digests(self) -> set[str]:
        """Config and layer digests of every manifest. Raises InvalidManifest if any manifest is unreadable,
        so that callers deleting blobs never act on a partial picture."""
        refs: set[str] = set()
        for _name, path in self._walk():
            try:
                raw = path.read_bytes()
            except FileNotFoundError:
                continue
            try:
                refs |= Manifest.parse(raw).digests()
            except InvalidManifest as e:
                raise InvalidManifest(f"{path}: {e}") from None
        return refs

    def remove_stale_temp(self) -> builtins.list[Path]:  # builtins: `list` here is the method above
        """Temp files an interrupted put() left behind (start-up only: a live put may own one)."""
        removed: list[Path] = []
        if not self.dir.is_dir():
            return removed
        for dirpath, _dirs, files in os.walk(self.dir):
            for f in files:
                if f.startswith(_TEMP_PREFIX):
                    p = Path(dirpath) / f
                    p.unlink(missing_ok=True)
                    removed.append(p)
        return removed

    def _walk(self) -> Iterator[tuple[ModelName, Path]]:
        """(name, path) for each file exactly four levels down whose path spells a valid model name."""
        if not self.dir.is_dir():
            return
        for host in _subdirs(self.dir):
            for namespace in _subdirs(host):
                for model in _subdirs(namespace):
                    for tag in _entries(model):
                        if not tag.is_file() or tag.name.startswith(_TEMP_PREFIX):
                            continue
                        try:
                            name = parse_name(f"{host.name}/{namespace.name}/{model.name}:{tag.name}")
                        except InvalidModelName:
                            log.debug("ignoring %s: not a model name", tag.path)
                            continue
                        if name.parts != (host.name, namespace.name, model.name, tag.name):
                            continue
                        yield name, Path(tag.path)


def _entries(path: Path | os.DirEntry[str]) -> list[os.DirEntry[str]]:
    """A directory's entries; none when it vanished since its parent was listed (a concurrent delete removes
    the directories it empties), so a walk never fails on what another request just removed."""
    try:
        with os.scandir(path) as it:
            return list(it)
    except (FileNotFoundError, NotADirectoryError):
        return []


def _subdirs(path: Path | os.DirEntry) -> list[os.DirEntry]:
    return [e for e in _entries(path) if e.is_dir(follow_symlinks=False)]


def _find_ignoring_case(directory: Path, parts: tuple[str, ...]) -> list[str] | None:
    """The stored spelling of a path below `directory` that matches `parts` ignoring case (a file at the end)."""
    if not parts:
        return [] if directory.is_file() else None
    try:
        entries = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return None
    low = parts[0].lower()
    # The exact spelling first, then the others in a stable order, so a lookup always lands on the same file.
    candidates = sorted((e for e in entries if e.lower() == low and not e.startswith(_TEMP_PREFIX)),
                        key=lambda e: (e != parts[0], e))
    for entry in candidates:
        rest = _find_ignoring_case(directory / entry, parts[1:])
        if rest is not None:
            return [entry, *rest]
    return None
