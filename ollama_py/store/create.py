"""/api/create in the store: turn a create request into blobs and, last of all, a manifest.

    create_model(store, name, req, *, quantizer=None, import_dirs=(), prune=True, converter=None, cancel=None)
        -> Iterator[dict]

The request is checked completely before anything is written: a bad request raises BadRequest (or
ModelNotFound for a missing `from` model) from the call itself, so the server can still answer with a
plain status. The iterator it returns then does the work and yields Ollama's progress objects:

    {"status": "parsing GGUF"}
    {"status": "quantizing F16 model to Q8_0", "digest": "0000000000000000000", "total": N, "completed": M}
    {"status": "quantizing F16 draft model to Q8_0", ...}   with draft_quantize: the DRAFT layer's weights
    {"status": "verifying conversion"}
    {"status": "using existing layer sha256:…"} / {"status": "creating new layer sha256:…"}   per layer
    {"status": "writing manifest"}
    {"status": "success"}

Blobs are written first (each atomically, see blobs.py) and the manifest is put atomically after checking
that every blob it names exists, so a kill -9 at any point leaves either the old manifest or the new one,
never one that points at missing blobs; what an interrupted create wrote is unreferenced and pruned.
Layers are ordered model, adapter, projector, template, system, params, messages, license.

`from` names a stored model, or a GGUF file (or directory of them) on the server only inside the directories the
operator allows (`import_dirs`, OLLAMA_PY_IMPORT_DIRS; none by default), the path resolved with every symlink
followed: as in Ollama, clients upload their files as blobs (`ollama-py create` does) and name them in `files`.
Setting `cancel` (the client hung up) stops a conversion or quantization in progress: its child is killed, its
temp files removed, and the iterator raises RequestCanceled.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import threading
from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ollama_py.api.names import ModelName, parse_name, shard_set
from ollama_py.api.options import DEPRECATED_PARAMETERS, OPTION_TYPES, parse_parameter, validate_options
from ollama_py.errors import (
    BadRequest,
    InvalidModelName,
    InvalidOption,
    ModelNotFound,
    NotFound,
    RequestCanceled,
    TemplateError,
)
from ollama_py.store.blobs import canonical_digest
from ollama_py.store.convert import Converter, HFSource, check_adapter_base, hf_source
from ollama_py.store.gguf_meta import GGUFInfo, file_type_name, read_gguf_info
from ollama_py.store.manifests import (
    CONFIG_V1,
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
    Layer,
    Manifest,
)
from ollama_py.store.models import ModelStore
from ollama_py.store.quantize import Quantizer, normalize_qtype
from ollama_py.template import parse_template
from ollama_py.template.jinja_chat import check_gguf_chat_templates

log = logging.getLogger(__name__)

_RANK = {
    MEDIA_MODEL: 0, MEDIA_ADAPTER: 1, MEDIA_PROJECTOR: 2, MEDIA_DRAFT: 2, MEDIA_TEMPLATE: 3, MEDIA_PROMPT: 3,
    MEDIA_SYSTEM: 4, MEDIA_PARAMS: 5, MEDIA_MESSAGES: 6, MEDIA_LICENSE: 7,
}  # fmt: skip
_WEIGHTS = (MEDIA_MODEL, MEDIA_ADAPTER, MEDIA_PROJECTOR, MEDIA_DRAFT)
_QUANTIZABLE = (0, 1, 32)  # F32, F16, BF16
_PROGRESS_DIGEST = "0000000000000000000"  # Ollama's placeholder: quantizing has no layer digest yet
_MISSING_NAMED = 10  # an incomplete split's error names this many missing shards, then counts the rest
_CONFIG_KEYS = ("model_format", "model_family", "model_families", "model_type", "file_type", "renderer",
                "parser", "requires", "remote_host", "remote_model", "capabilities", "context_length",
                "embedding_length", "base_name")


@dataclass(slots=True)
class _Weights:
    """One GGUF layer of the new model: already a blob (digest) or a server-side file still to copy in."""

    media_type: str
    info: GGUFInfo
    digest: str | None = None
    path: Path | None = None
    from_: str | None = None
    convert: HFSource | None = None  # Hugging Face files still to convert (store/convert.py)


@dataclass(slots=True)
class _Plan:
    name: ModelName
    weights: list[_Weights]
    kept: list[Layer]  # layers reused as they are from the `from` model
    base_config: dict[str, Any]
    base_params: dict[str, Any]
    quantize: str | None
    template: str | None
    system: str | None
    params: dict[str, Any]
    messages: list[dict[str, Any]] | None
    licenses: list[str]
    extra_config: dict[str, Any] = field(default_factory=dict)
    draft_quantize: str | None = None  # the DRAFT's weights quantized to this (Ollama's draft_quantize)


def create_model(store: ModelStore, name: ModelName, req: dict, *, quantizer: Quantizer | None = None,
                 import_dirs: Sequence[Path] = (), prune: bool = True, converter: Converter | None = None,
                 cancel: threading.Event | None = None) -> Iterator[dict]:
    """Check `req` (raising before anything is written), then return the iterator that creates the model."""
    plan = _plan(store, name, req, import_dirs, converter)
    if (plan.quantize is not None or plan.draft_quantize is not None) and quantizer is None:
        raise BadRequest("quantization is not available: llama-quantize was not found")
    return _execute(store, plan, quantizer, prune, cancel)


# -- checking the request -------------------------------------------------------------------------------


def _plan(store: ModelStore, name: ModelName, req: dict, import_dirs: Sequence[Path],
          converter: Converter | None = None) -> _Plan:
    if not isinstance(req, dict):
        raise BadRequest("invalid create request")
    files = _digest_map(req, "files")
    adapters = _digest_map(req, "adapters")
    source = _opt_str(req, "from")
    qtype = _opt_str(req, "quantize") or _opt_str(req, "quantization")
    quantize = normalize_qtype(qtype) if qtype else None

    weights: list[_Weights] = []
    kept: list[Layer] = []
    base_config: dict[str, Any] = {}
    base_params: dict[str, Any] = {}
    if source:
        base = _base_model(store, source)
        if base is not None:
            base_name, manifest = base
            base_config = store.read_config(manifest)
            for layer in manifest.layers:
                layer = Layer(layer.media_type, layer.digest, layer.size, base_name.short, layer.name)
                if layer.media_type in _WEIGHTS:
                    weights.append(_Weights(layer.media_type, _base_info(store, layer), layer.digest,
                                            from_=base_name.short))
                else:
                    kept.append(layer)
                if layer.media_type == MEDIA_PARAMS:
                    loaded = _load_json(store, layer.digest)
                    base_params = loaded if isinstance(loaded, dict) else {}
        elif (path := Path(source).expanduser()).is_absolute():
            path = allowed_path(path, import_dirs, source)
            if path.is_file():
                info = _file_info(path)
                weights.append(_Weights(_media_type(info), info, path=path))
                if info.split is not None:  # one shard named: the others beside it (model-0000N-of-0000M.gguf)
                    for sibling in sibling_shards(path):
                        sibling = allowed_path(sibling, import_dirs, str(sibling))
                        weights.append(_Weights(MEDIA_MODEL, _file_info(sibling), path=sibling))
            elif path.is_dir():
                for found in _ggufs_in(path):
                    found = allowed_path(found, import_dirs, str(found))
                    info = _file_info(found)
                    weights.append(_Weights(_media_type(info), info, path=found))
            else:
                raise BadRequest(f"from: no such file or directory on the server: {_shown(source)}")
        else:
            parsed = parse_name(source)  # InvalidModelName for anything that is neither name nor file
            raise ModelNotFound(parsed.short)
    elif files and (hf := hf_source(store, files, converter)) is not None:
        weights.append(_Weights(MEDIA_MODEL, GGUFInfo({}), convert=hf))
    elif files:
        for filename in sorted(files):
            info = _blob_info(store, files[filename])
            weights.append(_Weights(_media_type(info), info, files[filename]))
    else:
        raise BadRequest("neither 'from' or 'files' was specified")

    if adapters and (hf := hf_source(store, adapters, converter, adapter=True)) is not None:
        weights.append(_Weights(MEDIA_ADAPTER, GGUFInfo({}), convert=hf))
        adapters = {}
    if len(adapters) > 1:
        raise BadRequest("only one adapter is currently supported")
    for filename in sorted(adapters):
        weights.append(_Weights(MEDIA_ADAPTER, _blob_info(store, adapters[filename]), adapters[filename]))

    drafts = _digest_map(req, "draft_files")
    draft_name = _opt_str(req, "draft")
    if draft_name and not drafts:  # DRAFT naming a stored model: its weights
        draft_base = _base_model(store, draft_name)
        if draft_base is None:
            raise ModelNotFound(draft_name[:200])
        draft_layers = draft_base[1].layers_of(MEDIA_MODEL)
        if not draft_layers:
            raise BadRequest(f"draft model '{draft_name}' has no weights")
        drafts = {"draft.gguf": draft_layers[0].digest}
    if len(drafts) > 1:
        raise BadRequest("only one draft model file is supported")
    for filename in drafts:  # a DRAFT replaces the draft a `from` model had
        info = _blob_info(store, drafts[filename])
        if info.is_adapter or info.is_projector:
            raise BadRequest("the draft model must be a model GGUF, not an adapter or projector")
        weights = [w for w in weights if w.media_type != MEDIA_DRAFT]
        weights.append(_Weights(MEDIA_DRAFT, info, drafts[filename]))

    models = [w for w in weights if w.media_type == MEDIA_MODEL]
    if not models:
        raise BadRequest("no model file was provided")
    if len(models) > 1 or models[0].info.split is not None:  # a split GGUF's shards, as layers in shard order
        models = _shards_in_order(models)
        weights = [*models, *(w for w in weights if w.media_type != MEDIA_MODEL)]
        if quantize is not None:
            raise BadRequest("quantizing a split GGUF model is not supported: quantize its shards' source, or merge "
                             "them first (llama-gguf-split --merge)")
    if models[0].convert is None and any(w.convert is not None for w in weights):
        check_adapter_base(models[0].info)  # a safetensors adapter on a GGUF base
    if quantize is not None and models[0].convert is None and models[0].info.file_type not in _QUANTIZABLE:
        raise BadRequest("quantization is only supported for F16, BF16 and F32 models")
    draft_qtype = _opt_str(req, "draft_quantize")
    draft_quantize = normalize_qtype(draft_qtype) if draft_qtype else None
    if draft_quantize is not None:
        draft = next((w for w in weights if w.media_type == MEDIA_DRAFT), None)
        if draft is None:  # Ollama's words (its CLI flag's name, from the API too)
            raise BadRequest("--draft-quantize requires a DRAFT model")
        if draft.info.file_type not in _QUANTIZABLE and file_type_name(draft.info.file_type) != draft_quantize:
            raise BadRequest("draft quantization is only supported for F16, BF16 and F32 draft models")

    extra_config = {key: req[key] for key in ("renderer", "parser", "requires") if isinstance(req.get(key), str)
                    and req[key]}
    template = _opt_str(req, "template") or None
    if template is not None:
        try:  # as Ollama does: a template that does not parse is refused here, not at the first chat
            parse_template(template)
        except TemplateError as e:
            raise BadRequest(f"template error: {e}") from None
    # llama-server applies the GGUF's own chat template at load: one that loops or explodes is refused here, by a
    # bounded render in our sandbox, before any runner runs it (issue 34)
    check_gguf_chat_templates(models[0].info.kv)
    return _Plan(
        name=name, weights=weights, kept=kept, base_config=base_config, base_params=base_params,
        quantize=quantize, template=template, system=_opt_str(req, "system") or None,
        params=_parameters(req.get("parameters")), messages=_messages(req.get("messages")),
        licenses=_licenses(req.get("license")), extra_config=extra_config, draft_quantize=draft_quantize,
    )


def allowed_path(path: Path, import_dirs: Sequence[Path], given: str) -> Path:
    """`path` with every symlink resolved, when that lies inside one of the operator's import directories (each
    resolved too); BadRequest naming the setting otherwise, the same whether or not the path exists."""
    real = Path(os.path.realpath(path))
    for directory in import_dirs:
        if real.is_relative_to(os.path.realpath(directory)):
            return real
    where = "none are allowed here" if not import_dirs else "this one is outside the directories allowed"
    raise BadRequest(f"from: {_shown(given)} is a path on the server, and {where} (OLLAMA_PY_IMPORT_DIRS): upload "
                     "the file as a blob (POST /api/blobs/:digest) and name it in files; ollama-py create does this "
                     "for a FROM path")


def _shown(text: str) -> str:
    """Client text quoted in an error, cut short: an error never echoes a large request back."""
    return repr(text if len(text) <= 200 else text[:200] + "...")


def _base_model(store: ModelStore, source: str) -> tuple[ModelName, Manifest] | None:
    try:
        parsed = parse_name(source)
    except InvalidModelName:
        return None
    stored = store.manifests.resolve(parsed)
    if stored is None:
        return None
    return stored, store.manifests.get(stored)


def _digest_map(req: dict, key: str) -> dict[str, str]:
    raw = req.get(key)
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in raw.items()):
        raise BadRequest(f"{key} must be an object of file names to digests")
    for filename, digest in raw.items():
        if not _is_relative_path(filename):
            raise BadRequest("file path must be relative")
        canonical_digest(digest)  # BadRequest("invalid digest format")
    return dict(raw)


def _is_relative_path(path: str) -> bool:
    """Go's fs.ValidPath, minus "." and Windows separators: a/b.gguf yes; /a, ../a, a//b, C:\\a no."""
    if not path or path == "." or "\\" in path or ":" in path or "\0" in path:
        return False
    return all(part not in ("", ".", "..") for part in path.split("/"))


