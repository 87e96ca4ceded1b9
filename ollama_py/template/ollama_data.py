"""The Go values Ollama hands its templates, built from Python data.

Ollama (template/template.go, v0.14+) converts messages and tools before executing a template:

    .Messages  []*templateMessage{Role, Content, Thinking, Images, ToolCalls, ToolName, ToolCallID}
    .ToolCalls []templateToolCall{ID, Function{Index, Name, Arguments templateArgs}}
    .Tools     templateTools []templateTool{Type, Items, Function{Name, Description,
                   Parameters{Type, Defs, Items, Required, Properties templateProperties}}}

`templateArgs`, `templateProperties`, `templateTools` and `templateTool` print as JSON through
their String() methods (maps with sorted keys). Upstream Ollama gives `templateToolFunction` and
`templateToolFunctionParameters` no String(), so `{{ .Function }}` (qwen2.5, qwen3, deepseek
templates) prints Go struct syntax there — a known bug (ollama/ollama#14601, fix in #18391).
We render those two as JSON too, as Ollama did before v0.14 and as the fix does.

Messages may be given in Ollama's wire shape ({"role", "content", "tool_calls": [{"function":
{"name", "arguments"}}], ...}) or with Go field names ({"Role", "Content", "ToolCalls": [...]});
tools in the wire shape only (that is the only shape a request carries).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import io
import json
import pickle
from collections.abc import Mapping
from typing import Any, cast

import orjson

from ollama_py.errors import TemplateError
from ollama_py.memo import Memo
from ollama_py.template.gojson import marshal, marshal_ordered
from ollama_py.template.values import GoNamed, GoStruct, JsonField, plain_struct

_WIRE_MESSAGE_KEYS = {
    "role": "Role",
    "content": "Content",
    "thinking": "Thinking",
    "images": "Images",
    "tool_calls": "ToolCalls",
    "tool_name": "ToolName",
    "tool_call_id": "ToolCallID",
}
MESSAGE_FIELDS = tuple(_WIRE_MESSAGE_KEYS.values())


def decoded_json(value: Any) -> Any:
    """A JSON value as Go's encoding/json decodes it into `any`: every number is a float64
    (so `printf "%d"` of an argument prints %!d(float64=2), and `eq` with an int literal fails)."""
    if type(value) is str:  # most values: asked once
        return value
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return float(value)
    if isinstance(value, dict):
        return {k: decoded_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [decoded_json(v) for v in value]
    return value


def _json_string(value: GoStruct | GoNamed) -> str:
    return marshal(value)


def _nil_slice(type_name: str) -> GoNamed:
    return GoNamed(None, type_name, "slice")


def _expect(value: Any, kind: type | tuple[type, ...], where: str, default: Any) -> Any:
    if value is None:
        return default
    if type(value) is kind:  # (most values: bool is not int's type)
        return value
    if isinstance(value, bool) and kind is int:
        raise TemplateError(f"{where} must be a number")
    if not isinstance(value, kind):
        names = {str: "a string", int: "a number", Mapping: "an object", list: "an array"}
        want = names.get(kind, "of another type") if isinstance(kind, type) else "of another type"
        raise TemplateError(f"{where} must be {want}")
    return value


# -- messages ---------------------------------------------------------------------------------
def _arguments(value: Any, where: str) -> GoNamed:
    if isinstance(value, GoNamed):
        return value
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            raise TemplateError(f"{where} is not a JSON object") from None
    if value is not None and not isinstance(value, dict):
        raise TemplateError(f"{where} must be an object")
    if value is not None:
        value = decoded_json(value)

    def to_string(args: GoNamed) -> str:
        return "{}" if args.value is None else marshal(args.value)

    return GoNamed(value, "template.templateArgs", "map", string=to_string)


def _tool_call(call: Any, index: int, wire: bool) -> GoStruct:
    where = f"tool_calls[{index}]"
    if isinstance(call, GoStruct):
        return call
    if not isinstance(call, (dict, Mapping)):
        raise TemplateError(f"{where} must be an object")
    id_key, fn_key = ("id", "function") if wire else ("ID", "Function")
    fn = call.get(fn_key) or {}
    if not isinstance(fn, (dict, Mapping)):
        raise TemplateError(f"{where}.function must be an object")
    idx_key, name_key, args_key = ("index", "name", "arguments") if wire else ("Index", "Name", "Arguments")
    function = GoStruct(
        "template.templateToolCallFunction",
        {
            "Index": _expect(fn.get(idx_key), int, f"{where}.function.index", 0),
            "Name": _expect(fn.get(name_key), str, f"{where}.function.name", ""),
            "Arguments": _arguments(fn.get(args_key), f"{where}.function.arguments"),
        },
    )
    return GoStruct(
        "template.templateToolCall",
        {"ID": _expect(call.get(id_key), str, f"{where}.id", ""), "Function": function},
    )


def _image(value: Any) -> bytes:
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            return value.encode()
    raise TemplateError("images must be base64 strings")


# a message's nil slices, shared by every message without images or calls (frozen, and compared by contents)
_NO_IMAGES = _nil_slice("[]api.ImageData")
_NO_CALLS = _nil_slice("[]template.templateToolCall")


def _kept_only(key: bytes) -> GoStruct:
    raise LookupError("the caller keeps these answers (Memo.known, Memo.keep)")


# An agent's messages with tool calls come again on every later turn of its conversation: their conversions are
# kept by the message's value as orjson writes it (7.6 µs each made, ~1 to know one again). Only those with little
# text: a long text costs more to key than to convert.
_CALL_MESSAGES: Memo[bytes, GoStruct] = Memo(_kept_only, 1024)
_KEYED_TEXT = 2048


def template_message(msg: Mapping[str, Any] | GoStruct) -> GoStruct:
    """A message as Ollama's *templateMessage."""
    if isinstance(msg, GoStruct):
        return msg
    if not isinstance(msg, (dict, Mapping)):
        raise TemplateError("a message must be an object")
    key = _call_message_key(msg)
    if key is None:
        return _template_message(msg)
    return _CALL_MESSAGES.known(key) or _CALL_MESSAGES.keep(key, _template_message(msg))


