"""Compressed request bodies (server/body_coding.py): gzip, deflate and zstd decoded, several codings undone in
order, and a body that decodes past the limit stopped early, its memory bounded by the limit, not the bomb."""

from __future__ import annotations

import gzip
import json
import sys
import tracemalloc
import zlib
from pathlib import Path

import psutil
import pytest
import requests

from ollama_py.errors import BadRequest
from ollama_py.server.body_coding import SLICE, BodyTooLarge, UnsupportedCoding, codings, decode
from tests.helpers.serve import start_serve, stop_serve

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

BODY = json.dumps({"model": "smollm2", "messages": [{"role": "user", "content": "héllo " * 400_000}]}).encode()
MiB = 1 << 20


def _deflate(data: bytes, wbits: int) -> bytes:
    c = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return c.compress(data) + c.flush()


def _zeros_gzip(size: int, head: bytes = b"", tail: bytes = b"") -> bytes:
    """`size` zero bytes (between `head` and `tail`) gzipped, a MiB at a time (a bomb: ~1,000 to 1)."""
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = bytes(MiB)
    return c.compress(head) + b"".join(c.compress(block) for _ in range(size // MiB)) + c.compress(tail) + c.flush()


def _zeros_zstd(size: int) -> bytes:
    c = zstd.ZstdCompressor()
    block = bytes(MiB)
    return b"".join(c.compress(block) for _ in range(size // MiB)) + c.flush()


@pytest.mark.parametrize("header, encoded", [
    ("gzip", gzip.compress(BODY)),
    ("x-gzip", gzip.compress(BODY)),
    ("deflate", _deflate(BODY, zlib.MAX_WBITS)),  # zlib-wrapped, as RFC 9110 says
    ("deflate", _deflate(BODY, -zlib.MAX_WBITS)),  # raw, as some clients send it
    ("zstd", zstd.compress(BODY, 3)),  # Codex CLI's coding and level
    ("ZSTD", zstd.compress(BODY)),
    ("identity, gzip", gzip.compress(BODY)),
])
def test_each_coding_gives_the_body_back(header: str, encoded: bytes):
    assert len(BODY) > 2 * SLICE  # decoded over several slices
    assert decode(encoded, codings(header), 64 * MiB) == BODY


def test_codings_applied_in_turn_are_undone_last_first():
    encoded = zstd.compress(gzip.compress(BODY))
    assert codings("gzip, zstd") == ["gzip", "zstd"]
    assert decode(encoded, codings("gzip, zstd"), 64 * MiB) == BODY


def test_gzip_members_one_after_another_and_zero_padding_are_one_body():
    half = len(BODY) // 2
    encoded = gzip.compress(BODY[:half]) + gzip.compress(BODY[half:]) + bytes(16)
    assert decode(encoded, ["gzip"], 64 * MiB) == BODY
    frames = zstd.compress(BODY[:half]) + zstd.compress(BODY[half:])
    assert decode(frames, ["zstd"], 64 * MiB) == BODY


def test_no_coding_is_no_work():
    assert codings("") == [] and codings("identity") == []


@pytest.mark.parametrize("header", ["br", "compress", "gzip, br"])
def test_a_coding_this_server_cannot_decode_is_a_415_that_says_what_it_can(header: str):
    with pytest.raises(UnsupportedCoding) as e:
        codings(header)
    assert e.value.status == 415
    assert str(e.value) == f"unsupported Content-Encoding {header.split(', ')[-1]!r}: send the body as plain JSON, " \
                           "or encoded with gzip, deflate, zstd"


@pytest.mark.parametrize("coding, encoded, says", [
    ("gzip", b"{\"model\": \"plain JSON, not gzip\"}", "it is not the gzip data its Content-Encoding says"),
    ("gzip", gzip.compress(BODY)[:-100], "its gzip data ends early"),
    ("zstd", zstd.compress(BODY)[:-100], "its zstd data ends early"),
    ("zstd", b"\x28\xb5\x2f\xfdgarbage", "it is not the zstd data its Content-Encoding says"),
    ("deflate", b"\x78\x9c\xff\xff\xff", "it is not the deflate data its Content-Encoding says"),
])
def test_data_that_is_not_what_its_coding_says_is_a_400(coding: str, encoded: bytes, says: str):
    with pytest.raises(BadRequest) as e:
        decode(encoded, [coding], 64 * MiB)
    assert e.value.status == 400
    assert str(e.value).startswith("invalid request body: " + says)


@pytest.mark.parametrize("make", [_zeros_gzip, _zeros_zstd], ids=["gzip", "zstd"])
def test_a_bomb_stops_at_the_limit_and_holds_no_more_than_it(make):
    bomb = make(512 * MiB)
    assert len(bomb) < MiB  # half a GiB of zeros in under a MiB
    tracemalloc.start()
    try:
        with pytest.raises(BodyTooLarge) as e:
            decode(bomb, ["gzip"] if make is _zeros_gzip else ["zstd"], 8 * MiB)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 8 * MiB < e.value.size <= 8 * MiB + SLICE  # stopped at the first slice past the limit
    assert peak < 8 * MiB + 4 * SLICE  # the limit's worth of output, never the bomb's half GiB


def test_serve_refuses_a_compression_bomb_without_its_memory_or_a_held_loop(tmp_path: Path):
    """serve as users run it (uvloop): before, aiohttp decoded the body inline in data_received, and a 512 KB gzip
    body of 512 MiB of JSON grew serve by half a GiB and held its loop for the length of that decoding."""
    proc, url, _env = start_serve(tmp_path, {"OLLAMA_PY_LOOP_WARN_MS": "50"})  # the bound for a body
    try:
        before = psutil.Process(proc.pid).memory_info().rss
        bomb = _zeros_gzip(512 * MiB, b'{"model": "tiny", "prompt": "', b'"}')
        r = requests.post(url + "/api/generate", data=bomb, timeout=120,
                          headers={"Content-Type": "application/json", "Content-Encoding": "gzip"})
        assert r.status_code == 413
        assert r.json() == {"error": "request body too large: the limit is 67108864 bytes (OLLAMA_PY_MAX_BODY)"}
        peak = _peak_rss(proc.pid)
        assert requests.get(url + "/api/version", timeout=10).ok
    finally:
        stop_serve(proc)
    assert peak - before < 200 * MiB  # the 64 MiB limit's worth (and the allocator's slack), never 512 MiB
    held = [line for line in (tmp_path / "serve.log").read_text().splitlines() if "event loop held" in line]
    # (the watch names what held it: aiohttp's decompress_sync in data_received, before; never the decoding now,
    # neither on the loop nor, through the GIL, in a thread)
    assert not [line for line in held if "decompress" in line or "body_coding" in line], held


def _peak_rss(pid: int) -> int:
    """The process's peak resident memory (VmHWM), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")
