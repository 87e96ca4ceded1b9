"""The model store over a directory laid out by hand exactly as Ollama lays out ~/.ollama/models."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
from pathlib import Path

import pytest

from ollama_py.api.names import parse_name
from ollama_py.errors import ModelNotFound
from ollama_py.store.models import ModelStore
from tests.fakes.gguf_files import write_gguf, write_llama_gguf

TEMPLATE = "{{ if .System }}<|system|>{{ .System }}{{ end }}<|user|>{{ .Prompt }}<|assistant|>{{ .Response }}"
TOOLS_TEMPLATE = "{{ if .Tools }}tools: {{ range .Tools }}{{ . }}{{ end }}{{ end }}{{ .Prompt }}"


class OllamaStoreWriter:
    """Writes blobs and manifests the way Ollama does: sha256-<hex> files and compact v2 JSON."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "blobs").mkdir(parents=True, exist_ok=True)

    def blob(self, data: bytes) -> dict:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        (self.root / "blobs" / digest.replace(":", "-")).write_bytes(data)
        return {"digest": digest, "size": len(data)}

    def model(self, name_path: str, gguf_bytes: bytes, *, template: str | None = None, system: str | None = None,
              params: dict | None = None, messages: list | None = None, licenses: tuple[str, ...] = (),
              projector: bytes | None = None, family: str = "llama", mtime: float | None = None) -> str:
        layers = [{"mediaType": "application/vnd.ollama.image.model", **self.blob(gguf_bytes)}]
        if projector is not None:
            layers.append({"mediaType": "application/vnd.ollama.image.projector", **self.blob(projector)})
        if template is not None:
            layers.append({"mediaType": "application/vnd.ollama.image.template", **self.blob(template.encode())})
        if system is not None:
            layers.append({"mediaType": "application/vnd.ollama.image.system", **self.blob(system.encode())})
        if params is not None:
            layers.append({"mediaType": "application/vnd.ollama.image.params",
                           **self.blob(json.dumps(params).encode())})
        if messages is not None:
            layers.append({"mediaType": "application/vnd.ollama.image.messages",
                           **self.blob(json.dumps(messages).encode())})
        for text in licenses:
            layers.append({"mediaType": "application/vnd.ollama.image.license", **self.blob(text.encode())})
        config = {"model_format": "gguf", "model_family": family, "model_families": [family],
                  "model_type": "45K", "file_type": "F16", "architecture": "amd64", "os": "linux",
                  "rootfs": {"type": "layers", "diff_ids": [layer["digest"] for layer in layers]}}
        manifest = {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                    "config": {"mediaType": "application/vnd.docker.container.image.v1+json",
                               **self.blob(json.dumps(config).encode())},
                    "layers": layers}
        raw = (json.dumps(manifest, separators=(",", ":")) + "\n").encode()
        path = self.root / "manifests" / name_path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(raw)
        if mtime is not None:
            os.utime(path, (mtime, mtime))
        return hashlib.sha256(raw).hexdigest()


@pytest.fixture
def gguf_bytes(tmp_path: Path) -> bytes:
    return write_llama_gguf(tmp_path / "src.gguf").read_bytes()


@pytest.fixture
def ollama_dir(tmp_path: Path) -> Path:
    return tmp_path / "ollama-models"


@pytest.fixture
def writer(ollama_dir: Path) -> OllamaStoreWriter:
    return OllamaStoreWriter(ollama_dir)


