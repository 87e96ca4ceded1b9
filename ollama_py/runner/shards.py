"""A split GGUF as llama-server opens it: given the first shard's path, llama.cpp finds the others by their names
(NAME-00002-of-00003.gguf beside NAME-00001-of-00003.gguf), but the store keeps each shard as a blob named by its
digest. `link_shards` makes a directory of symlinks with the names llama.cpp expects, once per model, and returns
the first one's path; it is swapped in atomically, so two loads at once agree on it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ollama_py.api.names import shard_file_names


def _is_linked(directory: Path, names: list[str], shards: Sequence[Path]) -> bool:
    try:
        return all(os.readlink(directory / name) == str(shard) for name, shard in zip(names, shards, strict=True))
    except OSError:
        return False


def link_shards(shards: Sequence[Path], links_root: Path) -> Path:
    """(Blocking.) The path to start llama-server with for these shards (absolute blob paths, in order)."""
    shards = [Path(s).absolute() for s in shards]
    names = shard_file_names("model", len(shards))
    directory = links_root / shards[0].name.removeprefix("sha256-")[:32]
    if _is_linked(directory, names, shards):
        return directory / names[0]
    links_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=links_root, prefix=".tmp-"))
    try:
        for name, shard in zip(names, shards, strict=True):
            os.symlink(shard, tmp / name)
        if directory.exists() and not _is_linked(directory, names, shards):
            shutil.rmtree(directory, ignore_errors=True)  # stale (a blob store moved): made again
        try:
            os.rename(tmp, directory)
        except OSError:  # another load made it first
            if not _is_linked(directory, names, shards):
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return directory / names[0]
