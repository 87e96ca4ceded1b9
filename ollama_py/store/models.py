"""The model store: names -> manifests -> blobs, read back as Model values; list, copy, delete, prune.

    ModelStore(root)             root = OLLAMA_MODELS (an existing Ollama store works as is)
      .blobs / .manifests        the two halves (store/blobs.py, store/manifests.py)
      .load(name) -> Model       a manifest and its small layers (template, system, params, ...)
      .list_models()             the /api/tags entries
      .copy(src, dst)            a second name for the same manifest
      .delete(name)              the manifest, then the blobs no other manifest references
      .prune()                   start-up: unreferenced blobs and stale temp files
      .info(model) -> GGUFInfo   the weights' header, cached by digest

Everything here is blocking file I/O; the server calls it through asyncio.to_thread. `lock` serialises the
steps that must not interleave across threads: writing a manifest (after checking its blobs exist) and
deleting blobs (after checking nothing references them).
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from ollama_py.api.names import ModelName
from ollama_py.api.wire import ListModelResponse, Message, ModelDetails
from ollama_py.errors import ModelNotFound, NotFound, OllamaError
from ollama_py.store.blobs import BlobStore, canonical_digest
from ollama_py.store.gguf_meta import GGUFInfo, read_gguf_info
from ollama_py.store.manifests import (
    MEDIA_ADAPTER,
    MEDIA_DRAFT,
    MEDIA_LICENSE,
    MEDIA_MESSAGES,
    MEDIA_MODEL,
    MEDIA_PARAMS,
    MEDIA_PROJECTOR,
    MEDIA_PROMPT,
    MEDIA_SYSTEM,
    MEDIA_TEMPLATE,
    InvalidManifest,
    Manifest,
    ManifestStore,
)
from ollama_py.template.gemma4 import gemma4_thinks, is_gemma4
from ollama_py.template.harmony import is_harmony
from ollama_py.template.jinja_chat import template_thinks
from ollama_py.template.prompt import template_uses  # which variables a Go template really references

log = logging.getLogger(__name__)

_INFO_CACHE_SIZE = 16



def rfc3339(ts: float) -> str:
    """A timestamp as RFC 3339 in local time with its offset, as Go marshals a time.Time."""
    return dt.datetime.fromtimestamp(ts, dt.UTC).astimezone().isoformat()


@dataclass(frozen=True)
class Model:
    name: ModelName
    manifest: Manifest
    model_path: Path | None
    adapters: tuple[Path, ...]
    projectors: tuple[Path, ...]
    template: str | None
    system: str | None
    params: dict
    messages: list[Message]  # the MESSAGE layer: a conversation every chat starts with
    licenses: list[str]
    config: dict
    modified_at: float
    size: int
    info: GGUFInfo | None = field(default=None, repr=False, compare=False)  # the weights' header
    draft_path: Path | None = None  # the speculative-decoding draft model (a DRAFT layer), if any
    shards: tuple[Path, ...] = ()  # a split GGUF's files in order (model_path is the first); () for one file
    # what the projectors encode ("vision", "audio"), read from their headers; empty when not read: vision
    projector_media: frozenset[str] = frozenset()

    @property
    def digest(self) -> str:
        return self.manifest.digest

    @functools.cached_property
    def prompt_template(self) -> str | None:
        """The Go template prompts are rendered with: the TEMPLATE layer, unless the model names one of Ollama's
        built-in renderers (`RENDERER qwen3-coder`, `qwen3.5`, ...: Ollama renders those in Go code, and their
        TEMPLATE is a `{{ .Prompt }}` stub) and its GGUF carries a chat template, the format those renderers
        reproduce: then None, and the GGUF's own template renders the prompt, as llama-server renders it."""
        renderer = self.config.get("renderer")
        if isinstance(renderer, str) and renderer and self.info is not None and self.info.chat_template:
            return None
        return self.template

    @functools.cached_property
    def harmony(self) -> bool:
        """gpt-oss's harmony format (template/harmony.py): its answers are read as messages on channels, its thinking
        and tool calls from them, whatever its template says of tools or thinking (Ollama's shouldUseHarmony)."""
        family = self.config.get("model_family") or (self.info.architecture if self.info is not None else "")
        template = self.prompt_template
        if template is None and self.info is not None:
            template = self.info.chat_template
        return is_harmony(family if isinstance(family, str) else "", template, self._parser)

    @functools.cached_property
    def gemma4(self) -> bool:
        """Gemma 4's format (template/gemma4.py): thinking on its channel, tool calls in its own syntax, read so
        whatever else its template says (Ollama's `PARSER gemma4`; a GGUF chat template that writes both)."""
        return is_gemma4(self._gguf_template, self._parser)

    @property
    def _gguf_template(self) -> str | None:
        """The GGUF's chat template where it renders the prompts (no Go template), else None."""
        return self.info.chat_template if self.prompt_template is None and self.info is not None else None

    @property
    def _parser(self) -> str | None:
        parser = self.config.get("parser")
        return parser if isinstance(parser, str) else None

    @property
    def parent_model(self) -> str:
        layers = self.manifest.layers_of(MEDIA_MODEL)
        return (layers[0].from_ or "") if layers else ""

    @property
    def capabilities(self) -> list[str]:
        """Ollama's capability names: completion or embedding, vision, audio, tools, insert, thinking; and ours, rerank
        (alone: a reranker's runner answers neither chat nor embeddings), by PARAMETER rerank or else the GGUF.
        Worked out once per Model (the store hands out the same one while its manifest is unchanged; every
        inference request asks): a copy of that each time."""
        return list(self._capabilities)

    @functools.cached_property
    def remote_host(self) -> str:
        """The host a stub of a remote model points at (Ollama's cloud models: a config naming `remote_host` and
        `remote_model`, no weights); "" for a model of our own."""
        host = self.config.get("remote_host")
        return host if isinstance(host, str) else ""

    @functools.cached_property
    def _capabilities(self) -> tuple[str, ...]:
        caps: list[str] = []
        info = self.info
        if self.is_reranker:
            return ("rerank",)
        caps.append("embedding" if info is not None and info.is_embedding else "completion")
        # images come through a projector only: an encoder inside the model file (Ollama's own layout) is left out of
        # the copy llama-server reads (runner/gguf_compat.py), so such a model sees no image here
        media = self.projector_media or (frozenset({"vision"}) if self.projectors else frozenset())
        if "vision" in media:
            caps.append("vision")
        if "audio" in media:
            caps.append("audio")
        if self.prompt_template is not None:
            if template_uses(self.prompt_template, "Tools"):
                caps.append("tools")
            if template_uses(self.prompt_template, "Suffix"):
                caps.append("insert")
            if template_uses(self.prompt_template, "Thinking"):
                caps.append("thinking")
        elif info is not None and info.chat_template:
            # No Go template: llama-server renders the GGUF's own Jinja template, tools included, and thinks where
            # the template says so (Ollama's chatTemplateCapabilities)
            if "tools" in info.chat_template or "tool_call" in info.chat_template:  # chatTemplateHasToolSupport
                caps.append("tools")
            if template_thinks(info.chat_template):
                caps.append("thinking")
        if self.harmony:  # its parser reads thinking and tool calls whatever the template shows
            caps += [c for c in ("tools", "thinking") if c not in caps]
        if self.gemma4:
            caps += [c for c in ("tools", *(("thinking",) if gemma4_thinks(self._gguf_template, self._parser)
                                            else ())) if c not in caps]
        return tuple(caps)

    @functools.cached_property
    def is_reranker(self) -> bool:  # once per Model: the GGUF's answer looks through its tensor table
        said = self.params.get("rerank")
        if isinstance(said, bool):
            return said
        return self.info is not None and self.info.is_reranker

    @property
    def details(self) -> ModelDetails:
        cfg = self.config
        families = cfg.get("model_families")
        return {
            "parent_model": self.parent_model,
            "format": cfg.get("model_format") or "",
            "family": cfg.get("model_family") or "",
            "families": list(families) if isinstance(families, list) else None,
            "parameter_size": cfg.get("model_type") or "",
            "quantization_level": cfg.get("file_type") or "",
        }


class ModelStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.read_only = False  # serve found it unwritable (store/lock.py StoreReadOnly): nothing is pruned
        self.blobs = BlobStore(self.root)
        self.manifests = ManifestStore(self.root)
        self.lock = threading.RLock()
        self._info_cache: OrderedDict[str, GGUFInfo] = OrderedDict()
        self._loaded: dict[tuple[str, str, str, str], tuple[Model, Path, tuple[int, int]]] = {}
        self._info_lock = threading.Lock()

    # -- reading -------------------------------------------------------------------------------------

    def peek(self, name: ModelName) -> Model | None:
        """The model last loaded under this name if its manifest file is unchanged (one stat), else None.

        Cheap enough for the event loop: the inference routes look a model up on every request."""
        hit = self._loaded.get(name.key())
        if hit is None:
            return None
        model, path, stamp = hit
        try:
            st = path.stat()
        except OSError:
            return None
        return model if (st.st_mtime_ns, st.st_ino) == stamp else None

    def load(self, name: ModelName) -> Model:
        """The named model (case-insensitive); ModelNotFound when absent."""
        model = self._load(name)
        path = self.manifests.path(model.name)
        try:
            st = path.stat()
            self._loaded[name.key()] = (model, path, (st.st_mtime_ns, st.st_ino))
        except OSError:
            pass
        return model

    def _load(self, name: ModelName) -> Model:
        stored = self.manifests.resolve(name)
        if stored is None:
            raise ModelNotFound(name.short)
        manifest = self.manifests.get(stored)
        try:
            modified_at = self.manifests.path(stored).stat().st_mtime
        except FileNotFoundError:
            raise ModelNotFound(name.short) from None
        config = self._read_config(manifest)

        model_path: Path | None = None
        shards: list[Path] = []
        draft_path: Path | None = None
        adapters: list[Path] = []
        projectors: list[Path] = []
        template = system = None
        params: dict = {}
        messages: list[Message] = []
        licenses: list[str] = []
        for layer in manifest.layers:
            mt = layer.media_type
            if mt == MEDIA_MODEL:
                shards.append(self.blobs.path(layer.digest))
                if model_path is None:
                    model_path = shards[0]
            elif mt == MEDIA_ADAPTER:
                adapters.append(self.blobs.path(layer.digest))
            elif mt == MEDIA_PROJECTOR:
                projectors.append(self.blobs.path(layer.digest))
            elif mt == MEDIA_DRAFT:
                draft_path = self.blobs.path(layer.digest)
            elif mt in (MEDIA_TEMPLATE, MEDIA_PROMPT):
                template = self._read_text(layer.digest)
            elif mt == MEDIA_SYSTEM:
                system = self._read_text(layer.digest)
            elif mt == MEDIA_PARAMS:
                loaded = self._read_json(layer.digest)
                params = loaded if isinstance(loaded, dict) else {}
            elif mt == MEDIA_MESSAGES:
                loaded = self._read_json(layer.digest)
                found = [m for m in loaded if isinstance(m, dict)] if isinstance(loaded, list) else []
                messages = cast("list[Message]", found)  # Ollama's api.Message objects, as `create` wrote them
            elif mt == MEDIA_LICENSE:
                licenses.append(self._read_text(layer.digest))
        info = self._info_for(model_path) if model_path is not None else None
        if info is not None and len(shards) > 1:  # a split GGUF: its whole tensor table
            infos = [self._info_for(p) for p in shards[1:]]
            info = info.with_shards([i for i in infos if i is not None])
        media: set[str] = set()
        for projector in projectors:
            header = self._info_for(projector)
            media |= header.projector_media if header is not None else {"vision"}
        return Model(
            name=stored, manifest=manifest, model_path=model_path, adapters=tuple(adapters),
            projectors=tuple(projectors), template=template, system=system, params=params,
            messages=messages, licenses=licenses, config=config, modified_at=modified_at,
            size=manifest.size, info=info, draft_path=draft_path, shards=tuple(shards) if len(shards) > 1 else (),
            projector_media=frozenset(media),
        )

    def info(self, model: Model) -> GGUFInfo:
        """The model's GGUF header (cached by blob digest)."""
        if model.info is not None:
            return model.info
        if model.model_path is None:
            raise OllamaError(f"model '{model.name.short}' has no weights")
        info = self._info_for(model.model_path)
        assert info is not None
        return info

    def projector_info(self, model: Model) -> GGUFInfo | None:
        """The model's (first) projector's GGUF header, cached by blob digest; None without one, or unreadable."""
        return self._info_for(model.projectors[0]) if model.projectors else None

    def list_models(self) -> list[ListModelResponse]:
        """The /api/tags entries, most recently modified first."""
        entries: list[tuple[float, ListModelResponse]] = []
        for name, manifest, mtime in self.manifests.list():
            cfg = self._read_config(manifest)
            families = cfg.get("model_families")
            entry: ListModelResponse = {
                "name": name.short,
                "model": name.short,
                "modified_at": rfc3339(mtime),
                "size": manifest.size,
                "digest": manifest.digest.removeprefix("sha256:"),
                "details": {
                    "parent_model": "",
                    "format": cfg.get("model_format") or "",
                    "family": cfg.get("model_family") or "",
                    "families": list(families) if isinstance(families, list) else None,
                    "parameter_size": cfg.get("model_type") or "",
                    "quantization_level": cfg.get("file_type") or "",
                },
            }
            # a stub of a remote model (Ollama's cloud models) says where (omitted otherwise, as Ollama's omitempty)
            if isinstance(cfg.get("remote_model"), str) and cfg["remote_model"]:
                entry["remote_model"] = cfg["remote_model"]
            if isinstance(cfg.get("remote_host"), str) and cfg["remote_host"]:
                entry["remote_host"] = cfg["remote_host"]
            entries.append((mtime, entry))
        entries.sort(key=lambda e: -e[0])
        return [entry for _mtime, entry in entries]

    # -- writing -------------------------------------------------------------------------------------

    def copy(self, src: ModelName, dst: ModelName) -> None:
        """Point `dst` at `src`'s manifest (the same bytes, so the same digest); blobs are shared."""
        try:
            manifest = self.manifests.get(src)
        except ModelNotFound:
            raise ModelNotFound(src.short, message=f'model "{src.short}" not found') from None
        with self.lock:
            self.manifests.put(dst, manifest)

    def put_manifest(self, name: ModelName, manifest: Manifest) -> ModelName:
        """Write a manifest after checking every blob it names is present (under the store lock)."""
        with self.lock:
            missing = sorted(d for d in manifest.digests() if not self.blobs.exists(d))
            if missing:
                raise OllamaError(f"blob {missing[0]} not found; manifest not written")
            return self.manifests.put(name, manifest)

    def only_user(self, name: ModelName, digest: str) -> bool:
        """Whether `name` is the only model that references blob `digest`: deleting it would remove the blob."""
        digest = canonical_digest(digest)
        with self.lock:
            stored = self.manifests.resolve(name)
            return not any(other != stored and digest in {canonical_digest(d) for d in manifest.digests()}
                           for other, manifest, _ in self.manifests.list())

    def delete(self, name: ModelName) -> list[str]:
        """Remove the name, then the blobs only it referenced; returns the removed blob digests."""
        with self.lock:
            manifest = self.manifests.get(name)
            self.manifests.delete(name)
            return self.remove_unreferenced(manifest.digests())

    def remove_unreferenced(self, candidates: set[str]) -> list[str]:
        """Delete those of `candidates` that no manifest references (none at all if a manifest is unreadable)."""
        with self.lock:
            try:
                referenced = self.manifests.referenced_digests()
            except InvalidManifest as e:
                log.warning("keeping blobs: cannot tell what is referenced: %s", e)
                return []
            removed = sorted(canonical_digest(d) for d in candidates)
            removed = [d for d in removed if d not in referenced and self.blobs.exists(d)]
            for digest in removed:
                self.blobs.delete(digest)
                self._forget_info(digest)
            return removed

    def prune(self, *, older_than: float = 0.0) -> list[str]:
        """Clean-up at start (and, with `older_than`, while serving: files modified in the last `older_than`
        seconds are kept): stale manifest temp files, stale blob temp files, unreferenced blobs."""
        with self.lock:
            if not older_than:  # at start only: a put in progress outside the lock may own one
                self.manifests.remove_stale_temp()
            try:
                referenced = self.manifests.referenced_digests()
            except InvalidManifest as e:
                log.warning("not pruning blobs: %s", e)
                return self.blobs.prune(self.blobs.digests(), older_than=older_than)  # temp files only
            return self.blobs.prune(referenced, older_than=older_than)

    # -- helpers -------------------------------------------------------------------------------------

    def read_config(self, manifest: Manifest) -> dict[str, Any]:
        """The manifest's config blob as a dict ({} when missing or unreadable)."""
        return self._read_config(manifest)

    def blob_info(self, digest: str) -> GGUFInfo:
        """The GGUF header of a stored blob (cached); BadRequest when it is not a GGUF, NotFound when absent."""
        path = self.blobs.path(digest)
        key = path.name
        with self._info_lock:
            cached = self._info_cache.get(key)
        if cached is not None:
            return cached
        if not path.is_file():
            raise NotFound(f"blob {canonical_digest(digest)} not found")
        info = read_gguf_info(path)
        self._remember(key, info)
        return info

    def _info_for(self, path: Path) -> GGUFInfo | None:
        key = path.name
        with self._info_lock:
            cached = self._info_cache.get(key)
            if cached is not None:
                self._info_cache.move_to_end(key)
                return cached
        try:
            info = read_gguf_info(path)
        except (OSError, OllamaError) as e:
            log.warning("cannot read GGUF header of %s: %s", path, e)
            return None
        self._remember(key, info)
        return info

    def _remember(self, key: str, info: GGUFInfo) -> None:
        with self._info_lock:
            self._info_cache[key] = info
            while len(self._info_cache) > _INFO_CACHE_SIZE:
                self._info_cache.popitem(last=False)

    def _forget_info(self, digest: str) -> None:
        with self._info_lock:
            self._info_cache.pop(canonical_digest(digest).replace(":", "-", 1), None)

    def _read_config(self, manifest: Manifest) -> dict[str, Any]:
        loaded = self._read_json(manifest.config.digest)
        return loaded if isinstance(loaded, dict) else {}

    def _read_text(self, digest: str) -> str:
        try:
            return self.blobs.path(digest).read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            log.warning("blob %s is missing", digest)
            return ""

    def _read_json(self, digest: str) -> Any:
        try:
            return json.loads(self.blobs.path(digest).read_bytes())
        except FileNotFoundError:
            log.warning("blob %s is missing", digest)
        except ValueError as e:
            log.warning("blob %s is not JSON: %s", digest, e)
        return None
