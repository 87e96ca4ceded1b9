"""Reading request bodies: JSON objects with typed fields, every mistake a 400 with a clear message."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import math
import re
import sys
from typing import Any

import orjson
from aiohttp import hdrs, web

from ollama_py import bigjson
from ollama_py.api.names import CLOUD, ModelName, parse_name, parse_ref, stored_ref
from ollama_py.config import parse_duration
from ollama_py.errors import REMOTE_INFERENCE, BadRequest, CloudDisabled
from ollama_py.server import body_coding, offload
from ollama_py.server.access_log import current_stats
from ollama_py.server.appkeys import SETTINGS

_TYPE_NAMES = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array", dict: "object"}
_INT64 = (-(1 << 63), (1 << 63) - 1)
MAX_TOKEN_ID = 2**31 - 1


# A \uXXXX escape of a UTF-16 surrogate that is not half of a pair: a high one not followed by a low one, or a low
# one not after a high one. A pair (how clients escape an emoji) is one character to the decoder: matching every
# surrogate escape sent each agent request with an emoji through _fix_surrogates' walk (0.17 ms for 50 KB). Both
# alternatives share one literal prefix, the escape's backslash-u-d, for the regex engine to scan for (written as
# two alternatives it tried every position: 0.56 ms for 50 KB).
_LONE_SURROGATE = re.compile(rb"\\u[dD](?:[89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
                             rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD])[c-fC-F][0-9a-fA-F]{2})")
# A number that may be past float64's range: 309+ digits, or an exponent of 3+ digits. Only then are numbers
# parsed through the checking hooks (which cost a Python call per number). Looked for once every digit reads "0"
# and "E" reads "e": a run of 309 digits, or a digit, "e", an optional sign and 3+ digits ending where a JSON
# number ends -- so hex ids and UUIDs in an agent's text ("262e8277ac", "703e-481e") are not taken for one. The
# regex `[0-9]{309}|[eE][+-]?[0-9]{3}` tried at every position took 0.9 ms of the event loop for a 50 KB agent
# request, and matched its UUIDs (sending it down the hooks' path: 0.3 ms more); this takes ~0.05 ms.
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789E", b"000000000e")
_LONG_DIGITS = b"0" * 309
_BIG_EXPONENT = re.compile(rb"0e[+-]?000+[,\]}\s]")


# A run of 19 digits: an integer that may be past int64, which orjson reads as a float where json keeps it exact.
_INT64_DIGITS = b"0" * 19


def _huge(flat: bytes | bytearray) -> bool:
    """Whether a number may pass float64's range, in a body whose digits read "0" (_DIGITS_AS_ZERO)."""
    return _LONG_DIGITS in flat or _BIG_EXPONENT.search(flat) is not None


def maybe_huge_number(raw: bytes | bytearray) -> bool:
    return _huge(raw.translate(_DIGITS_AS_ZERO))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character '{name[0]}' looking for beginning of value")


class _NumberOutOfRange(ValueError):
    pass


def _number_out_of_range(text: str) -> _NumberOutOfRange:
    shown = text if len(text) <= 40 else text[:40] + "..."
    return _NumberOutOfRange(f"json: cannot unmarshal number {shown} into Go value of type float64")


def _parse_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e400: Go's decoder refuses it; Python would carry inf on to the runner
        raise _number_out_of_range(text)
    return value


def _parse_int(text: str) -> int:
    value = int(text)
    if abs(value) > sys.float_info.max:  # no Go number type holds it (float64 fields would overflow here later)
        raise _number_out_of_range(text)
    return value


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)  # read_json's, for a body of ordinary numbers


