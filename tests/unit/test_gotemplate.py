"""The Go template engine: each construct and function renders what Go's text/template renders.

Expected strings come from Go's documented behaviour (text/template, fmt, encoding/json); data is
a plain dict, i.e. Go's map[string]any as Ollama passes it.
"""

from __future__ import annotations

import datetime as dt
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ollama_py.errors import TemplateError
from ollama_py.template import parse_template

# every template here rendered by both engines (conftest.both_engines)
pytestmark = pytest.mark.usefixtures("both_engines")

DATA = {
    "S": "hello",
    "I": 42,
    "F": 1.5,
    "T": True,
    "Z": 0,
    "E": "",
    "N": None,
    "L": ["a", "b", "c"],
    "NL": [1, 2, 3, 4, 5],
    "LL": [[1, 2], [3, 4]],
    "M": {"b": 2, "a": "x", "c": None},
    "Empty": [],
    "EmptyM": {},
    "Bytes": b"hi",
    "Nested": {"Inner": {"Name": "deep"}},
}


def render(text: str, data: object = None) -> str:
    return parse_template(text).execute(DATA if data is None else data)


def case(template: str, expected: str, id: str):  # noqa: A002 - pytest's own word
    return pytest.param(template, expected, id=id)


# -- text, trim markers and comments --------------------------------------------------------------
@pytest.mark.parametrize(
    ("template", "expected"),
    [
        case("plain text", "plain text", "text-only"),
        case("a {{ .S }} b", "a hello b", "action-keeps-spaces"),
        case("a \n\t {{- .S }} b", "ahello b", "left-trim-eats-all-whitespace"),
        case("a {{ .S -}} \n\n b", "a hellob", "right-trim-eats-all-whitespace"),
        case("a {{- .S -}} b", "ahellob", "both-trims"),
        case("a\n{{- .S }}\n{{- .I }}\n", "ahello42\n", "trims-chain-across-lines"),
        case("{{-3}}", "-3", "dash-without-space-is-a-number"),
        case("{{ 3 -}} x", "3x", "right-trim-after-number"),
        case("a {{/* a comment */}} b", "a  b", "comment-renders-nothing"),
        case("a {{- /* trimmed comment */ -}} b", "ab", "trimmed-comment"),
        case("{{/* multi\nline */}}z", "z", "multi-line-comment"),
        case("x{{\n.S\n}}y", "xhelloy", "newlines-inside-action"),
        case("{{- \n .S \n -}}", "hello", "trim-markers-with-newline-spaces"),
        case("a}}b", "a}}b", "lone-right-delim-is-text"),
    ],
)
def test_text_and_trim(template: str, expected: str) -> None:
    assert render(template) == expected


