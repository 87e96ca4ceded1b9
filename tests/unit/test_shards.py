"""Split GGUF models (issue 26): `create` keeps every shard as a model layer in shard order (from uploaded files,
a server-side path to one shard, or a stored model), refuses an incomplete set, and the runner is started from
links named as llama.cpp looks for them; the estimate counts every shard."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ollama_py.api.names import parse_name, shard_set
from ollama_py.cli.create import plan_create
from ollama_py.errors import BadRequest
from ollama_py.estimate import memory
from ollama_py.modelfile import parse_modelfile
from ollama_py.runner.shards import link_shards
from ollama_py.store.create import create_model
from ollama_py.store.manifests import MEDIA_MODEL
from ollama_py.store.models import ModelStore
from tests.fakes.gguf_files import write_tiny_gguf
from tests.fakes.gguf_split import split_gguf


@pytest.fixture(scope="module")
def whole(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("whole") / "tiny.gguf", blocks=4)


@pytest.fixture(scope="module")
def shards(whole: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return split_gguf(whole, tmp_path_factory.mktemp("shards"), "tiny", max_tensors=14)


@pytest.fixture
def store(tmp_path: Path) -> ModelStore:
    return ModelStore(tmp_path / "models")


def upload(store: ModelStore, path: Path) -> str:
    with path.open("rb") as f:
        return store.blobs.write_from(f)[0]


def create(store: ModelStore, name: str, req: dict) -> None:
    list(create_model(store, parse_name(name), req))


@pytest.mark.parametrize(("name", "expected"), [
    pytest.param("m-00002-of-00003.gguf", ["m-00001-of-00003.gguf", "m-00002-of-00003.gguf", "m-00003-of-00003.gguf"],
                 id="a-middle-shard"),
    pytest.param("a-b-00001-of-00002.gguf", ["a-b-00001-of-00002.gguf", "a-b-00002-of-00002.gguf"], id="dashes"),
    pytest.param("model.gguf", None, id="whole-file"),
    pytest.param("m-00004-of-00003.gguf", None, id="index-past-count"),
    pytest.param("m-1-of-3.gguf", None, id="not-five-digits"),
])
def test_shard_set(name: str, expected: list[str] | None) -> None:
    assert shard_set(name) == expected


def test_the_test_split_is_a_split(shards: list[Path]) -> None:
    assert [p.name for p in shards] == ["tiny-00001-of-00003.gguf", "tiny-00002-of-00003.gguf",
                                        "tiny-00003-of-00003.gguf"]


def test_create_keeps_every_shard_in_order(store: ModelStore, shards: list[Path], whole: Path) -> None:
    digests = [upload(store, p) for p in shards]
    create(store, "split", {"files": {p.name: d for p, d in reversed(list(zip(shards, digests)))}})
    model = store.load(parse_name("split"))
    assert [layer.digest for layer in model.manifest.layers_of(MEDIA_MODEL)] == digests
    assert model.shards == tuple(store.blobs.path(d) for d in digests) and model.model_path == model.shards[0]
    assert model.info is not None and len(model.info.tensor_table) == len(store.blob_info(digests[0]).tensor_table) \
        + sum(len(store.blob_info(d).tensor_table) for d in digests[1:])
    shown = store.blob_info(digests[0])
    assert shown.split == (0, 3)
    # copies of it (FROM the stored model) are split the same way
    create(store, "split-copy", {"from": "split", "system": "Be brief."})
    assert store.load(parse_name("split-copy")).shards == model.shards


def test_a_server_side_path_to_one_shard_takes_them_all(store: ModelStore, shards: list[Path]) -> None:
    list(create_model(store, parse_name("split"), {"from": str(shards[1])}, import_dirs=[shards[0].parent]))
    assert len(store.load(parse_name("split")).shards) == 3


@pytest.mark.parametrize(("keep", "error"), [
    pytest.param([0, 2], "incomplete split GGUF model: missing 2 of 3", id="missing-middle"),
    pytest.param([1, 2], "incomplete split GGUF model: missing 1 of 3", id="missing-first"),
])
def test_an_incomplete_set_is_refused(store: ModelStore, shards: list[Path], keep: list[int], error: str) -> None:
    files = {shards[i].name: upload(store, shards[i]) for i in keep}
    with pytest.raises(BadRequest, match=error):
        create(store, "split", {"files": files})
    assert store.manifests.resolve(parse_name("split")) is None


def test_two_whole_models_are_refused(store: ModelStore, whole: Path, tmp_path: Path) -> None:
    other = write_tiny_gguf(tmp_path / "other.gguf", blocks=3)
    files = {"a.gguf": upload(store, whole), "b.gguf": upload(store, other)}
    with pytest.raises(BadRequest, match="more than one model file: give one GGUF, or every shard of one split"):
        create(store, "two", {"files": files})


def test_quantizing_a_split_model_is_refused(store: ModelStore, shards: list[Path]) -> None:
    files = {p.name: upload(store, p) for p in shards}
    with pytest.raises(BadRequest, match="quantizing a split GGUF model is not supported"):
        create(store, "split", {"files": files, "quantize": "q8_0"})


def test_the_cli_uploads_every_shard_of_a_from_path(shards: list[Path]) -> None:
    plan = plan_create(parse_modelfile(f"FROM ./{shards[0].name}\n"), shards[0].parent, Path.home())
    assert [f.name for f in plan.files] == [p.name for p in shards]


def test_the_estimate_counts_every_shard(shards: list[Path], whole: Path) -> None:
    split, one = memory.shape_from_shards(shards), memory.shape_from_gguf(whole)
    assert split.block_count == one.block_count
    assert split.layer_bytes == one.layer_bytes  # the same tensors, wherever they are stored
    assert split.file_size == sum(p.stat().st_size for p in shards)


def test_links_are_named_as_llama_cpp_looks_for_them(shards: list[Path], tmp_path: Path) -> None:
    first = link_shards(shards, tmp_path / "links")
    assert first.name == "model-00001-of-00003.gguf"
    linked = sorted(first.parent.iterdir())
    assert [p.name for p in linked] == ["model-00001-of-00003.gguf", "model-00002-of-00003.gguf",
                                        "model-00003-of-00003.gguf"]
    assert [p.resolve() for p in linked] == [p.resolve() for p in shards]
    assert link_shards(shards, tmp_path / "links") == first  # made once
    os.unlink(linked[1])  # damaged: made again
    assert link_shards(shards, tmp_path / "links") == first and linked[1].resolve() == shards[1].resolve()
    assert [p.name for p in (tmp_path / "links").iterdir()] == [first.parent.name]  # no temporary left


def test_a_lone_shard_is_refused(store: ModelStore, shards: list[Path]) -> None:
    with pytest.raises(BadRequest, match="incomplete split GGUF model: missing 2, 3 of 3"):
        create(store, "split", {"files": {"blob": upload(store, shards[0])}})


def test_show_modelfile_names_every_shard_and_creates_the_model_again(store: ModelStore, shards: list[Path]) -> None:
    from ollama_py.modelfile import serialize_modelfile
    from ollama_py.modelfile.serializer import build_modelfile

    create(store, "split", {"files": {p.name: upload(store, p) for p in shards}})
    model = store.load(parse_name("split"))
    text = serialize_modelfile(build_modelfile(str(model.model_path), more_from=[str(p) for p in model.shards[1:]]))
    assert [line.split(" ", 1)[1] for line in text.splitlines() if line.startswith("FROM ")] == \
        [str(p) for p in model.shards]
    plan = plan_create(parse_modelfile(text), Path("/"), Path.home())  # the CLI, given that Modelfile
    create(store, "again", {"files": {f.name: upload(store, f.path) for f in plan.files}})
    assert store.load(parse_name("again")).shards == model.shards
