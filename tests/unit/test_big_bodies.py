"""Request bodies up to the limit (OLLAMA_PY_MAX_BODY, 64 MiB) do not stall the event loop, and a larger one is a
413 naming the limit (issues 38 and 34). Before, a worker thread did not help: json.loads, a regex over a 60 MB
image or a copy of millions of token ids is one C call that holds the GIL, and the loop waited 1-5 s; now such
work goes a slice at a time (ollama_py/bigjson.py and friends). The client runs in a thread of its own, so its
work is not the loop's; the bound is generous (structure, not speed: the gaps were seconds, now tens of ms)."""

from __future__ import annotations

import asyncio
import base64
import json
import random
import zlib
from pathlib import Path
from typing import Any

import pytest
import requests
from aiohttp import web

from ollama_py import bigjson
from ollama_py.config import Settings
from ollama_py.server.app import create_app
from ollama_py.server.serve import PROTOCOL
from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings
from tests.helpers.loop import loop_watch
from tests.helpers.ports import free_port

STALL = 0.5  # seconds; these bodies held the loop 1.3-5 s before


@pytest.fixture
async def served(tmp_path: Path):
    """The gateway on a real port over the fake runner, with `tiny` (no vision) and a 64 MiB body limit."""
    settings = make_settings(tmp_path)
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "tiny.gguf", ctx=1 << 23))
    runner = web.AppRunner(create_app(settings, scheduler=fake_scheduler(settings)), **PROTOCOL)  # as serve
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    yield f"http://127.0.0.1:{port}"
    await runner.cleanup()


async def _post(url: str, body: bytes, coding: str = "") -> tuple[int, Any, float]:
    """POST from another thread while the loop is watched: (status, JSON answer, the loop's largest gap)."""
    headers = {"Content-Type": "application/json", **({"Content-Encoding": coding} if coding else {})}
    async with loop_watch() as gaps:
        r = await asyncio.to_thread(requests.post, url, data=body, headers=headers, timeout=300)
    return r.status_code, r.json(), gaps[0]


def _image_body(extra: dict[str, Any]) -> bytes:
    image = base64.b64encode(b"\x89PNG" * (11 << 20)).decode()  # 44 MiB of image, ~60 MB of base64
    return json.dumps({"model": "tiny", "stream": False, **extra}).replace('"IMAGE"', json.dumps(image)).encode()


async def test_a_60_mb_image_is_checked_without_stalling_the_loop(served):
    status, answer, gap = await _post(served + "/api/generate", _image_body({"prompt": "hi", "images": ["IMAGE"]}))
    assert status == 400 and answer["error"] == '"tiny" does not support vision'  # read, checked, then refused
    assert gap < STALL
    messages = [{"role": "user", "content": "hi", "images": ["IMAGE"]}]
    status, answer, gap = await _post(served + "/api/chat", _image_body({"messages": messages}))
    assert status == 400 and answer["error"] == '"tiny" does not support vision'
    assert gap < STALL


async def test_twenty_million_context_ids_are_decoded_without_stalling_the_loop(served):
    body = b'{"model": "nope", "prompt": "hi", "context": [' + b"7," * 20_000_000 + b'7]}'  # 40 MB
    status, answer, gap = await _post(served + "/api/generate", body)
    assert status == 404 and "nope" in answer["error"]  # the body was read and checked whole first
    assert gap < STALL


async def test_a_16_mb_tokenize_does_not_stall_the_loop(served):
    text = "w " * (8 << 20)
    status, answer, gap = await _post(served + "/api/tokenize", json.dumps({"model": "tiny", "text": text}).encode())
    assert status == 200 and len(answer["tokens"]) >= 8 << 20  # every word (the fake counts one more)
    assert gap < STALL


async def test_a_body_past_the_limit_is_a_413_naming_it(tmp_path: Path, aiohttp_client):
    settings = make_settings(tmp_path, max_body_bytes=1 << 20)
    client = await aiohttp_client(create_app(settings, scheduler=fake_scheduler(settings)))
    r = await client.post("/api/generate", data=b'{"model": "tiny", "prompt": "' + b"x" * (2 << 20) + b'"}',
                          headers={"Content-Type": "application/json"})
    assert r.status == 413
    assert (await r.json())["error"] == "request body too large: the limit is 1048576 bytes (OLLAMA_PY_MAX_BODY)"


def _gzip_bomb(size: int, head: bytes = b'{"model": "tiny", "prompt": "', fill: bytes = b"a") -> bytes:
    """A JSON body of `size` bytes, gzipped a MiB at a time: ~1,000 to 1. (One past the limit: test_body_coding.)"""
    c = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    block = (fill * (1 << 20))[:1 << 20]
    return c.compress(head) + b"".join(c.compress(block) for _ in range(size >> 20)) + c.compress(b'"}') + c.flush()