# -- printing values -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("template", "expected"),
    [
        case("{{ .S }}", "hello", "string"),
        case("{{ .I }}", "42", "int"),
        case("{{ .F }}", "1.5", "float"),
        case("{{ .T }}", "true", "bool"),
        case("{{ .N }}", "<no value>", "nil-value"),
        case("{{ .Missing }}", "<no value>", "missing-map-key"),
        case("{{ .L }}", "[a b c]", "slice"),
        case("{{ .M }}", "map[a:x b:2 c:<nil>]", "map-sorted-with-nil"),
        case("{{ .Empty }}", "[]", "empty-slice"),
        case("{{ .EmptyM }}", "map[]", "empty-map"),
        case("{{ .Bytes }}", "[104 105]", "bytes"),
        case("{{ .Nested.Inner.Name }}", "deep", "field-chain"),
        case("{{ .M.a }}", "x", "map-key-as-field"),
        case("{{ .M.zz }}", "<no value>", "missing-nested-key"),
        case("{{ . }}", "map[Bytes:[104 105] E: Empty:[] EmptyM:map[] F:1.5 I:42 L:[a b c] LL:[[1 2] [3 4]] "
             "M:map[a:x b:2 c:<nil>] N:<nil> NL:[1 2 3 4 5] Nested:map[Inner:map[Name:deep]] S:hello T:true Z:0]",
             "dot-is-the-data"),
        case("{{ $ }}", "map[Bytes:[104 105] E: Empty:[] EmptyM:map[] F:1.5 I:42 L:[a b c] LL:[[1 2] [3 4]] "
             "M:map[a:x b:2 c:<nil>] N:<nil> NL:[1 2 3 4 5] Nested:map[Inner:map[Name:deep]] S:hello T:true Z:0]",
             "dollar-is-the-data"),
    ],
)
def test_printing(template: str, expected: str) -> None:
    assert render(template) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(3.0, "3", id="integral-float"),
        pytest.param(100000.0, "100000", id="1e5-fixed"),
        pytest.param(1e6, "1e+06", id="1e6-exponent"),
        pytest.param(1234567.0, "1.234567e+06", id="7-digits-exponent"),
        pytest.param(0.0001, "0.0001", id="1e-4-fixed"),
        pytest.param(0.00001, "1e-05", id="1e-5-exponent"),
        pytest.param(-0.5, "-0.5", id="negative"),
        pytest.param(2.5e20, "2.5e+20", id="large"),
        pytest.param(0.1 + 0.2, "0.30000000000000004", id="shortest-round-trip"),
    ],
)
def test_float_printing_matches_go_v_verb(value: float, expected: str) -> None:
    assert render("{{ .X }}", {"X": value}) == expected


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        case('{{ "a\\tb\\u00e9\\x41" }}', "a\tbéA", "quoted-escapes"),
        case("{{ `raw\\n` }}", "raw\\n", "raw-string"),
        case("{{ 'a' }}", "97", "char-is-a-number"),
        case("{{ 0x10 }}", "16", "hex"),
        case("{{ 017 }}", "15", "octal"),
        case("{{ 1_000 }}", "1000", "underscores"),
        case("{{ 1e3 }}", "1000", "float-exponent"),
        case("{{ 1.0 }}", "1", "float"),
        case("{{ -2 }}", "-2", "negative"),
        case("{{ true }} {{ false }}", "true false", "bools"),
    ],
)
def test_literals(template: str, expected: str) -> None:
    assert render(template) == expected


