"""The functions a template can call: Go's builtins (text/template/funcs.go) and Ollama's additions
(`json`, `currentDate`, `yesterdayDate`, `toTypeScriptType`).

`and` and `or` short-circuit, so the executor evaluates them itself; everything else receives
evaluated arguments here. A function's own failure raises `FuncError`, which the executor reports
as Go does: `error calling index: index out of range: 5`.
"""

from __future__ import annotations

import datetime as _dt
import re
import urllib.parse
from collections.abc import Callable
from typing import Any

from ollama_py.template import gofmt
from ollama_py.template.gojson import UnsupportedValue, marshal
from ollama_py.template.values import GoNamed, GoStruct, go_type_name, is_true, unwrap


class FuncError(Exception):
    """A function returned an error (Go: "error calling NAME: MSG")."""


class ArgError(Exception):
    """The call itself is wrong: argument count or type (Go reports these without "error calling")."""


# -- comparison -------------------------------------------------------------------------------
_KINDS = {type(None): "invalid", bool: "bool", int: "int", float: "float", str: "string"}


def _kind(v: Any) -> str:
    kind = _KINDS.get(type(v))
    if kind is not None:
        return kind
    v = unwrap(v) if isinstance(v, GoNamed) else v
    if v is None:
        return "invalid"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    if isinstance(v, str):
        return "string"
    return "other"


def _eq(arg1: Any, *rest: Any) -> bool:
    if not rest:
        raise FuncError("missing argument for comparison")
    k1 = _kind(arg1)
    for arg in rest:
        k2 = _kind(arg)
        if k1 != k2:
            if arg1 is not None and arg is not None:
                raise FuncError("incompatible types for comparison")
            truth = False
        elif k1 == "invalid":
            truth = True
        elif k1 == "other":
            a, b = unwrap(arg1), unwrap(arg)
            if isinstance(a, GoStruct) and isinstance(b, GoStruct) and a.pointer and b.pointer:
                truth = a is b
            else:
                raise FuncError(f"non-comparable type {gofmt.format_value(arg)}: {go_type_name(arg)}")
        else:
            truth = arg1 == arg
        if truth:
            return True
    return False


def _lt(a: Any, b: Any) -> bool:
    k1, k2 = _kind(a), _kind(b)
    if k1 in ("invalid", "other") or k2 in ("invalid", "other"):
        raise FuncError("invalid type for comparison")
    if k1 != k2:
        raise FuncError("incompatible types for comparison")
    if k1 == "bool":
        raise FuncError("invalid type for comparison")
    return bool(a < b)


def _le(a: Any, b: Any) -> bool:
    return _lt(a, b) or _eq(a, b)


# -- len, index, slice ------------------------------------------------------------------------
def _length(item: Any) -> int:
    if item is None:
        raise FuncError("len of nil pointer")
    item = unwrap(item)
    if isinstance(item, str):
        return len(item.encode("utf-8", errors="surrogatepass"))  # Go counts bytes
    if isinstance(item, (bytes, bytearray, list, tuple, dict)):
        return len(item)
    raise FuncError(f"len of type {go_type_name(item)}")


def _index_arg(index: Any, cap: int) -> int:
    if index is None:
        raise FuncError("cannot index slice/array with nil")
    if isinstance(index, bool) or not isinstance(index, int):
        raise FuncError(f"cannot index slice/array with type {go_type_name(index)}")
    if index < 0 or index > cap:
        raise FuncError(f"index out of range: {index}")
    return index


def _index(item: Any, *indexes: Any) -> Any:
    if item is None:
        raise FuncError("index of untyped nil")
    for index in indexes:
        if item is None:
            raise FuncError("index of nil pointer")
        named = item if isinstance(item, GoNamed) else None
        data = unwrap(item)
        if isinstance(data, str):
            raw = data.encode("utf-8", errors="surrogatepass")
            x = _index_arg(index, len(raw))
            if x >= len(raw):
                raise FuncError(f"index out of range: {x}")
            item = raw[x]  # a byte, which prints as a number
        elif isinstance(data, (bytes, bytearray, list, tuple)):
            x = _index_arg(index, len(data))
            if x >= len(data):
                raise FuncError(f"index out of range: {x}")
            item = data[x]
        elif isinstance(data, dict):
            if index is not None and not isinstance(index, str):
                raise FuncError(f"value has type {go_type_name(index)}; should be string")
            if index in data:
                item = data[index]
            else:
                item = named.elem_zero() if named is not None and named.elem_zero is not None else None
        else:
            raise FuncError(f"can't index item of type {go_type_name(item)}")
    return item


def _slice(item: Any, *indexes: Any) -> Any:
    if item is None:
        raise FuncError("slice of untyped nil")
    if len(indexes) > 3:
        raise FuncError(f"too many slice indexes: {len(indexes)}")
    data = unwrap(item)
    if isinstance(data, str):
        if len(indexes) == 3:
            raise FuncError("cannot 3-index slice a string")
        seq: Any = data.encode("utf-8", errors="surrogatepass")
    elif isinstance(data, (bytes, bytearray, list, tuple)):
        seq = data
    else:
        raise FuncError(f"can't slice item of type {go_type_name(item)}")
    idx = [0, len(seq), len(seq)]
    for i, index in enumerate(indexes):
        idx[i] = _index_arg(index, len(seq))
    if idx[0] > idx[1]:
        raise FuncError(f"invalid slice index: {idx[0]} > {idx[1]}")
    if len(indexes) == 3 and idx[1] > idx[2]:
        raise FuncError(f"invalid slice index: {idx[1]} > {idx[2]}")
    part = seq[idx[0] : idx[1]]
    if isinstance(data, str):
        return part.decode("utf-8", errors="replace")
    if isinstance(item, GoNamed):
        return GoNamed(list(part), item.type_name, item.kind, item.string, item.marshal_json, item.elem_zero)
    return list(part) if isinstance(part, tuple) else part


