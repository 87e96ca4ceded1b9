"""GGUF headers: what /api/show and /api/create learn from a GGUF without loading its tensors."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest

from ollama_py.errors import BadRequest
from ollama_py.store.gguf_meta import file_type_name, human_number, model_info, read_gguf_info
from tests.fakes.gguf_files import CHAT_TEMPLATE, N_EMBD, N_FF, N_VOCAB, write_gguf, write_llama_gguf
from tests.helpers.paths import required_path

LLAMA_PARAMS = 2 * N_VOCAB * N_EMBD + 4 * N_EMBD * N_EMBD + 3 * N_EMBD * N_FF + 3 * N_EMBD


@pytest.fixture
def llama(tmp_path: Path) -> Path:
    return write_llama_gguf(tmp_path / "tiny.gguf")


def test_llama_facts(llama: Path) -> None:
    info = read_gguf_info(llama)
    assert info.architecture == info.family == "llama"
    assert info.kind == "model"
    assert info.parameter_count == LLAMA_PARAMS
    assert info.parameter_size == human_number(LLAMA_PARAMS) == "45K"
    assert (info.file_type, info.quantization_level) == (1, "F16")
    assert (info.context_length, info.embedding_length, info.block_count) == (256, N_EMBD, 1)
    assert (info.head_count, info.head_count_kv) == (4, 2)
    assert info.chat_template == CHAT_TEMPLATE
    assert not info.is_embedding and not info.is_projector and not info.is_adapter
    assert len(info.tensors) == 12
    assert ("token_embd.weight", "F16", [N_EMBD, N_VOCAB]) in info.tensors
    assert ("blk.0.attn_norm.weight", "F32", [N_EMBD]) in info.tensors


def test_matches_gguf_reader(llama: Path) -> None:
    """The package's own reader is the oracle for every key/value and tensor."""
    ours = read_gguf_info(llama)
    reader = gguf.GGUFReader(llama)
    theirs = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert ours.kv.keys() == theirs.keys()
    for key, value in theirs.items():
        if isinstance(value, float):
            assert ours.kv[key] == pytest.approx(value, rel=1e-6), key
        else:
            assert ours.kv[key] == value, key
    assert ours.tensors == [(t.name, t.tensor_type.name, [int(x) for x in t.shape]) for t in reader.tensors]


def test_float32_values_read_as_go_prints_them(llama: Path) -> None:
    assert read_gguf_info(llama).kv["llama.attention.layer_norm_rms_epsilon"] == 1e-05


def test_parameter_count_prefers_the_header(tmp_path: Path) -> None:
    path = write_llama_gguf(tmp_path / "m.gguf", extra_kv={"general.parameter_count": 8_030_261_248})
    info = read_gguf_info(path)
    assert info.parameter_count == 8_030_261_248
    assert info.parameter_size == "8.0B"


@pytest.mark.parametrize(("n", "text"), [
    (0, "0"), (999, "999"), (1000, "1K"), (45_248, "45K"), (1_000_000, "1M"), (134_515_008, "134.52M"),
    (268_098_176, "268.10M"), (999_999_999, "1000.00M"), (1_000_000_000, "1B"), (7_000_000_000, "7B"),
    (8_030_261_248, "8.0B"), (70_553_706_496, "70.6B"), (1_500_000_000_000, "1500B"),
], ids=lambda v: str(v))
def test_human_number_like_ollama(n: int, text: str) -> None:
    assert human_number(n) == text


@pytest.mark.parametrize(("ft", "name"), [
    (0, "F32"), (1, "F16"), (2, "Q4_0"), (3, "Q4_1"), (7, "Q8_0"), (8, "Q5_0"), (9, "Q5_1"), (10, "Q2_K"),
    (11, "Q3_K_S"), (12, "Q3_K_M"), (13, "Q3_K_L"), (14, "Q4_K_S"), (15, "Q4_K_M"), (16, "Q5_K_S"),
    (17, "Q5_K_M"), (18, "Q6_K"), (21, "Q2_K_S"), (32, "BF16"), (30, "IQ4_XS"), (None, "unknown"),
    (999, "unknown"),
], ids=lambda v: str(v))
def test_file_type_names(ft: int | None, name: str) -> None:
    assert file_type_name(ft) == name