# -- control structures ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("template", "expected"),
    [
        case("{{ if .T }}yes{{ end }}", "yes", "if-true"),
        case("{{ if .Z }}yes{{ else }}no{{ end }}", "no", "if-zero-is-false"),
        case("{{ if .E }}yes{{ else }}no{{ end }}", "no", "if-empty-string-is-false"),
        case("{{ if .Empty }}yes{{ else }}no{{ end }}", "no", "if-empty-list-is-false"),
        case("{{ if .EmptyM }}yes{{ else }}no{{ end }}", "no", "if-empty-map-is-false"),
        case("{{ if .N }}yes{{ else }}no{{ end }}", "no", "if-nil-is-false"),
        case("{{ if .Missing }}yes{{ else }}no{{ end }}", "no", "if-missing-is-false"),
        case("{{ if .F }}yes{{ end }}", "yes", "if-nonzero-float"),
        case("{{ if .Z }}a{{ else if .E }}b{{ else if .S }}c{{ else }}d{{ end }}", "c", "else-if-chain"),
        case("{{ with .S }}[{{ . }}]{{ end }}", "[hello]", "with-sets-dot"),
        case("{{ with .E }}x{{ else }}none{{ end }}", "none", "with-else"),
        case("{{ with .E }}a{{ else with .S }}b={{ . }}{{ end }}", "b=hello", "else-with"),
        case("{{ with $x := .I }}{{ $x }}{{ end }}", "42", "with-declares"),
        case("{{ range .L }}{{ . }},{{ end }}", "a,b,c,", "range-list"),
        case("{{ range $i, $v := .L }}{{ $i }}={{ $v }} {{ end }}", "0=a 1=b 2=c ", "range-index-and-value"),
        case("{{ range $v := .L }}{{ $v }}{{ end }}", "abc", "range-value-only"),
        case("{{ range $k, $v := .M }}{{ $k }}:{{ $v }};{{ end }}", "a:x;b:2;c:<no value>;", "range-map-sorted"),
        case("{{ range .Empty }}x{{ else }}empty{{ end }}", "empty", "range-else-empty"),
        case("{{ range .N }}x{{ else }}nil{{ end }}", "nil", "range-else-nil"),
        case("{{ range .Missing }}x{{ else }}missing{{ end }}", "missing", "range-else-missing"),
        case("{{ range 3 }}{{ . }}{{ end }}", "012", "range-over-int"),
        case("{{ range .L }}{{ $.S }}{{ end }}", "hellohellohello", "dollar-inside-range"),
        case(
            "{{ range .NL }}{{ if eq . 2 }}{{ continue }}{{ end }}{{ if eq . 4 }}{{ break }}{{ end }}{{ . }}{{ end }}",
            "13",
            "break-and-continue",
        ),
        case("{{ range .LL }}{{ range . }}{{ . }}{{ end }};{{ end }}", "12;34;", "nested-range"),
        case("{{ range .LL }}{{ range . }}{{ break }}{{ end }}x{{ end }}", "xx", "break-leaves-inner-range-only"),
    ],
)
def test_control(template: str, expected: str) -> None:
    assert render(template) == expected


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        case('{{ $x := "a" }}{{ $x }}', "a", "declare"),
        case("{{ $x := 1 }}{{ if true }}{{ $x := 2 }}{{ $x }}{{ end }}{{ $x }}", "21", "shadowing-ends-at-end"),
        case("{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ end }}{{ $x }}", "2", "assignment-reaches-outer"),
        case(
            '{{ $s := "" }}{{ range .L }}{{ $s = printf "%s%s" $s . }}{{ end }}{{ $s }}',
            "abc",
            "accumulate-across-iterations",
        ),
        case("{{ range .L }}{{ $y := . }}{{ $y }}{{ end }}", "abc", "body-variable-per-iteration"),
        case("{{ $i := 9 }}{{ range $i, $v := .L }}{{ end }}{{ $i }}", "9", "range-variables-are-scoped"),
        case("{{ $x := .Missing }}{{ $x }}", "<no value>", "variable-holding-nil"),
    ],
)
def test_variables(template: str, expected: str) -> None:
    assert render(template) == expected


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        case('{{ "x" | printf "%s-%s" "a" }}', "a-x", "pipe-passes-last-argument"),
        case("{{ .L | len }}", "3", "pipe-into-len"),
        case("{{ .S | printf \"%q\" | len }}", "7", "three-stage-pipe"),
        case("{{ (len .L) }}", "3", "parenthesised"),
        case("{{ (index .LL 1) }}", "[3 4]", "parenthesised-index"),
        case("{{ (index .Nested \"Inner\").Name }}", "deep", "field-of-parenthesised"),
        case("{{ printf \"%d\" (len (slice .L 1)) }}", "2", "nested-parentheses"),
    ],
)
def test_pipelines(template: str, expected: str) -> None:
    assert render(template) == expected


