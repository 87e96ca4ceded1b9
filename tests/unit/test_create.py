"""/api/create in the store: layers, config, progress, errors before writing, and crash consistency."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from ollama_py.api.names import parse_name
from ollama_py.errors import BadRequest, InvalidModelName, InvalidOption, ModelNotFound, NotFound, OllamaError
from ollama_py.store.create import create_model
from ollama_py.store.gguf_meta import read_gguf_info
from ollama_py.store.manifests import Manifest
from ollama_py.store.models import ModelStore
from ollama_py.store.quantize import make_quantizer, normalize_qtype
from tests.fakes.gguf_files import write_llama_gguf

TEMPLATE = "{{ if .System }}<|system|>{{ .System }}{{ end }}<|user|>{{ .Prompt }}<|assistant|>"
MEDIA = "application/vnd.ollama.image."


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path / "models")


@pytest.fixture
def f16(tmp_path: Path) -> Path:
    return write_llama_gguf(tmp_path / "tiny-f16.gguf")


def upload(store: ModelStore, path: Path) -> str:
    with path.open("rb") as f:
        digest, _ = store.blobs.write_from(f)
    return digest


def run(store: ModelStore, name: str, req: dict, **kw) -> list[dict]:
    return list(create_model(store, parse_name(name), req, **kw))


def snapshot(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} if root.exists() else set()


def test_create_from_uploaded_gguf(store: ModelStore, f16: Path) -> None:
    weights = upload(store, f16)
    req = {
        "files": {"tiny-f16.gguf": weights},
        "template": TEMPLATE,
        "system": "You are terse.",
        "parameters": {"temperature": 0.3, "num_ctx": "512", "stop": ["<|user|>", "<|end|>"]},
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
        "license": ["MIT", "Apache-2.0"],
    }
    progress = run(store, "tiny", req)
    statuses = [p["status"] for p in progress]
    assert statuses[0] == "parsing GGUF"
    assert statuses[1] == f"using existing layer {weights}"
    assert all(s.startswith("creating new layer sha256:") for s in statuses[2:8])
    assert statuses[-2:] == ["writing manifest", "success"]

    manifest = store.manifests.get(parse_name("tiny"))
    kinds = [layer.media_type.removeprefix(MEDIA) for layer in manifest.layers]
    assert kinds == ["model", "template", "system", "params", "messages", "license", "license"]
    assert [layer.digest for layer in manifest.layers] == [s.split()[-1] for s in statuses[1:-2]]

    config = json.loads(store.blobs.path(manifest.config.digest).read_bytes())
    assert config == {
        "model_format": "gguf", "model_family": "llama", "model_families": ["llama"], "model_type": "45K",
        "file_type": "F16", "architecture": "amd64", "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": [layer.digest for layer in manifest.layers]},
    }

    model = store.load(parse_name("tiny"))
    assert model.template == TEMPLATE
    assert model.system == "You are terse."
    assert model.params == {"num_ctx": 512, "stop": ["<|user|>", "<|end|>"], "temperature": 0.3}
    assert model.messages == req["messages"]
    assert model.licenses == ["MIT", "Apache-2.0"]
    assert model.model_path == store.blobs.path(weights)
    assert model.details == {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                             "parameter_size": "45K", "quantization_level": "F16"}
    assert [m["name"] for m in store.list_models()] == ["tiny:latest"]


def test_create_twice_reuses_every_layer(store: ModelStore, f16: Path) -> None:
    req = {"files": {"m.gguf": upload(store, f16)}, "system": "same"}
    run(store, "a", req)
    progress = run(store, "b", req)
    layers = [p["status"] for p in progress if "layer" in p["status"]]
    assert layers and all(s.startswith("using existing layer") for s in layers)
    assert store.manifests.get(parse_name("a")).raw == store.manifests.get(parse_name("b")).raw


def test_create_from_another_model(store: ModelStore, f16: Path) -> None:
    run(store, "base", {"files": {"m.gguf": upload(store, f16)}, "template": TEMPLATE, "system": "base system",
                        "parameters": {"temperature": 0.5, "top_k": 10}, "license": "MIT"})
    base = store.manifests.get(parse_name("base"))
    progress = run(store, "me/derived:v1", {"from": "BASE", "system": "derived system",
                                            "parameters": {"temperature": 0.9}})
    derived = store.load(parse_name("me/derived:v1"))
    assert derived.template == TEMPLATE
    assert derived.system == "derived system"
    assert derived.params == {"temperature": 0.9, "top_k": 10}
    assert derived.licenses == ["MIT"]
    assert derived.model_path == store.load(parse_name("base")).model_path
    assert derived.details["parent_model"] == "base:latest"
    assert "parsing GGUF" not in [p["status"] for p in progress]
    weights = base.layers_of(MEDIA + "model")[0].digest
    assert f"using existing layer {weights}" in [p["status"] for p in progress]
    kinds = [layer.media_type.removeprefix(MEDIA) for layer in derived.manifest.layers]
    assert kinds == ["model", "template", "system", "params", "license"]
    # the base is untouched
    assert store.manifests.get(parse_name("base")) == base


def test_recreate_prunes_layers_only_the_old_version_used(store: ModelStore, f16: Path) -> None:
    weights = upload(store, f16)
    run(store, "m", {"files": {"m.gguf": weights}, "system": "old"})
    old_system = store.manifests.get(parse_name("m")).layers_of(MEDIA + "system")[0].digest
    run(store, "m", {"files": {"m.gguf": weights}, "system": "new"})
    assert not store.blobs.exists(old_system)
    assert store.blobs.exists(weights)
    assert store.load(parse_name("m")).system == "new"


def test_recreate_keeps_old_layers_when_prune_is_off(store: ModelStore, f16: Path) -> None:
    weights = upload(store, f16)
    run(store, "m", {"files": {"m.gguf": weights}, "system": "old"})
    old_system = store.manifests.get(parse_name("m")).layers_of(MEDIA + "system")[0].digest
    run(store, "m", {"files": {"m.gguf": weights}, "system": "new"}, prune=False)
    assert store.blobs.exists(old_system)


def test_adapter_layer(store: ModelStore, f16: Path, tmp_path: Path) -> None:
    lora = upload(store, write_llama_gguf(tmp_path / "lora.gguf", general_type="adapter", seed=7))
    run(store, "with-lora", {"files": {"m.gguf": upload(store, f16)}, "adapters": {"lora.gguf": lora}})
    model = store.load(parse_name("with-lora"))
    assert model.adapters == (store.blobs.path(lora),)
    kinds = [layer.media_type.removeprefix(MEDIA) for layer in model.manifest.layers]
    assert kinds == ["model", "adapter"]


def test_server_side_path_inside_an_import_dir(store: ModelStore, f16: Path, tmp_path: Path) -> None:
    progress = run(store, "local", {"from": str(f16)}, import_dirs=[tmp_path])
    assert [p["status"] for p in progress][:2] == ["copying file", "parsing GGUF"]
    assert store.load(parse_name("local")).model_path.read_bytes() == f16.read_bytes()


NO_PATHS = ("is a path on the server, and none are allowed here (OLLAMA_PY_IMPORT_DIRS): upload the file as a blob "
            "(POST /api/blobs/:digest) and name it in files; ollama-py create does this for a FROM path")
OUTSIDE = NO_PATHS.replace("none are allowed here", "this one is outside the directories allowed")


def test_server_side_path_without_import_dirs_is_refused(store: ModelStore, f16: Path) -> None:
    """Issue 34 item 7: as Ollama's server, no server path by default, whoever asks (loopback included)."""
    before = snapshot(store.root)
    with pytest.raises(BadRequest) as e:
        create_model(store, parse_name("remote"), {"from": str(f16)})
    assert str(e.value) == f"from: {str(f16)!r} {NO_PATHS}"
    with pytest.raises(BadRequest, match="none are allowed here"):  # the same words whether it exists or not
        create_model(store, parse_name("remote"), {"from": "/etc/no-such-file.gguf"})
    assert snapshot(store.root) == before


