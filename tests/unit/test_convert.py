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


# -- no model code runs (issue 34 item 1) ----------------------------------------------------------------------

# What llama.cpp's converter does for QWenLMHeadModel (_set_vocab_qwen): the model's own tokenizer, code and all.
QWEN_LIKE_CONVERTER = """import sys
from transformers import AutoTokenizer
AutoTokenizer.from_pretrained(sys.argv[-1], trust_remote_code=True)
out = sys.argv[sys.argv.index("--outfile") + 1]
open(out, "wb").write(b"GGUF")
"""


def qwen_with_its_own_tokenizer_code(marker: Path) -> dict[str, bytes]:
    """A QWen-style upload whose tokenizer_config.json names an uploaded tokenization_x.py (auto_map) that leaves
    `marker` behind when it runs."""
    return {
        "config.json": json.dumps({"architectures": ["QWenLMHeadModel"], "model_type": "qwen"}).encode(),
        "tokenizer_config.json": json.dumps({"tokenizer_class": "QWenTokenizer", "auto_map": {
            "AutoTokenizer": ["tokenization_x.QWenTokenizer", None]}}).encode(),
        "tokenization_x.py": f"open({str(marker)!r}, 'w').write('ran')\nclass QWenTokenizer: pass\n".encode(),
        "model.safetensors": SAFETENSORS,
    }


async def upload_all(client, named: dict[str, bytes]) -> dict[str, str]:
    import hashlib

    out = {}
    for name, data in named.items():
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        assert (await client.post(f"/api/blobs/{digest}", data=data)).status in (200, 201)
        out[name] = digest
    return out


async def test_uploaded_tokenizer_code_never_runs(fake_app, aiohttp_client, tmp_path: Path) -> None:
    """Through the public API only: POST /api/blobs, POST /api/create. The .py is never staged, auto_map is
    removed, transformers' remote code is off in the converter: the code never runs and the client gets a 400."""
    scripts = tmp_path / "runners" / "convert"
    scripts.mkdir(parents=True)
    (scripts / "convert_hf_to_gguf.py").write_text(QWEN_LIKE_CONVERTER)
    marker = tmp_path / "PWNED"
    _, app = fake_app(runners_dir=tmp_path / "runners")
    client = await aiohttp_client(app)
    files = await upload_all(client, qwen_with_its_own_tokenizer_code(marker))
    r = await client.post("/api/create", json={"model": "qwen-evil", "files": files, "stream": False})
    assert not marker.exists()
    assert r.status == 400
    error = (await r.json())["error"]
    assert error.startswith("this model needs its own Python code (auto_map in tokenizer_config.json), which is "
                            "never run here: convert it to GGUF where you trust that code, then create from the GGUF")
    assert (await client.post("/api/show", json={"model": "qwen-evil"})).status == 404


@pytest.mark.parametrize(("name", "kept"), [
    ("config.json", True), ("tokenizer.json", True), ("tokenizer_config.json", True), ("special_tokens_map.json", True),
    ("generation_config.json", True), ("added_tokens.json", True), ("tokenizer.model", True),
    ("model.safetensors", True), ("model-00001-of-00002.safetensors", True), ("pytorch_model.bin", True),
    ("consolidated.00.pth", True), ("chat_template.jinja", True), ("1_Pooling/config.json", True),
    ("2_Dense/model.safetensors", True), ("original/tokenizer.model", True), ("merges.txt", True),
    ("tokenization_qwen.py", False), ("modeling_x.py", False), ("__init__.py", False), ("x.pyc", False),
    ("libevil.so", False), ("training_args.bin", False), ("optimizer.pt", False), ("sub/modeling_x.py", False),
    ("a/b/config.json", False), ("README.md", False),
])
def test_only_what_the_converter_reads_is_staged(name: str, kept: bool) -> None:
    from ollama_py.store.convert_files import converter_files

    assert converter_files({name: "sha256:" + "a" * 64})[0] == ({name: "sha256:" + "a" * 64} if kept else {})


def test_staged_json_loses_auto_map_at_any_depth(store: ModelStore, tmp_path: Path) -> None:
    from ollama_py.store.convert_files import stage

    config = {"architectures": ["X"], "auto_map": {"AutoConfig": "configuration_x.XConfig"},
              "text_config": {"auto_map": {"AutoModel": "modeling_x.X"}, "hidden_size": 8}}
    staged = stage(store, files(store, config__json=config, tokenizer__json={"model": {}}), tmp_path / "src")
    assert json.loads((tmp_path / "src" / "config.json").read_text()) == {
        "architectures": ["X"], "text_config": {"hidden_size": 8}}
    assert staged.remote_code == ("config.json",)
    assert not (tmp_path / "src" / "config.json").is_symlink()  # a copy: the blob itself is untouched


def test_a_huge_architecture_name_is_not_echoed_whole(store: ModelStore, converter: Converter) -> None:
    req = {"files": files(store, model__safetensors=SAFETENSORS, config__json={"architectures": ["A" * 1_000_000]})}
    with pytest.raises(BadRequest) as e:
        create(store, req, converter)
    assert str(e.value) == f'unsupported architecture "{"A" * 200}"'