def _fix_text(text: str) -> str:
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _fix_surrogates(body: dict[str, Any]) -> dict[str, Any]:
    """Strings with a lone UTF-16 surrogate (valid JSON escapes, but not encodable text) get U+FFFD in its
    place, as Go's encoding/json does; otherwise they would fail later, when sent on to the runner. In place and
    without recursion: the body may be nested as deep as the decoder allows."""
    stack: list[Any] = [body]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            items = list(node.items())
            node.clear()
            for key, value in items:
                node[_fix_text(key)] = _fix_text(value) if isinstance(value, str) else value
                if isinstance(value, (dict, list)):
                    stack.append(value)
        else:
            for i, value in enumerate(node):
                if isinstance(value, str):
                    node[i] = _fix_text(value)
                elif isinstance(value, (dict, list)):
                    stack.append(value)
    return body


# Bodies larger than this are decoded in a thread: json.loads of a 57 MiB body held the event loop for seconds.
_DECODE_OFF_LOOP = 256 << 10
# Token lists longer than this are checked in a thread too (a Python-level pass over every item).
_IDS_OFF_LOOP = 100_000


async def read_json(request: web.Request, *, allow_empty: bool = False) -> dict[str, Any]:
    """The body as a JSON object. JSON that Go's decoder refuses is refused too: NaN/Infinity literals, numbers
    past float64's range, and nesting deep enough to exhaust the parser. A large body is decoded off the loop; a
    compressed one (Content-Encoding) is decompressed off the loop, within the body limit (server/body_coding.py)."""
    coding = request.headers.get(hdrs.CONTENT_ENCODING)
    length = request.content_length
    if coding and (applied := body_coding.codings(coding)):
        raw = await _decompressed(request, applied)
    elif length is not None and length <= _DECODE_OFF_LOOP:
        raw = await request.read()  # the usual body: small, its length given
    else:  # large, or of a length not given (sent chunked): read in the pieces it comes in
        parts = await _read_parts(request)
        if sum(map(len, parts)) > _DECODE_OFF_LOOP:
            return await _decode_big(parts)
        raw = b"".join(parts)
    if not raw.strip():
        if allow_empty:
            return {}
        raise BadRequest("missing request body")
    if len(raw) > _DECODE_OFF_LOOP:
        return await asyncio.to_thread(decode_big_json, raw)
    return decode_json(raw)


async def _decode_big(parts: list[bytes]) -> dict[str, Any]:
    """A big body, joined and decoded in a thread. A big body means big work before the answer starts (decoding,
    checks, a render of thousands of tools): the cycle collector waits until then, or to the end for lists of
    millions of items (offload.py)."""
    stats = current_stats()
    if stats.attached:  # a request's own record, which resumes the collector when the request ends
        offload.pause_gc()
        stats.gc_paused_for(until_done=False)
    body = await asyncio.to_thread(lambda: decode_big_json(bigjson.joined(parts)))
    if stats.attached and offload.holds_bulky(body):
        stats.gc_paused_for(until_done=True)
    return body


async def _read_parts(request: web.Request) -> list[bytes]:
    """A large body as the pieces it arrived in: aiohttp's read() grows one buffer and copies it whole at the end,
    ~40 ms of the loop for 64 MiB; here the pieces are joined in a thread (bigjson.joined). The size limit is
    read()'s."""
    limit = request.app[SETTINGS].max_body_bytes if SETTINGS in request.app else 0
    parts: list[bytes] = []
    size = 0
    while chunk := await request.content.readany():
        parts.append(chunk)
        size += len(chunk)
        if limit and size > limit:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=size)
    return parts


async def _decompressed(request: web.Request, applied: list[str]) -> bytes:
    """A compressed body, read (its compressed size within the limit) and decoded in a thread, its decoded size
    within the limit too: a 413 as soon as it passes it, however far the data would go on expanding."""
    limit = request.app[SETTINGS].max_body_bytes if SETTINGS in request.app else 0
    parts = await _read_parts(request)

    def decode() -> bytes:
        try:
            return body_coding.decode(bigjson.joined(parts), applied, limit)
        except body_coding.BodyTooLarge as e:
            raise web.HTTPRequestEntityTooLarge(max_size=limit, actual_size=e.size) from None

    return await asyncio.to_thread(decode)