def test_server_side_path_outside_the_import_dirs_is_refused(store: ModelStore, f16: Path, tmp_path: Path) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    with pytest.raises(BadRequest) as e:
        create_model(store, parse_name("x"), {"from": str(f16)}, import_dirs=[allowed])
    assert str(e.value) == f"from: {str(f16)!r} {OUTSIDE}"
    with pytest.raises(BadRequest, match="outside the directories allowed"):  # `..` does not climb out either
        create_model(store, parse_name("x"), {"from": f"{allowed}/../{f16.name}"}, import_dirs=[allowed])


@pytest.mark.parametrize("link", ["file", "directory", "file-in-directory"])
def test_symlinks_out_of_an_import_dir_are_refused(store: ModelStore, f16: Path, tmp_path: Path, link: str) -> None:
    allowed = tmp_path / "allowed"
    allowed.mkdir()
    if link == "file":
        (allowed / "m.gguf").symlink_to(f16)
        source = allowed / "m.gguf"
    elif link == "directory":
        (allowed / "models").symlink_to(tmp_path)  # tmp_path holds tiny-f16.gguf
        source = allowed / "models"
    else:  # a model directory inside whose GGUF is a link to a file outside
        (allowed / "d").mkdir()
        (allowed / "d" / "model.gguf").symlink_to(f16)
        source = allowed / "d"
    with pytest.raises(BadRequest, match="outside the directories allowed"):
        create_model(store, parse_name("x"), {"from": str(source)}, import_dirs=[allowed])
    assert store.manifests.resolve(parse_name("x")) is None


