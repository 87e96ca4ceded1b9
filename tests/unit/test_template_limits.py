"""A template cannot freeze the gateway or eat its memory (issue 22.1, 22.10).

Go's fmt caps printf widths and precisions; our engine also bounds range iterations, the size of what a render
builds and its time, and refuses with a TemplateError (a 400 naming the limit); the server parses and renders
templates in threads, so even a long legal render leaves the event loop free.
"""

from __future__ import annotations

import time

import pytest

from ollama_py.errors import TemplateError
from ollama_py.template import parse_template
from ollama_py.template.exec import Limits
from tests.helpers.loop import loop_watch

# every template here rendered by both engines (conftest.both_engines)
pytestmark = pytest.mark.usefixtures("both_engines")


def render(text: str, data: object = None, limits: Limits | None = None) -> str:
    tmpl = parse_template(text)
    return tmpl.execute(data or {}) if limits is None else tmpl.execute(data or {}, limits)


# -- printf as Go caps it -----------------------------------------------------------------------------------
@pytest.mark.parametrize(("template", "expected"), [
    pytest.param('{{ printf "%0400000000d" 1 }}', "%!(NOVERB)%!(EXTRA int=1)", id="width-past-1e6-is-noverb"),
    pytest.param('{{ printf "%.400000000f|x" 1.5 }}', "%!(NOVERB)%!(EXTRA float64=1.5)", id="precision-past-1e6"),
    pytest.param('{{ printf "%*d" 2000000 1 }}', "%!(BADWIDTH)1", id="star-width-past-1e6"),
    pytest.param('{{ printf "%.*d" 2000000 1 }}', "%!(BADPREC)1", id="star-precision-past-1e6"),
    pytest.param('{{ printf "%.*d" -1 5 }}', "%!(BADPREC)5", id="negative-star-precision"),
    pytest.param('{{ printf "%*d|" -3 5 }}', "5  |", id="negative-star-width-pads-right"),
    pytest.param('{{ printf "%." 1 }}', "%!.(int=1)", id="trailing-dot-is-the-verb"),
    pytest.param('{{ printf "%1000000d" 7 | len }}', "1000000", id="width-of-1e6-is-fine"),
])
def test_printf_widths_are_capped_as_go_caps_them(template: str, expected: str) -> None:
    assert render(template) == expected


# -- the engine's bounds ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("template", "message"), [
    pytest.param("{{ range 10000000 }}x{{ end }}",
                 r"^template: :1:9: executing .*range over 10000000 passes the limit of 1000 iterations",
                 id="range-over-a-big-number"),
    pytest.param("{{ range 30 }}{{ range 30 }}{{ range 30 }}{{ end }}{{ end }}{{ end }}",
                 r"range over 30 passes the limit of 1000 iterations per render", id="nested-ranges-count-together"),
    pytest.param("{{ range $.L }}{{ range $.L }}{{ range $.L }}{{ end }}{{ end }}{{ end }}",
                 r"range iterations pass the limit of 1000 per render", id="nested-ranges-over-lists"),
    pytest.param('{{ $x := "ab" }}{{ range 20 }}{{ $x = printf "%s%s" $x $x }}{{ end }}',
                 r"error calling printf: printf's result passes the limit of 10000 characters", id="doubling-printf"),
    pytest.param('{{ $x := "ab" }}{{ range 20 }}{{ $x = print $x $x }}{{ end }}',
                 r"the arguments of print pass the limit of 10000 characters", id="doubling-print"),
    pytest.param('{{ $x := "<" }}{{ range 20 }}{{ $x = html $x $x }}{{ end }}',
                 r"the (result|arguments) of html pass(es)? the limit of 10000 characters", id="growing-html"),
    pytest.param('{{ printf "%20000d" 1 }}', r"printf's result passes the limit", id="one-wide-printf"),
    pytest.param("{{ range 900 }}{{ $.Long }}{{ end }}", r"the output passes the limit of 10000 characters",
                 id="output"),
])
def test_a_render_past_a_limit_is_a_template_error(template: str, message: str) -> None:
    limits = Limits(iterations=1000, chars=10_000)
    with pytest.raises(TemplateError, match=message):
        render(template, {"Long": "x" * 100, "L": list(range(30))}, limits)


