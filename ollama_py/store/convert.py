"""Hugging Face model directories in /api/create: checked, staged and converted by llama.cpp's own converter.

    find_converter(runners_dir) -> Converter | None     runners/convert/, installed by scripts/build_runners.sh
    hf_source(store, files, converter, adapter=...) -> HFSource | None
        None when `files` is a GGUF; else the checked source, or BadRequest before anything is written:
        no converter, missing packages, no config.json, no weights, a Git LFS pointer, an unknown architecture.
    source.convert(store, base=...) -> Generator[dict, None, str]    yields progress, returns the new blob digest

The converter is `convert_hf_to_gguf.py` (or `convert_lora_to_gguf.py` for a PEFT LoRA adapter) from the same
pinned llama.cpp source the runners are built from, run with this Python (it needs the `convert` extra: torch,
transformers, safetensors, sentencepiece). No code that came with the model ever runs (issue 34):

- only the files the conversion reads are staged (convert_files.py: Ollama's gathering rules; never a `.py`),
  JSON files copied with their `auto_map` (transformers' pointer to model code) removed;
- the converter runs as an isolated child (convert_sandbox.py + convert_bootstrap.py): its own workspace as cwd,
  HOME and TMPDIR, a reduced environment, no network, resource limits, OLLAMA_PY_CONVERT_TIMEOUT, remote code
  off in transformers whatever the converter asks, and no module loaded from the workspace or a temp directory.
  A model whose tokenizer or config needs its own code is a 400 that says so. (Pickled weights are safe too: the
  converter loads PyTorch files with torch.load(weights_only=True), which refuses anything but tensors.)

The GGUF is written to a temp file in the blobs directory (sha256-tmp-convert-*: what a start-up prune removes) and
moved in under its digest only when the converter succeeded, so a failure, a crash, a timeout or a client that goes
away (`cancel`) leaves no partial blob and no converter running.
"""

from __future__ import annotations

import ast
import collections
import importlib.util
import json
import logging
import os
import re
import sys
import tempfile
import threading
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ollama_py.errors import BadRequest, NotFound, OllamaError
from ollama_py.store.blobs import canonical_digest
from ollama_py.store.convert_bootstrap import REFUSED
from ollama_py.store.convert_files import Staged, converter_files, read_json, stage
from ollama_py.store.convert_sandbox import DEFAULT_TIMEOUT, host_limits, run_isolated
from ollama_py.store.gguf_meta import GGUFInfo
from ollama_py.store.models import ModelStore

log = logging.getLogger(__name__)

CONVERTER_DIR = "convert"
HF_SCRIPT = "convert_hf_to_gguf.py"
LORA_SCRIPT = "convert_lora_to_gguf.py"
REQUIRED_PACKAGES = ("numpy", "torch", "safetensors", "sentencepiece", "transformers")
INSTALL_HINT = "pip install 'ollama-py[convert]'"

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pth", ".pt")
_GGUF_MAGIC = b"GGUF"
_LFS_POINTER = b"version https://git-lfs"
_TQDM_PERCENT = re.compile(r"Writing:\s*(\d+)%")
_UNSUPPORTED = re.compile(r"Model (\S+) is not supported")
_TAIL_LINES = 30


@dataclass(frozen=True, slots=True)
class Converter:
    """Where llama.cpp's converter scripts are, and the Python that runs them."""

    scripts_dir: Path
    python: str = sys.executable
    timeout: float = DEFAULT_TIMEOUT  # seconds one conversion may take (OLLAMA_PY_CONVERT_TIMEOUT)

    def script(self, name: str) -> Path:
        return self.scripts_dir / name


def find_converter(runners_dir: Path, *, timeout: float = DEFAULT_TIMEOUT) -> Converter | None:
    """The converter installed next to the runners (runners/convert/), or None."""
    scripts = Path(runners_dir).absolute() / CONVERTER_DIR
    return Converter(scripts, timeout=timeout) if (scripts / HF_SCRIPT).is_file() else None


def missing_packages() -> list[str]:
    """The converter's Python packages this interpreter lacks (it runs the converter with the same one)."""
    return [name for name in REQUIRED_PACKAGES if importlib.util.find_spec(name) is None]