def test_a_long_server_path_is_not_echoed_whole(store: ModelStore) -> None:
    with pytest.raises(BadRequest) as e:
        create_model(store, parse_name("x"), {"from": "/" + "a" * 100_000})
    assert len(str(e.value)) < 500


ERRORS = {
    "nothing": ({}, BadRequest, "neither 'from' or 'files' was specified"),
    "empty files": ({"files": {}}, BadRequest, "neither 'from' or 'files' was specified"),
    "bad digest": ({"files": {"m.gguf": "sha256:123"}}, BadRequest, "invalid digest format"),
    "missing blob": ({"files": {"m.gguf": "sha256:" + "0" * 64}}, NotFound, f"blob sha256:{'0' * 64} not found"),
    "absolute file": ({"files": {"/etc/m.gguf": "WEIGHTS"}}, BadRequest, "file path must be relative"),
    "dotdot file": ({"files": {"../m.gguf": "WEIGHTS"}}, BadRequest, "file path must be relative"),
    "not gguf": ({"files": {"notes.txt": "TEXT"}}, BadRequest, "supplied file was not in GGUF format"),
    "two adapters": ({"files": {"m.gguf": "WEIGHTS"}, "adapters": {"a.gguf": "WEIGHTS", "b.gguf": "TEXT"}},
                     BadRequest, "only one adapter is currently supported"),
    "unknown quant": ({"files": {"m.gguf": "WEIGHTS"}, "quantize": "q9_9"}, BadRequest,
                      "unsupported quantization type q9_9"),
    "quantize a quantized model": ({"files": {"m.gguf": "Q8"}, "quantize": "q4_K_M"}, BadRequest,
                                   "quantization is only supported for F16, BF16 and F32 models"),
    "unknown parameter": ({"files": {"m.gguf": "WEIGHTS"}, "parameters": {"temprature": 1}}, InvalidOption,
                          "unknown parameter 'temprature'"),
    "bad float": ({"files": {"m.gguf": "WEIGHTS"}, "parameters": {"temperature": "hot"}}, InvalidOption,
                  "invalid float value [hot]"),
    "wrong json type": ({"files": {"m.gguf": "WEIGHTS"}, "parameters": {"num_ctx": True}}, InvalidOption,
                        'option "num_ctx" must be of type integer'),
    "license type": ({"files": {"m.gguf": "WEIGHTS"}, "license": 5}, BadRequest, "unknown license type: int"),
    "messages type": ({"files": {"m.gguf": "WEIGHTS"}, "messages": "hi"}, BadRequest, "messages must be an array"),
    "missing from": ({"from": "ghost"}, ModelNotFound, "model 'ghost:latest' not found"),
    "invalid from": ({"from": "../../etc"}, InvalidModelName, "invalid model name"),
    "only an adapter": ({"files": {"a.gguf": "ADAPTER"}}, BadRequest, "no model file was provided"),
    "template with an unknown function": ({"files": {"m.gguf": "WEIGHTS"}, "template": "{{ .Prompt | shout }}"},
                                          BadRequest, 'template error: template: :1: function "shout" not defined'),
    "template left open": ({"files": {"m.gguf": "WEIGHTS"}, "template": "{{ if .System }}{{ .System }}"},
                           BadRequest, "template error: template: :1: unexpected EOF"),
}


