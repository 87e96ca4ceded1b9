"""Hostile GGUF headers: a small file can claim any count, so the reader checks every count against the bytes
that remain and bounds what the estimator builds from the key/values. At /api/create such a file is a 400 that
says what is wrong; a stored model whose weights are such a file is a 400 when it is loaded, never a 500."""

from __future__ import annotations

from pathlib import Path

import pytest

from ollama_py.api.names import parse_name
from ollama_py.errors import BadRequest
from ollama_py.estimate import memory
from ollama_py.store.gguf_meta import read_gguf_info
from ollama_py.store.manifests import CONFIG_V1, MEDIA_MODEL, Layer, Manifest
from ollama_py.store.models import ModelStore
from tests.fakes.gguf_files import (
    T_ARRAY,
    T_STRING,
    T_UINT32,
    T_UINT64,
    gguf_string,
    nested_array,
    raw_gguf,
    u32,
    u64,
    write_gguf,
)

ARCH = ("general.architecture", T_STRING, gguf_string("llama"))

HOSTILE = {
    "2e7 blocks": raw_gguf([ARCH, ("llama.block_count", T_UINT32, u32(20_000_000))]),
    "4e9 blocks": raw_gguf([ARCH, ("llama.block_count", T_UINT64, u64(4_000_000_000))]),
    # a count given as an array (found by test_gguf_fuzz: its largest item was taken as the layer count, and the
    # estimate built per-layer tuples of 4e9 items, 24 GB, until the kernel killed the process)
    "4e9 blocks in an array": raw_gguf([ARCH, ("llama.block_count", T_ARRAY,
                                               u32(T_UINT32) + u64(3) + u32(4) + u32(4_294_967_295) + u32(0))]),
    "2e7 key/values": raw_gguf([ARCH], n_kv=20_000_000),
    "2e7 tensors": raw_gguf([ARCH], n_tensors=20_000_000),
    "2e7 nested arrays": raw_gguf([ARCH, ("a", T_ARRAY, u32(T_ARRAY) + u64(20_000_000))]),
    "2e7 strings": raw_gguf([ARCH, ("a", T_ARRAY, u32(T_STRING) + u64(20_000_000))]),
    "5000-deep array": raw_gguf([ARCH, ("a", T_ARRAY, nested_array(5000))]),
    "tensor past the end": raw_gguf([ARCH], n_tensors=1, tail=gguf_string("w") + u32(1) + u64(1 << 30)
                                    + u32(0) + u64(0)),
}