@lru_cache(maxsize=4)
def known_architectures(scripts_dir: Path) -> frozenset[str]:
    """The Hugging Face architectures (config.json's `architectures`) the converter can convert.

    Read from the source, not by importing it (that takes torch, seconds): the `TEXT_MODEL_MAP` literal of
    conversion/__init__.py in current llama.cpp, or the `@ModelBase.register("...")` names of older trees that
    keep every model in convert_hf_to_gguf.py. Empty when neither is found (the converter then decides)."""
    init = scripts_dir / "conversion" / "__init__.py"
    if init.is_file():
        for node in ast.walk(ast.parse(init.read_text(encoding="utf-8"))):
            target: ast.expr
            value: ast.expr | None
            if isinstance(node, ast.AnnAssign):
                target, value = node.target, node.value
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                target, value = node.targets[0], node.value
            else:
                continue
            if isinstance(target, ast.Name) and target.id == "TEXT_MODEL_MAP" and value is not None:
                try:
                    return frozenset(ast.literal_eval(value))
                except ValueError:
                    break
    names: set[str] = set()
    sources = [scripts_dir / HF_SCRIPT, *sorted((scripts_dir / "conversion").glob("*.py"))]
    for source in sources:
        try:
            text = source.read_text(encoding="utf-8")
        except OSError:
            continue
        for args in re.findall(r"@ModelBase\.register\(([^)]*)\)", text):
            names.update(re.findall(r"\"([A-Za-z0-9_]+)\"", args))
    return frozenset(names)


@dataclass(frozen=True, slots=True)
class HFSource:
    """A checked Hugging Face model (or PEFT LoRA adapter) given as {file name: blob digest}."""

    files: Mapping[str, str]
    converter: Converter
    adapter: bool
    architecture: str  # config.json's architectures[0]; "" for an adapter

    def convert(self, store: ModelStore, *, base: HFSource | None = None, base_info: GGUFInfo | None = None,
                cancel: threading.Event | None = None) -> Generator[dict, None, str]:
        """Convert into a new blob, yielding progress; returns its digest. An adapter is converted against
        `base` (the model's own Hugging Face files) or, failing that, a config.json made from `base_info`.
        RequestCanceled (the converter killed, nothing kept) once `cancel` is set."""
        with tempfile.TemporaryDirectory(prefix="ollama-convert-") as tmp:
            work = Path(tmp)
            staged = stage(store, self.files, work / "src")
            src = staged.path
            script: list[str]
            if self.adapter:
                base_dir = work / "base"
                if base is not None:
                    stage(store, {n: d for n, d in base.files.items() if _is_config(n)}, base_dir)
                else:
                    _write_base_config(base_dir, base_info)
                script = [str(self.converter.script(LORA_SCRIPT)), "--base", str(base_dir), "--outtype", "f16"]
            else:
                script = [str(self.converter.script(HF_SCRIPT)), "--outtype", "auto"]
                if (src / "modules.json").is_file() and any((src / d).is_dir() for d in _dense_dirs(src)):
                    script.append("--sentence-transformers-dense-modules")
            fd, out_name = tempfile.mkstemp(prefix="sha256-tmp-convert-", suffix=".gguf", dir=store.blobs.dir)
            os.close(fd)
            out = Path(out_name)
            script += ["--outfile", str(out), str(src)]
            inputs = sum(store.blobs.size(d) for d in self.files.values())
            try:
                yield {"status": "converting adapter" if self.adapter else "converting model"}
                _run(self.converter, script, work, inputs, self.architecture, staged, cancel)
                if out.stat().st_size == 0:
                    raise OllamaError("converting model failed: the converter wrote nothing")
                digest, _size = store.blobs.move_in(out)
                return digest
            finally:
                out.unlink(missing_ok=True)


