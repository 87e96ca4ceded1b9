"""What `create` uploads from a FROM/ADAPTER directory: Ollama's gathering rules (client/model_files.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ollama_py.client.model_files import gather_model_files
from ollama_py.errors import OllamaError

SAFETENSORS = b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "
GGUF = b"GGUF\x03\x00\x00\x00" + b"\x00" * 16
ZIP = b"PK\x03\x04" + b"\x00" * 16


def layout(root: Path, files: dict[str, bytes | str]) -> Path:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
    return root


def names(root: Path) -> list[str]:
    return [name for name, _ in gather_model_files(root)]


HF_CONFIGS = {"config.json": "{}", "tokenizer_config.json": "{}", "generation_config.json": "{}",
              "chat_template.jinja": "{{ messages }}"}


@pytest.mark.parametrize(("files", "expected"), [
    pytest.param({"model.safetensors": SAFETENSORS, **HF_CONFIGS, "tokenizer.model": b"spm", "README.md": "hi"},
                 ["model.safetensors", "config.json", "generation_config.json", "tokenizer_config.json",
                  "chat_template.jinja", "tokenizer.model"], id="safetensors-with-configs-and-template"),
    pytest.param({"model-00001-of-00002.safetensors": SAFETENSORS, "model-00002-of-00002.safetensors": SAFETENSORS,
                  "consolidated.safetensors": SAFETENSORS, "model.safetensors.index.json": "{}",
                  "config.json": "{}", "tokenizer.json": "{}", "tokenizer.model": b"spm"},
                 ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors", "config.json",
                  "model.safetensors.index.json", "tokenizer.json"], id="shards-over-consolidated-tokenizer-json-wins"),
    pytest.param({"adapter_model.safetensors": SAFETENSORS, "adapter_config.json": "{}"},
                 ["adapter_model.safetensors", "adapter_config.json"], id="lora-adapter"),
    pytest.param({"pytorch_model.bin": ZIP, "config.json": "{}", "tokenizer.model": b"spm"},
                 ["pytorch_model.bin", "config.json", "tokenizer.model"], id="pytorch-checkpoint"),
    pytest.param({"consolidated.00.pth": ZIP, "params.json": "{}"}, ["consolidated.00.pth", "params.json"],
                 id="consolidated-pth"),
    pytest.param({"model.gguf": GGUF, "mmproj.gguf": GGUF, "config.json": "{}"}, ["mmproj.gguf", "model.gguf"],
                 id="gguf-files-alone"),
    pytest.param({"model.bin": GGUF, "notes.bin": b"not a gguf"}, ["model.bin"], id="gguf-named-bin"),
    pytest.param({"model.safetensors": SAFETENSORS, "modules.json": "[]", "config.json": "{}",
                  "1_Pooling/config.json": "{}", "2_Dense/config.json": "{}", "2_Dense/model.safetensors": SAFETENSORS,
                  "tokenizer.json": "{}"},
                 ["model.safetensors", "config.json", "modules.json", "tokenizer.json", "1_Pooling/config.json",
                  "2_Dense/config.json", "2_Dense/model.safetensors"], id="sentence-transformers-dense-layers"),
    pytest.param({"model.safetensors": SAFETENSORS, "config.json": "{}", "original/tokenizer.model": b"spm"},
                 ["model.safetensors", "config.json", "original/tokenizer.model"], id="tokenizer-model-one-level-down"),
])
def test_gathered_files(tmp_path: Path, files: dict[str, bytes | str], expected: list[str]) -> None:
    assert names(layout(tmp_path, files)) == expected


def test_a_directory_without_weights_says_so(tmp_path: Path) -> None:
    layout(tmp_path, {"config.json": "{}", "tokenizer.json": "{}"})
    with pytest.raises(OllamaError, match="no model files found in"):
        gather_model_files(tmp_path)


def test_a_git_lfs_pointer_is_not_uploaded_as_weights(tmp_path: Path) -> None:
    layout(tmp_path, {"model.safetensors": "version https://git-lfs.github.com/spec/v1\noid sha256:00\n",
                      "config.json": "{}"})
    with pytest.raises(OllamaError, match="is a Git LFS pointer, not the weights: run `git lfs pull` first"):
        gather_model_files(tmp_path)
