"""Reading request bodies: JSON objects with typed fields, every mistake a 400 with a clear message."""

from __future__ import annotations

import json
import re
from typing import Any

from aiohttp import web

from ollama_py.api.names import ModelName, parse_name
from ollama_py.errors import BadRequest

_TYPE_NAMES = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array", dict: "object"}


_LONE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid character '{name[0]}' looking for beginning of value")


def _fix_surrogates(value: Any) -> Any:
    """Strings with a lone UTF-16 surrogate (valid JSON escapes, but not encodable text) get U+FFFD in its
    place, as Go's encoding/json does; otherwise they would fail later, when sent on to the runner."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_fix_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {_fix_surrogates(k): _fix_surrogates(v) for k, v in value.items()}
    return value


async def read_json(request: web.Request, *, allow_empty: bool = False) -> dict[str, Any]:
    """The body as a JSON object. JSON that Go's decoder refuses is refused too: NaN/Infinity literals, and
    nesting deep enough to exhaust the parser."""
    raw = await request.read()
    if not raw.strip():
        if allow_empty:
            return {}
        raise BadRequest("missing request body")
    try:
        body = json.loads(raw, parse_constant=_reject_constant)
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise BadRequest(f"invalid character in request body: {e}") from None
    except RecursionError:
        raise BadRequest("invalid request body: JSON nested too deeply") from None
    if not isinstance(body, dict):
        raise BadRequest("json: cannot unmarshal request body: expected a JSON object")
    if _LONE_SURROGATE.search(raw):
        body = _fix_surrogates(body)
    return body


def field(body: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any = None) -> Any:
    """body[key] checked against kind (None/absent gives default). bool is never accepted as int."""
    value = body.get(key)
    if value is None:
        return default
    kinds = kind if isinstance(kind, tuple) else (kind,)
    ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
    if float in kinds and isinstance(value, int) and not isinstance(value, bool):
        ok = True
    if not ok:
        want = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        raise BadRequest(f'json: cannot unmarshal {type(value).__name__} into field "{key}" of type {want}')
    return value


def requested_model(body: dict[str, Any]) -> tuple[ModelName, str]:
    """The model a request names: parsed, and as the user wrote it (error texts quote it that way)."""
    name = model_name(body)
    return name, body.get("model") or body.get("name")


def model_name(body: dict[str, Any], key: str = "model") -> ModelName:
    """The model named in a request (legacy "name" accepted), parsed; 400 when missing or invalid."""
    raw = field(body, key, str) or (field(body, "name", str) if key == "model" else None)
    if not raw:
        raise BadRequest("model is required")
    return parse_name(raw)


_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def check_images(images: Any) -> list[str]:
    """Base64 images, as Go decodes a []byte field: the first bad byte is named, as Ollama's 400 does."""
    if images is None:
        return []
    if not isinstance(images, list):
        raise BadRequest("json: cannot unmarshal images: expected an array of base64 strings")
    for image in images:
        if not isinstance(image, str):
            raise BadRequest(f"json: cannot unmarshal {type(image).__name__} into Go value of type []uint8")
        valid = _BASE64.match(image)
        end = valid.end() if valid else 0
        if end < len(image) or len(image) % 4:
            raise BadRequest(f"illegal base64 data at input byte {min(end, len(image) - len(image) % 4)}")
    return images