def hf_source(store: ModelStore, files: Mapping[str, str], converter: Converter | None, *,
              adapter: bool = False) -> HFSource | None:
    """None when `files` is a GGUF model (or has no weights that need converting); else the checked source."""
    if not files or not _needs_conversion(store, files):
        return None
    files, _dropped = converter_files(files)  # never a .py: only what the conversion reads
    what = "adapter" if adapter else "model"
    if converter is None:
        raise BadRequest(f"converting a safetensors {what} is not available here: llama.cpp's converter was not "
                         "found next to the runners (scripts/build_runners.sh installs it in runners/convert)")
    missing = missing_packages()
    if missing:
        raise BadRequest(f"converting a safetensors {what} needs the Python packages {', '.join(missing)}: "
                         f"{INSTALL_HINT}")
    for digest in files.values():
        if not store.blobs.exists(digest):
            raise BadRequest(f"blob {canonical_digest(digest)} not found")
    config_name = "adapter_config.json" if adapter else "config.json"
    if config_name not in files:
        raise BadRequest(f"{config_name} is missing: a safetensors {what} directory needs its {config_name}")
    weights = [n for n in files if _is_weights(n) and "/" not in n]
    if not weights:
        raise BadRequest(f"no {what} weights were found: the directory needs *.safetensors "
                         "(or pytorch_model*.bin) files beside its config.json")
    for name in weights:
        if _head(store, files[name], len(_LFS_POINTER)) == _LFS_POINTER:
            raise BadRequest(f"{name} is a Git LFS pointer, not the weights: fetch it with `git lfs pull`")
    config = _json_blob(store, files[config_name], config_name)
    if adapter:
        if config.get("peft_type", "LORA") != "LORA":
            raise BadRequest(f"unsupported adapter type {str(config.get('peft_type'))[:100]!r}: only LoRA adapters "
                             "convert")
        return HFSource(dict(files), converter, True, "")
    architectures = config.get("architectures")
    if not (isinstance(architectures, list) and architectures and isinstance(architectures[0], str)):
        raise BadRequest("config.json names no architecture (\"architectures\" is missing)")
    architecture = architectures[0]
    known = known_architectures(converter.scripts_dir)
    if known and architecture not in known:
        raise BadRequest(f'unsupported architecture "{architecture[:200]}"')  # never a client's megabytes back
    return HFSource(dict(files), converter, False, architecture)


# -- checking ------------------------------------------------------------------------------------------------


def _is_weights(name: str) -> bool:
    return name.lower().endswith(_WEIGHT_SUFFIXES)


def _is_config(name: str) -> bool:
    return name.endswith(".json") and "/" not in name


def _needs_conversion(store: ModelStore, files: Mapping[str, str]) -> bool:
    """Safetensors or PyTorch weights (Ollama's rule: a `.bin` that holds a GGUF is a GGUF), or a Hugging Face
    config without any GGUF beside it (a directory whose weights are missing: refused with its reason)."""
    if any(name.lower().endswith(".gguf") for name in files):
        return False
    for name, digest in files.items():
        if _is_weights(name) and _head(store, digest, 4) != _GGUF_MAGIC:
            return True
    return any(name in ("config.json", "adapter_config.json") for name in files)


def _head(store: ModelStore, digest: str, n: int) -> bytes:
    try:
        with store.blobs.path(digest).open("rb") as f:
            return f.read(n)
    except (OSError, NotFound, ValueError):
        return b""


def _json_blob(store: ModelStore, digest: str, name: str) -> dict[str, Any]:
    value = read_json(store, digest, name)
    if not isinstance(value, dict):
        raise BadRequest(f"{name} is not a JSON object")
    return value


def _dense_dirs(src: Path) -> list[str]:
    """sentence-transformers' Dense modules (2_Dense, ...) that modules.json lists."""
    try:
        modules = json.loads((src / "modules.json").read_text())
    except (OSError, ValueError, RecursionError):
        return []
    return [m["path"] for m in modules if isinstance(m, dict) and "Dense" in str(m.get("type", ""))
            and isinstance(m.get("path"), str)]


# -- doing -----------------------------------------------------------------------------------------------------


# What a LoRA conversion needs of its base: the config.json of the model it was trained on. Made from the base
# GGUF's metadata where the mapping is plain (the llama-like families); other bases need their HF files.
_HF_ARCH = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
            "mistral": "MistralForCausalLM"}


