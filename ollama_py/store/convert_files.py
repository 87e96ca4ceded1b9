"""Which of a create request's Hugging Face files reach the converter, and how they are laid out for it.

    converter_files(files) -> (kept, dropped)      {name: digest} split by the gathering rules below
    stage(store, files, into) -> Staged            the kept files under their names in `into`

Only data the conversion reads is staged, never code. The rules are Ollama's client-side gathering
(parser.filesForModel), which is all an `ollama create` ever uploads, plus what our own client gathers
(client/model_files.py) and a few tokenizer data files llama.cpp's converter reads:

    top level           *.safetensors, pytorch_model*.bin, adapter_model.bin, consolidated*.pth   (weights)
                        *.json, *.jinja, tokenizer.model
                        merges.txt, vocab.txt, spiece.model, sentencepiece.bpe.model, tokenizer.model.v3
    one directory down  model*.safetensors (Ollama's nested weights; sentence-transformers' N_Dense/),
                        *.json (1_Pooling/config.json, ...), tokenizer.model (Meta's original/)

Anything else (a `.py`, a `.so`, a pickled training_args.bin, a deeper path) is dropped with a warning: Ollama
accepts such files and its converter never reads them; ours would, through transformers' `auto_map`.

JSON files are copied, not linked, with every `auto_map` key removed, so transformers never even sees a pointer
to model code; the other files are symlinks to their blobs. A JSON file over _MAX_JSON_BYTES or one that does not
parse is a BadRequest: the converter reads each whole.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath
from typing import Any

from ollama_py.errors import BadRequest
from ollama_py.store.models import ModelStore

log = logging.getLogger(__name__)

_TOP_LEVEL = ("*.safetensors", "pytorch_model*.bin", "adapter_model.bin", "consolidated*.pth", "*.json", "*.jinja",
              "tokenizer.model", "merges.txt", "vocab.txt", "spiece.model", "sentencepiece.bpe.model",
              "tokenizer.model.v3")
_NESTED = ("model*.safetensors", "*.json", "tokenizer.model")
_MAX_JSON_BYTES = 256 << 20  # the largest tokenizer.json files are ~35 MB
_REMOTE_CODE_KEY = "auto_map"


def is_converter_file(name: str) -> bool:
    """Whether a file of this (relative, POSIX) name reaches the converter."""
    parts = PurePosixPath(name).parts
    if len(parts) == 1:
        return any(fnmatchcase(parts[0], pattern) for pattern in _TOP_LEVEL)
    if len(parts) == 2:
        return any(fnmatchcase(parts[1], pattern) for pattern in _NESTED)
    return False


def converter_files(files: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """(the files the converter gets, the names dropped), by the rules in the module doc."""
    kept = {name: digest for name, digest in files.items() if is_converter_file(name)}
    dropped = sorted(name for name in files if name not in kept)
    if dropped:
        log.warning("create: not given to the converter (never model code, only the files it reads): %s",
                    ", ".join(dropped[:20]) + (f" and {len(dropped) - 20} more" if len(dropped) > 20 else ""))
    return kept, dropped


@dataclass(frozen=True, slots=True)
class Staged:
    """A staged model directory, and the JSON files an `auto_map` (model code the converter will not run) was
    removed from: a conversion that fails without that code says so."""

    path: Path
    remote_code: tuple[str, ...] = ()


def read_json(store: ModelStore, digest: str, name: str) -> Any:
    """A JSON blob's value; BadRequest when it is too large or not JSON."""
    path = store.blobs.path(digest)
    try:
        if path.stat().st_size > _MAX_JSON_BYTES:
            raise BadRequest(f"{name} is larger than {_MAX_JSON_BYTES >> 20} MiB: not a model's JSON file")
        return json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError) as e:
        raise BadRequest(f"{name} is not valid JSON: {str(e)[:200]}") from None


def _without_remote_code(value: Any) -> tuple[Any, bool]:
    """`value` with every auto_map key removed, at any depth (a composite config nests its parts' configs)."""
    if isinstance(value, dict):
        removed = _REMOTE_CODE_KEY in value
        out = {}
        for key, item in value.items():
            if key == _REMOTE_CODE_KEY:
                continue
            out[key], inner = _without_remote_code(item)
            removed = removed or inner
        return out, removed
    if isinstance(value, list):
        pairs = [_without_remote_code(item) for item in value]
        return [item for item, _ in pairs], any(inner for _, inner in pairs)
    return value, False


def stage(store: ModelStore, files: Mapping[str, str], into: Path) -> Staged:
    """Lay the converter's files out in `into` under their names (checked relative, no `..`, by the caller)."""
    into.mkdir(parents=True, exist_ok=True)
    remote_code: list[str] = []
    for name, digest in files.items():
        rel = PurePosixPath(name)
        if rel.is_absolute() or ".." in rel.parts or not is_converter_file(name):
            raise BadRequest(f"file {name!r} is not one the converter reads")
        target = into.joinpath(*rel.parts)
        target.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".json"):
            value, removed = _without_remote_code(read_json(store, digest, name))
            if removed:
                remote_code.append(name)
                log.warning("create: %s names model code (auto_map); removed, the converter never runs it", name)
                target.write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")
            else:
                target.write_bytes(store.blobs.path(digest).read_bytes())
        else:
            os.symlink(store.blobs.path(digest), target)
    return Staged(into, tuple(sorted(remote_code)))


__all__ = ["Staged", "converter_files", "is_converter_file", "read_json", "stage"]