# -- functions ---------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("template", "expected"),
    [
        case("{{ and 1 0 2 }}", "0", "and-returns-first-false"),
        case("{{ and 1 2 }}", "2", "and-returns-last"),
        case('{{ or 0 "" "x" }}', "x", "or-returns-first-true"),
        case('{{ or 0 "" }}', "", "or-returns-last"),
        case("{{ and false (index .L 10) }}", "false", "and-short-circuits"),
        case("{{ or true (index .L 10) }}", "true", "or-short-circuits"),
        case("{{ not 0 }} {{ not .S }}", "true false", "not"),
        case("{{ eq 1 2 3 1 }}", "true", "eq-any-of"),
        case('{{ eq .S "x" "hello" }}', "true", "eq-strings"),
        case('{{ eq .Missing "a" }}', "false", "eq-with-nil"),
        case('{{ eq .S "hello" }} {{ eq .S "x" }} {{ ne .S "hello" }} {{ ne .S "x" }}', "true false false true",
             "eq-ne-string-constant"),
        case('{{ eq .Missing "a" }} {{ ne .N "a" }}', "false true", "eq-ne-nil-and-string-constant"),
        case('{{ "hello" | eq .S "x" }} {{ "y" | eq .S "x" }}', "true false", "eq-string-constant-piped"),
        case('{{ range .L }}{{ if eq . "b" }}B{{ else }}{{ . }}{{ end }}{{ end }}', "aBc", "eq-dot-string-constant"),
        case("{{ ne 1 2 }} {{ ne 1 1 }}", "true false", "ne"),
        case("{{ lt 1 2 }} {{ le 2 2 }} {{ gt 1 2 }} {{ ge 1.5 1.5 }}", "true true false true", "ordering"),
        case('{{ lt "a" "b" }}', "true", "string-ordering"),
        case('{{ len "héllo" }}', "6", "len-counts-bytes"),
        case("{{ len .L }} {{ len .M }}", "3 3", "len-list-map"),
        case("{{ index .L 1 }}", "b", "index-list"),
        case('{{ index .M "a" }}', "x", "index-map"),
        case('{{ index .M "zz" }}', "<no value>", "index-missing-key"),
        case('{{ index "abc" 1 }}', "98", "index-string-gives-byte"),
        case("{{ index .LL 1 0 }}", "3", "index-nested"),
        case('{{ slice "hello" 1 3 }}', "el", "slice-string"),
        case("{{ slice .L 1 }}", "[b c]", "slice-list"),
        case("{{ slice .L }}", "[a b c]", "slice-no-index"),
        case('{{ print "a" 1 2 "b" }}', "a1 2b", "print-spaces-between-non-strings"),
        case("{{ print nil }}", "<nil>", "print-nil"),
        case("{{ print .Missing }}", "<nil>", "print-missing"),
        case('{{ println "a" 1 }}', "a 1\n", "println"),
        case('{{ html "<a href=\\"x\\">&\'</a>" }}', "&lt;a href=&#34;x&#34;&gt;&amp;&#39;&lt;/a&gt;", "html"),
        case('{{ js "it\'s <b>=\\"\\n" }}', "it\\'s \\u003Cb\\u003E\\u003D\\\"\\u000A", "js"),
        case('{{ urlquery "a b/c?d=é" }}', "a+b%2Fc%3Fd%3D%C3%A9", "urlquery"),
        case("{{ html 1 2 }}", "1 2", "escapers-print-their-arguments"),
    ],
)
def test_builtin_functions(template: str, expected: str) -> None:
    assert render(template) == expected


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        case('{{ printf "%s %d %v %q" "a" 3 1.5 "x" }}', 'a 3 1.5 "x"', "basic-verbs"),
        case('{{ printf "%5d|%-5s|%05.1f" 42 "ab" 3.14159 }}', "   42|ab   |003.1", "width-and-precision"),
        case('{{ printf "%x %X %o %b %#x" 255 255 8 5 255 }}', "ff FF 10 101 0xff", "integer-bases"),
        case('{{ printf "%t %%" true }}', "true %", "bool-and-percent"),
        case('{{ printf "%c %U %q" 65 65 65 }}', "A U+0041 'A'", "runes"),
        case('{{ printf "%e %g %.2f %8.3f" 1234.5678 1234.5678 3.14159 3.14159 }}', "1.234568e+03 1234.5678 3.14    3.142",
             "floats"),
        case('{{ printf "%+d %x" 5 "hi" }}', "+5 6869", "plus-flag-and-hex-string"),
        case('{{ printf "%.3s" "abcdef" }}', "abc", "string-precision"),
        case('{{ printf "%v %s" .L .L }}', "[a b c] [a b c]", "slices"),
        case('{{ printf "%d" }}', "%!d(MISSING)", "missing-argument"),
        case('{{ printf "%d" 1 2 }}', "1%!(EXTRA int=2)", "extra-argument"),
        case('{{ printf "%d" "x" }}', "%!d(string=x)", "wrong-type"),
        case('{{ printf "%s" nil }}', "%!s(<nil>)", "nil-for-string"),
        case('{{ printf "%d" 1.5 }}', "%!d(float64=1.5)", "float-for-int"),
        case('{{ printf "%v" .M }}', "map[a:x b:2 c:<nil>]", "map"),
        case('{{ printf "%q" "a\\"b\\n" }}', '"a\\"b\\n"', "quote-escapes"),
        case('{{ printf "%6.2f|%-6d|" 3.14159 42 }}', "  3.14|42    |", "padding"),
        case('{{ printf "%g" 1e21 }}', "1e+21", "g-large"),
        case('{{ printf "%.3g %.3g %.6g" 1234.5678 0.0001234 1.5 }}', "1.23e+03 0.000123 1.5", "g-precision"),
        case('{{ printf "%T %T %T %T %T" 1 "a" 1.5 .L nil }}', "int string float64 []interface {} <nil>", "type-verb"),
    ],
)
def test_printf(template: str, expected: str) -> None:
    assert render(template) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param({"b": 1, "a": [1, 2.0, None]}, '{"a":[1,2,null],"b":1}', id="sorted-compact"),
        pytest.param("<a & b>", '"\\u003ca \\u0026 b\\u003e"', id="html-escaped"),
        pytest.param("line\nquote\"tab\tctl\x01", '"line\\nquote\\"tab\\tctl\\u0001"', id="control-escapes"),
        pytest.param("\u2028é", '"\\u2028é"', id="line-separator-escaped-unicode-kept"),
        pytest.param(1e21, "1e+21", id="float-exponent"),
        pytest.param(1e-7, "1e-7", id="float-small-exponent"),
        pytest.param(0.000001, "0.000001", id="float-fixed-boundary"),
        pytest.param(1e20, "100000000000000000000", id="float-fixed-large"),
        pytest.param(3.0, "3", id="integral-float"),
        pytest.param(True, "true", id="bool"),
        pytest.param(None, "null", id="nil"),
        pytest.param(b"hi", '"aGk="', id="bytes-base64"),
        pytest.param(float("nan"), "", id="unencodable-is-empty"),
    ],
)
def test_json_function_matches_go_marshal(value: object, expected: str) -> None:
    assert render("{{ json .X }}", {"X": value}) == expected