def check_adapter_base(info: GGUFInfo) -> None:
    """BadRequest unless a LoRA's base given as a GGUF (a model in the store) is one whose config.json can be made
    from its metadata; a base given as Hugging Face files in the same create always does."""
    if info.architecture not in _HF_ARCH:
        raise BadRequest("converting a safetensors adapter needs its base model's config.json: create it FROM the "
                         "base model's Hugging Face directory, with the ADAPTER line (the base's architecture "
                         f"{info.architecture or 'unknown'!r} has no config.json of its own)")


def _write_base_config(base_dir: Path, info: GGUFInfo | None) -> None:
    if info is None:
        raise BadRequest("converting a safetensors adapter needs its base model")
    check_adapter_base(info)
    arch = info.architecture

    def kv(key: str, default: object = None) -> object:
        return info.kv.get(f"{arch}.{key}", default)

    vocab = info.kv.get("tokenizer.ggml.tokens")
    config = {
        "architectures": [_HF_ARCH[arch]], "model_type": arch,
        "hidden_size": kv("embedding_length"), "num_hidden_layers": kv("block_count"),
        "num_attention_heads": kv("attention.head_count"),
        "num_key_value_heads": kv("attention.head_count_kv", kv("attention.head_count")),
        "intermediate_size": kv("feed_forward_length"), "max_position_embeddings": kv("context_length"),
        "rms_norm_eps": kv("attention.layer_norm_rms_epsilon", 1e-6), "rope_theta": kv("rope.freq_base", 10000.0),
        "vocab_size": len(vocab) if isinstance(vocab, list) else kv("vocab_size"),
    }
    base_dir.mkdir(parents=True, exist_ok=True)
    (base_dir / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))


def _run(converter: Converter, script: list[str], work: Path, inputs: int, architecture: str, staged: Staged,
         cancel: threading.Event | None) -> None:
    """Run the converter fenced in (convert_sandbox.py) until it ends, `cancel` is set (RequestCanceled) or its
    timeout passes; raise with its own words on failure. Its tqdm bar ("Writing: NN%") goes to the debug log: one
    "converting model" line is what Ollama shows, and a bar here would share the quantizer's placeholder digest in
    the CLI's view."""
    tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
    lines = run_isolated(script, python=converter.python, scripts_dir=converter.scripts_dir, workspace=work,
                         limits=host_limits(inputs, converter.timeout), timeout=converter.timeout, cancel=cancel)
    try:
        while True:
            try:
                line = next(lines)
            except StopIteration as done:
                rc = done.value
                break
            if _TQDM_PERCENT.search(line) is None:
                tail.append(line)
            log.debug("converter: %s", line)
    finally:
        lines.close()  # the child is killed if still running
    if rc != 0:
        raise _failure(rc, list(tail), architecture, staged.remote_code)


def _failure(rc: int, tail: list[str], architecture: str, remote_code: tuple[str, ...] = ()) -> OllamaError:
    text = "\n".join(tail)
    if (m := _UNSUPPORTED.search(text)) is not None:
        return BadRequest(f'unsupported architecture "{m.group(1) or architecture[:200]}"')
    if remote_code or REFUSED in text or "trust_remote_code" in text:
        where = f" (auto_map in {', '.join(remote_code)})" if remote_code else ""
        return BadRequest(f"this model needs its own Python code{where}, which is never run here: convert it to GGUF "
                          f"where you trust that code, then create from the GGUF ({_last_error(tail)[-300:]})")
    if "Weights only load failed" in text or "UnpicklingError" in text:
        return BadRequest("a PyTorch weights file holds more than tensors (pickled objects that would run code when "
                          "loaded), so it is never loaded: save the weights as safetensors")
    if "ModuleNotFoundError" in text or "ImportError" in text:
        missing = [line for line in tail if "ModuleNotFoundError" in line or "ImportError" in line]
        return BadRequest(f"the converter could not start ({missing[-1]}): {INSTALL_HINT}")
    return OllamaError(f"converting model failed (exit status {rc}): {_last_error(tail)[-1500:]}")


def _last_error(tail: list[str]) -> str:
    errors = [line for line in tail if line.startswith(("ERROR", "Error")) or "Error:" in line]
    return "; ".join((errors or tail)[-3:])


__all__ = ["Converter", "HFSource", "check_adapter_base", "find_converter", "hf_source", "known_architectures",
           "missing_packages"]