def decode_big_json(raw: bytes | bytearray) -> dict[str, Any]:
    """decode_json for a large body, in a worker thread: every step is cut into slices (bigjson), so that no
    single C call holds the GIL, and with it the event loop, for more than a few milliseconds."""
    try:
        body = bigjson.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"invalid character in request body: {e}") from None
    except RecursionError:
        raise BadRequest("invalid request body: JSON nested too deeply") from None
    if not isinstance(body, dict):
        raise BadRequest("json: cannot unmarshal request body: expected a JSON object")
    _check_numbers(body)
    _check_depth(body, raw)
    if any(_LONE_SURROGATE.search(raw, k, k + _WINDOW + 12) for k in range(0, len(raw), _WINDOW)):
        body = _fix_surrogates(body)
    return body


_WINDOW = 1 << 16


def _check_numbers(body: dict[str, Any]) -> None:
    """decode_json's number checks, walking the decoded body (in slices: a list of millions of ids is looked
    at 64k items per step)."""
    stack: list[Any] = [body]
    while stack:
        node = stack.pop()
        items = node.values() if isinstance(node, dict) else node
        if isinstance(items, list) and len(items) > _WINDOW:
            slices: Any = (items[k:k + _WINDOW] for k in range(0, len(items), _WINDOW))
        else:
            slices = (items,)
        for part in slices:
            for value in part:
                if isinstance(value, (dict, list)):
                    stack.append(value)
                elif isinstance(value, float) and math.isinf(value):
                    raise BadRequest(str(_number_out_of_range(repr(value))))
                elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > sys.float_info.max:
                    raise BadRequest(str(_number_out_of_range(str(value))))


# How deep a body may nest. Python's parser reaches ~990 levels before RecursionError, and what a request carries
# on (a format's schema, tools' parameters) is re-encoded for the runner and parsed again there, which then fails
# as a 5xx; no real schema nests past a few dozen levels.
MAX_DEPTH = 256
_CONTAINERS = (dict, list)
_COUNT_WINDOW = 1 << 20  # bytes a bracket count looks at in one C call
_QUICK_DEPTH_BYTES = 4 << 20  # a body up to this size is written once by orjson to know it nests < 255 levels


def _check_depth(body: Any, raw: bytes | bytearray) -> None:
    """BadRequest when the decoded body nests deeper than MAX_DEPTH. A body up to a few MiB is written once by
    orjson, whose writer refuses 255+ levels (19 us for an agent's 80 KB; the walk below took 110); a larger one is
    free when it has few brackets (counted a window at a time: one count over 60 MB is a C call holding the GIL
    ~15 ms). Anything else is walked."""
    if len(raw) <= _QUICK_DEPTH_BYTES:
        try:
            orjson.dumps(body)
            return
        except orjson.JSONEncodeError:  # that many levels, or an integer past 64 bits (json's path read it)
            pass
    else:
        brackets = 0
        for k in range(0, len(raw), _COUNT_WINDOW):
            brackets += raw.count(b"[", k, k + _COUNT_WINDOW) + raw.count(b"{", k, k + _COUNT_WINDOW)
            if brackets > MAX_DEPTH:
                break
        else:
            return
    # level by level, each level's non-empty containers gathered in one comprehension (a walk with a stack of
    # (node, depth) pairs took as long as decoding an agent's 80 KB body did)
    level: list[Any] = [body]
    for _ in range(MAX_DEPTH):  # (a decoded body's containers are exactly dicts and lists)
        level = [value for node in level for value in (node.values() if type(node) is dict else node)
                 if type(value) in _CONTAINERS and value]
        if not level:
            return
    raise BadRequest(f"invalid request body: JSON nested deeper than {MAX_DEPTH} levels")