def _blob_info(store: ModelStore, digest: str) -> GGUFInfo:
    try:
        return store.blob_info(digest)
    except NotFound:  # 404, as HEAD /api/blobs/<digest> says (Ollama: a 500 with the open error)
        raise NotFound(f"blob {canonical_digest(digest)} not found") from None
    except BadRequest as e:
        raise _not_gguf(e) from None


def _base_info(store: ModelStore, layer: Layer) -> GGUFInfo:
    """The header of a reused weights layer. Only the model's matters (quantizing, the config); an adapter or
    projector we cannot read is carried over as it is."""
    if layer.media_type == MEDIA_MODEL:
        return _blob_info(store, layer.digest)
    try:
        return _blob_info(store, layer.digest)
    except BadRequest:
        return GGUFInfo({})


def sibling_shards(path: Path) -> list[Path]:
    """The other shards of a split GGUF beside `path`, by llama.cpp's naming (NAME-00002-of-00003.gguf)."""
    names = shard_set(path.name) or []
    return [path.with_name(n) for n in names if n != path.name and path.with_name(n).is_file()]


def _shards_in_order(models: list[_Weights]) -> list[_Weights]:
    """Several model files are one model only as every shard of one split GGUF (its split.no/split.count
    metadata): returned in shard order, the first carrying the whole model's tensor table."""
    splits = [(m.info.split, m) for m in models]
    shards = [(split, m) for split, m in splits if split is not None]
    if len(shards) < len(splits):
        raise BadRequest("more than one model file: give one GGUF, or every shard of one split GGUF")
    count = shards[0][0][1]
    have = sorted(no for (no, _), _m in shards)
    if have != list(range(count)) or any(c != count for (_, c), _m in shards):
        missing = sorted(set(range(count)) - set(have))
        named = ", ".join(str(i + 1) for i in missing[:_MISSING_NAMED])
        if len(missing) > _MISSING_NAMED:  # one short line, however many shards the header claims
            named += f" and {len(missing) - _MISSING_NAMED} more"
        detail = f"missing {named} of {count}" if missing else "shards of two models"
        raise BadRequest(f"incomplete split GGUF model: {detail}")
    ordered = [m for _split, m in sorted(shards, key=lambda pair: pair[0][0])]
    ordered[0].info = ordered[0].info.with_shards([m.info for m in ordered[1:]])
    return ordered