async def test_a_big_compressed_body_within_the_limit_is_read_whole_without_stalling_the_loop(served):
    body = _gzip_bomb(48 << 20, b'{"model": "nope", "prompt": "', b"w ")  # 48 MiB of "w w w ..."
    status, answer, gap = await _post(served + "/api/generate", body, "gzip")
    assert status == 404 and answer["error"] == "model 'nope' not found"  # decoded and parsed whole, then looked up
    assert gap < STALL


@pytest.mark.parametrize("size", [100, 60 << 20], ids=["small", "60MB"])
async def test_a_body_sent_chunked_is_read_as_one_with_its_length_given(served, size: int):
    """A body of no given length (Transfer-Encoding: chunked, as a client streaming its body sends it) is read in
    its pieces too: before, aiohttp's read() copied 60 MB whole on the loop (35 ms held)."""
    body = json.dumps({"model": "nope", "prompt": "a" * size}).encode()

    def pieces():
        for k in range(0, len(body), 1 << 20):
            yield body[k:k + (1 << 20)]

    async with loop_watch() as gaps:
        r = await asyncio.to_thread(requests.post, served + "/api/generate", data=pieces(), timeout=300)
    assert r.status_code == 404 and r.json()["error"] == "model 'nope' not found"
    assert gaps[0] < STALL


def test_the_limit_is_a_setting():
    assert Settings.from_env({}).max_body_bytes == 64 << 20
    assert Settings.from_env({"OLLAMA_PY_MAX_BODY": "1000000"}).max_body_bytes == 1_000_000


@pytest.mark.parametrize("seed", range(12))
def test_bigjson_reads_and_writes_what_json_does(seed):
    rng = random.Random(seed)
    alphabet = ["a", "é", '"', "\\", "\n", "😀", "\ud800", "xxxxxxx", "\u2028", "/", "\x00"]
    text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 300_000)))
    doc = {"model": "m", "messages": [{"role": "user", "content": text}], text[:10]: [1, 2.5, -3e10, True, None],
           "context": [rng.randint(0, 10**6) for _ in range(rng.randint(0, 200_000))], "nested": [[1, 2], [3]],
           "grid": [[rng.random(), rng.randint(-5, 5)] for _ in range(rng.randint(0, 50_000))]}
    raw = json.dumps(doc).encode()
    assert bigjson.loads(raw) == json.loads(raw)
    assert bigjson.dumps(doc) == json.dumps(doc, ensure_ascii=False)
    clean = json.loads(json.dumps(doc).replace("\\ud800", ""))  # UTF-8 holds no lone surrogate
    assert b"".join(bigjson.dumps_chunks(clean)) == json.dumps(clean, ensure_ascii=False).encode()
    escaped = b"".join(bigjson.dumps_chunks(clean, ascii_only=True))  # a runner's request
    assert escaped == json.dumps(clean).encode() and escaped.isascii()


@pytest.mark.parametrize("offset", range(0, 14))
def test_bigjson_never_splits_an_escape_or_a_surrogate_pair(offset):
    body = b"a" * (65536 - offset)
    for raw in (b'{"s": "' + body + b'\\ud83d\\ude00' + b"c" * 70000 + b'"}',
                b'{"s": "' + body + b'\\\\ud83d' + b"c" * 70000 + b'"}',
                b'{"s": "' + body + b'\\\\\\"\\n\\u00e9' + b"c" * 70000 + b'"}'):
        assert bigjson.loads(raw) == json.loads(raw)


@pytest.mark.parametrize("raw", [
    pytest.param(b'{"a": "' + b"x" * 300_000, id="unterminated-string"),
    pytest.param(b'{"a": [' + b"1," * 200_000 + b"]}", id="trailing-comma"),
    pytest.param(b'{"a": [' + b"1," * 200_000 + b"1}", id="unclosed-array"),
    pytest.param(b'{"a": "' + b"x" * 300_000 + b'\\q"}', id="bad-escape"),
])
def test_bigjson_refuses_what_json_refuses(raw):
    with pytest.raises(ValueError):
        json.loads(raw)
    with pytest.raises(ValueError):
        bigjson.loads(raw)


