"""JSON for very large documents without holding the GIL for long: `loads` and `dumps` in slices.

A thread does not keep a big json.loads off the event loop: the C decoder holds the GIL for the whole call
(a 60 MB body with one base64 image: ~0.2 s; 20 million token ids: ~0.7 s), and the loop waits that long. Here
the work is cut into C calls of at most ~64 KB each, with Python bytecode between them, where the interpreter
hands the GIL to the loop (every 5 ms). Meant to run in a worker thread, for documents past a few hundred KB.

    loads(raw) -> Any      what json.loads(raw) gives: string literals and runs of numbers inside arrays longer
                           than _SLICE are cut out of the document, the rest decoded (whole when it is small,
                           else the outer two levels of objects and arrays walked here and each value inside
                           them decoded by the C scanner: 10,000 tools are 10,000 short calls), the pieces
                           decoded slice by slice and put back
    dumps(obj) -> str      json.dumps(obj, ensure_ascii=False): long strings and lists encoded slice by slice
    dumps_chunks(obj)      the same as UTF-8 pieces of ~1 MB, to be written one at a time

Errors are json.JSONDecodeError (a ValueError), as json.loads raises them; positions inside a cut-out piece are
relative to that piece.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

_SLICE = 1 << 16


def loads(raw: bytes | bytearray, parse_constant: Any = None) -> Any:
    data = raw  # not copied: a copy of 80 MB is one C call that holds the GIL
    if len(data) <= 4 * _SLICE:
        return json.loads(data, parse_constant=parse_constant)
    tag = "\x00" + secrets.token_hex(8) + ":"  # a placeholder no client string holds (it has a random part)
    pieces: list[tuple[str, int, int]] = []  # ("s" string body | "n" numbers, start, end) of the cut-out spans
    skeleton: list[bytes] = []
    pos = 0  # data[:pos] is in the skeleton (or cut out)
    i = 0
    n = len(data)
    while i < n:
        q = data.find(b'"', i)
        stretch_end = n if q < 0 else q
        if stretch_end - i > _SLICE:  # a long stretch between strings: runs of numbers filling arrays
            pos = _cut_numbers(data, i, stretch_end, pos, skeleton, pieces, tag)
        if q < 0:
            break
        end = _string_end(data, q)
        if end - q > _SLICE and data[end - 1:end] == b'"':
            skeleton.append(bytes(data[pos:q]))
            skeleton.append(json.dumps(f"{tag}{len(pieces)}").encode())
            pieces.append(("s", q + 1, end - 1))
            pos = end
        i = end
    skeleton.append(bytes(data[pos:]))
    doc = _loads_skeleton(b"".join(skeleton), parse_constant)
    if not pieces:
        return doc
    values = [_decode_string(data, a, b) if kind == "s" else _decode_numbers(data, a, b) for kind, a, b in pieces]
    return _put_back(doc, tag, values)


_WS = re.compile(r"[ \t\n\r]*")
_WALKED = 2  # levels of objects and arrays walked in Python; values deeper are one C scanner call each


def joined(parts: list[bytes]) -> bytearray:
    """Pieces of a document in one buffer, appended a piece at a time: one join of 64 MiB is a C call holding the
    GIL ~20 ms, and so is making a zeroed buffer of that size to copy into; a growing one is moved, not copied,
    by the allocator (under a millisecond a step). For a body that arrived in pieces, before loads."""
    out = bytearray()
    for p in parts:
        out += p
    return out


def _loads_skeleton(skeleton: bytes, parse_constant: Any) -> Any:
    """json.loads(skeleton): whole when small; else walked (_walk), so that no single C call decodes more than
    one value two levels down."""
    if len(skeleton) <= 4 * _SLICE:
        return json.loads(skeleton, parse_constant=parse_constant)
    text = skeleton.decode(json.detect_encoding(skeleton), "surrogatepass")
    if text.startswith("\ufeff"):
        raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    decoder = json.JSONDecoder(parse_constant=parse_constant)
    scan = decoder.scan_once  # type: ignore[attr-defined]
    value, end = _walk(text, _WS.match(text, 0).end(), 0, scan)  # type: ignore[union-attr]
    end = _WS.match(text, end).end()  # type: ignore[union-attr]
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)
    return value


def _walk(s: str, idx: int, depth: int, scan: Any) -> tuple[Any, int]:
    """The value at s[idx] (no whitespace before it) and the index past it."""
    ch = s[idx:idx + 1]
    if depth >= _WALKED or ch not in ("[", "{"):
        try:
            return scan(s, idx)
        except StopIteration as e:
            raise json.JSONDecodeError("Expecting value", s, e.value) from None
    ws = _WS.match
    idx = ws(s, idx + 1).end()  # type: ignore[union-attr]
    if ch == "[":
        items: list[Any] = []
        if s[idx:idx + 1] == "]":
            return items, idx + 1
        while True:
            value, idx = _walk(s, idx, depth + 1, scan)
            items.append(value)
            done, idx = _after_value(s, idx, "]")
            if done:
                return items, idx
    obj: dict[str, Any] = {}
    if s[idx:idx + 1] == "}":
        return obj, idx + 1
    while True:
        if s[idx:idx + 1] != '"':
            raise json.JSONDecodeError("Expecting property name enclosed in double quotes", s, idx)
        key, idx = json.decoder.scanstring(s, idx + 1)  # type: ignore[attr-defined]
        idx = ws(s, idx).end()  # type: ignore[union-attr]
        if s[idx:idx + 1] != ":":
            raise json.JSONDecodeError("Expecting ':' delimiter", s, idx)
        idx = ws(s, idx + 1).end()  # type: ignore[union-attr]
        obj[key], idx = _walk(s, idx, depth + 1, scan)
        done, idx = _after_value(s, idx, "}")
        if done:
            return obj, idx


def _after_value(s: str, idx: int, close: str) -> tuple[bool, int]:
    """Past a value inside a container: (True, the index after `close`) at the container's end, else (False, the
    index of the next value)."""
    idx = _WS.match(s, idx).end()  # type: ignore[union-attr]
    sep = s[idx:idx + 1]
    if sep == close:
        return True, idx + 1
    if sep != ",":
        raise json.JSONDecodeError("Expecting ',' delimiter", s, idx)
    return False, _WS.match(s, idx + 1).end()  # type: ignore[union-attr]


def _string_end(data: bytes | bytearray, q: int) -> int:
    """The index past the string literal opening at q (unterminated: the end of the document)."""
    j = q + 1
    while True:
        k = data.find(b'"', j)
        if k < 0:
            return len(data)
        r = k
        while data[r - 1] == 0x5C:  # a run of backslashes before the quote: odd means it is escaped
            r -= 1
        if (k - r) % 2 == 0:
            return k + 1
        j = k + 1


_NUMBER_RUN = re.compile(rb"[-+0-9.eE,\s]+")


def _cut_numbers(data: bytes | bytearray, i: int, end: int, pos: int, skeleton: list[bytes],
                 pieces: list[tuple[str, int, int]], tag: str) -> int:
    """Cut out, between i and end, each run of numbers longer than a slice that fills an array; returns the new
    copied-up-to position. Every regex call looks at one slice at most."""
    at = i
    while at < end:
        m = _NUMBER_RUN.search(data, at, min(end, at + _SLICE))
        if m is None:
            at = min(end, at + _SLICE)
            continue
        a, b = m.start(), m.end()
        while b < end and b == min(end, m.endpos):  # the run filled its window: extend it
            m = _NUMBER_RUN.match(data, b, min(end, b + _SLICE))
            if m is None:
                break
            b = m.end()
        if b - a > _SLICE:
            lb = data.rfind(b"[", max(i, a - 64), a)
            rb = data.find(b"]", b, min(end, b + 64))
            if lb >= pos and rb >= 0 and not data[lb + 1:a].strip() and not data[b:rb].strip():
                # the whole array, brackets and all, becomes the placeholder
                skeleton.append(bytes(data[pos:lb]))
                skeleton.append(json.dumps(f"{tag}{len(pieces)}").encode())
                pieces.append(("n", a, b))
                pos = rb + 1
        at = b
    return pos


def _safe_cut(data: bytes | bytearray, a: int, c: int) -> int:
    """c moved left so that data[a:c] ends neither inside an escape nor between the two escapes of a surrogate
    pair (each slice is decoded alone)."""
    for _ in range(3):
        p = data.rfind(b"\\", max(a, c - 12), c)
        if p < 0:
            return c
        r = p
        while r > a and data[r - 1] == 0x5C:
            r -= 1
        if (p - r) % 2:  # data[p] is the escaped half of a "\\\\": the escape ended at p + 1 <= c
            return c
        is_u = data[p + 1:p + 2] in (b"u", b"U")
        length = 6 if is_u else 2
        high = is_u and data[p + 2:p + 4].upper() in (b"D8", b"D9", b"DA", b"DB")
        if p + length > c or (high and p + length == c):
            c = p
            continue
        return c
    return c


def _decode_string(data: bytes | bytearray, a: int, b: int) -> str:
    """The JSON string literal body data[a:b], decoded slice by slice."""
    out: list[str] = []
    while a < b:
        c = b if b - a <= _SLICE else _safe_cut(data, a, a + _SLICE)
        out.append(json.loads(b'"' + data[a:c] + b'"'))
        a = c
    return "".join(out)


def _decode_numbers(data: bytes | bytearray, a: int, b: int) -> list[Any]:
    out: list[Any] = []
    while a < b:
        c = data.find(b",", min(b, a + _SLICE), b)
        c = b if c < 0 else c
        out.extend(json.loads(b"[" + data[a:c] + b"]"))
        a = c + 1
    return out


def _put_back(doc: Any, tag: str, values: list[Any]) -> Any:
    def value(v: Any) -> Any:
        if isinstance(v, str) and v.startswith(tag):
            return values[int(v[len(tag):])]
        return v

    doc = value(doc)
    stack = [doc]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for k in list(node):
                v = node[k]
                if isinstance(k, str) and k.startswith(tag):
                    del node[k]
                    k = values[int(k[len(tag):])]
                node[k] = value(v)
                if isinstance(v, (dict, list)):
                    stack.append(v)
        elif isinstance(node, list):
            for idx, v in enumerate(node):
                if isinstance(v, str) and v.startswith(tag):
                    node[idx] = values[int(v[len(tag):])]
                elif isinstance(v, (dict, list)):
                    stack.append(v)
    return doc


def dumps(obj: Any) -> str:
    """json.dumps(obj, ensure_ascii=False), with long strings and lists encoded in slices."""
    parts: list[str] = []
    _encode(obj, parts, keep=True)
    return "".join(parts)


def dumps_chunks(obj: Any, size: int = 1 << 20, *, ascii_only: bool = False) -> list[bytes]:
    """dumps(obj) in UTF-8, as pieces of about `size` bytes (to write one at a time: joining 80 MB is itself a
    long C call). `ascii_only`: non-ASCII escaped, as fastjson.dumps_ascii writes a runner's request (quicker for a
    text that one emoji makes Python hold at four bytes a character)."""
    parts: list[str] = []
    _encode(obj, parts, keep=not ascii_only)
    chunks: list[bytes] = []
    batch: list[str] = []
    length = 0
    for part in parts:
        batch.append(part)
        length += len(part)
        if length >= size:
            chunks.append("".join(batch).encode())
            batch, length = [], 0
    if batch:
        chunks.append("".join(batch).encode())
    return chunks


_SCALARS = (int, float, bool, type(None))


def _encode(obj: Any, parts: list[str], keep: bool) -> None:
    """obj's JSON as pieces appended to `parts`; `keep`: non-ASCII kept as it is, else escaped."""
    if isinstance(obj, str):
        if len(obj) <= _SLICE:
            parts.append(json.dumps(obj, ensure_ascii=not keep))
            return
        parts.append('"')
        for k in range(0, len(obj), _SLICE):
            parts.append(json.dumps(obj[k:k + _SLICE], ensure_ascii=not keep)[1:-1])
        parts.append('"')
    elif isinstance(obj, dict):
        parts.append("{")
        for n, (k, v) in enumerate(obj.items()):
            if n:
                parts.append(", ")
            parts.append(json.dumps(k if isinstance(k, str) else json.dumps(k), ensure_ascii=not keep))
            parts.append(": ")
            _encode(v, parts, keep)
        parts.append("}")
    elif isinstance(obj, (list, tuple)):
        parts.append("[")
        n = 0
        while n < len(obj):
            if n:
                parts.append(", ")
            if isinstance(obj[n], _SCALARS):  # a run of numbers (and the like): a slice at a time
                j = n + 1
                while j < len(obj) and j - n < _SLICE // 8 and isinstance(obj[j], _SCALARS):
                    j += 1
                parts.append(json.dumps(obj[n:j])[1:-1])
                n = j
            else:
                _encode(obj[n], parts, keep)
                n += 1
        parts.append("]")
    else:
        parts.append(json.dumps(obj, ensure_ascii=not keep))
