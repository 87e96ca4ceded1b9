"""Ollama-published GGUFs on the real llama-server (runner/gguf_compat.py). Ollama's library is out of reach from
here, so the files are the test models rewritten the way Ollama's converter lays them out: Gemma 3 270M without
the RMS-norm epsilon llama.cpp requires and with its RoPE base under Ollama's name; SmolLM2 with a vision
encoder's tensor inside the model file; a tiny gpt-oss of random weights in both layouts."""

from __future__ import annotations

import os
from pathlib import Path

import gguf
import numpy as np
import pytest

from tests.fakes.gguf_files import (
    rewrite_gguf,
    write_tiny_gemma4,
    write_tiny_glm_flash,
    write_tiny_gpt_oss,
    write_tiny_lfm2,
    write_tiny_olmo,
    write_tiny_qwen25vl,
)
from tests.helpers.paths import required_path
from tests.helpers.serve import create_from_file

pytestmark = pytest.mark.integration

GREEDY = {"temperature": 0, "seed": 7, "num_predict": 12, "num_ctx": 512}


@pytest.fixture(scope="module")
def gemma_as_ollama_writes_it(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("ollama-layout")
    return rewrite_gguf(required_path("OLLAMA_PY_TEST_GEMMA"), tmp / "gemma3-ollama.gguf",
                        drop=("gemma3.attention.layer_norm_rms_epsilon",),
                        rename={"gemma3.rope.freq_base": "gemma3.rope.global.freq_base"},
                        add={"gemma3.rope.local.freq_base": (10000.0, gguf.GGUFValueType.FLOAT32)})


def generate(live_server, model: str) -> tuple[int, dict]:
    """A greedy answer, the runner gone when it returns (the shared server's later tests count its runners)."""
    r = live_server.api("POST", "/api/generate", json={"model": model, "prompt": "The capital of France is",
                                                       "stream": False, "options": GREEDY, "keep_alive": 0})
    live_server.unload(model)
    return r.status_code, r.json()


def test_an_ollama_gemma3_loads_and_answers_as_the_same_weights_converted_by_llama_cpp(
        live_server, gemma_as_ollama_writes_it) -> None:
    create_from_file(live_server.url, "gemma3-llamacpp", Path(os.environ["OLLAMA_PY_TEST_GEMMA"]))
    create_from_file(live_server.url, "gemma3-ollama", gemma_as_ollama_writes_it)
    status, theirs = generate(live_server, "gemma3-ollama")
    assert status == 200, theirs  # without the overrides: "key not found in model: ...layer_norm_rms_epsilon"
    status, ours = generate(live_server, "gemma3-llamacpp")
    assert status == 200, ours
    assert theirs["response"] and theirs["response"] == ours["response"]
    assert theirs["eval_count"] == ours["eval_count"]


def test_an_ollama_gemma3_with_its_vision_encoder_inside_answers_from_a_text_only_copy(
        live_server, tmp_path) -> None:
    """Ollama's Gemma 3 4B and up: the encoder's tensors inside the model file, the multimodal tokens left in the
    vocabulary, Ollama's key names."""
    mono = rewrite_gguf(required_path("OLLAMA_PY_TEST_GEMMA"), tmp_path / "gemma3-mono.gguf", more_tokens=3,
                        drop=("gemma3.attention.layer_norm_rms_epsilon",),
                        rename={"gemma3.rope.freq_base": "gemma3.rope.global.freq_base"},
                        tensors={"v.blk.0.attn_q.weight": np.zeros((8, 8), dtype=np.float32),
                                 "mm.input_projection.weight": np.ones((4, 8), dtype=np.float32)})
    create_from_file(live_server.url, "gemma3-llamacpp", Path(os.environ["OLLAMA_PY_TEST_GEMMA"]))
    create_from_file(live_server.url, "gemma3-mono", mono)
    status, theirs = generate(live_server, "gemma3-mono")
    assert status == 200, theirs  # before: "wrong number of tensors" (or the vocabulary's shape)
    status, ours = generate(live_server, "gemma3-llamacpp")
    assert status == 200, ours
    assert theirs["response"] and theirs["response"] == ours["response"]
    copies = list((Path(live_server.env["OLLAMA_PY_DATA_DIR"]) / "text-only").glob("sha256-*.gguf"))
    assert len(copies) == 1  # written once, kept for the next load
    status, again = generate(live_server, "gemma3-mono")
    assert (status, again["response"]) == (200, theirs["response"])
    assert list((Path(live_server.env["OLLAMA_PY_DATA_DIR"]) / "text-only").glob("sha256-*.gguf")) == copies
    assert live_server.api("DELETE", "/api/delete", json={"model": "gemma3-mono"}).status_code == 200
    assert not copies[0].exists()  # the copy goes with its model


def test_an_architecture_of_ollamas_own_name_fails_with_a_reason_a_user_can_act_on(live_server, tmp_path) -> None:
    renamed = rewrite_gguf(required_path("OLLAMA_PY_TEST_MODEL"), tmp_path / "deepseekocr.gguf",
                           arch="deepseekocr")
    create_from_file(live_server.url, "glm-ollama", renamed)
    status, body = generate(live_server, "glm-ollama")
    assert status == 500
    assert "unknown model architecture: 'deepseekocr'" in body["error"]  # llama-server's own words, then why
    assert "this GGUF is in Ollama's own layout (architecture 'deepseekocr', which llama.cpp reads as " \
        "'deepseek2-ocr' only once translated)" in body["error"]
    assert "\n" not in body["error"]


@pytest.mark.parametrize("write", [write_tiny_gpt_oss, write_tiny_olmo, write_tiny_gemma4, write_tiny_lfm2,
                                   write_tiny_glm_flash, write_tiny_qwen25vl])
def test_an_ollama_architecture_answers_from_a_translated_copy_as_llama_cpps_file_does(live_server, tmp_path,
                                                                                      write) -> None:
    """Ollama's gpt-oss (architecture `gptoss`, three tensor names and four keys of its own) and OLMo 3 (`olmo3`):
    upstream llama-server refuses them ("unknown model architecture"); Ollama's Gemma 4 names its tokenizer `llama`
    (the runner then fails to tokenize, or splits its control tokens), its LFM2 its output norm under another name
    (the runner: "tensor 'token_embd_norm.weight' not found"); its GLM-4.7-Flash (`glm4moelite`) the per-head
    attention lengths where llama.cpp's deepseek2 reads the latent ones. Read from the translated copy each answers,
    token for token, as the same weights laid out by llama.cpp's converter."""
    create_from_file(live_server.url, "oss-llamacpp", write(tmp_path / "llama-cpp.gguf"))
    create_from_file(live_server.url, "oss-ollama", write(tmp_path / "ollama.gguf", ollama_layout=True))
    status, theirs = generate(live_server, "oss-ollama")
    assert status == 200, theirs
    status, ours = generate(live_server, "oss-llamacpp")
    assert status == 200, ours
    assert theirs["eval_count"] == ours["eval_count"] > 0
    assert theirs["response"] == ours["response"]
    copies = list((Path(live_server.env["OLLAMA_PY_DATA_DIR"]) / "text-only").glob("sha256-*.gguf"))
    assert len(copies) == 1
    assert live_server.api("DELETE", "/api/delete", json={"model": "oss-ollama"}).status_code == 200
    assert not copies[0].exists()  # the copy goes with its model
    assert live_server.api("DELETE", "/api/delete", json={"model": "oss-llamacpp"}).status_code == 200