def test_json_of_missing_key_is_null() -> None:
    assert render("{{ json .Nope }}", {}) == "null"


def test_current_date_is_today_and_yesterday_date_the_day_before() -> None:
    out = render("{{ currentDate }} {{ yesterdayDate }} {{ currentDate \"2006-01-02\" }}", {})
    today, yesterday, formatted = out.split()
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", today)
    assert dt.date.fromisoformat(today) - dt.date.fromisoformat(yesterday) == dt.timedelta(days=1)
    assert abs(dt.date.fromisoformat(today) - dt.date.today()) <= dt.timedelta(days=1)
    assert formatted == today


def test_to_typescript_type_of_tool_properties() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "a": {"type": "string"},
                        "b": {"type": ["integer", "null"]},
                        "c": {"anyOf": [{"type": "boolean"}, {"type": "array"}]},
                        "d": {"description": "no type"},
                    },
                },
            },
        }
    ]
    template = (
        "{{ range .Tools }}{{ range $k, $v := .Function.Parameters.Properties }}"
        "{{ $k }}: {{ toTypeScriptType $v }}; {{ end }}{{ end }}{{ toTypeScriptType 1 }}"
    )
    assert render(template, {"Tools": tools}) == "a: string; b: number | null; c: boolean | any[]; d: any; any"