def _call_message_key(msg: Mapping[str, Any]) -> bytes | None:
    """The key of a message with tool calls and little text (and no images); None for any other."""
    if not (msg.get("tool_calls") or msg.get("ToolCalls")) or msg.get("images") or msg.get("Images"):
        return None
    content = msg.get("content", msg.get("Content"))
    if isinstance(content, str) and len(content) > _KEYED_TEXT:
        return None
    try:
        return orjson.dumps(msg)
    except TypeError:  # anything orjson does not write: converted each time
        return None


# The wire keys a message of plain text has (a user's, a tool's result, an answer without calls): such a message
# is made at once when each value is a string (2.5 -> ~1 us; an agent's turn has dozens).
_TEXT_KEYS = frozenset({"role", "content", "thinking", "tool_name", "tool_call_id"})


def _template_message(msg: Mapping[str, Any]) -> GoStruct:
    if type(msg) is dict and _TEXT_KEYS.issuperset(msg):
        role, content = msg.get("role", ""), msg.get("content", "")
        thinking, name, call_id = msg.get("thinking", ""), msg.get("tool_name", ""), msg.get("tool_call_id", "")
        if type(role) is str and type(content) is str and type(thinking) is str and type(name) is str \
                and type(call_id) is str:
            return plain_struct("template.templateMessage", {
                "Role": role, "Content": content, "Thinking": thinking, "Images": _NO_IMAGES, "ToolCalls": _NO_CALLS,
                "ToolName": name, "ToolCallID": call_id}, pointer=True)
    wire = not _WIRE_MESSAGE_KEYS.keys().isdisjoint(msg)
    if wire:
        fields = {go: msg.get(key) for key, go in _WIRE_MESSAGE_KEYS.items()}
    else:
        unknown = sorted(set(msg) - set(MESSAGE_FIELDS))
        if unknown:
            raise TemplateError(f"unknown message field {unknown[0]!r}; known fields: {', '.join(MESSAGE_FIELDS)}")
        fields = {go: msg.get(go) for go in MESSAGE_FIELDS}
    calls = fields["ToolCalls"]
    if calls is not None and not isinstance(calls, (list, tuple)):
        raise TemplateError("tool_calls must be an array")
    images = fields["Images"]
    if images is not None and not isinstance(images, (list, tuple)):
        raise TemplateError("images must be an array")
    return plain_struct(
        "template.templateMessage",
        {
            "Role": _expect(fields["Role"], str, "role", ""),
            "Content": _expect(fields["Content"], str, "content", ""),
            "Thinking": _expect(fields["Thinking"], str, "thinking", ""),
            "Images": GoNamed([_image(i) for i in images], "[]api.ImageData", "slice")
            if images
            else _NO_IMAGES,
            "ToolCalls": GoNamed([_tool_call(c, i, wire) for i, c in enumerate(calls)], "[]template.templateToolCall",
                                 "slice")
            if calls
            else _NO_CALLS,
            "ToolName": _expect(fields["ToolName"], str, "tool_name", ""),
            "ToolCallID": _expect(fields["ToolCallID"], str, "tool_call_id", ""),
        },
        pointer=True,
    )


