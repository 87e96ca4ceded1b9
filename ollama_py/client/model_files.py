"""Which files of a model directory a create request uploads: Ollama's client-side rules (parser.filesForModel).

    gather_model_files(directory) -> list[(name, path)]     names are POSIX paths relative to the directory

The weights, first kind found wins:
    model*.safetensors            model.safetensors, model-00001-of-00002.safetensors: preferred over the
                                  consolidated.safetensors many repositories also ship (the same weights in
                                  Mistral's layout, which would be uploaded and converted twice)
    adapters.safetensors, adapter_model.safetensors     a LoRA adapter directory
    *.safetensors                 any other safetensors
    pytorch_model*.bin            PyTorch checkpoints (converted where llama.cpp's converter reads them)
    consolidated*.pth
    *.gguf
    *.bin                         a GGUF file named .bin (checked by its magic)
then the configuration beside them: *.json (config.json, tokenizer.json, tokenizer_config.json,
generation_config.json, adapter_config.json, ...) and one directory down (sentence-transformers' 1_Pooling/,
2_Dense/config.json), *.jinja (chat_template.jinja), the safetensors of Dense modules one directory down for
embedding models, and tokenizer.model unless a tokenizer.json is there (or one directory down, as in
meta-llama/Meta-Llama-3-8B's original/). A Git LFS pointer where weights should be is an error that says so.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ollama_py.errors import OllamaError

_LFS_POINTER = b"version https://git-lfs"
_GGUF_MAGIC = b"GGUF"
_ZIP_MAGIC = b"PK\x03\x04"  # torch.save's format


def _head(path: Path, n: int) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(n)
    except OSError:
        return b""


def _glob(directory: Path, pattern: str) -> list[Path]:
    return sorted(p for p in directory.glob(pattern) if p.is_file())


def _is_gguf(path: Path) -> bool:
    return _head(path, 4) == _GGUF_MAGIC


def _is_zip(path: Path) -> bool:
    return _head(path, 4) == _ZIP_MAGIC


def _weights(directory: Path) -> list[Path]:
    is_gguf, is_zip = _is_gguf, _is_zip
    candidates: tuple[tuple[str, Callable[[Path], bool] | None], ...] = (
        ("model*.safetensors", None), ("adapters.safetensors", None), ("adapter_model.safetensors", None),
        ("*.safetensors", None), ("pytorch_model*.bin", is_zip), ("adapter_model.bin", is_zip),
        ("consolidated*.pth", is_zip), ("*.gguf", None), ("*.bin", is_gguf),
    )
    for pattern, check in candidates:
        found = _glob(directory, pattern)
        for path in found:
            if _head(path, len(_LFS_POINTER)) == _LFS_POINTER:
                raise OllamaError(f"{path} is a Git LFS pointer, not the weights: run `git lfs pull` first")
        if check is not None:
            found = [p for p in found if check(p)]
        if found:
            return found
    return []


def gather_model_files(directory: Path) -> list[tuple[str, Path]]:
    """The files to upload for the model (or adapter) in `directory`; OllamaError when it holds no weights."""
    directory = Path(directory)
    weights = _weights(directory)
    if not weights:
        raise OllamaError(f"no model files found in {directory}: expected *.safetensors, pytorch_model*.bin, "
                          "consolidated*.pth or *.gguf")
    files = list(weights)
    if not _is_gguf(weights[0]):
        files += _glob(directory, "*.json") + _glob(directory, "*/*.json") + _glob(directory, "*.jinja")
        if (directory / "modules.json").is_file():  # sentence-transformers: its Dense layers' weights
            files += _glob(directory, "*_Dense/*.safetensors")
        if not any(p.name == "tokenizer.json" for p in files):
            files += _glob(directory, "tokenizer.model") or _glob(directory, "*/tokenizer.model")
    seen: set[Path] = set()
    out: list[tuple[str, Path]] = []
    for path in files:
        if path not in seen:
            seen.add(path)
            out.append((path.relative_to(directory).as_posix(), path))
    return out