# -- Ollama's data shapes ------------------------------------------------------------------------------
MESSAGES = [
    {"Role": "user", "Content": "Weather?"},
    {
        "Role": "assistant",
        "ToolCalls": [{"Function": {"Name": "get_weather", "Arguments": {"unit": "c", "city": "Paris", "days": 2}}}],
    },
    {"Role": "tool", "Content": "18C", "ToolName": "get_weather"},
]


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        case(
            "{{ range .Messages }}{{ range .ToolCalls }}{{ .Function.Name }}{{ .Function.Arguments }}{{ end }}{{ end }}",
            'get_weather{"city":"Paris","days":2,"unit":"c"}',
            "arguments-print-as-sorted-json",
        ),
        case(
            "{{ range .Messages }}{{ range .ToolCalls }}{{ json .Function.Arguments }}{{ end }}{{ end }}",
            '{"city":"Paris","days":2,"unit":"c"}',
            "arguments-json",
        ),
        case(
            "{{ range .Messages }}{{ range .ToolCalls }}{{ range $k, $v := .Function.Arguments }}{{ $k }}={{ $v }} "
            "{{ end }}{{ end }}{{ end }}",
            "city=Paris days=2 unit=c ",
            "arguments-range-sorted",
        ),
        case(
            "{{ range .Messages }}{{ range .ToolCalls }}{{ .Function.Arguments.city }}{{ end }}{{ end }}",
            "Paris",
            "argument-by-name",
        ),
        case(
            "{{ range .Messages }}[{{ .Role }}|{{ .Content }}|{{ .Thinking }}|{{ .ToolName }}|{{ if .ToolCalls }}calls"
            "{{ end }}|{{ .ToolCallID }}]{{ end }}",
            "[user|Weather?||||][assistant||||calls|][tool|18C||get_weather||]",
            "missing-message-fields-are-zero",
        ),
        case("{{ range .Messages }}{{ . }};{{ end }}", "{user Weather?  [] []  };{assistant   [] [{ {0 get_weather "
             '{"city":"Paris","days":2,"unit":"c"}}}]  };{tool 18C  [] [] get_weather };',
             "message-prints-as-go-struct"),
        case("{{ len .Messages }} {{ len (slice .Messages 1) }}", "3 2", "messages-len-and-slice"),
        case(
            '{{ range .Messages }}{{ range .ToolCalls }}{{ printf "%d %T" .Function.Arguments.days .Function.Arguments.days }}'
            "{{ end }}{{ end }}",
            "%!d(float64=2) float64",
            "argument-numbers-are-float64-as-go-decodes-json",
        ),
        case("{{ .Tools }}", "null", "no-tools-prints-null"),
    ],
)
def test_ollama_message_data(template: str, expected: str) -> None:
    assert render(template, {"Messages": MESSAGES, "Tools": None}) == expected


def test_tools_print_as_json_in_declaration_order() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get <weather>",
                "parameters": {
                    "type": "object",
                    "required": ["city"],
                    "properties": {"unit": {"type": "string", "enum": ["c", "f"]}, "city": {"type": "string"}},
                },
            },
        }
    ]
    function = (
        '{"name":"get_weather","description":"Get \\u003cweather\\u003e","parameters":{"type":"object",'
        '"required":["city"],"properties":{"city":{"type":"string"},"unit":{"type":"string","enum":["c","f"]}}}}'
    )
    template = "{{ .Tools }}|{{ range .Tools }}{{ . }}|{{ .Function }}|{{ .Function.Parameters.Properties }}{{ end }}"
    assert render(template, {"Tools": tools}) == (
        f'[{{"type":"function","function":{function}}}]|{{"type":"function","function":{function}}}|{function}|'
        '{"city":{"type":"string"},"unit":{"type":"string","enum":["c","f"]}}'
    )


def test_tool_property_type_prints_its_name() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"properties": {"x": {"type": "string"}}}}}]
    template = "{{ range .Tools }}{{ range $n, $p := .Function.Parameters.Properties }}{{ $n }}: {{ $p.Type }}{{ end }}{{ end }}"
    assert render(template, {"Tools": tools}) == "x: string"


def test_unknown_field_of_a_message_is_an_error_naming_the_type() -> None:
    with pytest.raises(TemplateError, match=r"can't evaluate field Foo in type \*template\.templateMessage"):
        render("{{ range .Messages }}{{ .Foo }}{{ end }}", {"Messages": MESSAGES})


def test_unknown_message_key_in_data_is_rejected() -> None:
    with pytest.raises(TemplateError, match="unknown message field 'Colour'"):
        render("{{ .Messages }}", {"Messages": [{"Role": "user", "Colour": "red"}]})


