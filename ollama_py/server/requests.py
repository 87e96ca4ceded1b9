"""Reading request bodies: JSON objects with typed fields, every mistake a 400 with a clear message."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from ollama_py.api.names import ModelName, parse_name
from ollama_py.errors import BadRequest

_TYPE_NAMES = {str: "string", bool: "boolean", int: "integer", float: "number", list: "array", dict: "object"}


async def read_json(request: web.Request, *, allow_empty: bool = False) -> dict[str, Any]:
    raw = await request.read()
    if not raw.strip():
        if allow_empty:
            return {}
        raise BadRequest("missing request body")
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise BadRequest(f"invalid character in request body: {e}") from None
    if not isinstance(body, dict):
        raise BadRequest("json: cannot unmarshal request body: expected a JSON object")
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


def model_name(body: dict[str, Any], key: str = "model") -> ModelName:
    """The model named in a request (legacy "name" accepted), parsed; 400 when missing or invalid."""
    raw = field(body, key, str) or (field(body, "name", str) if key == "model" else None)
    if not raw:
        raise BadRequest("model is required")
    return parse_name(raw)