def decode_json(raw: bytes) -> dict[str, Any]:
    """read_json's decoding, blocking: a request body as a JSON object, or BadRequest. orjson reads it (twice as
    fast as json: 72 vs 161 us for an agent's 80 KB) unless a number may be out of range or past int64; whatever
    orjson refuses (invalid JSON, NaN, a lone surrogate, UTF-16) is read by json's path, which says what is wrong
    or repairs what Go would."""
    flat = raw.translate(_DIGITS_AS_ZERO)  # one look at the digits says what may be out of orjson's reach
    if _INT64_DIGITS not in flat:  # (an integer past int64 has 19 digits or more; so has one past float64)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
        else:  # (orjson takes no lone surrogate: nothing to repair)
            if not isinstance(body, dict):
                raise BadRequest("json: cannot unmarshal request body: expected a JSON object")
            _check_depth(body, raw)
            return body
    try:
        if _huge(flat):  # (orjson refuses a number past float64's range: 1e400 is found here)
            body = json.loads(raw, parse_constant=_reject_constant, parse_float=_parse_float, parse_int=_parse_int)
        else:
            body = _DECODER.decode(raw.decode(json.detect_encoding(raw), "surrogatepass"))  # json.loads, made once
    except _NumberOutOfRange as e:
        raise BadRequest(str(e)) from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise BadRequest(f"invalid character in request body: {e}") from None
    except RecursionError:
        raise BadRequest("invalid request body: JSON nested too deeply") from None
    if not isinstance(body, dict):
        raise BadRequest("json: cannot unmarshal request body: expected a JSON object")
    _check_depth(body, raw)
    if _LONE_SURROGATE.search(raw):
        body = _fix_surrogates(body)
    return body


def field(body: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    """body[key] checked against kind (None/absent gives default). bool is never accepted as int.

    An int field takes a whole float (6.0, 1e16) as that integer, within int64. JSON Schema 2020-12 (the
    dialect of our openapi.json) counts 6.0 as an integer and no schema can tell it from 6; Ollama's options
    take one the same way (Options.FromMap), though Go's decoder refuses one for a top-level int field."""
    value = body.get(key)
    if value is None:
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if int in kinds and float not in kinds and isinstance(value, float) and value.is_integer():
        if not _INT64[0] <= value <= _INT64[1]:
            raise BadRequest(f'json: cannot unmarshal number {value!r} into field "{key}" of type integer')
        value = int(value)
    if int in kinds and isinstance(value, int) and not isinstance(value, bool) and not _INT64[0] <= value <= _INT64[1]:
        raise BadRequest(f'json: cannot unmarshal number {value} into field "{key}" of type integer')
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        want = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        raise BadRequest(f'json: cannot unmarshal {type(value).__name__} into field "{key}" of type {want}')
    return value


async def token_ids(body: dict[str, Any], key: str) -> list[int] | None:
    """body[key] as token ids (integers from 0 to MAX_TOKEN_ID; a whole float is its integer, as in field).
    A long list is checked off the loop."""
    value = field(body, key, list)
    if value is None:
        return None
    if len(value) > _IDS_OFF_LOOP:
        ids = await asyncio.to_thread(_check_token_ids, value, key)
        stats = current_stats()
        stats.hold(value)
        stats.hold(ids)
        return ids
    return _check_token_ids(value, key)


def _check_token_ids(value: list[Any], key: str) -> list[int]:
    ids = [int(t) if isinstance(t, float) and t.is_integer() else t for t in value]
    if not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t <= MAX_TOKEN_ID for t in ids):
        raise BadRequest(f"{key} must be a list of token ids (integers from 0 to {MAX_TOKEN_ID})")
    return ids


