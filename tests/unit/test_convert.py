"""Checks a create from Hugging Face files makes before anything is written (store/convert.py): which converter
architectures exist, and the 400s. The conversions themselves run in tests/integration/test_hf_import.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ollama_py.api.names import parse_name
from ollama_py.errors import BadRequest
from ollama_py.store.convert import Converter, find_converter, known_architectures
from ollama_py.store.create import create_model
from ollama_py.store.models import ModelStore
from tests.fakes.gguf_files import write_gguf, write_llama_gguf

SAFETENSORS = b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path / "models")


@pytest.fixture
def converter(tmp_path: Path) -> Converter:
    """A converter tree as build_runners.sh installs it (only what is read before running it)."""
    scripts = tmp_path / "runners" / "convert"
    (scripts / "conversion").mkdir(parents=True)
    (scripts / "convert_hf_to_gguf.py").write_text("raise SystemExit('not run in these tests')\n")
    (scripts / "conversion" / "__init__.py").write_text(
        'TEXT_MODEL_MAP: dict[str, str] = {\n    "LlamaForCausalLM": "llama",\n    "Qwen2ForCausalLM": "qwen",\n}\n'
        'MMPROJ_MODEL_MAP: dict[str, str] = {"LlavaForConditionalGeneration": "llava"}\n')
    found = find_converter(tmp_path / "runners")
    assert found is not None
    return found


def files(store: ModelStore, **named: bytes | dict) -> dict[str, str]:
    out = {}
    for name, data in named.items():
        raw = json.dumps(data).encode() if isinstance(data, dict) else data
        out[name.replace("__", ".")] = store.blobs.write_bytes(raw)[0]
    return out


def create(store: ModelStore, req: dict, converter: Converter | None) -> list[dict]:
    return list(create_model(store, parse_name("hf"), req, converter=converter))


def test_known_architectures_from_the_text_model_map(converter: Converter) -> None:
    assert known_architectures(converter.scripts_dir) == {"LlamaForCausalLM", "Qwen2ForCausalLM"}


def test_known_architectures_from_register_decorators_of_an_older_tree(tmp_path: Path) -> None:
    (tmp_path / "convert_hf_to_gguf.py").write_text(
        '@ModelBase.register("LlamaForCausalLM", "MistralForCausalLM")\nclass LlamaModel: ...\n'
        '@ModelBase.register("GemmaForCausalLM")\nclass GemmaModel: ...\n')
    assert known_architectures(tmp_path) == {"LlamaForCausalLM", "MistralForCausalLM", "GemmaForCausalLM"}


def test_no_converter_tree_means_none(tmp_path: Path) -> None:
    assert find_converter(tmp_path) is None


@pytest.mark.parametrize(("named", "error"), [
    pytest.param({"model__safetensors": SAFETENSORS, "config__json": {"architectures": ["MambaLikeForCausalLM"]}},
                 'unsupported architecture "MambaLikeForCausalLM"', id="unknown-architecture"),
    pytest.param({"config__json": {"architectures": ["LlamaForCausalLM"]}, "tokenizer__json": {}},
                 "no model weights were found: the directory needs *.safetensors (or pytorch_model*.bin) files "
                 "beside its config.json", id="no-weights"),
    pytest.param({"model__safetensors": SAFETENSORS, "tokenizer__json": {}},
                 "config.json is missing: a safetensors model directory needs its config.json", id="no-config"),
    pytest.param({"model__safetensors": SAFETENSORS, "config__json": {"model_type": "llama"}},
                 'config.json names no architecture ("architectures" is missing)', id="no-architectures"),
])
def test_refused_before_anything_is_written(store: ModelStore, converter: Converter, named: dict,
                                             error: str) -> None:
    req = {"files": files(store, **named)}
    before = set(store.blobs.dir.iterdir())
    with pytest.raises(BadRequest) as e:
        create_model(store, parse_name("hf"), req, converter=converter)
    assert str(e.value) == error
    assert set(store.blobs.dir.iterdir()) == before


def test_without_the_converter_the_400_says_where_it_comes_from(store: ModelStore) -> None:
    req = {"files": files(store, model__safetensors=SAFETENSORS, config__json={"architectures": ["X"]})}
    with pytest.raises(BadRequest, match=r"llama.cpp's converter was not found next to the runners"):
        create(store, req, None)


def test_an_adapter_needs_its_peft_config(store: ModelStore, converter: Converter) -> None:
    req = {"files": files(store, model__safetensors=SAFETENSORS, config__json={"architectures": ["LlamaForCausalLM"]}),
           "adapters": files(store, adapter_model__safetensors=SAFETENSORS)}
    with pytest.raises(BadRequest, match="adapter_config.json is missing"):
        create(store, req, converter)


def lora_files(store: ModelStore) -> dict[str, str]:
    return files(store, adapter_model__safetensors=SAFETENSORS,
                 adapter_config__json={"peft_type": "LORA", "r": 4, "lora_alpha": 8})


def test_an_adapter_on_a_gguf_base_whose_config_can_be_made(store: ModelStore, converter: Converter,
                                                             tmp_path: Path) -> None:
    base = store.blobs.write_file(write_llama_gguf(tmp_path / "base.gguf"))[0]
    # checked and planned; the conversion itself (with a config.json made from the GGUF) runs when iterated
    create_model(store, parse_name("tuned"), {"files": {"base.gguf": base}, "adapters": lora_files(store)},
                 converter=converter)


def test_an_adapter_on_a_gguf_base_of_another_family_is_refused_up_front(store: ModelStore, converter: Converter,
                                                                          tmp_path: Path) -> None:
    base = store.blobs.write_file(write_gguf(tmp_path / "phi.gguf", "phi2", {"phi2.block_count": 2}))[0]
    with pytest.raises(BadRequest, match=r"needs its base model's config.json: create it FROM the base model's "
                                         r"Hugging Face directory, with the ADAPTER line \(the base's architecture "
                                         r"'phi2' has no config.json of its own\)"):
        create_model(store, parse_name("tuned"), {"files": {"phi.gguf": base}, "adapters": lora_files(store)},
                     converter=converter)