@pytest.mark.parametrize(("req", "exc", "message"), list(ERRORS.values()), ids=list(ERRORS))
def test_errors_before_anything_is_written(store: ModelStore, f16: Path, tmp_path: Path, req: dict,
                                           exc: type[Exception], message: str) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("not a model")
    ids = {
        "WEIGHTS": upload(store, f16),
        "TEXT": upload(store, text),
        "Q8": upload(store, write_llama_gguf(tmp_path / "q8.gguf", file_type=7, seed=3)),
        "ADAPTER": upload(store, write_llama_gguf(tmp_path / "a.gguf", general_type="adapter", seed=4)),
    }
    for key in ("files", "adapters"):
        if key in req:
            req = {**req, key: {k: ids.get(v, v) for k, v in req[key].items()}}
    before = snapshot(store.root)
    with pytest.raises(exc) as err:
        create_model(store, parse_name("x"), req, quantizer=lambda *a: Path("/nonexistent"))
    assert str(err.value) == message
    assert err.value.status in (400, 404)
    assert snapshot(store.root) == before


def test_quantize_without_a_quantizer_is_refused_up_front(store: ModelStore, f16: Path) -> None:
    with pytest.raises(BadRequest, match="quantization is not available"):
        create_model(store, parse_name("x"), {"files": {"m.gguf": upload(store, f16)}, "quantize": "q8_0"})


def test_interrupted_create_leaves_no_manifest_and_prune_cleans_up(store: ModelStore, f16: Path) -> None:
    weights = upload(store, f16)
    run(store, "keep", {"files": {"m.gguf": weights}})
    before_blobs = store.blobs.digests()
    it = create_model(store, parse_name("half"), {"files": {"m.gguf": weights}, "system": "never finished",
                                                  "template": TEMPLATE})
    for progress in it:
        if progress["status"] == "writing manifest":
            break  # the client (or the process) dies here, before the manifest is put
    it.close()
    assert store.manifests.resolve(parse_name("half")) is None
    assert store.blobs.digests() > before_blobs  # small layers and config were written...
    store.prune()
    assert store.blobs.digests() == before_blobs  # ...and a start-up prune takes them away
    assert store.load(parse_name("keep")).model_path.is_file()


def test_manifest_is_never_written_over_missing_blobs(store: ModelStore, f16: Path) -> None:
    weights = upload(store, f16)
    it = create_model(store, parse_name("racy"), {"files": {"m.gguf": weights}})
    for progress in it:
        if progress["status"] == "writing manifest":
            store.blobs.delete(weights)  # a concurrent delete took the weights meanwhile
            break
    with pytest.raises(OllamaError, match="not found"):
        next(it)
    assert store.manifests.resolve(parse_name("racy")) is None


def fake_quantizer(calls: list[tuple[str, int]]):
    """Stands in for llama-quantize: reports three tensors and writes a Q8_0-labelled GGUF."""

    def quantize(src: Path, dst_dir: Path, qtype: str, progress) -> Path:
        calls.append((qtype, src.stat().st_size))
        for i in range(1, 4):
            progress(i, 3)
        return write_llama_gguf(dst_dir / "sha256-tmp-quantize-test", file_type=7, seed=11)

    return quantize