def _file_info(path: Path) -> GGUFInfo:
    try:
        return read_gguf_info(path)
    except BadRequest as e:
        raise _not_gguf(e) from None
    except OSError as e:
        raise BadRequest(f"cannot read {path}: {e.strerror}") from None


def _ggufs_in(directory: Path) -> list[Path]:
    """The GGUF files of a server-side FROM directory, as Ollama finds them: *.gguf, else *.bin files that are
    GGUFs by their magic (a GGUF saved as model.bin). BadRequest when the directory holds no model."""
    def is_gguf(path: Path) -> bool:
        try:
            with path.open("rb") as f:
                return f.read(4) == b"GGUF"
        except OSError:
            return False

    for pattern in ("*.gguf", "*.bin"):
        found = sorted(p for p in directory.glob(pattern) if p.is_file() and is_gguf(p))
        if found:
            return found
    raise BadRequest(f"no model found in {directory.name or directory}: the directory holds no GGUF file "
                     "(*.gguf, or a GGUF named *.bin)")


def _not_gguf(e: BadRequest) -> BadRequest:
    """Ollama's words for a file that is not a GGUF at all; the reader's reason for one whose header it refuses
    (a count that cannot fit, arrays nested too deep), which says more than "not in GGUF format"."""
    if str(e).startswith("invalid GGUF file"):
        return BadRequest(f"supplied file was not in GGUF format: {str(e).removeprefix('invalid GGUF file: ')}")
    return BadRequest("supplied file was not in GGUF format")