def test_lists_an_ollama_store(writer: OllamaStoreWriter, ollama_dir: Path, gguf_bytes: bytes) -> None:
    older, newer = 1_700_000_000.0, 1_700_000_500.0
    d1 = writer.model("registry.ollama.ai/library/x/latest", gguf_bytes, template=TEMPLATE, mtime=older)
    d2 = writer.model("registry.ollama.ai/someone/y/v1", gguf_bytes, system="be brief", mtime=newer)
    listed = ModelStore(ollama_dir).list_models()
    assert [m["name"] for m in listed] == ["someone/y:v1", "x:latest"]  # newest first
    x = listed[1]
    assert x["model"] == "x:latest"
    assert x["digest"] == d1 and listed[0]["digest"] == d2
    assert dt.datetime.fromisoformat(x["modified_at"]).timestamp() == older
    assert dt.datetime.fromisoformat(x["modified_at"]).utcoffset() is not None
    blobs = ollama_dir / "blobs"
    manifest = json.loads((ollama_dir / "manifests/registry.ollama.ai/library/x/latest").read_bytes())
    expected_size = manifest["config"]["size"] + sum(layer["size"] for layer in manifest["layers"])
    assert x["size"] == expected_size
    assert x["size"] == sum((blobs / layer["digest"].replace(":", "-")).stat().st_size
                            for layer in [manifest["config"], *manifest["layers"]])
    assert x["details"] == {"parent_model": "", "format": "gguf", "family": "llama", "families": ["llama"],
                            "parameter_size": "45K", "quantization_level": "F16"}