async def test_a_long_context_is_written_as_the_encoder_writes_it():
    """/api/generate's final chunk with millions of context ids is encoded a slice at a time, off the loop: the
    same bytes as the one-call encoder (streamed NDJSON line and stream:false body)."""
    from ollama_py.fastjson import dumps
    from ollama_py.server.streaming import encode_long, long_context, ndjson_line

    event = {"model": "m", "response": "é\x00", "done": True, "context": list(range(300_000)), "eval_count": 2}
    assert long_context(event) and not long_context({**event, "context": [1, 2]})
    assert await encode_long(ndjson_line, event) == ndjson_line(event)
    assert await encode_long(lambda o: dumps(o).encode(), event) == dumps(event).encode()
    assert json.loads(await encode_long(ndjson_line, event))["context"] == event["context"]


@pytest.mark.parametrize("seed", range(6))
def test_bigjson_decodes_a_body_made_of_many_small_values_as_json_does(seed):
    """A 2 MiB body of 10,000 tools was one C call (~90 ms holding the GIL, so the loop); its outer levels are now
    walked and each value decoded on its own. Same result, same errors."""
    rng = random.Random(seed)
    leaves = [1, -2.5e3, "x", "é\\u2028", None, True, False, [], {}, [1, [2, {"a": []}]], {"k": {"j": [None]}}]

    def value(depth: int) -> Any:
        if depth > 3 or rng.random() < 0.3:
            return rng.choice(leaves)
        if rng.random() < 0.5:
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        return {f"k{rng.randint(0, 9)}": value(depth + 1) for _ in range(rng.randint(0, 4))}

    doc = {"model": "m", "tools": [value(1) for _ in range(20_000)], "n": [value(2) for _ in range(2000)]}
    raw = json.dumps(doc, indent=rng.choice([None, 1])).encode()
    assert len(raw) > 4 * (1 << 16)
    assert bigjson.loads(raw) == json.loads(raw)
    for bad in (raw[:-1], raw + b" x", raw.replace(b":", b"", 1), raw.replace(b",", b",,", 1)):
        with pytest.raises(ValueError):
            json.loads(bad)
        with pytest.raises(ValueError):
            bigjson.loads(bad)


async def test_big_bodies_pause_the_cycle_collector_only_while_they_are_served(served):
    """A body past 256 KiB pauses Python's cycle collector (its full collections walked lists of millions of ids
    and thousands of rendered tools, holding the loop up to 180 ms); whatever the request's outcome, it is on
    again once the request is over, and the token-id lists it held are emptied (freed off the loop)."""
    import gc

    from ollama_py.server.offload import release

    tools = [{"type": "function", "function": {"name": f"t{i}", "parameters": {"type": "object"}}}
             for i in range(5000)]
    bodies = [
        ("/api/generate", {"model": "tiny", "prompt": "hi", "stream": False, "context": [7] * 300_000}),
        ("/api/chat", {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "tools": tools,
                       "stream": False}),  # a model without tools: refused after the decode
        ("/api/chat", {"model": "tiny", "messages": [{"role": "user", "content": "x " * 200_000}],
                       "stream": True, "options": {"num_predict": 2}}),
        ("/api/generate", {"model": "nope", "prompt": "hi", "context": [1] * 200_000}),
    ]
    assert gc.isenabled()
    statuses = []
    for path, body in bodies:
        statuses.append((await _post(served + path, json.dumps(body).encode()))[0] if body.get("stream") is not True
                        else (await asyncio.to_thread(requests.post, served + path, json=body, timeout=60)).status_code)
        assert gc.isenabled(), path
    assert statuses == [200, 400, 200, 404]
    ids, more = list(range(300_000)), [1] * 200_000
    await release([ids, more])
    assert ids == [] and more == []


_BIG = "x" * ((256 << 10) + 1)  # one character past what a runner body may hold before it is encoded in a thread


@pytest.mark.parametrize(("body", "bulky"), [
    ({"prompt": "hi", "n_predict": 8, "stream": True, "response_fields": ["content", "tokens", "stop"]}, False),
    ({"prompt": _BIG, "n_predict": 8}, True),
    ({"prompt": "hi", "messages": [{"role": "user", "content": _BIG}]}, True),  # a message's content
    ({"a": {"b": {"c": {"d": _BIG}}}}, True),  # a string in a container three levels down
    ({"a": {"b": {"c": {"d": {"e": _BIG}}}}}, False),  # four levels down: not looked at
    ({"prompt": list(range(40_000))}, True),  # token ids, by count
    ({"prompt": [*range(100), _BIG]}, False),  # only a list's first 64 items are looked into
    ({"prompt": [1, 2.5, None, True, "x"], "seed": 1, "temperature": 0.0}, False),
])
def test_a_runner_body_is_encoded_in_a_thread_when_it_holds_a_long_text_or_many_items(body, bulky):
    from ollama_py.runner.sse import _bulky

    assert _bulky(body) is bulky
