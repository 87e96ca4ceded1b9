"""How Python data stands in for Go values inside templates.

Plain Python maps onto Go's dynamic types the way JSON-decoded data does in Go:

    None            nil              (prints "<no value>" as an action's result, "<nil>" inside values)
    bool            bool
    int             int
    float           float64          (printed with %v's shortest form: 1e+06, 0.5)
    str             string
    bytes           []byte
    list / tuple    []interface {}
    dict            map[string]interface {}   (range, print and json visit keys in sorted order;
                                               a missing key yields nil, like Ollama's
                                               missingkey=zero on map[string]any)

Two wrappers carry what plain Python cannot:

* `GoStruct`: a struct (or pointer to one) with fixed fields. Reading an unknown field is an
  error, as in Go ("can't evaluate field X in type T"); `%v` prints `{a b c}`.
* `GoNamed`: a named slice/map type with methods, e.g. Ollama's `templateArgs` whose `String()`
  is JSON, or a typed nil slice that JSON-encodes as null but prints as `[]`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any


@dataclass(frozen=True, slots=True)
class JsonField:
    """One field in a struct's JSON form: `json:"key,omitempty"`."""

    name: str  # Go field name
    key: str  # JSON key
    omitempty: bool = False


@dataclass(frozen=True, slots=True, eq=False)
class GoStruct:
    type_name: str  # Go's type name, e.g. "template.templateMessage"
    fields: Mapping[str, Any]  # in declaration order: %v prints them in this order
    pointer: bool = False  # a *T: print/printf show "&{...}", a bare action shows "{...}"
    string: Callable[[GoStruct], str] | None = None  # the type's String() method, if any
    json_fields: tuple[JsonField, ...] | None = None  # struct tags; None: every field by name
    marshal_json: Callable[[GoStruct], str] | None = None  # a MarshalJSON method, if any
    extra: Mapping[str, Any] = field(default_factory=dict)  # host-side data (e.g. for toTypeScriptType)

    @property
    def go_type(self) -> str:
        return ("*" if self.pointer else "") + self.type_name


@dataclass(frozen=True, slots=True, eq=False)
class GoNamed:
    """A named Go type over a slice or map (value None is that type's nil)."""

    value: list[Any] | dict[str, Any] | None
    type_name: str
    kind: str  # "slice" | "map"
    string: Callable[[GoNamed], str] | None = None  # String()
    marshal_json: Callable[[GoNamed], str] | None = None  # MarshalJSON()
    elem_zero: Callable[[], Any] | None = None  # zero value for a missing map key (None: nil)

    @property
    def go_type(self) -> str:
        return self.type_name

    def contents(self) -> list[Any] | dict[str, Any]:
        """The underlying data, with nil read as empty (len, range and index see it that way)."""
        if self.value is None:
            return [] if self.kind == "slice" else {}
        return self.value


_NO_EXTRA: Mapping[str, Any] = MappingProxyType({})
# (from the dataclass's own fields, in order: a field added to GoStruct fails this unpacking at import)
_SET_TYPE, _SET_FIELDS, _SET_POINTER, _SET_STRING, _SET_TAGS, _SET_MARSHAL, _SET_EXTRA = (
    GoStruct.__dict__[f.name].__set__ for f in dataclasses.fields(GoStruct))


def plain_struct(type_name: str, fields: Mapping[str, Any], pointer: bool = False) -> GoStruct:
    """GoStruct(type_name, fields, pointer): no methods, tags or host data. Its slots are set directly, as the
    frozen dataclass's __init__ does one object.__setattr__ at a time (0.8 vs 2 us; an agent's turn makes dozens,
    one a message)."""
    struct = object.__new__(GoStruct)
    _SET_TYPE(struct, type_name)
    _SET_FIELDS(struct, fields)
    _SET_POINTER(struct, pointer)
    _SET_STRING(struct, None)
    _SET_TAGS(struct, None)
    _SET_MARSHAL(struct, None)
    _SET_EXTRA(struct, _NO_EXTRA)
    return struct


def unwrap(value: Any) -> Any:
    """The plain Python view of a value for len, range, index, comparisons and truth."""
    if isinstance(value, GoNamed):
        return value.contents()
    return value


def go_type_name(value: Any) -> str:
    """The Go type a value stands for, as fmt prints it in %!verb(type=value) and errors."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float64"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (bytes, bytearray)):
        return "[]uint8"
    if isinstance(value, (list, tuple)):
        return "[]interface {}"
    if isinstance(value, dict):
        return "map[string]interface {}"
    if isinstance(value, (GoStruct, GoNamed)):
        return value.go_type
    return type(value).__name__


_PLAIN = frozenset({bool, int, float, str, bytes, bytearray, list, tuple, dict})


def is_true(value: Any) -> bool:
    """Go template truth: false, 0, nil, and empty strings, slices and maps are false; structs
    are always true."""
    if type(value) in _PLAIN:  # most values: asked once, not through the chain below
        return bool(value)
    value = unwrap(value)
    if value is None:
        return False
    if isinstance(value, GoStruct):
        return True
    if isinstance(value, (bool, int, float, str, bytes, bytearray, list, tuple, dict)):
        return bool(value)
    return True