# -- tools ------------------------------------------------------------------------------------
def _property_type(value: Any, where: str) -> GoNamed:
    if isinstance(value, str):
        types: list[str] | None = [value]
    elif value is None:
        types = None
    elif isinstance(value, list) and all(isinstance(t, str) for t in value):
        types = list(value)
    else:
        raise TemplateError(f"{where}.type must be a string or an array of strings")

    def to_string(pt: GoNamed) -> str:
        items = cast(list[Any], pt.contents())  # a slice
        if not items:
            return ""
        return items[0] if len(items) == 1 else "[" + " ".join(items) + "]"

    def to_json(pt: GoNamed) -> str:
        items = cast(list[Any], pt.contents())
        return marshal(items[0]) if len(items) == 1 else marshal(pt.value)

    return GoNamed(types, "api.PropertyType", "slice", string=to_string, marshal_json=to_json)


_PROPERTY_JSON = (
    JsonField("AnyOf", "anyOf", True),
    JsonField("Type", "type", True),
    JsonField("Items", "items", True),
    JsonField("Description", "description", True),
    JsonField("Enum", "enum", True),
    JsonField("Properties", "properties", True),
    JsonField("Required", "required", True),
)


def _strings(value: Any, where: str) -> GoNamed | list[str]:
    if value is None:
        return _nil_slice("[]string")
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TemplateError(f"{where} must be an array of strings")
    return list(value)


