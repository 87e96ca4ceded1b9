"""Go's encoding/json.Marshal for template values: what Ollama's `json` template function prints.

Compact; map keys sorted; `<`, `>`, `&`, U+2028 and U+2029 escaped as \\u003c etc. (Go's default
HTML-safe encoding); floats in Go's form (1e+21, 1e-7, 0.5); []byte as base64. Structs follow
their `json_fields` tags (omitempty included) or a MarshalJSON hook.
"""

from __future__ import annotations

import base64
import json
import re
from json.encoder import encode_basestring as _encode_basestring
from typing import Any

from ollama_py.template.gofmt import format_float_json, sorted_items
from ollama_py.template.values import GoNamed, GoStruct


class UnsupportedValue(ValueError):
    """json.Marshal would fail (NaN, Inf, unsupported type)."""


_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\b": "\\b",
    "\f": "\\f",
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


_STRING_TABLE = str.maketrans(
    {chr(c): f"\\u{c:04x}" for c in range(0x20)}
    | {chr(c): "\\ufffd" for c in range(0xD800, 0xE000)}  # Go replaces invalid UTF-8 with U+FFFD
    | _ESCAPES
)


_HTML_UNSAFE = ("<", ">", "&", "\u2028", "\u2029")
_SURROGATE = re.compile("[\ud800-\udfff]")


def encode_string(s: str) -> str:
    if _SURROGATE.search(s):
        return '"' + s.translate(_STRING_TABLE) + '"'
    # Python's encoder (C speed) writes what Go's does, but for Go's HTML-safe escapes. (Its string encoder called
    # directly: json.dumps(s, ensure_ascii=False) built an encoder for each string, hundreds per agent request.)
    text = _encode_basestring(s)
    for ch in _HTML_UNSAFE:
        if ch in text:
            text = text.replace(ch, _ESCAPES[ch])
    return text


def _is_empty(value: Any) -> bool:
    """encoding/json's omitempty test."""
    if isinstance(value, GoNamed):
        return len(value.contents()) == 0
    if value is None or value is False:
        return True
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value == 0
    if isinstance(value, (str, bytes, bytearray, list, tuple, dict)):
        return len(value) == 0
    return False


def marshal(value: Any) -> str:
    """json.Marshal(value) as text; raises UnsupportedValue where Go returns an error."""
    if isinstance(value, GoStruct):
        if value.marshal_json is not None:
            return value.marshal_json(value)
        if value.json_fields is None:
            pairs = [(name, v) for name, v in value.fields.items()]
        else:
            pairs = [
                (f.key, value.fields[f.name])
                for f in value.json_fields
                if not (f.omitempty and _is_empty(value.fields[f.name]))
            ]
        return "{" + ",".join(encode_string(k) + ":" + marshal(v) for k, v in pairs) + "}"
    if isinstance(value, GoNamed):
        if value.marshal_json is not None:
            return value.marshal_json(value)
        if value.value is None:
            return "null"
        return marshal(value.value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise UnsupportedValue(f"json: unsupported value: {value}")
        return format_float_json(value)
    if isinstance(value, str):
        return encode_string(value)
    if isinstance(value, (bytes, bytearray)):
        return '"' + base64.b64encode(bytes(value)).decode() + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(marshal(v) for v in value) + "]"
    if isinstance(value, dict):
        items = [(k if isinstance(k, str) else str(k), v) for k, v in sorted_items(value)]
        items.sort(key=lambda kv: kv[0].encode("utf-8", errors="surrogatepass"))
        return "{" + ",".join(encode_string(k) + ":" + marshal(v) for k, v in items) + "}"
    raise UnsupportedValue(f"json: unsupported type: {type(value).__name__}")


def marshal_arguments(arguments: dict[str, Any]) -> str:
    """A tool call's arguments as Ollama's clients get them (Go marshals its ordered arguments: compact, in the
    model's order); a NaN or an infinity (Python's JSON reads them from a model's text) kept as Python writes it."""
    try:
        return marshal_ordered(arguments)
    except UnsupportedValue:
        return json.dumps(arguments)


def marshal_ordered(d: dict[str, Any] | None) -> str:
    """An insertion-ordered map (Ollama's orderedmap-backed types): keys in the order given."""
    if d is None:
        return "null"
    return "{" + ",".join(encode_string(k) + ":" + marshal(v) for k, v in d.items()) + "}"
