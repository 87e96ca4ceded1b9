"""What openapi.json admits, the server takes (schemathesis' positive_data_acceptance): whole floats for integer
fields, token ids, a null option; and what it refuses, it refuses as Ollama does (create with neither `from`
nor `files`, an empty OpenAI embeddings `input`, a missing blob)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from ollama_py.api.options import validate_options
from ollama_py.errors import BadRequest
from ollama_py.server.bodies import field, token_ids

INT_FIELDS = {
    "int": (7, 7),
    "whole float": (6.0, 6),
    "1e16": (1e16, 10**16),
    "int64 max": (2**63 - 1, 2**63 - 1),
}


@pytest.mark.parametrize(("value", "expected"), INT_FIELDS.values(), ids=INT_FIELDS.keys())
def test_an_int_field_takes_a_whole_float(value: Any, expected: int) -> None:
    got = field({"n": value}, "n", int)
    assert got == expected and type(got) is int


REFUSED = {
    "fraction": (6.5, 'json: cannot unmarshal float into field "n" of type integer'),
    "past int64": (2**63, 'json: cannot unmarshal number 9223372036854775808 into field "n" of type integer'),
    "float past int64": (1e300, 'json: cannot unmarshal number 1e+300 into field "n" of type integer'),
    "bool": (True, 'json: cannot unmarshal bool into field "n" of type integer'),
    "string": ("6", 'json: cannot unmarshal str into field "n" of type integer'),
}


@pytest.mark.parametrize(("value", "message"), REFUSED.values(), ids=REFUSED.keys())
def test_an_int_field_refuses(value: Any, message: str) -> None:
    with pytest.raises(BadRequest) as e:
        field({"n": value}, "n", int)
    assert str(e.value) == message


def test_a_float_field_keeps_its_float() -> None:
    assert field({"t": 6.0}, "t", float) == 6.0 and field({"t": 6}, "t", float) == 6


async def test_token_ids_take_whole_floats() -> None:
    assert await token_ids({"context": [1.0, 2, 2147483647]}, "context") == [1, 2, 2147483647]
    assert await token_ids({}, "context") is None
    long = [1.0] * 200_000  # checked in a thread, with the same answer
    assert await token_ids({"context": long}, "context") == [1] * 200_000


@pytest.mark.parametrize("bad", [[1.5], [-1], [2**31], [True], ["1"]], ids=["fraction", "negative", "past int32",
                                                                           "bool", "string"])
async def test_token_ids_refuse(bad: list[Any]) -> None:
    with pytest.raises(BadRequest, match=r"^tokens must be a list of token ids \(integers from 0 to 2147483647\)$"):
        await token_ids({"tokens": bad}, "tokens")
    with pytest.raises(BadRequest, match=r"^tokens must be a list of token ids"):
        await token_ids({"tokens": [1] * 200_000 + bad}, "tokens")


def test_a_null_num_thread_is_skipped_as_ollama_does() -> None:
    # Options.FromMap: `if val == nil { continue }` before any type check
    assert validate_options({"num_thread": None, "num_ctx": 1024.0}) == {"num_ctx": 1024}


async def test_generate_takes_whole_floats_for_its_integers(fake_app, aiohttp_client) -> None:
    _, app = fake_app()
    client = await aiohttp_client(app)
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False,
                                                 "context": [1.0, 2.0], "options": {"num_predict": 2.0}})
    assert r.status == 200, await r.text()


async def test_create_with_neither_from_nor_files_is_ollamas_400(fake_app, aiohttp_client) -> None:
    _, app = fake_app()
    client = await aiohttp_client(app)
    r = await client.post("/api/create", json={"model": "x", "stream": False})
    assert r.status == 400
    assert (await r.json())["error"] == "neither 'from' or 'files' was specified"


async def test_create_naming_a_missing_blob_is_a_404(fake_app, aiohttp_client) -> None:
    _, app = fake_app()
    client = await aiohttp_client(app)
    digest = "sha256:" + hashlib.sha256(b"never uploaded").hexdigest()
    r = await client.post("/api/create", json={"model": "x", "files": {"m.gguf": digest}, "stream": False})
    assert r.status == 404
    assert (await r.json())["error"] == f"blob {digest} not found"


async def test_openai_embeddings_with_an_empty_input_list_is_ollamas_400(fake_app, aiohttp_client) -> None:
    _, app = fake_app()
    client = await aiohttp_client(app)
    r = await client.post("/v1/embeddings", json={"model": "tiny", "input": []})
    assert r.status == 400
    assert (await r.json())["error"]["message"] == "invalid input"


def nested(depth: int) -> str:
    """A JSON schema `depth` levels deep, as text (json.dumps itself gives up near 1000 levels)."""
    return '{"type": "array", "items": ' * (depth - 1) + '{"type": "string"}' + "}" * (depth - 1)


async def test_a_chat_format_nested_past_the_limit_is_a_400_not_the_runners_5xx(fake_app, aiohttp_client) -> None:
    # a schema hundreds of levels deep parsed here but broke the runner's parser (a 5xx, found by test_request_fuzz)
    _, app = fake_app()
    client = await aiohttp_client(app)
    head = '{"model": "tiny", "stream": false, "messages": [{"role": "user", "content": "hi"}], "format": '
    r = await client.post("/api/chat", data=head + nested(600) + "}", headers={"Content-Type": "application/json"})
    assert r.status == 400
    assert (await r.json()) == {"error": "invalid request body: JSON nested deeper than 256 levels"}
    # a deep but real schema goes through
    r = await client.post("/api/chat", data=head + nested(40) + "}", headers={"Content-Type": "application/json"})
    assert r.status == 200, await r.text()


@pytest.mark.parametrize(("depth", "refused"), [(600, True), (250, False)])
def test_a_big_bodys_depth_is_checked_across_its_windows(depth: int, refused: bool) -> None:
    """A body past a few MiB is decoded in a thread, and its brackets counted a window at a time: nesting that
    starts after the first windows is still found."""
    from ollama_py.bigjson import joined
    from ollama_py.server.bodies import decode_big_json

    text = '{"model": "tiny", "prompt": "' + "word " * 1_000_000 + '", "format": ' + nested(depth) + "}"
    raw = text.encode()
    parts = [raw[k:k + 65536] for k in range(0, len(raw), 65536)]
    assert joined(parts) == raw
    if refused:
        with pytest.raises(BadRequest, match="nested deeper than 256 levels"):
            decode_big_json(joined(parts))
    else:
        assert decode_big_json(joined(parts)) == json.loads(raw)


# -- the scans a body gets before decoding (on the event loop: an agent's request is 50 KB) ---------------------------

@pytest.mark.parametrize(("text", "flagged", "refused"), [
    (b'{"t": 1e400}', True, True), (b'{"t": [2.5E+308, 1]}', True, True), (b'{"t": ' + b"9" * 400 + b"}", True, True),
    (b'{"t": -1e-999\n}', True, False),  # (underflows to 0, as in Go)
    (b'{"t": ' + b"1" * 309 + b"}", True, False),  # (1.1e308: within float64)
    (b'{"t": 1e40}', False, False), (b'{"t": 1e10, "u": 123456}', False, False),
    # hex ids and UUIDs in text, as every agent request carries: no numbers
    (b'{"id": "262e8277ac666116b", "s": "e201643a-703e-481e-a175-c2708345e524"}', False, False),
])
def test_only_a_number_that_may_pass_float64_takes_the_checking_path(text: bytes, flagged: bool,
                                                                     refused: bool) -> None:
    from ollama_py.server.bodies import decode_json, maybe_huge_number

    assert maybe_huge_number(text) is flagged
    if refused:
        with pytest.raises(BadRequest, match="into Go value of type float64"):
            decode_json(text)
    else:
        assert decode_json(text)


def test_a_surrogate_pair_is_one_character_and_a_lone_half_is_replaced() -> None:
    from ollama_py.server.bodies import _LONE_SURROGATE, decode_json

    pairs = b'{"e": "\\ud83d\\ude00 and \\uD83E\\uDD16"}'
    assert _LONE_SURROGATE.search(pairs) is None
    assert decode_json(pairs) == {"e": "\U0001f600 and \U0001f916"}
    for lone in (b'{"e": "\\ud83d x"}', b'{"e": "x \\ude00"}', b'{"e": "\\ude00\\ud83d"}', b'{"e": "\\ud800\\ud800"}'):
        assert _LONE_SURROGATE.search(lone) is not None, lone
        assert "\ufffd" in decode_json(lone)["e"]


@pytest.mark.parametrize(("depth", "refused"), [(40, False), (254, False), (255, False), (256, False),
                                                (257, True), (300, True)])
def test_a_bodys_depth_is_refused_past_256_levels_exactly(depth: int, refused: bool) -> None:
    """Nesting up to MAX_DEPTH passes, one level more is refused, whichever way it is found (orjson's writer knows
    a body under 255 levels at once; deeper ones are walked)."""
    from ollama_py.server.bodies import decode_json

    raw = ('{"model": "tiny", "format": ' + nested(depth - 1) + "}").encode()  # the body itself is one level
    if refused:
        with pytest.raises(BadRequest, match="nested deeper than 256 levels"):
            decode_json(raw)
    else:
        assert decode_json(raw) == json.loads(raw)