@pytest.mark.parametrize("data", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_header_is_a_clear_bad_request(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "hostile.gguf"
    path.write_bytes(data)
    assert len(data) < 100_000  # small files, every one
    with pytest.raises(BadRequest, match="^invalid GGUF file: "):
        read_gguf_info(path)
    with pytest.raises(BadRequest, match="^invalid GGUF file: "):
        memory.shape_from_gguf(path)  # the load path reads the header the same way


def test_block_count_message_names_the_key(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(HOSTILE["2e7 blocks"])
    with pytest.raises(BadRequest, match=r"llama.block_count is 20000000 \(at most 4096\)"):
        read_gguf_info(path)


def test_nesting_a_few_levels_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(raw_gguf([ARCH, ("a", T_ARRAY, nested_array(3))]))
    assert read_gguf_info(path).kv["a"] == [[[]]]


@pytest.mark.parametrize("data", [HOSTILE["2e7 blocks"], HOSTILE["5000-deep array"], HOSTILE["4e9 blocks in an array"]],
                         ids=["blocks", "deep", "blocks-array"])
async def test_create_refuses_a_hostile_header_with_a_400(fake_app, aiohttp_client, tmp_path: Path,
                                                          data: bytes) -> None:
    _, app = fake_app()
    client = await aiohttp_client(app)
    import hashlib

    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert (await client.post(f"/api/blobs/{digest}", data=data)).status == 201
    r = await client.post("/api/create", json={"model": "evil", "files": {"m.gguf": digest}, "stream": False})
    assert r.status == 400
    error = (await r.json())["error"]
    assert error.startswith("supplied file was not in GGUF format: ")
    assert "block_count" in error or "nested" in error


async def test_loading_a_stored_hostile_model_is_a_400(fake_app, aiohttp_client) -> None:
    """A store written before these checks (or by another tool) may already hold such weights."""
    settings, app = fake_app()
    store = ModelStore(settings.models)
    weights, size = store.blobs.write_bytes(HOSTILE["2e7 blocks"])
    config, config_size = store.blobs.write_bytes(b"{}")
    manifest = Manifest.build(Layer(CONFIG_V1, config, config_size), [Layer(MEDIA_MODEL, weights, size)])
    store.put_manifest(parse_name("evil"), manifest)
    client = await aiohttp_client(app)
    r = await client.post("/api/generate", json={"model": "evil", "prompt": "hi", "stream": False})
    assert r.status == 400
    assert "llama.block_count is 20000000" in (await r.json())["error"]


def test_real_writer_output_passes(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "ok.gguf", "llama", {"llama.block_count": 80, "tokenizer.ggml.tokens": ["a"] * 1000})
    assert read_gguf_info(path).block_count == 80


def split_bomb(count: int) -> bytes:
    """A whole GGUF of ~124 bytes that says it is shard 1 of `count` (issue 34 item 6)."""
    return raw_gguf([ARCH, ("split.no", T_UINT32, u32(0)), ("split.count", T_UINT32, u32(count))])


def test_split_count_is_bounded_like_block_count(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(split_bomb(20_000_000))
    assert len(path.read_bytes()) < 200
    with pytest.raises(BadRequest, match=r"^invalid GGUF file: split.count is 20000000 \(at most 9999\)$"):
        read_gguf_info(path)


async def test_create_with_a_split_count_bomb_is_a_small_400(fake_app, aiohttp_client) -> None:
    """One small upload claiming 2e7 shards: a 400 naming the key, not a list of 2e7 missing shards (the 189 MB
    error the issue measured) or a gateway that freezes building it."""
    import hashlib

    _, app = fake_app()
    client = await aiohttp_client(app)
    data = split_bomb(20_000_000)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert (await client.post(f"/api/blobs/{digest}", data=data)).status == 201
    r = await client.post("/api/create", json={"model": "bomb", "files": {"m.gguf": digest}, "stream": False})
    assert r.status == 400
    body = await r.read()
    assert len(body) < 300
    assert (await r.json())["error"] == ("supplied file was not in GGUF format: split.count is 20000000 "
                                         "(at most 9999)")


async def test_a_lone_shard_of_many_names_a_few_missing_shards(fake_app, aiohttp_client) -> None:
    """Within the bound, the incomplete-split error still stays one short line."""
    import hashlib

    _, app = fake_app()
    client = await aiohttp_client(app)
    data = split_bomb(9999)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert (await client.post(f"/api/blobs/{digest}", data=data)).status == 201
    r = await client.post("/api/create", json={"model": "bomb", "files": {"m.gguf": digest}, "stream": False})
    assert r.status == 400
    assert (await r.json())["error"] == ("incomplete split GGUF model: missing 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 and "
                                         "9988 more of 9999")


def test_a_huge_key_is_not_echoed_whole(tmp_path: Path) -> None:
    """A key of 1 MB ending in block_count: the error names it, cut short."""
    path = tmp_path / "m.gguf"
    path.write_bytes(raw_gguf([ARCH, ("x" * 1_000_000 + ".block_count", T_UINT32, u32(20_000_000))]))
    with pytest.raises(BadRequest) as e:
        read_gguf_info(path)
    assert str(e.value).startswith("invalid GGUF file: xxx") and len(str(e.value)) < 400