def test_a_render_past_its_time_is_a_template_error() -> None:
    with pytest.raises(TemplateError, match=r"rendering takes longer than the limit of 0.05 s"):
        render('{{ range 10000000 }}{{ $x := printf "%d" . }}{{ end }}', limits=Limits(iterations=10**9,
                                                                                      seconds=0.05))


def test_the_default_limits_refuse_the_reported_templates_quickly() -> None:
    started = time.monotonic()
    with pytest.raises(TemplateError, match="range over 10000000 passes the limit of 1000000"):
        render("{{ range 10000000 }}{{ end }}")
    assert render('{{ printf "%0400000000d" 1 }}') == "%!(NOVERB)%!(EXTRA int=1)"
    assert time.monotonic() - started < 5  # generous: both answers take milliseconds


def test_a_template_longer_than_a_mebibyte_is_refused() -> None:
    with pytest.raises(TemplateError, match=r"template: too long: 1048577 characters \(the limit is 1048576\)"):
        parse_template("x" * (1 << 20 | 1))


# -- through the server -------------------------------------------------------------------------------------
@pytest.fixture
async def client(fake_app, aiohttp_client):
    _, app = fake_app()
    return await aiohttp_client(app)


BOMB = "{{ range 10000000 }}x{{ end }}{{ .Prompt }}"
BOMB_ERROR = ("template: :1:9: executing \"\" at <{{range 10000000}}'x...>: range over 10000000 passes the limit of "
              "1000000 iterations per render")


async def test_generate_with_a_range_bomb_template_is_a_400(client):
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "template": BOMB})
    assert r.status == 400
    assert (await r.json()) == {"error": BOMB_ERROR}


async def test_generate_with_a_template_that_does_not_parse_is_a_400(client):
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "template": "{{ .Prompt"})
    assert r.status == 400
    assert (await r.json())["error"].startswith("template: :1: unclosed action")


async def test_a_created_model_whose_template_explodes_is_refused_at_request_time(client):
    r = await client.post("/api/create", json={"model": "bomb", "from": "tiny", "template": BOMB, "stream": False})
    assert r.status == 200
    chat = {"model": "bomb", "messages": [{"role": "user", "content": "hi"}]}
    for path, body, error in [
        ("/api/chat", chat, {"error": BOMB_ERROR}),
        ("/v1/chat/completions", chat, {"error": {"message": BOMB_ERROR, "type": "invalid_request_error",
                                                  "param": None, "code": None}}),
        ("/v1/messages", {**chat, "max_tokens": 5}, {"type": "error", "error": {"type": "invalid_request_error",
                                                                               "message": BOMB_ERROR}}),
    ]:
        r = await client.post(path, json=body)
        assert r.status == 400, path
        assert (await r.json()) == error, path


async def test_a_long_render_leaves_the_event_loop_free(client):
    # Legal, about two seconds of rendering: before it ran in a thread, the loop stood still that long.
    slow = '{{ range 400000 }}{{ $x := printf "%d" . }}{{ end }}{{ .Prompt }}'
    async with loop_watch() as gaps:
        r = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "template": slow,
                                                     "stream": False, "options": {"num_predict": 1}})
        assert r.status == 200
    assert gaps[0] < 1.0


async def test_ten_thousand_tools_render_without_stalling_the_loop(client):
    # Each tool is rendered (to JSON) but not printed: the fake runner's context stays small.
    template = "{{ range .Tools }}{{ $t := json .Function }}{{ end }}{{ range .Messages }}{{ .Content }}{{ end }}"
    r = await client.post("/api/create", json={"model": "tooly", "from": "tiny", "template": template,
                                               "stream": False})
    assert r.status == 200
    tools = [{"type": "function", "function": {
        "name": f"tool_{i}", "description": "does a thing " * 5,
        "parameters": {"type": "object", "properties": {"a": {"type": "string", "description": "an a"}}}}}
        for i in range(10_000)]
    async with loop_watch() as gaps:
        r = await client.post("/api/chat", json={"model": "tooly", "tools": tools, "stream": False,
                                                 "messages": [{"role": "user", "content": "hi"}],
                                                 "options": {"num_predict": 1}})
        assert r.status == 200, await r.text()
    assert gaps[0] < 1.0