# -- errors ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("template", "message"),
    [
        case('{{ define "x" .X }}x{{ end }}', r'template: :1: unexpected ".X" in define clause', "define-with-pipeline"),
        case('line one\n{{ block "x" }}{{ end }}', r"template: :2: missing value for block clause", "block-no-pipeline"),
        case("{{ define nil }}{{ end }}", r"template: :1: unexpected <nil> in define clause", "nil-prints-as-a-keyword"),
        case("{{ template . }}", r"template: :1: unexpected <\.> in template clause", "dot-prints-as-a-keyword"),
        case("{{ call .F }}", r"the call function is not supported", "call"),
        case("{{ 1+2i }}", r"complex constant 1\+2i is not supported", "complex"),
        case("{{ foo }}", r'template: :1: function "foo" not defined', "unknown-function"),
        case("{{ .X | foo }}", r'function "foo" not defined', "unknown-function-in-pipe"),
        case("{{ if }}x{{ end }}", r"missing value for if", "empty-if"),
        case("{{ }}", r"missing value for command", "empty-action"),
        case("{{ end }}", r"unexpected \{\{end\}\}", "stray-end"),
        case("{{ .X }}{{ else }}", r"unexpected \{\{else\}\}", "stray-else"),
        case("{{ if .X }}x", r"unexpected EOF", "unclosed-if"),
        case("{{ .X", r"unclosed action", "unclosed-action"),
        case('{{ "abc }}', r"unterminated quoted string", "unterminated-string"),
        case("{{ `abc }}", r"unterminated raw quoted string", "unterminated-raw-string"),
        case("{{ (.X }}", r"unclosed left paren", "unclosed-paren"),
        case("{{ .X) }}", r"unexpected right paren", "stray-paren"),
        case("{{/* x }}", r"unclosed comment", "unclosed-comment"),
        case("{{ /* x */ }}", r'unexpected "/" in command', "space-before-comment"),
        case("{{ .X ~ }}", r'unexpected "~" in operand', "stray-character"),
        case("{{ .X \x01 }}", r"unrecognized character in action: U\+0001", "control-character"),
        case("{{ $x }}", r'undefined variable "\$x"', "undefined-variable"),
        case("{{ if true }}{{ $x := 1 }}{{ end }}{{ $x }}", r'undefined variable "\$x"', "variable-out-of-scope"),
        case("{{ break }}", r"\{\{break\}\} outside \{\{range\}\}", "break-outside-range"),
        case("{{ range .L }}{{ else }}{{ continue }}{{ end }}", r"\{\{continue\}\} outside \{\{range\}\}",
             "continue-in-range-else"),
        case("{{ .X | 2 }}", r"non executable command in pipeline stage 2", "literal-in-pipeline"),
        case("{{ $a, $b := .L }}", r"too many declarations in command", "two-variables-outside-range"),
        case("{{ .X.1 }}", r"bad number syntax|unexpected", "bad-field"),
        case("{{ 3x }}", r'bad number syntax: "3x"', "bad-number"),
        case("{{ \"a\".b }}", r"unexpected \. after term", "field-of-literal"),
        case("{{ .X }}\n{{ .Y }}\n{{ end }}", r"template: :3: unexpected \{\{end\}\}", "line-number"),
    ],
)
def test_parse_errors_name_the_construct(template: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        parse_template(template)


@pytest.mark.parametrize(
    ("template", "message"),
    [
        case("{{ index .L 5 }}", r"error calling index: index out of range: 5", "index-out-of-range"),
        case('{{ index .L "a" }}', r"cannot index slice/array with type string", "index-with-string"),
        case("{{ slice .L 2 1 }}", r"invalid slice index: 2 > 1", "slice-reversed"),
        case("{{ len 3 }}", r"len of type int", "len-of-int"),
        case("{{ len .N }}", r"len of nil pointer", "len-of-nil"),
        case('{{ eq "a" 1 }}', r"incompatible types for comparison", "eq-mixed-types"),
        case('{{ eq .I "a" }}', r'at <eq .I "a">: error calling eq: incompatible types for comparison',
             "eq-int-with-string-constant"),
        case('{{ ne .L "a" }}', r"error calling ne: incompatible types", "ne-list-with-string-constant"),
        case('{{ "x" | ne .S "a" }}', r"wrong number of args for ne: want 2 got 3", "ne-string-constant-piped"),
        case("{{ lt 1 1.5 }}", r"incompatible types for comparison", "lt-mixed-types"),
        case("{{ lt true false }}", r"invalid type for comparison", "lt-bools"),
        case("{{ eq .L .L }}", r"non-comparable", "eq-lists"),
        case("{{ eq .S nil }}", r"cannot assign nil", "nil-to-eq"),
        case("{{ nil }}", r"nil is not a command", "nil-command"),
        case("{{ 1 2 }}", r"can't give argument to non-function 1", "argument-to-literal"),
        case("{{ .S.Foo }}", r"can't evaluate field Foo in type string", "field-of-string"),
        case("{{ .Missing.Foo }}", r"nil pointer evaluating interface \{\}\.Foo", "field-of-missing"),
        case("{{ range .S }}{{ end }}", r"range can't iterate over hello", "range-over-string"),
        case("{{ range $i, $v := 3 }}{{ end }}", r"can't use 3 to iterate over more than one variable", "range-int-two-vars"),
        case("{{ printf 1 }}", r"wrong type for value; expected string; got int", "printf-format-type"),
        case("{{ not 1 2 }}", r"wrong number of args for not: want 1 got 2", "arity"),
        case("{{ and }}", r"wrong number of args for and: want at least 1 got 0", "and-arity"),
        case("{{ .M.a 1 }}", r"a is not a method but has arguments", "map-key-with-arguments"),
    ],
)
def test_execution_errors(template: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        render(template)


def test_execution_error_says_where() -> None:
    with pytest.raises(TemplateError, match=r'^template: :2:3: executing "" at <index \.L 5>: '):
        render("x\n{{ index .L 5 }}")


# -- properties -------------------------------------------------------------------------------------------
FRAGMENTS = [
    "{{", "}}", "{{- ", " -}}", " ", "\n", ".X", ".L", "$x", "$", ":=", "=", ",", "if", "else", "end", "range",
    "with", "break", "continue", "(", ")", "|", '"s"', '"', "`", "/*", "*/", "1", "-", "len", "printf", "eq",
    "index", "nil", "true", "text", "define", "'", ".", "\\",
]
template_soup = st.lists(st.sampled_from(FRAGMENTS), max_size=24).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.one_of(st.text(max_size=60), template_soup))
def test_parsing_arbitrary_text_raises_only_template_error(text: str) -> None:
    try:
        tmpl = parse_template(text)
    except TemplateError:
        return
    try:
        tmpl.execute({"X": "x", "L": [1, "a", None]})
    except TemplateError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.text().filter(lambda s: "{{" not in s))
