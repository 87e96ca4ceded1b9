"""Named templates in TEMPLATEs: {{define}}, {{template}} and {{block}} as Go's text/template runs them
(issue 23.6), through the engine, Ollama's prompt rendering and /api/generate.

Expected strings follow Go's documented semantics and its own tables (text/template multi_test.go,
exec_test.go's TestBlock and TestMaxExecDepth); data is a plain dict, Go's map[string]any as Ollama passes it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ollama_py.errors import TemplateError
from ollama_py.template import parse_template, render_prompt
from ollama_py.template.exec import Limits
from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings

# every template here rendered by both engines (conftest.both_engines)
pytestmark = pytest.mark.usefixtures("both_engines")

DATA = {"I": 17, "SI": [3, 4, 5], "S": "hello", "U": {"V": "v"}}
# Go's multiText1 + multiText2, parsed in one piece (the defines print nothing at the top level)
DEFINES = ('\n\t{{define "x"}}TEXT{{end}}\n\t{{define "dotV"}}{{.V}}{{end}}\n'
           '\n\t{{define "dot"}}{{.}}{{end}}\n\t{{define "nested"}}{{template "dot" .}}{{end}}\n')


def render(text: str, data: object = None, limits: Limits | None = None) -> str:
    tmpl = parse_template(text)
    value = DATA if data is None else data
    return tmpl.execute(value) if limits is None else tmpl.execute(value, limits)


def case(template: str, expected: str, case_id: str) -> object:
    return pytest.param(template, expected, id=case_id)


@pytest.mark.parametrize(("template", "expected"), [
    case('{{template "x" .SI}}', "TEXT", "invoke-x"),
    case('{{template "x"}}', "TEXT", "invoke-x-no-args"),
    case('{{template "dot" .I}}', "17", "invoke-dot-int"),
    case('{{template "dot" .SI}}', "[3 4 5]", "invoke-dot-list"),
    case('{{template "dotV" .U}}', "v", "invoke-dotV"),
    case('{{template "nested" .I}}', "17", "invoke-nested-int"),
    case('{{template "nested" $x:=.SI}},{{index $x 1}}', "[3 4 5],4", "variable-declared-by-template-persists"),
    case('{{template "dot"}}', "<no value>", "no-pipeline-is-nil-dot"),
])
def test_go_multi_exec_table(template: str, expected: str) -> None:
    between = re.sub(r"\{\{define .*?\{\{end\}\}", "", DEFINES)  # the text around the defines stays
    assert render(DEFINES + template) == between + expected
    assert render(template + DEFINES) == expected + between


@pytest.mark.parametrize(("template", "expected"), [
    case('a({{block "inner" .S}}bar({{.}})baz{{end}})b', "a(bar(hello)baz)b", "go-TestBlock"),
    case('{{block "b" .S}}[{{.}}]{{end}}{{template "b" "again"}}', "[hello][again]", "a-block-is-a-define-too"),
    case('{{template "later" .S}}{{define "later"}}<{{.}}>{{end}}', "<hello>", "defined-after-use"),
    case('x{{define "a"}}A{{end}}y', "xy", "a-define-prints-nothing-where-it-stands"),
    case('{{define "a"}}{{$}}{{end}}{{template "a" .I}}', "17", "dollar-is-the-templates-own-dot"),
    case('{{define "a"}}{{$v := 1}}{{$v}}{{end}}{{$v := 2}}{{template "a"}}{{$v}}', "12", "own-variable-scope"),
    case('{{define "a"}}  \n{{end}}{{define "a"}}body{{end}}{{template "a"}}', "body", "a-body-replaces-an-empty-one"),
    case('{{define "a"}}body{{end}}{{define "a"}}\n{{end}}{{template "a"}}', "body",
         "an-empty-define-keeps-the-body"),
    case('{{define ""}}main{{end}}\n', "main", "define-of-the-main-name-with-an-empty-main"),
    case('{{define "list"}}{{.V}}{{with .Next}},{{template "list" .}}{{end}}{{end}}{{template "list" .L}}', "1,2,3",
         "recursion-over-data"),
    case('{{range .SI}}{{template "n" .}}{{end}}{{define "n"}}<{{.}}>{{end}}', "<3><4><5>", "called-in-a-range"),
    case('{{- define "a" -}}\n  A  \n{{- end -}}\n{{ template "a" }}', "A", "trim-markers"),
    case("{{define `raw`}}R{{end}}{{template `raw`}}", "R", "raw-string-names"),
])
def test_named_templates_render_as_go_renders_them(template: str, expected: str) -> None:
    data = {**DATA, "L": {"V": 1, "Next": {"V": 2, "Next": {"V": 3, "Next": None}}}}
    assert render(template, data) == expected


@pytest.mark.parametrize(("template", "message"), [
    case('{{define "a"}}a{{end}}{{define "a"}}b{{end}}', r'^template: :1: template: multiple definition of template "a"$',
         "go-multidefine"),
    case('{{block "a" .}}a{{end}}{{define "a"}}b{{end}}', r'multiple definition of template "a"',
         "a-block-and-a-define-with-bodies"),
    case('{{define ""}}a{{end}}main text', r'multiple definition of template ""', "define-of-the-main-name"),
    case('{{if true}}{{define "a"}}b{{end}}{{end}}', r"^template: :1: unexpected <define> in command$",
         "define-inside-if"),
    case('{{range .SI}}\n{{define "a"}}b{{end}}{{end}}', r"^template: :2: unexpected <define> in command$",
         "define-inside-range"),
    case('{{define "a"}}{{define "b"}}b{{end}}{{end}}', r"unexpected <define> in command", "define-inside-define"),
    case('{{define "a"}}x{{else}}y{{end}}', r"unexpected \{\{else\}\} in define clause", "else-in-define"),
    case('{{block "a" .}}x{{else}}y{{end}}', r"unexpected \{\{else\}\} in block clause", "else-in-block"),
    case('{{define "a"}}x', r"unexpected EOF", "unclosed-define"),
    case("{{define a}}x{{end}}", r'unexpected "a" in define clause', "define-name-not-a-string"),
    case('{{define "a" .}}x{{end}}', r"unexpected <\.> in define clause", "define-with-a-pipeline"),
    case("{{template .S}}", r'unexpected "\.S" in template clause', "template-name-not-a-string"),
    case('{{block "a"}}x{{end}}', r"missing value for block clause", "block-without-pipeline"),
    case('{{$x := 1}}{{define "a"}}{{$x}}{{end}}', r'undefined variable "\$x"', "no-variables-from-outside"),
    case('{{range .SI}}{{block "b" .}}{{break}}{{end}}{{end}}', r"\{\{break\}\} outside \{\{range\}\}",
         "a-block-body-is-outside-the-range"),
])
def test_named_template_parse_errors(template: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        parse_template(template)


def test_an_undefined_template_is_gos_error_at_the_call() -> None:
    with pytest.raises(TemplateError) as err:
        render('{{template "x" .}}')
    assert str(err.value) == 'template: :1:11: executing "" at <{{template "x" .}}>: template "x" not defined'


def test_an_error_inside_a_named_template_names_it() -> None:
    with pytest.raises(TemplateError) as err:
        render('{{define "t"}}\n  {{index .SI 7}}{{end}}{{template "t" .}}')
    assert str(err.value).startswith('template: :2:4: executing "t" at <index .SI 7>: error calling index:')


@pytest.mark.parametrize("template", [
    pytest.param('{{template "" .}}', id="go-TestMaxExecDepth"),
    pytest.param('{{define "a"}}{{template "b" .}}{{end}}{{define "b"}}{{template "a" .}}{{end}}{{template "a"}}',
                 id="mutual"),
    pytest.param('{{define "a"}}{{if true}}{{with 1}}{{template "a" .}}{{end}}{{end}}{{end}}{{template "a"}}',
                 id="through-if-and-with"),
])
def test_endless_recursion_stops_at_the_depth_limit(template: str) -> None:
    with pytest.raises(TemplateError, match=r'executing "[a-z]*" at <\{\{template "[a-z]*" ?\.?\}\}>: '
                                            r"exceeded maximum template depth \(100\)$"):
        render(template)


def test_the_depth_limit_counts_nested_calls_only() -> None:
    chain = {"V": 0, "Next": None}
    for v in range(1, 30):
        chain = {"V": v, "Next": chain}
    template = '{{define "l"}}{{.V}}{{with .Next}} {{template "l" .}}{{end}}{{end}}{{template "l" .}}'
    assert render(template, chain, Limits(depth=30)) == " ".join(str(v) for v in range(29, -1, -1))
    with pytest.raises(TemplateError, match=r"exceeded maximum template depth \(29\)"):
        render(template, chain, Limits(depth=29))
    many_calls = '{{define "d"}}.{{end}}' + '{{template "d"}}' * 500  # siblings, not nesting
    assert render(many_calls) == "." * 500


def test_recursion_that_fans_out_stops_at_the_time_limit() -> None:
    template = '{{define "a"}}{{template "a"}}{{template "a"}}{{end}}{{template "a"}}'
    with pytest.raises(TemplateError, match="rendering takes longer than the limit|maximum template depth"):
        render(template, limits=Limits(seconds=0.2))


# -- Ollama's prompt rendering over named templates --------------------------------------------------------------
def test_messages_used_only_inside_a_define_make_a_messages_template() -> None:
    """Ollama's Vars() walks every template of the set, so .Messages in a define counts."""
    template = ('{{define "turn"}}<|{{.Role}}|>{{.Content}}\n{{end}}'
                '{{range .Messages}}{{template "turn" .}}{{end}}<|assistant|>')
    prompt = render_prompt(template, messages=[{"role": "user", "content": "hi"},
                                               {"role": "assistant", "content": "hello"},
                                               {"role": "user", "content": "again"}])
    assert prompt == "<|user|>hi\n<|assistant|>hello\n<|user|>again\n<|assistant|>"