def test_embedding_model(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "bert.gguf", "bert", {
        "bert.context_length": 512, "bert.embedding_length": 384, "bert.block_count": 1,
        "bert.attention.head_count": 12, "bert.attention.causal": False, "bert.pooling_type": 1,
        "general.file_type": 1,
    }, {"token_embd.weight": np.zeros((8, 384), dtype=np.float16)})
    info = read_gguf_info(path)
    assert info.is_embedding
    assert info.head_count_kv == 12  # defaults to the head count
    assert info.parameter_count == 8 * 384


def test_non_causal_without_pooling_is_embedding(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "nb.gguf", "nomic-bert", {"nomic-bert.attention.causal": False})
    assert read_gguf_info(path).is_embedding


def test_projector_and_adapter_kinds(tmp_path: Path) -> None:
    proj = write_gguf(tmp_path / "mmproj.gguf", "clip", {"clip.has_vision_encoder": True}, general_type="projector")
    assert read_gguf_info(proj).is_projector
    clip = write_gguf(tmp_path / "clip.gguf", "clip", {"clip.vision.block_count": 2}, general_type=None)
    assert read_gguf_info(clip).is_projector
    lora = write_llama_gguf(tmp_path / "lora.gguf", general_type="adapter")
    assert read_gguf_info(lora).is_adapter


def test_model_info_hides_name_template_and_long_arrays(llama: Path) -> None:
    info = read_gguf_info(llama)
    short = model_info(info, verbose=False)
    assert "general.name" not in short and "tokenizer.chat_template" not in short
    assert short["general.parameter_count"] == LLAMA_PARAMS
    assert short["tokenizer.ggml.tokens"] == []
    assert short["tokenizer.ggml.merges"] == ["t 1"]  # five or fewer stay
    assert short["llama.context_length"] == 256
    assert list(short) == sorted(short)
    full = model_info(info, verbose=True)
    assert full["tokenizer.ggml.tokens"] == [f"t{i}" for i in range(N_VOCAB)]
    assert "general.name" not in full


def test_model_info_is_json_ready(llama: Path) -> None:
    import json

    json.dumps(model_info(read_gguf_info(llama), verbose=True), allow_nan=False)


def test_not_a_gguf(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("just some text, not weights")
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    for path in (text, empty):
        with pytest.raises(BadRequest, match="invalid file magic"):
            read_gguf_info(path)


@pytest.mark.parametrize("keep", [8, 24, 100, 400], ids=lambda n: f"{n}-bytes")
def test_truncated_gguf_is_a_clear_error(llama: Path, tmp_path: Path, keep: int) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(llama.read_bytes()[:keep])
    with pytest.raises(BadRequest, match="GGUF"):
        read_gguf_info(cut)


def test_absurd_counts_are_refused_without_allocating(tmp_path: Path) -> None:
    header = b"GGUF" + (3).to_bytes(4, "little") + (1 << 60).to_bytes(8, "little") + (1).to_bytes(8, "little")
    path = tmp_path / "huge.gguf"
    path.write_bytes(header + b"\0" * 64)
    with pytest.raises(BadRequest):
        read_gguf_info(path)


def test_unsupported_version(llama: Path, tmp_path: Path) -> None:
    data = bytearray(llama.read_bytes())
    data[4:8] = (1).to_bytes(4, "little")
    path = tmp_path / "v1.gguf"
    path.write_bytes(bytes(data))
    with pytest.raises(BadRequest, match="unsupported GGUF version 1"):
        read_gguf_info(path)


@pytest.mark.integration  # the real model: fetched by `make test` before the integration run, never skipped
def test_real_smollm2_header() -> None:
    info = read_gguf_info(required_path("OLLAMA_PY_TEST_MODEL"))
    assert (info.architecture, info.quantization_level, info.parameter_size) == ("llama", "Q4_1", "134.52M")
    assert (info.context_length, info.embedding_length, info.block_count) == (8192, 576, 30)
    assert (info.head_count, info.head_count_kv) == (9, 3)
    assert len(info.tensors) == 272
    assert "<|im_start|>" in (info.chat_template or "")