def test_text_without_actions_renders_to_itself(text: str) -> None:
    assert parse_template(text).execute({}) == text


@settings(max_examples=200, deadline=None)
@given(
    st.text().filter(lambda s: "{{" not in s and not s.endswith("{")),  # "{" + "{{-" would open the action early
    st.text().filter(lambda s: "{{" not in s),
)
def test_trim_markers_remove_exactly_the_adjacent_whitespace(before: str, after: str) -> None:
    out = parse_template(before + '{{- "X" -}}' + after).execute({})
    assert out == before.rstrip(" \t\r\n") + "X" + after.lstrip(" \t\r\n")


def test_many_templates_each_render_their_own_text() -> None:
    """Each parsed tree runs its own code (made once and kept, a bounded number of trees): past that bound, and
    for a template parsed again, every render is still that template's."""
    templates = [parse_template("{{ .S }}-" + str(i) + '{{ range .L }}{{ if eq . "b" }}' + str(i) + "{{ end }}{{ end }}")
                 for i in range(600)]
    for _ in range(2):
        for i, tmpl in enumerate(templates):
            assert tmpl.execute(DATA) == f"hello-{i}{i}"
    again = parse_template("{{ .S }}-0{{ range .L }}{{ if eq . \"b\" }}0{{ end }}{{ end }}")
    assert again.execute({"S": "other", "L": ["b", "b"]}) == "other-000"


def test_one_template_renders_the_same_from_many_threads() -> None:
    """Renders run in worker threads: one template's code is shared by concurrent renders, each with its data."""
    from concurrent.futures import ThreadPoolExecutor

    tmpl = parse_template("{{ range $i, $m := .L }}{{ $i }}={{ $m }};{{ end }}{{ .S }}")

    def one(k: int) -> str:
        return tmpl.execute({"L": [k, k + 1], "S": str(k)})

    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(one, range(400)))
    assert got == [f"0={k};1={k + 1};{k}" for k in range(400)]
