"""Request bodies sent compressed (`Content-Encoding: gzip`, `deflate` or `zstd`), decoded with a bound.

Codex CLI compresses its `/v1/responses` bodies with zstd on its ChatGPT-login path, and pi on its Codex route;
Ollama decodes none (its JSON parser refuses the bytes). aiohttp would decode them itself, in the connection's
data_received on the event loop, and its bound did not hold: a 200 KB gzip body of zeros became 200 MB in memory and
held the loop 167 ms before the body limit's 413. serve turns that off (`auto_decompress=False`) and a JSON body is
decoded here instead, in a worker thread, at most SLICE bytes of output per call (the C decoders let the GIL go
while they work), stopping as soon as the output passes the body limit.

    codings(header)             the codings a Content-Encoding header names, in the order they were applied;
                                BodyCodingError (415) for one this server cannot decode
    decode(data, codings, limit) -> bytes
                                the body decoded; BodyTooLarge past `limit` bytes of output, BodyCodingError (400)
                                for data that is not what its coding says
"""

from __future__ import annotations

import sys
import zlib
from typing import Protocol

from ollama_py.errors import BadRequest, OllamaError

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

SLICE = 1 << 20  # bytes of output per decoder call
_SUPPORTED = ("gzip", "deflate", "zstd")
_ALIASES = {"x-gzip": "gzip"}


class UnsupportedCoding(OllamaError):
    status = 415  # RFC 9110: a content coding the server does not understand


class BodyTooLarge(Exception):
    """The decoded body passed the limit after `size` bytes."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.size = size


def codings(header: str) -> list[str]:
    """The codings of a Content-Encoding header, first applied first ("identity" left out)."""
    out = []
    for part in header.split(","):
        name = part.strip().lower()
        name = _ALIASES.get(name, name)
        if name in ("", "identity"):
            continue
        if name not in _SUPPORTED:
            raise UnsupportedCoding(f"unsupported Content-Encoding {part.strip()!r}: send the body as plain JSON, "
                                    f"or encoded with {', '.join(_SUPPORTED)}")
        out.append(name)
    if len(out) > 3:
        raise UnsupportedCoding(f"Content-Encoding names {len(out)} codings: at most 3 are decoded")
    return out


class _Decoder(Protocol):
    def step(self, data: bytes | bytearray) -> bytes: ...  # up to SLICE bytes of output; `data` on the first call

    @property
    def eof(self) -> bool: ...  # the member (gzip) or frame (zstd) ended

    @property
    def more(self) -> bool: ...  # another step can give output without more data

    @property
    def unused(self) -> bytes: ...  # what follows the end: the next member or frame


class _Zlib:
    """gzip (one member) or deflate (zlib-wrapped, or raw as some clients send it)."""

    def __init__(self, coding: str, first: bytes | bytearray) -> None:
        if coding == "gzip":
            wbits = 16 + zlib.MAX_WBITS
        elif first[:1] and first[0] & 0x0F == 8:  # a zlib header (RFC 1950): CM = 8
            wbits = zlib.MAX_WBITS
        else:
            wbits = -zlib.MAX_WBITS
        self._d = zlib.decompressobj(wbits)
        self._full = False

    def step(self, data: bytes | bytearray) -> bytes:
        out = self._d.decompress(data or self._d.unconsumed_tail, SLICE)
        self._full = len(out) == SLICE  # a full slice may leave output inside the decoder
        return out

    @property
    def eof(self) -> bool:
        return self._d.eof

    @property
    def more(self) -> bool:
        return self._full or bool(self._d.unconsumed_tail)

    @property
    def unused(self) -> bytes:
        return self._d.unused_data


class _Zstd:
    def __init__(self) -> None:
        self._d = zstd.ZstdDecompressor()

    def step(self, data: bytes | bytearray) -> bytes:
        return self._d.decompress(data, SLICE)

    @property
    def eof(self) -> bool:
        return self._d.eof

    @property
    def more(self) -> bool:
        return not self._d.needs_input

    @property
    def unused(self) -> bytes:
        return self._d.unused_data


def _decode_one(data: bytes | bytearray, coding: str, limit: int) -> bytes:
    """One coding undone: member after member (gzip) or frame after frame (zstd), as their formats allow."""
    parts: list[bytes] = []
    size = 0
    rest = data
    try:
        while rest:
            decoder: _Decoder = _Zstd() if coding == "zstd" else _Zlib(coding, rest)
            piece = decoder.step(rest)
            while True:
                size += len(piece)
                if size > limit:
                    raise BodyTooLarge(size)
                parts.append(piece)
                if decoder.eof:
                    break
                if not decoder.more:
                    raise BadRequest(f"invalid request body: its {coding} data ends early")
                piece = decoder.step(b"")
            rest = decoder.unused
            if coding == "gzip":
                rest = rest.lstrip(b"\0")  # zeros may pad a gzip stream (as Python's gzip module reads it)
    except (zlib.error, zstd.ZstdError) as e:
        raise BadRequest(f"invalid request body: it is not the {coding} data its Content-Encoding says ({e})") \
            from None
    return b"".join(parts)


def decode(data: bytes | bytearray, applied: list[str], limit: int) -> bytes:
    """`data` with the codings undone, last applied first; BodyTooLarge once more than `limit` bytes come out
    (0: no limit)."""
    bound = limit or sys.maxsize
    out: bytes | bytearray = data
    for coding in reversed(applied):
        out = _decode_one(out, coding, bound)
    return bytes(out)