def _nested_properties(value: Any, where: str) -> GoStruct | None:
    """*api.ToolPropertiesMap: an insertion-ordered map whose contents Go templates cannot reach."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TemplateError(f"{where} must be an object")
    ordered = {k: tool_property(v, f"{where}.{k}") for k, v in value.items()}

    def opaque(_: GoStruct) -> str:
        raise TemplateError("cannot print *api.ToolPropertiesMap: Go prints a memory address")

    return GoStruct(
        "api.ToolPropertiesMap",
        {},
        pointer=True,
        string=opaque,
        marshal_json=lambda _s: marshal_ordered(ordered),
        extra={"properties": ordered},
    )


def tool_property(value: Any, where: str = "property") -> GoStruct:
    """api.ToolProperty from a JSON-schema property object."""
    if not isinstance(value, Mapping):
        raise TemplateError(f"{where} must be an object")
    any_of = value.get("anyOf")
    if any_of is not None and not isinstance(any_of, list):
        raise TemplateError(f"{where}.anyOf must be an array")
    enum = value.get("enum")
    if enum is not None and not isinstance(enum, list):
        raise TemplateError(f"{where}.enum must be an array")
    return GoStruct(
        "api.ToolProperty",
        {
            "AnyOf": [tool_property(p, f"{where}.anyOf[{i}]") for i, p in enumerate(any_of)]
            if any_of
            else _nil_slice("[]api.ToolProperty"),
            "Type": _property_type(value.get("type"), where),
            "Items": decoded_json(value.get("items")),
            "Description": _expect(value.get("description"), str, f"{where}.description", ""),
            "Enum": decoded_json(enum) if enum else _nil_slice("[]interface {}"),
            "Properties": _nested_properties(value.get("properties"), f"{where}.properties"),
            "Required": _strings(value.get("required"), f"{where}.required"),
        },
        json_fields=_PROPERTY_JSON,
    )


def _properties(value: Any, where: str) -> GoNamed:
    if value is not None and not isinstance(value, Mapping):
        raise TemplateError(f"{where} must be an object")
    props = None if value is None else {k: tool_property(v, f"{where}.{k}") for k, v in value.items()}

    def to_string(p: GoNamed) -> str:
        return "{}" if p.value is None else marshal(p.value)

    return GoNamed(props, "template.templateProperties", "map", string=to_string, elem_zero=lambda: tool_property({}))


# template_tool's answers by the tool's value as orjson writes it (an agent sends the same tools each turn): a
# faithful encoding of decoded JSON (1, 1.0 and true, "a" and ["a"] all differ), ~5x quicker than pickle's (11 vs
# 50 µs for twenty tools with real schemas). Tools come from request bodies, where Go's JSON rules refuse NaN and
# infinities (which orjson would write as null, as None). What orjson does not take (a key that is not a string,
# a lone surrogate) is keyed as pickle writes it, without pickle's memo (`fast`), so that an equal tool gives the
# same bytes however its strings are shared. Never read back: an answer is kept by template_tool, made with the
# tool's index, which only an error names.
_TOOLS: Memo[bytes, GoStruct] = Memo(_kept_only, 1024)


def _value_key(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # (orjson.JSONEncodeError is one)
        pass
    out = io.BytesIO()
    pickler = pickle.Pickler(out, pickle.HIGHEST_PROTOCOL)
    pickler.fast = True  # (no memo: a shared object is written again; a tool from JSON has no cycles)
    pickler.dump(value)
    return out.getvalue()


def template_tool(tool: Any, index: int = 0) -> GoStruct:
    """A tool definition (wire shape) as Ollama's templateTool. The same tool gives the same value, whose JSON
    (what templates print) is written once: an agent's dozen tools with their schemas were most of the render of
    each of its requests (1 ms of 1.4)."""
    if isinstance(tool, GoStruct):
        return tool
    try:
        key = _value_key(tool)
    except Exception:  # not plain data (a pickling error of any kind): converted (and refused) as it is
        return _template_tool(tool, index)
    value = _TOOLS.known(key)
    return value if value is not None else _TOOLS.keep(key, _template_tool(tool, index))


def _json_once(struct: GoStruct) -> GoStruct:
    """The struct, its JSON (json_fields, as marshal writes it) written on the first print and kept."""
    text: list[str] = []

    def marshal_json(value: GoStruct) -> str:
        if not text:
            text.append(marshal(dataclasses.replace(value, marshal_json=None)))
        return text[0]

    return dataclasses.replace(struct, marshal_json=marshal_json)


def _template_tool(tool: Any, index: int) -> GoStruct:
    where = f"tools[{index}]"
    if not isinstance(tool, Mapping):
        raise TemplateError(f"{where} must be an object")
    if "Function" in tool or "Type" in tool:
        raise TemplateError(f"{where} must use the API's field names (type, function), not Go's")
    fn = _expect(tool.get("function"), Mapping, f"{where}.function", {})
    params = _expect(fn.get("parameters"), Mapping, f"{where}.function.parameters", {})
    parameters = _json_once(GoStruct(
        "template.templateToolFunctionParameters",
        {
            "Type": _expect(params.get("type"), str, f"{where}.function.parameters.type", ""),
            "Defs": decoded_json(params.get("$defs")),
            "Items": decoded_json(params.get("items")),
            "Required": _strings(params.get("required"), f"{where}.function.parameters.required"),
            "Properties": _properties(params.get("properties"), f"{where}.function.parameters.properties"),
        },
        string=_json_string,
        json_fields=(
            JsonField("Type", "type"),
            JsonField("Defs", "$defs", True),
            JsonField("Items", "items", True),
            JsonField("Required", "required", True),
            JsonField("Properties", "properties"),
        ),
    ))
    function = _json_once(GoStruct(
        "template.templateToolFunction",
        {
            "Name": _expect(fn.get("name"), str, f"{where}.function.name", ""),
            "Description": _expect(fn.get("description"), str, f"{where}.function.description", ""),
            "Parameters": parameters,
        },
        string=_json_string,
        json_fields=(
            JsonField("Name", "name"),
            JsonField("Description", "description"),
            JsonField("Parameters", "parameters"),
        ),
    ))
    return _json_once(GoStruct(
        "template.templateTool",
        {
            "Type": _expect(tool.get("type"), str, f"{where}.type", ""),
            "Items": decoded_json(tool.get("items")),
            "Function": function,
        },
        string=_json_string,
        json_fields=(JsonField("Type", "type"), JsonField("Items", "items", True), JsonField("Function", "function")),
    ))


def template_tools(tools: Any) -> GoNamed:
    """The `.Tools` value: templateTools, which prints as JSON ("null" when there are none)."""
    if isinstance(tools, GoNamed):
        return tools
    if tools is not None and not isinstance(tools, (list, tuple)):
        raise TemplateError("tools must be an array")
    value = None if tools is None else [template_tool(t, i) for i, t in enumerate(tools)]
    return GoNamed(value, "template.templateTools", "slice", string=_json_string)


def template_data(data: Any) -> Any:
    """Ollama's view of execute() data: `Messages` and `Tools` become the Go types above; every
    other key is a plain map entry."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    messages = out.get("Messages")
    if isinstance(messages, (list, tuple)):
        out["Messages"] = [template_message(m) for m in messages]
    if "Tools" in out and not isinstance(out["Tools"], GoNamed):
        out["Tools"] = template_tools(out["Tools"])
    return out
