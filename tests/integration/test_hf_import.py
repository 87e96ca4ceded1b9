"""`create` from a Hugging Face directory (issue 30): converted by llama.cpp's own converter (runners/convert),
stored, shown and run by the real llama-server. The model is made here: a random 2-layer Llama with a
sentencepiece tokenizer trained on a few sentences (tests/fakes/hf_models.py), once per session."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from ollama_py.cli.main import cli
from tests.helpers.serve import LiveServer, start_serve, stop_serve, upload_blob

pytestmark = pytest.mark.integration

pytest.importorskip("torch", reason="needs the convert extra: pip install '.[convert]' (make test installs it)")
pytest.importorskip("transformers", reason="needs the convert extra")


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory):
    """A server of our own (the real runners and their converter; no SmolLM2 needed)."""
    tmp = tmp_path_factory.mktemp("hf-live")
    proc, url, env = start_serve(tmp)
    try:
        yield LiveServer(url=url, env=env, models_dir=tmp / "models", proc=proc, log_path=tmp / "serve.log")
    finally:
        stop_serve(proc)


@pytest.fixture(scope="session")
def hf_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.fakes.hf_models import make_llama_dir

    return make_llama_dir(tmp_path_factory.mktemp("hf") / "tiny-llama")


@pytest.fixture(scope="session")
def hf_lora(tmp_path_factory: pytest.TempPathFactory, hf_llama: Path) -> Path:
    from tests.fakes.hf_models import make_lora_dir

    return make_lora_dir(tmp_path_factory.mktemp("hf") / "tiny-lora", hf_llama)


def ollama(live: LiveServer, *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env=live.env)


def create_from_modelfile(live: LiveServer, name: str, tmp: Path, text: str, *args: str) -> Result:
    (tmp / "Modelfile").write_text(text)
    return ollama(live, "create", name, "-f", str(tmp / "Modelfile"), *args)


def create_from_files(live: LiveServer, name: str, directory: Path, **req: object):
    files = {p.relative_to(directory).as_posix(): upload_blob(live.url, p)
             for p in sorted(directory.rglob("*")) if p.is_file()}
    return live.api("POST", "/api/create", json={"model": name, "files": files, "stream": False, **req})


def generate(live: LiveServer, name: str) -> dict:
    r = live.api("POST", "/api/generate", json={
        "model": name, "prompt": "The sky is", "stream": False, "options": {"num_predict": 8, "temperature": 0}})
    assert r.status_code == 200, r.text
    return r.json()


def test_create_from_a_directory_converts_shows_and_generates(live_server: LiveServer, hf_llama: Path,
                                                               tmp_path: Path) -> None:
    result = create_from_modelfile(live_server, "hf-tiny", tmp_path, f"FROM {hf_llama}\n")
    try:
        assert result.exit_code == 0, result.output
        lines = [line.strip() for line in result.stderr.splitlines()]
        assert "converting model" in lines and lines[-1] == "success"
        assert sum(line.startswith("copying file") for line in lines) == 7  # weights, 5 json, .jinja, tokenizer

        show = live_server.api("POST", "/api/show", json={"model": "hf-tiny"}).json()
        assert show["details"]["family"] == "llama" and show["details"]["format"] == "gguf"
        assert show["details"]["quantization_level"] == "F16"
        info = show["model_info"]
        assert info["general.architecture"] == "llama" and info["llama.block_count"] == 2
        assert info["llama.embedding_length"] == 64
        # embeddings and output 2 x 400 x 64; per layer q,o 64x64, k,v 64x32, mlp 3 x 64x128, 2 norms; final norm
        assert info["general.parameter_count"] == 2 * 25_600 + 2 * 36_992 + 64
        # the chat template of the directory (chat_template.jinja) is the model's template
        assert show["template"] == (hf_llama / "chat_template.jinja").read_text()

        out = generate(live_server, "hf-tiny")
        assert out["done"] and out["eval_count"] > 0
    finally:
        ollama(live_server, "rm", "hf-tiny")


def test_create_from_uploaded_files_through_the_api(live_server: LiveServer, hf_llama: Path) -> None:
    r = create_from_files(live_server, "hf-api", hf_llama)
    try:
        assert r.status_code == 200, r.text
        assert r.json() == {"status": "success"}
        names = {m["name"] for m in live_server.api("GET", "/api/tags").json()["models"]}
        assert "hf-api:latest" in names
        assert generate(live_server, "hf-api")["done"]
    finally:
        live_server.api("DELETE", "/api/delete", json={"model": "hf-api"})


def test_create_converted_and_quantized(live_server: LiveServer, hf_llama: Path, tmp_path: Path) -> None:
    result = create_from_modelfile(live_server, "hf-q4", tmp_path, f"FROM {hf_llama}\n", "--quantize", "q4_K_M")
    try:
        assert result.exit_code == 0, result.output
        lines = [line.strip() for line in result.stderr.splitlines()]
        assert "converting model" in lines
        assert any(line.startswith("quantizing F16 model to Q4_K_M") for line in lines)
        show = live_server.api("POST", "/api/show", json={"model": "hf-q4"}).json()
        assert show["details"]["quantization_level"] == "Q4_K_M"
        assert generate(live_server, "hf-q4")["done"]
    finally:
        ollama(live_server, "rm", "hf-q4")


def copy_dir(src: Path, dst: Path, *, drop: tuple[str, ...] = ()) -> Path:
    dst.mkdir(parents=True)
    for p in src.iterdir():
        if p.is_file() and p.name not in drop:
            (dst / p.name).write_bytes(p.read_bytes())
    return dst


def test_pytorch_bin_checkpoint_is_converted_too(live_server: LiveServer, hf_llama: Path, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import load_file

    d = copy_dir(hf_llama, tmp_path / "bin-model", drop=("model.safetensors",))
    torch.save(load_file(str(hf_llama / "model.safetensors")), d / "pytorch_model.bin")
    result = create_from_modelfile(live_server, "hf-bin", tmp_path, "FROM ./bin-model\n")
    try:
        assert result.exit_code == 0, result.output
        show = live_server.api("POST", "/api/show", json={"model": "hf-bin"}).json()
        assert show["model_info"]["general.parameter_count"] == 2 * 25_600 + 2 * 36_992 + 64
        assert generate(live_server, "hf-bin")["done"]
    finally:
        ollama(live_server, "rm", "hf-bin")


def test_unknown_architecture_is_a_400_naming_it(live_server: LiveServer, hf_llama: Path, tmp_path: Path) -> None:
    d = copy_dir(hf_llama, tmp_path / "odd")
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, "architectures": ["TotallyNewForCausalLM"]}))
    r = create_from_files(live_server, "hf-odd", d)
    assert r.status_code == 400
    assert r.json() == {"error": 'unsupported architecture "TotallyNewForCausalLM"'}
    result = create_from_modelfile(live_server, "hf-odd", tmp_path, "FROM ./odd\n")
    assert (result.exit_code, result.stderr.splitlines()[-1]) == (
        1, 'Error: unsupported architecture "TotallyNewForCausalLM"')
    assert live_server.api("POST", "/api/show", json={"model": "hf-odd"}).status_code == 404


def test_a_directory_without_weights_is_refused(live_server: LiveServer, hf_llama: Path, tmp_path: Path) -> None:
    d = copy_dir(hf_llama, tmp_path / "no-weights", drop=("model.safetensors",))
    r = create_from_files(live_server, "hf-none", d)
    assert r.status_code == 400
    assert r.json()["error"].startswith("no model weights were found")
    (tmp_path / "empty").mkdir()
    result = create_from_modelfile(live_server, "hf-none", tmp_path, "FROM ./empty\n")
    assert result.exit_code == 1 and "no model files found in" in result.stderr


def test_weights_without_config_or_as_lfs_pointers_are_refused(live_server: LiveServer, hf_llama: Path,
                                                                tmp_path: Path) -> None:
    d = copy_dir(hf_llama, tmp_path / "no-config", drop=("config.json",))
    r = create_from_files(live_server, "hf-bad", d)
    assert (r.status_code, r.json()["error"]) == (
        400, "config.json is missing: a safetensors model directory needs its config.json")
    d = copy_dir(hf_llama, tmp_path / "lfs")
    (d / "model.safetensors").write_text("version https://git-lfs.github.com/spec/v1\noid sha256:ab\nsize 503144\n")
    r = create_from_files(live_server, "hf-bad", d)
    assert (r.status_code, r.json()["error"]) == (
        400, "model.safetensors is a Git LFS pointer, not the weights: fetch it with `git lfs pull`")


def test_a_failed_conversion_leaves_no_blob_behind(live_server: LiveServer, hf_llama: Path, tmp_path: Path) -> None:
    d = copy_dir(hf_llama, tmp_path / "broken")
    data = (d / "model.safetensors").read_bytes()
    (d / "model.safetensors").write_bytes(data[: len(data) // 2])  # a download cut short
    files = {p.name: upload_blob(live_server.url, p) for p in sorted(d.iterdir())}
    blobs = live_server.models_dir / "blobs"
    before = {p.name for p in blobs.iterdir()}
    r = live_server.api("POST", "/api/create", json={"model": "hf-broken", "files": files}, stream=True)
    lines = [json.loads(line) for line in r.iter_lines() if line]
    assert {"status": "converting model"} in lines
    assert lines[-1]["error"].startswith("converting model failed")
    assert {p.name for p in blobs.iterdir()} == before
    assert live_server.api("POST", "/api/show", json={"model": "hf-broken"}).status_code == 404


def test_lora_adapter_directory_converts_and_changes_the_answer(live_server: LiveServer, hf_llama: Path,
                                                                 hf_lora: Path, tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "tuned").mkdir()
    base = create_from_modelfile(live_server, "hf-base", tmp_path / "base", f"FROM {hf_llama}\n")
    tuned = create_from_modelfile(live_server, "hf-tuned", tmp_path / "tuned", f"FROM {hf_llama}\nADAPTER {hf_lora}\n")
    try:
        assert base.exit_code == 0, base.output
        assert tuned.exit_code == 0, tuned.output
        assert "converting adapter" in [line.strip() for line in tuned.stderr.splitlines()]
        show = live_server.api("POST", "/api/show", json={"model": "hf-tuned"}).json()
        assert "\nADAPTER " in show["modelfile"]
        plain, adapted = generate(live_server, "hf-base"), generate(live_server, "hf-tuned")
        assert plain["done"] and adapted["done"]
        assert adapted["response"] != plain["response"]  # the adapter is applied (llama-server --lora)
    finally:
        ollama(live_server, "rm", "hf-base")
        ollama(live_server, "rm", "hf-tuned")


def test_lora_adapter_on_an_existing_model(live_server: LiveServer, hf_llama: Path, hf_lora: Path,
                                           tmp_path: Path) -> None:
    """FROM a model already in the store: the LoRA converter gets a config.json made from its GGUF metadata."""
    (tmp_path / "base").mkdir()
    assert create_from_modelfile(live_server, "hf-base2", tmp_path / "base", f"FROM {hf_llama}\n").exit_code == 0
    result = create_from_modelfile(live_server, "hf-tuned2", tmp_path, f"FROM hf-base2\nADAPTER {hf_lora}\n")
    try:
        assert result.exit_code == 0, result.output
        show = live_server.api("POST", "/api/show", json={"model": "hf-tuned2"}).json()
        assert "\nADAPTER " in show["modelfile"] and show["details"]["parent_model"] == "hf-base2:latest"
        assert generate(live_server, "hf-tuned2")["done"]
    finally:
        ollama(live_server, "rm", "hf-base2")
        ollama(live_server, "rm", "hf-tuned2")


def test_chat_template_from_tokenizer_config_becomes_the_template(live_server: LiveServer, hf_llama: Path,
                                                                  tmp_path: Path) -> None:
    """Older transformers keep the chat template in tokenizer_config.json instead of chat_template.jinja."""
    d = copy_dir(hf_llama, tmp_path / "older", drop=("chat_template.jinja",))
    template = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant] "
    config = json.loads((d / "tokenizer_config.json").read_text())
    (d / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    result = create_from_modelfile(live_server, "hf-older", tmp_path, "FROM ./older\n")
    try:
        assert result.exit_code == 0, result.output
        assert live_server.api("POST", "/api/show", json={"model": "hf-older"}).json()["template"] == template
        r = live_server.api("POST", "/api/chat", json={
            "model": "hf-older", "messages": [{"role": "user", "content": "hi"}], "stream": False,
            "options": {"num_predict": 4, "temperature": 0}})
        assert r.status_code == 200 and r.json()["done"], r.text
    finally:
        ollama(live_server, "rm", "hf-older")


def test_sentence_transformers_dense_layers_are_gathered_and_converted(live_server: LiveServer,
                                                                       tmp_path: Path) -> None:
    """An EmbeddingGemma-style directory: 2_Dense/ and 3_Dense/ (one directory down, listed in modules.json) are
    uploaded and converted into the GGUF. (Embedding with it is not asserted: the pinned llama-server aborts on
    this tiny gemma-embedding model, GGML_ASSERT(buffer) in llm_graph_input_attn_no_cache::set_input.)"""
    from tests.fakes.hf_models import make_embedding_gemma_dir

    make_embedding_gemma_dir(tmp_path / "embedder")
    result = create_from_modelfile(live_server, "hf-embed", tmp_path, "FROM ./embedder\n")
    try:
        assert result.exit_code == 0, result.output
        show = live_server.api("POST", "/api/show", json={"model": "hf-embed"}).json()
        assert show["capabilities"] == ["embedding"]
        info = show["model_info"]
        assert info["general.architecture"] == "gemma-embedding"
        assert (info["gemma-embedding.dense_2_feat_in"], info["gemma-embedding.dense_2_feat_out"]) == (64, 128)
        assert (info["gemma-embedding.dense_3_feat_in"], info["gemma-embedding.dense_3_feat_out"]) == (128, 64)
    finally:
        ollama(live_server, "rm", "hf-embed")


# -- no model code runs (issue 34 item 1) ----------------------------------------------------------------------

def test_tokenizer_code_named_by_auto_map_never_runs(live_server: LiveServer, tmp_path: Path) -> None:
    """QWenLMHeadModel: llama.cpp's converter asks transformers for the tokenizer with trust_remote_code=True
    (_set_vocab_qwen). A tokenizer_config.json whose auto_map names an uploaded tokenization_x.py made that code run
    as the serve user; now the .py never reaches the converter, auto_map is removed, remote code is off: a 400."""
    marker = tmp_path / "PWNED"
    d = tmp_path / "qwen-evil"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({
        "architectures": ["QWenLMHeadModel"], "model_type": "qwen", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 256, "vocab_size": 512, "seq_length": 256,
        "max_position_embeddings": 256, "layer_norm_epsilon": 1e-6, "rotary_emb_base": 10000, "kv_channels": 16,
        "rotary_pct": 1.0}))
    (d / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "QWenTokenizer", "auto_map": {"AutoTokenizer": ["tokenization_x.QWenTokenizer", None]}}))
    (d / "tokenization_x.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nclass QWenTokenizer: pass\n")
    (d / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    r = create_from_files(live_server, "qwen-evil", d)
    assert not marker.exists()
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith("this model needs its own Python code (auto_map in tokenizer_config.json)")


def test_a_pickled_pytorch_checkpoint_never_runs(live_server: LiveServer, hf_llama: Path, tmp_path: Path) -> None:
    """A pytorch_model.bin whose pickle calls os.system when loaded: the converter's torch.load(weights_only=True)
    refuses it, and the client hears why."""
    import torch

    marker = tmp_path / "PWNED"

    class Payload:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    d = copy_dir(hf_llama, tmp_path / "pickled", drop=("model.safetensors",))
    torch.save({"model.embed_tokens.weight": Payload()}, d / "pytorch_model.bin")
    r = create_from_files(live_server, "hf-pickled", d)
    assert not marker.exists()
    assert (r.status_code, r.json()["error"]) == (400, "a PyTorch weights file holds more than tensors (pickled "
                                                       "objects that would run code when loaded), so it is never "
                                                       "loaded: save the weights as safetensors")