def _media_type(info: GGUFInfo) -> str:
    if info.is_adapter:
        return MEDIA_ADAPTER
    if info.is_projector:
        return MEDIA_PROJECTOR
    return MEDIA_MODEL


def _opt_str(req: dict, key: str) -> str:
    value = req.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRequest(f'json: cannot unmarshal {type(value).__name__} into field "{key}" of type string')
    return value


def _parameters(raw: object) -> dict[str, Any]:
    """PARAMETERs as typed values: strings (from a Modelfile) parsed, JSON values checked; stop a list."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise BadRequest("parameters must be an object")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        if value is None or key in DEPRECATED_PARAMETERS:
            continue
        kind = OPTION_TYPES.get(key)
        if kind is None:
            raise InvalidOption(f"unknown parameter '{key}'")
        if kind is list:
            values = value if isinstance(value, list) else [value]
            if not all(isinstance(v, str) for v in values):
                raise InvalidOption(f'option "{key}" must be of an array of strings')
            out[key] = list(values)
        elif isinstance(value, str) and kind is not str:
            parsed = parse_parameter(key, value)
            if parsed is not None:
                out[key] = parsed
        else:
            out.update(validate_options({key: value}, per_request=False))
    return out


def _messages(raw: object) -> list[dict[str, Any]] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise BadRequest("messages must be an array")
    out: list[dict[str, Any]] = []
    for message in raw:
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                and isinstance(message.get("content", ""), str)):
            raise BadRequest("each message needs a role and a content string")
        out.append({"role": message["role"], "content": message.get("content", ""),
                    **{k: v for k, v in message.items() if k not in ("role", "content") and v}})
    return out or None


def _licenses(raw: object) -> list[str]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [raw] if raw else []
    if isinstance(raw, list) and all(isinstance(v, str) for v in raw):
        return [v for v in raw if v]
    raise BadRequest(f"unknown license type: {type(raw).__name__}")


def _load_json(store: ModelStore, digest: str) -> Any:
    try:
        return json.loads(store.blobs.path(digest).read_bytes())
    except (OSError, ValueError):
        return None


# -- doing it -----------------------------------------------------------------------------------------


def _execute(store: ModelStore, plan: _Plan, quantizer: Quantizer | None, prune: bool,
             cancel: threading.Event | None = None) -> Iterator[dict]:
    new_blobs: set[str] = set()  # written by this create: the status says "creating new layer"
    layers: list[Layer] = []

    def check_cancel() -> None:
        if cancel is not None and cancel.is_set():
            raise RequestCanceled()

    for w in plan.weights:
        check_cancel()
        if w.convert is not None:  # the model comes before its adapter: an adapter converts against it
            model = next(m for m in plan.weights if m.media_type == MEDIA_MODEL)
            base = model.convert if model is not w else None
            blobs_before = store.blobs.digests()
            w.digest = yield from w.convert.convert(store, base=base, base_info=None if base else model.info,
                                                    cancel=cancel)
            if canonical_digest(w.digest) not in blobs_before:
                new_blobs.add(canonical_digest(w.digest))
            w.info = store.blob_info(w.digest)
            continue
        if w.digest is None:
            assert w.path is not None
            yield {"status": "copying file"}
            existed = _exists_file_blob(store, w.path)
            w.digest, _size = store.blobs.write_file(w.path)
            if not existed:
                new_blobs.add(w.digest)
        if w.from_ is None:
            yield {"status": "parsing GGUF"}

    for w in plan.weights:
        check_cancel()
        assert w.digest is not None
        want = {MEDIA_MODEL: plan.quantize, MEDIA_DRAFT: plan.draft_quantize}.get(w.media_type)
        if want is not None:
            have = file_type_name(w.info.file_type)
            if have != want:
                assert quantizer is not None
                src = store.blobs.path(w.digest)
                what = "draft model" if w.media_type == MEDIA_DRAFT else "model"
                out = yield from _run_quantizer(quantizer, src, store.blobs.dir, want,
                                                f"quantizing {have} {what} to {want}", src.stat().st_size, cancel)
                yield {"status": "verifying conversion"}
                existed_before = _exists_file_blob(store, out)
                w.digest, _size = store.blobs.move_in(out)
                if not existed_before:
                    new_blobs.add(w.digest)
                w.info = store.blob_info(w.digest)
                w.from_ = None
        layers.append(Layer(w.media_type, w.digest, store.blobs.size(w.digest), w.from_))

    check_cancel()  # the last point where the client's going away leaves the store as it was
    kept = list(plan.kept)

    def small(media_type: str, data: bytes) -> None:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        if not store.blobs.exists(digest):
            new_blobs.add(digest)
        store.blobs.write_bytes(data)
        layers.append(Layer(media_type, digest, len(data)))

    if plan.template is not None:
        kept = [layer for layer in kept if layer.media_type not in (MEDIA_TEMPLATE, MEDIA_PROMPT)]
        small(MEDIA_TEMPLATE, plan.template.encode())
    if plan.system is not None:
        kept = [layer for layer in kept if layer.media_type != MEDIA_SYSTEM]
        small(MEDIA_SYSTEM, plan.system.encode())
    if plan.params:
        kept = [layer for layer in kept if layer.media_type != MEDIA_PARAMS]
        small(MEDIA_PARAMS, _go_json({**plan.base_params, **plan.params}, sort_keys=True))
    if plan.messages is not None:
        kept = [layer for layer in kept if layer.media_type != MEDIA_MESSAGES]
        small(MEDIA_MESSAGES, _go_json(plan.messages))
    for text in plan.licenses:
        small(MEDIA_LICENSE, text.encode())
    layers.extend(kept)

    layers = _dedupe(sorted(layers, key=lambda layer: _RANK.get(layer.media_type, len(_RANK))))
    config_data = _go_json(_config(plan, layers))
    config_digest, config_size = store.blobs.write_bytes(config_data)
    config_layer = Layer(CONFIG_V1, config_digest, config_size)

    for layer in layers:
        verb = "creating new" if canonical_digest(layer.digest) in new_blobs else "using existing"
        yield {"status": f"{verb} layer {layer.digest}"}

    yield {"status": "writing manifest"}
    manifest = Manifest.build(config_layer, layers)
    with store.lock:
        try:
            old: Manifest | None = store.manifests.get(plan.name)
        except ModelNotFound:
            old = None
        store.put_manifest(plan.name, manifest)
        if prune and old is not None:
            # The layers the name used to point at and no longer does go, unless another model shares them.
            store.remove_unreferenced(old.digests() - manifest.digests())
    yield {"status": "success"}


def _exists_file_blob(store: ModelStore, path: Path) -> bool:
    with path.open("rb") as f:
        return store.blobs.exists("sha256:" + hashlib.file_digest(f, "sha256").hexdigest())


def _dedupe(layers: list[Layer]) -> list[Layer]:
    seen: set[tuple[str, str]] = set()
    out: list[Layer] = []
    for layer in layers:
        key = (layer.media_type, canonical_digest(layer.digest))
        if key not in seen:
            seen.add(key)
            out.append(layer)
    return out


def _config(plan: _Plan, layers: list[Layer]) -> dict[str, Any]:
    """The image-v1 config blob (model.ConfigV2), keys in Ollama's order."""
    model = next(w for w in plan.weights if w.media_type == MEDIA_MODEL)
    families = [model.info.architecture]
    for w in plan.weights:
        if w.media_type == MEDIA_PROJECTOR and w.info.architecture and w.info.architecture not in families:
            families.append(w.info.architecture)
    values: dict[str, Any] = {**plan.base_config, **plan.extra_config}
    values.update(
        model_format="gguf",
        model_family=model.info.architecture,
        model_families=families,
        model_type=model.info.parameter_size,
        file_type=model.info.quantization_level,
    )
    config: dict[str, Any] = {key: values[key] for key in _CONFIG_KEYS if key in values}
    for key, value in values.items():  # anything newer a base model's config carried
        if key not in config and key not in ("architecture", "os", "rootfs"):
            config[key] = value
    config["architecture"] = values.get("architecture") or "amd64"
    config["os"] = values.get("os") or "linux"
    config["rootfs"] = {"type": "layers", "diff_ids": [layer.digest for layer in layers]}
    return config


