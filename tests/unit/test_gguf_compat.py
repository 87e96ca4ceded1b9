"""GGUFs published by Ollama in a layout of its own (runner/gguf_compat.py): the metadata llama-server is given to
read them as meant, and the note a load failure carries. The real llama-server reading such files:
tests/integration/test_ollama_layout_live.py."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from ollama_py.api.names import parse_name
from ollama_py.runner.argv import LaunchSpec, build_argv
from ollama_py.runner.gguf_compat import Layout, ollama_layout, sweep_copies, write_text_only
from ollama_py.scheduler.factory import plan_load
from ollama_py.store.gguf_meta import GGUFInfo, read_gguf_info
from ollama_py.store.models import ModelStore
from tests.fakes.gguf_files import (
    rewrite_gguf,
    write_tiny_gguf,
    write_tiny_glm_flash,
    write_tiny_gpt_oss,
    write_tiny_olmo,
    write_tiny_qwen25vl,
)
from tests.helpers.app import create_tiny_model, make_settings

LLAMA3_TEMPLATE = "{{ '<|start_header_id|>' + m.role + '<|end_header_id|>' + m.content + '<|eot_id|>' }}"


def llama3_tokens() -> list[str]:
    tokens = [f"t{i}" for i in range(128256)]
    tokens[128001], tokens[128006], tokens[128009] = "<|end_of_text|>", "<|start_header_id|>", "<|eot_id|>"
    return tokens


def info(arch: str, kv: dict[str, object] | None = None, tensors: tuple[str, ...] = ("token_embd.weight",),
         rows: int | None = None) -> GGUFInfo:
    """A GGUF header: token embeddings for every token of the vocabulary unless `rows` says how many."""
    tokens = (kv or {}).get("tokenizer.ggml.tokens")
    rows = rows if rows is not None else len(tokens) if isinstance(tokens, list) else 32
    table = tuple((name, "F32", (8, rows) if name == "token_embd.weight" else (8, 8)) for name in tensors)
    return GGUFInfo({"general.architecture": arch, **(kv or {})}, table)


def test_a_llama3_file_without_a_pre_tokenizer_and_ending_at_end_of_text_is_read_with_llama_bpe_and_eot() -> None:
    published = info("llama", {"tokenizer.ggml.tokens": llama3_tokens(), "tokenizer.ggml.eos_token_id": 128001,
                               "tokenizer.chat_template": LLAMA3_TEMPLATE})
    assert ollama_layout(published) == Layout(("tokenizer.ggml.pre=str:llama-bpe",
                                               "tokenizer.ggml.eos_token_id=int:128009",
                                               "tokenizer.ggml.eot_token_id=int:128009"))
    # only what is missing: a pre-tokenizer of "default" with the right end of sequence and end of turn
    half = info("llama", {"tokenizer.ggml.tokens": llama3_tokens(), "tokenizer.ggml.pre": "default",
                          "tokenizer.ggml.eos_token_id": 128009, "tokenizer.ggml.eot_token_id": 128009,
                          "tokenizer.chat_template": LLAMA3_TEMPLATE})
    assert ollama_layout(half).overrides == ("tokenizer.ggml.pre=str:llama-bpe",)


def test_llama_files_as_llama_cpp_writes_them_get_nothing() -> None:
    converted = info("llama", {"tokenizer.ggml.tokens": llama3_tokens(), "tokenizer.ggml.pre": "llama-bpe",
                               "tokenizer.ggml.eos_token_id": 128009, "tokenizer.chat_template": LLAMA3_TEMPLATE})
    assert ollama_layout(converted) == Layout()
    # another llama-architecture model (SmolLM2's vocabulary): no Llama 3 marker, whatever its pre-tokenizer
    assert ollama_layout(info("llama", {"tokenizer.ggml.tokens": [f"t{i}" for i in range(49152)]})) == Layout()
    # <|eot_id|> where Llama 3 has it but no Llama 3 chat format (no header token, no template): left as it is
    tokens = llama3_tokens()
    tokens[128006] = "t128006"
    assert ollama_layout(info("llama", {"tokenizer.ggml.tokens": tokens, "tokenizer.ggml.eos_token_id": 128001})) \
        == Layout()
    assert ollama_layout(None) == Layout()


def test_a_gemma3_file_of_ollamas_converter_gets_llama_cpps_keys_with_ollamas_values() -> None:
    published = info("gemma3", {"gemma3.context_length": 131072, "gemma3.rope.global.freq_base": 1000000.0,
                                "gemma3.rope.local.freq_base": 10000.0, "tokenizer.ggml.add_padding_token": False})
    assert ollama_layout(published) == Layout((
        "gemma3.rope.freq_base=float:1000000.0", "gemma3.rope.freq_base_swa=float:10000.0",
        "gemma3.attention.layer_norm_rms_epsilon=float:1e-06", "gemma3.rope.scaling.type=str:linear",
        "gemma3.rope.scaling.factor=float:8.0"))
    # the 1B: 32K of context, no scaling; its keys missing altogether get Gemma 3's defaults
    small = info("gemma3", {"gemma3.context_length": 32768})
    assert ollama_layout(small).overrides == ("gemma3.rope.freq_base=float:1000000.0",
                                              "gemma3.rope.freq_base_swa=float:10000.0",
                                              "gemma3.attention.layer_norm_rms_epsilon=float:1e-06")


def test_a_gemma3_file_as_llama_cpp_writes_it_gets_nothing() -> None:
    converted = info("gemma3", {"gemma3.context_length": 32768, "gemma3.rope.freq_base": 1000000.0,
                                "gemma3.attention.layer_norm_rms_epsilon": 1e-6,
                                "gemma3.attention.sliding_window": 512})
    assert ollama_layout(converted) == Layout()


def test_a_vision_encoder_inside_the_model_file_is_named_in_the_note() -> None:
    monolithic = info("gemma3", {"gemma3.attention.layer_norm_rms_epsilon": 1e-6, "gemma3.rope.freq_base": 1e6,
                                 "gemma3.rope.freq_base_swa": 1e4, "tokenizer.ggml.tokens": ["t"] * 40},
                      tensors=("token_embd.weight", "blk.0.attn_q.weight", "v.blk.0.attn_q.weight",
                               "v.patch_embd.weight", "mm.input_projection.weight"), rows=32)
    layout = ollama_layout(monolithic)
    assert layout.overrides == () and layout.text_only
    assert layout.note.startswith("this GGUF is in Ollama's own layout (3 tensors of a vision or audio encoder "
                                  "inside the model file")
    assert "a vocabulary of 40 tokens for 32 token embeddings; its text model was read from a copy without them" \
        in layout.note
    assert "use a GGUF converted by llama.cpp" in layout.note
    # the same encoder in a projector file is where llama.cpp wants it
    projector = info("clip", {"general.type": "projector"}, tensors=("v.blk.0.attn_q.weight", "mm.0.weight"))
    assert ollama_layout(projector) == Layout()


@pytest.mark.parametrize(("arch", "theirs"), [("deepseekocr", "deepseek2-ocr"), ("glmocr", "glm4")])
def test_an_architecture_of_ollamas_own_name_is_named_in_the_note(arch: str, theirs: str) -> None:
    layout = ollama_layout(info(arch))
    assert layout.overrides == () and not layout.text_only
    assert f"architecture '{arch}', which llama.cpp reads as '{theirs}' only once translated" in layout.note


def test_mistral3_yarn_parameters_under_ollamas_names_are_copied_to_llama_cpps() -> None:
    published = info("mistral3", {"mistral3.rope.scaling.beta_fast": 32.0, "mistral3.rope.scaling.beta_slow": 1.0,
                                  "mistral3.rope.scaling_beta": 0.1})
    assert ollama_layout(published).overrides == (
        "mistral3.rope.scaling.yarn_beta_fast=float:32.0", "mistral3.rope.scaling.yarn_beta_slow=float:1.0",
        "mistral3.attention.temperature_scale=float:0.1", "tokenizer.ggml.pre=str:tekken")
    assert ollama_layout(info("mistral3", {"tokenizer.ggml.pre": "tekken"})) == Layout()


def test_overrides_reach_llama_servers_argv_before_a_models_own_flags() -> None:
    spec = LaunchSpec(model=Path("/m.gguf"), kv_overrides=("a.b=int:1", "c=str:x"),
                      extra=("--override-kv", "a.b=int:2"))
    argv = build_argv(spec, "llama-server", 8080)
    at = argv.index("a.b=int:1")
    assert argv[at - 1:at + 3] == ["--override-kv", "a.b=int:1", "--override-kv", "c=str:x"]
    assert argv[-2:] == ["--override-kv", "a.b=int:2"]  # the config file's word comes last, so it wins
    assert "--override-kv" not in build_argv(LaunchSpec(model=Path("/m.gguf")), "llama-server", 8080)


def write_ollama_gemma3(path: Path) -> Path:
    """A tiny gemma3-architecture GGUF as Ollama's converter writes one: RoPE bases under its names, no RMS-norm
    epsilon."""
    w = gguf.GGUFWriter(str(path), "gemma3")
    w.add_context_length(2048)
    w.add_embedding_length(8)
    w.add_block_count(1)
    w.add_feed_forward_length(16)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_float32("gemma3.rope.global.freq_base", 1000000.0)
    w.add_float32("gemma3.rope.local.freq_base", 10000.0)
    w.add_tokenizer_model("llama")
    w.add_token_list([f"t{i}" for i in range(16)])
    w.add_tensor("token_embd.weight", np.zeros((16, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_a_stored_ollama_gemma3_is_planned_with_its_overrides(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    create_tiny_model(settings, write_ollama_gemma3(tmp_path / "g.gguf"), name="gemma3-ollama")
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "t.gguf"), name="tiny")
    store = ModelStore(settings.models)
    plan = plan_load(settings, [], 64 << 30, store.load(parse_name("gemma3-ollama")), {}, False)
    assert plan.spec.kv_overrides == ("gemma3.rope.freq_base=float:1000000.0",
                                      "gemma3.rope.freq_base_swa=float:10000.0",
                                      "gemma3.attention.layer_norm_rms_epsilon=float:1e-06")
    assert plan.load_note == ""
    plain = plan_load(settings, [], 64 << 30, store.load(parse_name("tiny")), {}, False)
    assert (plain.spec.kv_overrides, plain.load_note) == ((), "")
    assert ollama_layout(read_gguf_info(tmp_path / "t.gguf")) == Layout()


def write_monolithic(path: Path, more_tokens: int = 0) -> Path:
    """The test suite's tiny model with a vision encoder's tensors inside it, as Ollama publishes Gemma 3."""
    return rewrite_gguf(write_tiny_gguf(path.with_suffix(".plain.gguf")), path, more_tokens=more_tokens,
                        tensors={"v.blk.0.attn_q.weight": np.zeros((8, 8), dtype=np.float32),
                                 "mm.input_projection.weight": np.ones((4, 8), dtype=np.float32)})


def test_the_text_only_copy_holds_the_text_model_and_a_vocabulary_cut_to_its_embeddings(tmp_path: Path) -> None:
    mono = write_monolithic(tmp_path / "mono.gguf", more_tokens=5)
    plain = read_gguf_info(tmp_path / "mono.plain.gguf")
    assert ollama_layout(read_gguf_info(mono)).text_only
    write_text_only(mono, tmp_path / "copies" / "copy.gguf")
    assert [p.name for p in (tmp_path / "copies").iterdir()] == ["copy.gguf"]  # nothing half-written left
    copy = read_gguf_info(tmp_path / "copies" / "copy.gguf")
    assert copy.tensor_table == plain.tensor_table  # the text model's tensors, as they were
    assert copy.kv == plain.kv  # every key/value, the vocabulary back to its 32 tokens
    assert ollama_layout(copy) == Layout()
    reader = gguf.GGUFReader(str(tmp_path / "copies" / "copy.gguf"))
    before = gguf.GGUFReader(str(tmp_path / "mono.plain.gguf"))
    for ours, theirs in zip(reader.tensors, before.tensors, strict=True):
        assert np.array_equal(ours.data, theirs.data)


def test_copies_of_models_gone_from_the_store_are_removed(tmp_path: Path) -> None:
    blobs, copies = tmp_path / "blobs", tmp_path / "copies"
    blobs.mkdir()
    copies.mkdir()
    (blobs / "sha256-aa").write_bytes(b"x")
    for name in ("sha256-aa.gguf", "sha256-bb.gguf"):
        (copies / name).write_bytes(b"copy")
    sweep_copies(copies, blobs)
    assert [p.name for p in copies.iterdir()] == ["sha256-aa.gguf"]


def test_a_monolithic_model_is_planned_from_its_copy_under_the_data_dir(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    create_tiny_model(settings, write_monolithic(tmp_path / "mono.gguf"), name="mono")
    model = ModelStore(settings.models).load(parse_name("mono"))
    plan = plan_load(settings, [], 64 << 30, model, {}, False)
    assert model.model_path is not None
    assert plan.spec.text_only_copy == settings.data_dir / "text-only" / f"{model.model_path.name}.gguf"
    argv = build_argv(plan.spec, "llama-server", 8080)
    assert argv[argv.index("--model") + 1] == str(plan.spec.text_only_copy)
    # its memory is its text model's: the same as the file without the encoder
    create_tiny_model(settings, tmp_path / "mono.plain.gguf", name="plain")
    plain = plan_load(settings, [], 64 << 30, ModelStore(settings.models).load(parse_name("plain")), {}, False)
    assert (plan.size, plan.size_vram) == (plain.size, plain.size_vram)


async def test_a_load_failure_of_an_ollama_layout_file_says_why(fake_app, aiohttp_client, tmp_path: Path) -> None:
    failure = "llama_model_load: error loading model: unknown model architecture: 'deepseekocr'"
    settings, app = fake_app({"FAKE_LOAD_FAIL": failure})
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "deepseekocr.gguf", arch="deepseekocr"), name="deepseekocr")
    client = await aiohttp_client(app)
    r = await client.post("/api/generate", json={"model": "deepseekocr", "prompt": "hi", "stream": False})
    assert r.status == 500
    error = (await r.json())["error"]
    assert "unknown model architecture: 'deepseekocr'" in error
    assert error.endswith("(this GGUF is in Ollama's own layout (architecture 'deepseekocr', which llama.cpp reads as "
                          "'deepseek2-ocr' only once translated), which upstream llama.cpp does not read: use a GGUF "
                          "converted by llama.cpp (from Hugging Face, or `ollama-py create` from the model's "
                          "safetensors))")
    # a model without such a layout fails with llama-server's words only
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False})
    error = (await r.json())["error"]
    assert "unknown model architecture" in error and "Ollama's own layout" not in error


async def test_an_encoder_inside_the_model_file_claims_no_vision(fake_app, aiohttp_client, tmp_path: Path) -> None:
    """Its encoder is left out of the copy llama-server reads: no image would be seen, so none is accepted."""
    settings, app = fake_app()
    mono = rewrite_gguf(write_monolithic(tmp_path / "mono.gguf"), tmp_path / "mono-vision.gguf",
                        add={"llama.vision.block_count": (2, gguf.GGUFValueType.UINT32)})
    create_tiny_model(settings, mono, name="mono")
    client = await aiohttp_client(app)
    show = await (await client.post("/api/show", json={"model": "mono"})).json()
    assert show["capabilities"] == ["completion"]
    r = await client.post("/api/chat", json={"model": "mono", "messages": [
        {"role": "user", "content": "what is this?", "images": ["iVBORw0KGgo="]}]})
    assert r.status == 400 and (await r.json())["error"] == "\"mono\" does not support vision"


def test_no_copy_is_started_without_room_for_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mono = write_monolithic(tmp_path / "mono.gguf")
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage._replace(free=512 << 20))  # the disk's answer
    with pytest.raises(OSError, match=r"GiB are needed and 0\.5 GiB are free") as caught:
        write_text_only(mono, tmp_path / "copies" / "copy.gguf")
    assert caught.value.errno == errno.ENOSPC
    assert list((tmp_path / "copies").iterdir()) == []


@pytest.mark.parametrize(("arch", "theirs", "write"), [("gptoss", "gpt-oss", write_tiny_gpt_oss),
                                                       ("olmo3", "olmo2", write_tiny_olmo),
                                                       ("glm4moelite", "deepseek2", write_tiny_glm_flash),
                                                       ("qwen25vl", "qwen2vl", write_tiny_qwen25vl)])
def test_an_ollama_architecture_is_read_from_a_copy_translated_as_ollamas_loader_translates_it(
        tmp_path: Path, arch: str, theirs: str, write: Any) -> None:
    """gptoss -> gpt-oss: the keys' prefix, gpt-4o's pre-tokenizer, the expert FFN length from its tensors, YaRN,
    and three tensor names; olmo3 -> olmo2: the name and the prefix. The copy is the file llama.cpp's converter
    writes of the same weights."""
    published = write(tmp_path / "ollama.gguf", ollama_layout=True)
    layout = ollama_layout(read_gguf_info(published))
    assert layout.text_only and layout.overrides == ()
    assert f"architecture '{arch}', which llama.cpp reads as '{theirs}' once translated" in layout.note
    write_text_only(published, tmp_path / "copy.gguf")
    copy = gguf.GGUFReader(str(tmp_path / "copy.gguf"))
    llama_cpp = gguf.GGUFReader(str(write(tmp_path / "llama-cpp.gguf")))

    def keys(reader: gguf.GGUFReader) -> dict[str, object]:
        return {f.name: f.contents() for f in reader.fields.values() if not f.name.startswith("GGUF.")}

    assert keys(copy) == keys(llama_cpp)
    assert [(t.name, t.tensor_type, list(t.shape)) for t in copy.tensors] == \
        [(t.name, t.tensor_type, list(t.shape)) for t in llama_cpp.tensors]
    assert all((a.data == b.data).all() for a, b in zip(copy.tensors, llama_cpp.tensors, strict=True))
    assert ollama_layout(read_gguf_info(tmp_path / "copy.gguf")) == Layout()  # nothing more to do to it


@pytest.mark.parametrize(("writer", "said"), [
    ("write_tiny_gemma4", "Gemma 4 with its tokenizer named 'llama'"),
    ("write_tiny_lfm2", "LFM2 with its output norm named 'output_norm'")])
def test_an_ollama_file_of_llama_cpps_architecture_name_is_read_from_a_translated_copy(
        tmp_path: Path, writer: str, said: str) -> None:
    """Gemma 4 as Ollama publishes it: its tokenizer named `llama` (SentencePiece, which splits its control tokens:
    on the runner it fails or tokenizes as another model), its encoder inside, a MoE's per-expert scale under the
    router's name. LFM2: its output norm under llama.cpp's other name (the runner: "tensor 'token_embd_norm.weight'
    not found"), no pre-tokenizer, a feed-forward length its tensors do not have. The copy is the file llama.cpp's
    converter writes of the same weights."""
    import tests.fakes.gguf_files as files

    write = getattr(files, writer)
    extra = {"expert_scale": True} if writer == "write_tiny_gemma4" else {}
    published = write(tmp_path / "ollama.gguf", ollama_layout=True, **extra)
    layout = ollama_layout(read_gguf_info(published))
    assert layout.text_only and said in layout.note
    write_text_only(published, tmp_path / "copy.gguf")
    copy = gguf.GGUFReader(str(tmp_path / "copy.gguf"))
    llama_cpp = gguf.GGUFReader(str(write(tmp_path / "llama-cpp.gguf", **extra)))
    assert {f.name: f.contents() for f in copy.fields.values() if not f.name.startswith("GGUF.")} == \
        {f.name: f.contents() for f in llama_cpp.fields.values() if not f.name.startswith("GGUF.")}
    assert [(t.name, list(t.shape)) for t in copy.tensors] == [(t.name, list(t.shape)) for t in llama_cpp.tensors]
    assert ollama_layout(read_gguf_info(tmp_path / "copy.gguf")) == Layout()
    # the same architecture converted by llama.cpp is left as it is
    assert ollama_layout(read_gguf_info(tmp_path / "llama-cpp.gguf")) == Layout()