# -- escaping ---------------------------------------------------------------------------------
def _eval_args(args: tuple[Any, ...]) -> str:
    if len(args) == 1 and isinstance(args[0], str):
        return args[0]
    return gofmt.sprint(list(args))


_HTML = str.maketrans({'"': "&#34;", "'": "&#39;", "&": "&amp;", "<": "&lt;", ">": "&gt;", "\x00": "\ufffd"})
_JS = str.maketrans(
    {"\\": "\\\\", "'": "\\'", '"': '\\"', "<": "\\u003C", ">": "\\u003E", "&": "\\u0026", "=": "\\u003D"}
    | {chr(c): f"\\u00{c:02X}" for c in range(0x20)}
)
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def _html(*args: Any) -> str:
    return _eval_args(args).translate(_HTML)  # str.translate: a long text is escaped at C speed


def _js(*args: Any) -> str:
    s = _eval_args(args).translate(_JS)

    def unprintable(m: re.Match[str]) -> str:
        run = m.group()
        if run.isprintable():
            return run
        return "".join(ch if ch.isprintable() else f"\\u{ord(ch):04X}" for ch in run)

    return _NON_ASCII.sub(unprintable, s)


def _urlquery(*args: Any) -> str:
    return urllib.parse.quote_plus(_eval_args(args), safe="-_.~")


# -- Ollama's functions -----------------------------------------------------------------------
def _json(value: Any) -> str:
    try:
        return marshal(value)
    except UnsupportedValue:
        return ""  # Ollama ignores json.Marshal's error and prints the empty result


def _dates(offset_days: int) -> Callable[..., str]:
    def fn(*args: Any) -> str:
        for a in args:
            if not isinstance(a, str):
                raise ArgError(f"wrong type for value; expected string; got {go_type_name(a)}")
        # The format argument is accepted and ignored, as in Ollama.
        return (_dt.date.today() + _dt.timedelta(days=offset_days)).isoformat()

    return fn


def _ts_scalar(json_type: str) -> str:
    return {
        "string": "string",
        "number": "number",
        "integer": "number",
        "boolean": "boolean",
        "array": "any[]",
        "object": "Record<string, any>",
        "null": "null",
    }.get(json_type, "any")


def ts_type_of_property(prop: GoStruct) -> str:
    """api.ToolProperty.ToTypeScriptType."""
    any_of = unwrap(prop.fields.get("AnyOf")) or []
    if any_of:
        return " | ".join(ts_type_of_property(p) for p in any_of)
    types = unwrap(prop.fields.get("Type")) or []
    if not types:
        return "any"
    return " | ".join(_ts_scalar(t) for t in types)


def _to_typescript_type(value: Any) -> str:
    if isinstance(value, GoStruct) and value.type_name == "api.ToolProperty":
        return ts_type_of_property(value)
    return "any"


# name -> (function, minimum args, maximum args or None)
BUILTINS: dict[str, tuple[Callable[..., Any], int, int | None]] = {
    "not": (lambda a: not is_true(a), 1, 1),
    "len": (_length, 1, 1),
    "index": (_index, 1, None),
    "slice": (_slice, 1, None),
    "print": (lambda *a: gofmt.sprint(list(a)), 0, None),
    "println": (lambda *a: gofmt.sprintln(list(a)), 0, None),
    "printf": (lambda fmt, *a: gofmt.sprintf(fmt, list(a)), 1, None),
    "html": (_html, 0, None),
    "js": (_js, 0, None),
    "urlquery": (_urlquery, 0, None),
    "eq": (_eq, 1, None),
    "ne": (lambda a, b: not _eq(a, b), 2, 2),
    "lt": (_lt, 2, 2),
    "le": (_le, 2, 2),
    "gt": (lambda a, b: not _le(a, b), 2, 2),
    "ge": (lambda a, b: not _lt(a, b), 2, 2),
    "json": (_json, 1, 1),
    "currentDate": (_dates(0), 0, None),
    "yesterdayDate": (_dates(-1), 0, None),
    "toTypeScriptType": (_to_typescript_type, 1, 1),
}
SHORT_CIRCUIT = frozenset({"and", "or"})
# Functions whose parameters are reflect.Value in Go: a literal nil cannot be passed to them.
VALUE_PARAMS = frozenset({"and", "or", "not", "len", "index", "slice", "eq", "ne", "lt", "le", "gt", "ge"})
FUNC_NAMES = frozenset(BUILTINS) | SHORT_CIRCUIT


def call(name: str, args: list[Any], limit: int | None = None) -> Any:
    """Call a non-short-circuit function with evaluated arguments. `limit`: the most characters printf may
    build (gofmt.OutputTooLong past it); the caller checks every other function's result itself."""
    fn, lo, hi = BUILTINS[name]
    if hi is None and len(args) < lo:
        raise ArgError(f"wrong number of args for {name}: want at least {lo} got {len(args)}")
    if hi is not None and len(args) != lo:
        raise ArgError(f"wrong number of args for {name}: want {lo} got {len(args)}")
    if name == "printf" and not isinstance(args[0], str):
        raise ArgError(f"wrong type for value; expected string; got {go_type_name(args[0])}")
    if name == "printf" and limit is not None:
        return gofmt.sprintf(args[0], args[1:], limit)
    return fn(*args)