def test_a_legacy_template_can_call_its_named_templates_on_every_turn() -> None:
    """Ollama runs the last turn in a new set without the named templates ('template "sys" not defined'); here they
    stay available, and the last turn is still cut after .Response."""
    template = '{{define "sys"}}{{if .System}}[{{.System}}] {{end}}{{end}}{{template "sys" .}}Q:{{.Prompt}} A:{{.Response}};'
    prompt = render_prompt(template, system="be brief", messages=[
        {"role": "user", "content": "one"}, {"role": "assistant", "content": "1"}, {"role": "user", "content": "two"}])
    assert prompt == "[be brief] Q:one A:1;Q:two A:"


# -- through the API --------------------------------------------------------------------------------------------
TEMPLATE = ('{{- define "system" }}<|system|>{{ . }}\n{{ end }}'
            '{{- define "turn" }}<|{{ .Role }}|>{{ .Content }}\n{{ end }}'
            '{{- if .System }}{{ template "system" .System }}{{ end }}'
            '{{- range .Messages }}{{ if ne .Role "system" }}{{ template "turn" . }}{{ end }}{{ end }}'
            '{{- block "open" . }}<|assistant|>{{ end }}')


@pytest.fixture
async def client(tmp_path: Path, tiny_gguf: Path, aiohttp_client):
    from ollama_py.server.app import create_app

    settings = make_settings(tmp_path)
    create_tiny_model(settings, tiny_gguf, "named", template=TEMPLATE, system="Be kind.")
    create_tiny_model(settings, tiny_gguf, "undefined", template='{{ .Prompt }}{{ template "missing" . }}')
    log = tmp_path / "requests.jsonl"
    app = create_app(settings, scheduler=fake_scheduler(settings, {"FAKE_LOG_FILE": str(log)}))
    c = await aiohttp_client(app)
    c.prompts = lambda: [p for line in log.read_text().splitlines() if (p := json.loads(line).get("prompt"))]  # type: ignore
    return c


async def test_generate_renders_a_template_with_define_template_and_block(client) -> None:
    r = await client.post("/api/generate", json={"model": "named", "prompt": "Hi there", "stream": False})
    assert r.status == 200, await r.text()
    assert client.prompts()[-1] == "<|system|>Be kind.\n<|user|>Hi there\n<|assistant|>"


async def test_generate_with_an_undefined_template_is_a_400_with_gos_message(client) -> None:
    r = await client.post("/api/generate", json={"model": "undefined", "prompt": "Hi", "stream": False})
    assert r.status == 400
    assert (await r.json())["error"] == (  # Go cuts the node to 20 characters
        'template: :1:25: executing "" at <{{template "missing"...>: template "missing" not defined')


async def test_create_with_two_bodies_for_one_name_is_a_400(client) -> None:
    r = await client.post("/api/create", json={"model": "twice", "from": "named", "stream": False,
                                               "template": '{{define "a"}}1{{end}}{{define "a"}}2{{end}}'})
    assert r.status == 400
    assert 'multiple definition of template "a"' in (await r.json())["error"]