def _go_json(obj: Any, *, sort_keys: bool = False) -> bytes:
    """JSON as Go's json.Encoder writes it: compact, with a trailing newline."""
    return (json.dumps(obj, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys) + "\n").encode()


def _run_quantizer(quantizer: Quantizer, src: Path, dst_dir: Path, qtype: str, status: str, total: int,
                   cancel: threading.Event | None = None) -> Generator[dict, None, Path]:
    """Run the quantizer in a thread, yielding its progress; returns the output path (via `yield from`). The
    tool stops at its next line once this generator is closed or `cancel` is set."""
    events: queue.Queue[tuple[int, int] | None] = queue.Queue()
    cancelled = threading.Event()
    result: dict[str, Any] = {}

    def progress(done: int, count: int) -> None:
        if cancelled.is_set():
            raise RequestCanceled()
        events.put((done, count))

    def work() -> None:
        try:
            result["path"] = quantizer(src, dst_dir, qtype, progress)
        except BaseException as e:  # handed to the generator's thread
            result["error"] = e
        finally:
            events.put(None)

    thread = threading.Thread(target=work, name="quantize", daemon=True)
    thread.start()
    try:
        while True:
            try:
                event = events.get(timeout=0.25)
            except queue.Empty:
                if cancel is not None and cancel.is_set():
                    raise RequestCanceled() from None
                continue
            if event is None:
                break
            done, count = event
            yield {"status": status, "digest": _PROGRESS_DIGEST, "total": total, "completed": total * done // count}
            if cancel is not None and cancel.is_set():
                raise RequestCanceled()
    except BaseException:  # the client went away (GeneratorExit): stop the tool, drop its output
        cancelled.set()
        thread.join()
        if "path" in result:
            Path(result["path"]).unlink(missing_ok=True)
        raise
    thread.join()
    if "error" in result:
        raise result["error"]
    return result["path"]


__all__ = ["create_model", "Quantizer"]