def requested_model(body: dict[str, Any], *, remote: str = REMOTE_INFERENCE) -> tuple[ModelName, str]:
    """The model a request names: parsed, and as the user wrote it (error texts quote it that way; find_model
    reads its `:local` there). A cloud model (`name:cloud`, `name:tag-cloud`) is a 403 naming `remote`, what is
    unavailable, as from an Ollama with its cloud disabled (in Ollama's own envelope on every route: its cloud
    check comes before the OpenAI and Anthropic translation)."""
    raw = _named(body)
    ref = parse_ref(raw)
    name = parse_name(ref.base)
    if ref.source == CLOUD:
        raise CloudDisabled(remote, bare=True)
    return name, raw


def stored_model(body: dict[str, Any]) -> tuple[ModelName, str]:
    """The model a pull or a delete names, as Ollama normalises it: a cloud model's stub under the name it is
    stored by (`name:tag:cloud` -> `name:tag-cloud`), `:local` dropped; and the name as the user wrote it."""
    raw = _named(body)
    return parse_name(stored_ref(raw)), raw


def model_name(body: dict[str, Any], key: str = "model") -> ModelName:
    """The model named in a request (legacy "name" accepted), parsed; 400 when missing or invalid."""
    return parse_name(_named(body, key))


def _named(body: dict[str, Any], key: str = "model") -> str:
    """The model name a request writes under `key` (for "model", the legacy "name" too); 400 when there is none."""
    raw = field(body, key, str) or (field(body, "name", str) if key == "model" else None)
    if not raw:
        raise BadRequest("model is required")
    return raw


def keep_alive(body: dict[str, Any]) -> float | None:
    """A request's keep_alive in seconds (a Go duration string or a number of seconds; negative: forever), None
    when absent."""
    raw = body.get("keep_alive")
    if raw is None:
        return None
    try:
        return parse_duration(raw)
    except ValueError as e:
        raise BadRequest(str(e) if "duration" in str(e) else f"invalid keep_alive: {raw!r}") from None


_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def image_chars(value: Any) -> int:
    """Characters of base64 image data in a body's `images`, or in its messages' (to decide where to check them:
    a 60 MB image takes the regex over a second)."""
    if not isinstance(value, list):
        return 0
    total = 0
    for item in value:
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += image_chars(item.get("images"))
    return total


async def checked_images(images: Any) -> list[str]:
    """check_images, in a thread for large images."""
    if image_chars(images) > _DECODE_OFF_LOOP:
        return await asyncio.to_thread(check_images, images)
    return check_images(images)


_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]*")


def _base64_end(image: str) -> int:
    """Where _BASE64's match of the image ends, found a window at a time (one regex over a 60 MB image held the
    GIL for 0.1 s, stalling the event loop even from a worker thread)."""
    at = 0
    while True:
        window_end = min(len(image), at + _WINDOW)
        run = _BASE64_RUN.match(image, at, window_end)
        assert run is not None  # `*` matches the empty run
        at = run.end()
        if at < window_end or at == len(image):
            break
    padding = _BASE64.match(image, at, at + 2)  # at most "==" after the run
    return padding.end() if padding else at


def base64_data(data: Any, missing: str, invalid: str) -> str:
    """A media item's base64 text: a 400 with `missing` when it is no string, `invalid: <why>` when it does not
    decode (an Anthropic image source, an OpenAI input_audio part)."""
    if not isinstance(data, str):
        raise BadRequest(missing)
    try:
        base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError) as e:
        raise BadRequest(f"{invalid}: {e}") from None
    return data


def check_images(images: Any) -> list[str]:
    """Base64 images, as Go decodes a []byte field: the first bad byte is named, as Ollama's 400 does."""
    if images is None:
        return []
    if not isinstance(images, list):
        raise BadRequest("json: cannot unmarshal images: expected an array of base64 strings")
    for image in images:
        if not isinstance(image, str):
            raise BadRequest(f"json: cannot unmarshal {type(image).__name__} into Go value of type []uint8")
        end = _base64_end(image)
        if end < len(image) or len(image) % 4:
            raise BadRequest(f"illegal base64 data at input byte {min(end, len(image) - len(image) % 4)}")
    return images
