"""A standing fuzz over GGUF headers: random metadata under a size cap, built from the pieces a real header is
made of (counts, type codes, lengths, the keys the estimator reads) so that most examples get past the magic.
Reading one either succeeds or raises our BadRequest; so does turning it into a memory estimate, as a load
does. What is read never holds more items than the file has bytes (no amplification)."""

from __future__ import annotations

import contextlib
import resource
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from ollama_py.errors import BadRequest
from ollama_py.estimate import memory
from ollama_py.store.gguf_meta import read_gguf_info
from tests.fakes.gguf_files import T_ARRAY, T_UINT32, gguf_string, nested_array, raw_gguf, u32, u64

SIZE_CAP = 64 * 1024
COUNTS = [0, 1, 2, 3, 7, 8, 255, 4096, 4097, 1 << 16, 20_000_000, 4_000_000_000, (1 << 32) - 1, 1 << 63,
          (1 << 64) - 1]
KEYS = ["llama.block_count", "llama.block_count", "general.architecture", "general.alignment", "general.type",
        "llama.block_count", "llama.context_length",
        "llama.embedding_length", "llama.attention.head_count", "llama.attention.head_count_kv",
        "llama.attention.sliding_window", "llama.attention.sliding_window_pattern", "llama.vocab_size",
        "tokenizer.ggml.tokens", "tokenizer.chat_template", "x"]

count = st.one_of(st.sampled_from(COUNTS), st.integers(0, (1 << 64) - 1))
vtype = st.one_of(st.integers(0, 13), st.integers(0, (1 << 32) - 1))


def value(depth: int = 0) -> st.SearchStrategy[bytes]:
    scalar = st.one_of(
        st.builds(lambda t, n: u32(t) + u64(n), st.sampled_from([4, 10, 6, 11]), count),  # u32/u64/i64 claims
        st.builds(lambda s: u32(8) + gguf_string(s), st.sampled_from(["llama", "gemma3", "clip", "", "adapter"])),
        st.builds(lambda t, b: u32(t) + b, vtype, st.binary(max_size=16)),
        st.builds(lambda depth: u32(9) + nested_array(depth), st.integers(1, 5000)),
    )
    if depth >= 3:
        return scalar
    array = st.builds(lambda t, n, items: u32(9) + u32(t) + u64(n) + b"".join(items),
                      st.integers(0, 12), count, st.lists(st.deferred(lambda: value(depth + 1)), max_size=4))
    return st.one_of(scalar, array)


kv_entry = st.builds(lambda k, v: gguf_string(k) + v, st.sampled_from(KEYS), value())
tensor_row = st.builds(lambda name, dims, rest: gguf_string(name) + u32(len(dims)) + b"".join(map(u64, dims)) + rest,
                       st.sampled_from(["token_embd.weight", "blk.0.attn_q.weight", "blk.99999999.x", "output.weight"]),
                       st.lists(count, max_size=9), st.binary(min_size=0, max_size=12))


@st.composite
def header(draw: st.DrawFn) -> bytes:
    """Mostly honest counts (so the entries get read), sometimes a lie; mostly version 3."""
    kvs = draw(st.lists(kv_entry, max_size=6))
    rows = draw(st.lists(tensor_row, max_size=3))
    version = draw(st.sampled_from([3, 3, 3, 2, 1, 3 << 16]))
    n_kv = draw(st.one_of(st.just(len(kvs)), st.just(len(kvs)), count))
    n_tensors = draw(st.one_of(st.just(len(rows)), st.just(len(rows)), count))
    junk = draw(st.binary(max_size=64))
    return (b"GGUF" + u32(version) + u64(n_tensors) + u64(n_kv) + b"".join(kvs) + b"".join(rows) + junk)[:SIZE_CAP]

@contextlib.contextmanager
def memory_cap(extra: int = 1 << 30) -> Iterator[None]:
    """At most `extra` more bytes of data for this process meanwhile: an example that would amplify a small header
    into gigabytes fails here with a MemoryError, named and shrunk by hypothesis, instead of the kernel killing the
    whole test run (a block count given as an array once asked for 24 GB)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    status = Path("/proc/self/status").read_text()
    used = next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmData:"))
    cap = used + extra if hard == resource.RLIM_INFINITY else min(used + extra, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))


def items(value: object) -> int:
    return 1 + sum(items(v) for v in value) if isinstance(value, list) else 1


# what the fuzz found once: llama.block_count as an array of u32, one of them 2^32 - 1
BLOCKS_IN_AN_ARRAY = raw_gguf([("llama.block_count", T_ARRAY, u32(T_UINT32) + u64(2) + u32(4) + u32((1 << 32) - 1))])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=header())
@example(data=BLOCKS_IN_AN_ARRAY)
def test_any_header_reads_or_is_a_bad_request(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp, memory_cap():
        path = Path(tmp) / "fuzz.gguf"
        path.write_bytes(data)
        try:
            info = read_gguf_info(path)
        except BadRequest:
            return
        assert sum(items(v) for v in info.kv.values()) + len(info.tensor_table) <= len(data)
        try:
            shape = memory.shape_from_gguf(path)
            memory.estimate(shape, num_ctx=2048)
        except BadRequest:
            return
        assert len(shape.layer_bytes) <= 4096