def test_quantize_progress_and_result(store: ModelStore, f16: Path) -> None:
    calls: list[tuple[str, int]] = []
    progress = run(store, "q", {"files": {"m.gguf": upload(store, f16)}, "quantize": "q8_0"},
                   quantizer=fake_quantizer(calls))
    assert calls == [("Q8_0", f16.stat().st_size)]
    steps = [p for p in progress if p["status"].startswith("quantizing")]
    size = f16.stat().st_size
    assert steps == [{"status": "quantizing F16 model to Q8_0", "digest": "0000000000000000000", "total": size,
                      "completed": size * i // 3} for i in (1, 2, 3)]
    statuses = [p["status"] for p in progress]
    assert statuses.index("verifying conversion") > statuses.index("quantizing F16 model to Q8_0")
    model = store.load(parse_name("q"))
    assert model.details["quantization_level"] == "Q8_0"
    assert any(s.startswith("creating new layer") for s in statuses)
    assert not list(store.blobs.dir.glob("sha256-tmp-*"))


def test_quantize_to_the_same_type_is_a_no_op(store: ModelStore, tmp_path: Path) -> None:
    f32 = write_llama_gguf(tmp_path / "f32.gguf", file_type=0)
    calls: list[tuple[str, int]] = []
    run(store, "same", {"files": {"m.gguf": upload(store, f32)}}, quantizer=fake_quantizer(calls))
    assert calls == []


def test_failed_quantization_writes_no_manifest(store: ModelStore, f16: Path) -> None:
    def broken(src: Path, dst_dir: Path, qtype: str, progress) -> Path:
        progress(1, 2)
        raise OllamaError("llama-quantize failed (exit status 1): boom")

    it = create_model(store, parse_name("broken"), {"files": {"m.gguf": upload(store, f16)}, "quantize": "Q4_0"},
                      quantizer=broken)
    with pytest.raises(OllamaError, match="boom"):
        list(it)
    assert store.manifests.resolve(parse_name("broken")) is None


@pytest.mark.parametrize(("given", "canonical"), [("q4_k_m", "Q4_K_M"), ("Q8_0", "Q8_0"), ("q3_K_l", "Q3_K_L"),
                                                   (" q6_k ", "Q6_K")], ids=lambda v: v.strip())
def test_normalize_qtype(given: str, canonical: str) -> None:
    assert normalize_qtype(given) == canonical


@pytest.mark.integration
def test_quantize_f16_to_q8_0_with_llama_quantize(store: ModelStore, f16: Path) -> None:
    binary = os.environ.get("OLLAMA_PY_TEST_QUANTIZE")
    if not binary:
        pytest.fail("OLLAMA_PY_TEST_QUANTIZE is not set: point it at a built llama-quantize "
                    "(runners/<variant>/llama-quantize); the Makefile sets it")
    assert shutil.which(binary) or Path(binary).is_file(), f"{binary} does not exist"
    progress = run(store, "tiny:q8_0", {"files": {"tiny-f16.gguf": upload(store, f16)}, "quantize": "q8_0"},
                   quantizer=make_quantizer(Path(binary)))
    steps = [p for p in progress if p["status"] == "quantizing F16 model to Q8_0"]
    assert len(steps) == 12  # one per tensor
    assert steps[-1]["completed"] == steps[-1]["total"] == f16.stat().st_size
    assert progress[-1] == {"status": "success"}
    model = store.load(parse_name("tiny:q8_0"))
    info = read_gguf_info(model.model_path)
    assert info.quantization_level == "Q8_0"
    assert ("blk.0.attn_q.weight", "Q8_0", [64, 64]) in info.tensors
    assert model.details["quantization_level"] == "Q8_0"
    assert model.model_path.stat().st_size < f16.stat().st_size
    assert isinstance(Manifest.parse(store.manifests.path(model.name).read_bytes()), Manifest)
    assert not list(store.blobs.dir.glob("sha256-tmp-*"))


# -- quantize() against a stand-in llama-quantize ---------------------------------------------------------

FAKE_TOOL = """#!{python}
import sys, time
src, out, qtype = sys.argv[1:4]
mode = {mode!r}
for i in range(1, 5):
    print(f"[{{i:4d}}/{{4:4d}}] blk.{{i}}.weight - [ 64, 64, 1, 1], type = f16, converting to " + qtype.lower(),
          file=sys.stderr, flush=True)
    if mode == "slow":
        time.sleep(0.2)
if mode == "fail":
    print("llama_model_quantize: failed to quantize: boom", file=sys.stderr)
    sys.exit(1)
open(out, "wb").write(b"quantized " + qtype.encode())
"""


def fake_tool(tmp_path: Path, mode: str = "ok") -> Path:
    import sys

    tool = tmp_path / f"llama-quantize-{mode}"
    tool.write_text(FAKE_TOOL.format(python=sys.executable, mode=mode))
    tool.chmod(0o755)
    return tool


def test_quantize_runs_the_tool_and_reports_each_tensor(tmp_path: Path, f16: Path) -> None:
    from ollama_py.store.quantize import quantize

    seen: list[tuple[int, int]] = []
    out = quantize(f16, tmp_path / "blobs", "q4_k_m", fake_tool(tmp_path), lambda n, m: seen.append((n, m)))
    assert seen == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert out.parent == tmp_path / "blobs" and out.name.startswith("sha256-tmp-quantize-")
    assert out.read_bytes() == b"quantized Q4_K_M"


def test_quantize_failure_carries_the_tools_words_and_leaves_nothing(tmp_path: Path, f16: Path) -> None:
    from ollama_py.store.quantize import quantize

    with pytest.raises(OllamaError, match="exit status 1.*boom"):
        quantize(f16, tmp_path / "blobs", "q8_0", fake_tool(tmp_path, "fail"), lambda n, m: None)
    assert list((tmp_path / "blobs").iterdir()) == []


def test_quantize_stops_the_tool_when_progress_raises(tmp_path: Path, f16: Path) -> None:
    from ollama_py.errors import RequestCanceled
    from ollama_py.store.quantize import quantize

    def cancel(n: int, m: int) -> None:
        raise RequestCanceled()

    with pytest.raises(RequestCanceled):
        quantize(f16, tmp_path / "blobs", "q8_0", fake_tool(tmp_path, "slow"), cancel)
    assert list((tmp_path / "blobs").iterdir()) == []


def test_quantize_without_the_tool(tmp_path: Path, f16: Path) -> None:
    from ollama_py.store.quantize import quantize

    with pytest.raises(OllamaError, match="quantization is not available"):
        quantize(f16, tmp_path / "blobs", "q8_0", tmp_path / "missing", lambda n, m: None)


def test_create_closed_mid_quantize_stops_and_cleans_up(store: ModelStore, f16: Path, tmp_path: Path) -> None:
    it = create_model(store, parse_name("q"), {"files": {"m.gguf": upload(store, f16)}, "quantize": "q8_0"},
                      quantizer=make_quantizer(fake_tool(tmp_path, "slow")))
    for progress in it:
        if progress["status"].startswith("quantizing"):
            break
    it.close()
    assert store.manifests.resolve(parse_name("q")) is None
    assert not list(store.blobs.dir.glob("sha256-tmp-*"))


# -- draft_quantize (create --draft-quantize): the DRAFT layer quantized as quantize does the model -------------

def test_draft_quantize_quantizes_the_draft_and_leaves_the_model(store: ModelStore, f16: Path, tmp_path: Path) -> None:
    calls: list[tuple] = []
    draft = write_llama_gguf(tmp_path / "draft-f16.gguf", seed=1)
    progress = run(store, "spec", {"files": {"m.gguf": upload(store, f16)},
                                   "draft_files": {"d.gguf": upload(store, draft)}, "draft_quantize": "q8_0"},
                   quantizer=fake_quantizer(calls))
    assert [c[0] for c in calls] == ["Q8_0"]
    assert any(p["status"] == "quantizing F16 draft model to Q8_0" for p in progress)
    assert not any(p["status"].startswith("quantizing F16 model") for p in progress)
    model = store.load(parse_name("spec"))
    assert model.draft_path is not None and model.draft_path.read_bytes() != draft.read_bytes()
    assert model.model_path.read_bytes() == f16.read_bytes()


def test_draft_quantize_without_a_draft_is_refused(store: ModelStore, f16: Path) -> None:
    with pytest.raises(BadRequest, match="^--draft-quantize requires a DRAFT model$"):
        run(store, "x", {"files": {"m.gguf": upload(store, f16)}, "draft_quantize": "q8_0"},
            quantizer=fake_quantizer([]))


def test_draft_quantize_of_a_quantized_draft_is_refused(store: ModelStore, f16: Path, tmp_path: Path) -> None:
    q4 = write_llama_gguf(tmp_path / "q4.gguf", file_type=3, seed=2)  # MOSTLY_Q4_1 by its header
    with pytest.raises(BadRequest, match="only supported for F16, BF16 and F32 draft models"):
        run(store, "x", {"files": {"m.gguf": upload(store, f16)}, "draft_files": {"d.gguf": upload(store, q4)},
                         "draft_quantize": "q8_0"}, quantizer=fake_quantizer([]))


@pytest.mark.integration
def test_draft_quantize_with_llama_quantize(store: ModelStore, f16: Path, tmp_path: Path) -> None:
    binary = os.environ.get("OLLAMA_PY_TEST_QUANTIZE")
    if not binary:
        pytest.fail("OLLAMA_PY_TEST_QUANTIZE is not set: point it at a built llama-quantize; the Makefile sets it")
    draft = write_llama_gguf(tmp_path / "draft-f16.gguf", seed=1)
    run(store, "spec:q8", {"files": {"m.gguf": upload(store, f16)}, "draft_files": {"d.gguf": upload(store, draft)},
                           "draft_quantize": "Q8_0"}, quantizer=make_quantizer(Path(binary)))
    model = store.load(parse_name("spec:q8"))
    assert model.draft_path is not None
    assert read_gguf_info(model.draft_path).quantization_level == "Q8_0"
    assert read_gguf_info(model.model_path).quantization_level == "F16"
    assert model.details["quantization_level"] == "F16"


def test_a_huge_draft_name_is_not_echoed_whole(store: ModelStore, f16: Path) -> None:
    with pytest.raises(ModelNotFound) as e:
        create_model(store, parse_name("x"), {"files": {"m.gguf": upload(store, f16)}, "draft": "d" * 1_000_000})
    assert len(str(e.value)) < 300
