"""Manifests: the Docker v2 JSON Ollama writes, names -> files, case-insensitive lookups."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ollama_py.api.names import parse_name
from ollama_py.errors import ModelNotFound
from ollama_py.store.manifests import (
    CONFIG_V1,
    MEDIA_LICENSE,
    MEDIA_MODEL,
    MEDIA_TEMPLATE,
    InvalidManifest,
    Layer,
    Manifest,
    ManifestStore,
)


def d(ch: str) -> str:
    return "sha256:" + ch * 64


CONFIG = Layer(CONFIG_V1, d("c"), 485)
LAYERS = (
    Layer(MEDIA_MODEL, d("1"), 2019377376, from_="llama3.2:latest"),
    Layer(MEDIA_TEMPLATE, d("2"), 1429),
    Layer(MEDIA_LICENSE, d("3"), 7711),
)

# Exactly what Ollama's WriteManifest (json.Encoder) writes for these layers.
OLLAMA_BYTES = (
    '{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",'
    f'"config":{{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"{d("c")}","size":485}},'
    f'"layers":[{{"mediaType":"application/vnd.ollama.image.model","digest":"{d("1")}","size":2019377376,'
    f'"from":"llama3.2:latest"}},'
    f'{{"mediaType":"application/vnd.ollama.image.template","digest":"{d("2")}","size":1429}},'
    f'{{"mediaType":"application/vnd.ollama.image.license","digest":"{d("3")}","size":7711}}]}}\n'
).encode()


def test_build_writes_ollamas_bytes() -> None:
    m = Manifest.build(CONFIG, LAYERS)
    assert m.raw == OLLAMA_BYTES
    assert m.digest == "sha256:" + hashlib.sha256(OLLAMA_BYTES).hexdigest()


def test_parse_build_round_trip() -> None:
    m = Manifest.parse(OLLAMA_BYTES)
    assert m.config == CONFIG
    assert m.layers == LAYERS
    assert Manifest.build(m.config, m.layers).raw == OLLAMA_BYTES
    assert m.size == 485 + 2019377376 + 1429 + 7711
    assert m.layers_of(MEDIA_TEMPLATE) == [LAYERS[1]]
    assert m.digests() == {d("c"), d("1"), d("2"), d("3")}


def test_parse_keeps_raw_bytes_of_pretty_printed_manifest() -> None:
    pretty = json.dumps(json.loads(OLLAMA_BYTES), indent=2).encode()
    m = Manifest.parse(pretty)
    assert m.raw == pretty
    assert m.digest == "sha256:" + hashlib.sha256(pretty).hexdigest()
    assert m.layers == LAYERS


def test_layer_json_round_trip() -> None:
    layer = Layer(MEDIA_MODEL, d("1"), 5, from_="x:latest", name="model.safetensors")
    assert layer.to_json() == {"mediaType": MEDIA_MODEL, "digest": d("1"), "size": 5, "from": "x:latest",
                               "name": "model.safetensors"}
    assert Layer.from_json(layer.to_json()) == layer
    assert "from" not in Layer(MEDIA_MODEL, d("1"), 5).to_json()


@pytest.mark.parametrize("raw", [
    b"not json",
    b"[]",
    b'{"schemaVersion":2}',
    b'{"config":{"mediaType":"x","digest":"sha256:zz","size":1},"layers":[]}',
    b'{"config":{"mediaType":"x","digest":"' + d("a").encode() + b'","size":-1},"layers":[]}',
    b'{"config":{"mediaType":"x","digest":"' + d("a").encode() + b'","size":1},"layers":[3]}',
    b"\xff\xfe",
], ids=["text", "array", "no-config", "bad-digest", "negative-size", "bad-layer", "binary"])
def test_parse_rejects_garbage(raw: bytes) -> None:
    with pytest.raises(InvalidManifest):
        Manifest.parse(raw)


@pytest.fixture
def store(tmp_path: Path) -> ManifestStore:
    return ManifestStore(tmp_path)


def test_put_get_round_trip_at_ollamas_path(store: ManifestStore, tmp_path: Path) -> None:
    m = Manifest.build(CONFIG, LAYERS)
    store.put(parse_name("llama3.2"), m)
    path = tmp_path / "manifests/registry.ollama.ai/library/llama3.2/latest"
    assert path.read_bytes() == m.raw
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)
    assert store.get(parse_name("llama3.2:latest")) == m
    assert [p.name for p in path.parent.iterdir()] == ["latest"]  # no temp file left


def test_lookup_ignores_case_and_keeps_stored_case(store: ManifestStore) -> None:
    m = Manifest.build(CONFIG, LAYERS)
    store.put(parse_name("MyUser/MyModel:Tag"), m)
    name = parse_name("myuser/mymodel:tag")
    assert store.resolve(name) == parse_name("MyUser/MyModel:Tag")
    assert store.get(name) == m
    assert store.get(parse_name("MYUSER/MYMODEL:TAG")).digest == m.digest


def test_put_over_a_case_variant_rewrites_the_existing_file(store: ManifestStore, tmp_path: Path) -> None:
    first = Manifest.build(CONFIG, LAYERS[:1])
    second = Manifest.build(CONFIG, LAYERS)
    store.put(parse_name("Model:Tag"), first)
    written = store.put(parse_name("model:tag"), second)
    assert written == parse_name("Model:Tag")
    files = [str(p.relative_to(tmp_path)) for p in (tmp_path / "manifests").rglob("*") if p.is_file()]
    assert files == ["manifests/registry.ollama.ai/library/Model/Tag"]
    assert store.get(parse_name("MODEL:TAG")) == second


def test_get_missing_is_model_not_found(store: ManifestStore) -> None:
    with pytest.raises(ModelNotFound) as exc:
        store.get(parse_name("nope"))
    assert str(exc.value) == "model 'nope:latest' not found"
    assert exc.value.status == 404
    assert store.resolve(parse_name("nope")) is None


def test_delete_removes_file_and_empty_dirs(store: ManifestStore, tmp_path: Path) -> None:
    m = Manifest.build(CONFIG, LAYERS)
    store.put(parse_name("user/a:1"), m)
    store.put(parse_name("user/a:2"), m)
    store.delete(parse_name("USER/A:1"))
    assert (tmp_path / "manifests/registry.ollama.ai/user/a/2").is_file()
    store.delete(parse_name("user/a:2"))
    assert list((tmp_path / "manifests").iterdir()) == []
    with pytest.raises(ModelNotFound):
        store.delete(parse_name("user/a:2"))


def test_list_reads_every_manifest_and_skips_junk(store: ManifestStore, tmp_path: Path) -> None:
    m = Manifest.build(CONFIG, LAYERS)
    store.put(parse_name("a"), m)
    store.put(parse_name("example.com/ns/b:v1"), m)
    root = tmp_path / "manifests"
    (root / "registry.ollama.ai/library/a/.tmp-123").write_bytes(b"half-written")
    (root / "registry.ollama.ai/library/broken").mkdir()
    (root / "registry.ollama.ai/library/broken/latest").write_bytes(b"{not json")
    (root / "registry.ollama.ai/library/bad name").mkdir()
    (root / "registry.ollama.ai/library/bad name/latest").write_bytes(m.raw)
    (root / "stray-file").write_bytes(b"x")
    listed = {str(name): (manifest.digest, mtime > 0) for name, manifest, mtime in store.list()}
    assert listed == {
        "registry.ollama.ai/library/a:latest": (m.digest, True),
        "example.com/ns/b:v1": (m.digest, True),
    }


def test_referenced_digests(store: ManifestStore) -> None:
    store.put(parse_name("a"), Manifest.build(CONFIG, LAYERS[:1]))
    store.put(parse_name("b"), Manifest.build(CONFIG, LAYERS[1:]))
    assert store.referenced_digests() == {d("c"), d("1"), d("2"), d("3")}


def test_referenced_digests_refuses_to_guess_past_a_corrupt_manifest(store: ManifestStore, tmp_path: Path) -> None:
    store.put(parse_name("a"), Manifest.build(CONFIG, LAYERS))
    bad = tmp_path / "manifests/registry.ollama.ai/library/bad/latest"
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"garbage")
    with pytest.raises(InvalidManifest):
        store.referenced_digests()


def test_remove_stale_temp(store: ManifestStore, tmp_path: Path) -> None:
    store.put(parse_name("a"), Manifest.build(CONFIG, LAYERS))
    tmp = tmp_path / "manifests/registry.ollama.ai/library/a/.tmp-abc"
    tmp.write_bytes(b"x")
    assert store.remove_stale_temp() == [tmp]
    assert not tmp.exists()
    assert store.get(parse_name("a"))