def test_loads_an_ollama_model(writer: OllamaStoreWriter, ollama_dir: Path, gguf_bytes: bytes) -> None:
    writer.model("registry.ollama.ai/library/x/latest", gguf_bytes, template=TEMPLATE, system="You are terse.",
                 params={"temperature": 0.2, "stop": ["<|user|>", "<|end|>"]},
                 messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
                 licenses=("MIT", "Apache-2.0"))
    model = ModelStore(ollama_dir).load(parse_name("X"))
    assert model.name == parse_name("x")
    assert model.model_path is not None and model.model_path.read_bytes() == gguf_bytes
    assert model.template == TEMPLATE
    assert model.system == "You are terse."
    assert model.params == {"temperature": 0.2, "stop": ["<|user|>", "<|end|>"]}
    assert model.messages == [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert model.licenses == ["MIT", "Apache-2.0"]
    assert model.config["model_family"] == "llama"
    assert model.capabilities == ["completion"]
    assert model.details["quantization_level"] == "F16"
    assert model.adapters == () and model.projectors == ()
    assert ModelStore(ollama_dir).info(model).architecture == "llama"


def test_capabilities(writer: OllamaStoreWriter, ollama_dir: Path, gguf_bytes: bytes, tmp_path: Path) -> None:
    writer.model("registry.ollama.ai/library/tools/latest", gguf_bytes, template=TOOLS_TEMPLATE)
    writer.model("registry.ollama.ai/library/fim/latest", gguf_bytes, template="{{ .Prompt }}{{ .Suffix }}")
    writer.model("registry.ollama.ai/library/vision/latest", gguf_bytes, projector=b"mmproj")
    bert = write_gguf(tmp_path / "bert.gguf", "bert", {"bert.pooling_type": 1}).read_bytes()
    writer.model("registry.ollama.ai/library/embed/latest", bert, family="bert")
    store = ModelStore(ollama_dir)
    assert store.load(parse_name("tools")).capabilities == ["completion", "tools"]
    assert store.load(parse_name("fim")).capabilities == ["completion", "insert"]
    assert store.load(parse_name("vision")).capabilities == ["completion", "vision"]
    assert store.load(parse_name("embed")).capabilities == ["embedding"]


def test_missing_model(ollama_dir: Path) -> None:
    with pytest.raises(ModelNotFound) as exc:
        ModelStore(ollama_dir).load(parse_name("ghost"))
    assert str(exc.value) == "model 'ghost:latest' not found"


def test_copy_shares_blobs_and_digest(writer: OllamaStoreWriter, ollama_dir: Path, gguf_bytes: bytes) -> None:
    digest = writer.model("registry.ollama.ai/library/x/latest", gguf_bytes, template=TEMPLATE)
    store = ModelStore(ollama_dir)
    blobs_before = store.blobs.digests()
    store.copy(parse_name("x"), parse_name("me/x-copy:v2"))
    assert (ollama_dir / "manifests/registry.ollama.ai/me/x-copy/v2").read_bytes() == \
        (ollama_dir / "manifests/registry.ollama.ai/library/x/latest").read_bytes()
    assert {m["name"]: m["digest"] for m in store.list_models()} == {"x:latest": digest, "me/x-copy:v2": digest}
    assert store.blobs.digests() == blobs_before


def test_copy_of_missing_source(ollama_dir: Path) -> None:
    with pytest.raises(ModelNotFound) as exc:
        ModelStore(ollama_dir).copy(parse_name("ghost"), parse_name("other"))
    assert str(exc.value) == 'model "ghost:latest" not found'
    assert exc.value.status == 404


def test_delete_keeps_shared_blobs(writer: OllamaStoreWriter, ollama_dir: Path, gguf_bytes: bytes) -> None:
    writer.model("registry.ollama.ai/library/a/latest", gguf_bytes, system="I am A")
    writer.model("registry.ollama.ai/library/b/latest", gguf_bytes, system="I am B")
    store = ModelStore(ollama_dir)
    weights = "sha256:" + hashlib.sha256(gguf_bytes).hexdigest()
    system_a = "sha256:" + hashlib.sha256(b"I am A").hexdigest()
    removed = store.delete(parse_name("A"))
    assert system_a in removed and weights not in removed
    assert store.blobs.exists(weights)
    assert not store.blobs.exists(system_a)
    assert [m["name"] for m in store.list_models()] == ["b:latest"]
    assert store.load(parse_name("b")).system == "I am B"
    store.delete(parse_name("b"))
    assert store.blobs.digests() == set()
    assert not (ollama_dir / "manifests/registry.ollama.ai").exists()


def test_delete_missing(ollama_dir: Path) -> None:
    with pytest.raises(ModelNotFound):
        ModelStore(ollama_dir).delete(parse_name("ghost"))


def test_prune_at_startup(writer: OllamaStoreWriter, ollama_dir: Path, gguf_bytes: bytes) -> None:
    writer.model("registry.ollama.ai/library/a/latest", gguf_bytes, template=TEMPLATE)
    orphan = writer.blob(b"left over from a deleted model")["digest"]
    (ollama_dir / "blobs" / "sha256-tmp-123").write_bytes(b"interrupted upload")
    (ollama_dir / "blobs" / f"sha256-{'e' * 64}-partial").write_bytes(b"interrupted pull")
    stale_manifest = ollama_dir / "manifests/registry.ollama.ai/library/a/.tmp-9"
    stale_manifest.write_bytes(b"{")
    store = ModelStore(ollama_dir)
    referenced = store.manifests.referenced_digests()
    removed = store.prune()
    assert orphan.replace(":", "-") in removed
    assert "sha256-tmp-123" in removed
    assert not stale_manifest.exists()
    assert store.blobs.digests() == referenced
    assert store.load(parse_name("a")).template == TEMPLATE


def test_prune_keeps_blobs_when_a_manifest_is_unreadable(writer: OllamaStoreWriter, ollama_dir: Path,
                                                         gguf_bytes: bytes) -> None:
    writer.model("registry.ollama.ai/library/a/latest", gguf_bytes)
    orphan = writer.blob(b"maybe referenced by the broken manifest")["digest"]
    (ollama_dir / "blobs" / "sha256-tmp-1").write_bytes(b"x")
    broken = ollama_dir / "manifests/registry.ollama.ai/library/broken/latest"
    broken.parent.mkdir(parents=True)
    broken.write_bytes(b"{truncated")
    store = ModelStore(ollama_dir)
    assert store.prune() == ["sha256-tmp-1"]
    assert store.blobs.exists(orphan)
    assert [m["name"] for m in store.list_models()] == ["a:latest"]


def test_peek_returns_the_loaded_model_until_its_manifest_changes(tmp_path):
    from ollama_py.api.names import parse_name
    from ollama_py.store.models import ModelStore
    from tests.fakes.gguf_files import write_tiny_gguf
    from tests.helpers.app import create_tiny_model, make_settings

    settings = make_settings(tmp_path)
    gguf = write_tiny_gguf(tmp_path / "t.gguf")
    create_tiny_model(settings, gguf, "peeky", system="one")
    store = ModelStore(settings.models)
    name = parse_name("Peeky")
    assert store.peek(name) is None  # never loaded
    first = store.load(name)
    assert store.peek(name) is first and first.system == "one"
    create_tiny_model(settings, gguf, "peeky", system="two")  # a new manifest under the same name
    assert store.peek(name) is None
    assert store.load(name).system == "two"
    store.delete(name)
    assert store.peek(name) is None
