"""JSON for the per-token path: the C scanner and encoder of the standard library, called directly.

`json.loads` and `json.dumps` wrap those C functions in several Python frames (encoding detection, a
whitespace regex, argument handling). That is nothing once, but every streamed token is decoded once (the
runner's event) and encoded once (the client's chunk), and between tokens the gateway sleeps while llama-server
evicts its caches, so each of those frames runs cold: in a bare relay on our 2-core VM the two wrappers cost
~70 us a token. Output is byte for byte what `json.dumps(obj, ensure_ascii=False,
separators=(",", ":"))` gives.

Since plain tokens after the first take the lane (server/streaming.py) and skip JSON both ways, this serves the
tokens of requests with thinking, tools or log-probabilities and every first chunk. Re-measured there
(bench/fastjson_cost.py, bench/results/fastjson.md, 2026-11-25): with cold caches, as between tokens, it saves
~6 us decoding an event and ~10 us encoding a chunk, ~17 us a token (0.2 % of a token on this CPU, ~0.6 % of a
small model's token on a GPU). Kept for that, at 50 lines with an equality test.

What only llama-server reads and writes goes through orjson: a runner's events (`loads`: 0.4 us an event
instead of 2.4) and the requests sent to it (`to_runner`: an agent's 80 KB prompt in 3 us instead of 166, as
UTF-8). What a client reads stays byte for byte as json writes it.
"""

from __future__ import annotations

import json
from json import encoder as _encoder
from json import scanner as _scanner
from typing import Any

import orjson

_DECODER = json.JSONDecoder()
# The C scanner and encoder are CPython's json internals, which typeshed does not declare.
_scan = (_scanner.c_make_scanner or _scanner.py_make_scanner)(_DECODER)  # type: ignore[attr-defined]


def _default(o: Any) -> Any:
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


if _encoder.c_make_encoder is not None:  # type: ignore[attr-defined]
    _encode = _encoder.c_make_encoder(None,  # type: ignore[attr-defined]
                                       _default, _encoder.encode_basestring, None, ":", ",", False, False, True)

    _encode_ascii = _encoder.c_make_encoder(None,  # type: ignore[attr-defined]
                                             _default, _encoder.encode_basestring_ascii, None, ":", ",", False,
                                             False, True)

    def dumps(obj: Any) -> str:
        """Compact JSON, non-ASCII kept as is."""
        return "".join(_encode(obj, 0))

    def dumps_ascii(obj: Any) -> bytes:
        """Compact JSON with every non-ASCII character escaped (\\uXXXX), as bytes: what goes to a runner. An
        agent's text holds a few arrows and emoji, and one of them makes Python keep the whole text four bytes a
        character: its JSON with non-ASCII kept, then UTF-8, took 305 µs for a 50 KB prompt, escaped 96 (pure ASCII
        text: 126 -> 78; CJK text: the same time, twice the bytes). llama-server's parser reads the escapes back
        to the same text."""
        return "".join(_encode_ascii(obj, 0)).encode("ascii")
else:  # pragma: no cover - CPython always has the C encoder
    _PY = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
    _PY_ASCII = json.JSONEncoder(separators=(",", ":"))

    def dumps(obj: Any) -> str:
        return _PY.encode(obj)

    def dumps_ascii(obj: Any) -> bytes:
        return _PY_ASCII.encode(obj).encode("ascii")


json_string = _encoder.encode_basestring  # a str as a JSON string literal, non-ASCII kept (as dumps writes it)


def to_runner(obj: Any) -> bytes:
    """A request body for llama-server: compact UTF-8 JSON (orjson), or dumps_ascii's escapes for what orjson
    refuses (a lone surrogate, an integer past 64 bits, a key that is not a string)."""
    try:
        return orjson.dumps(obj)
    except TypeError:  # (orjson.JSONEncodeError is one)
        return dumps_ascii(obj)


def loads(data: bytes | str) -> Any:
    """One JSON value that is all of `data` (surrounding whitespace allowed); ValueError otherwise. orjson first;
    what it refuses (NaN, a lone surrogate) is read by json's scanner, which also says what is wrong."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    text = (data.decode() if isinstance(data, (bytes, bytearray)) else data).strip()
    try:
        value, end = _scan(text, 0)
    except StopIteration as e:
        raise json.JSONDecodeError("Expecting value", text, e.value) from None
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value
