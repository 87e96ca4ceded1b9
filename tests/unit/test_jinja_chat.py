"""GGUF chat templates rendered in our sandbox (template/jinja_chat.py): the semantics llama-server renders them
with, and the limits that stop a template that loops or explodes (issues 38 and 34 item 4). The comparison with
the real llama-server's /apply-template on every template is tests/integration/test_jinja_chat_runner.py."""

from __future__ import annotations

import time

import pytest

from ollama_py.template.jinja_chat import (
    CHECK_LIMITS,
    ChatTemplate,
    JinjaLimit,
    JinjaUnsupported,
    check_chat_template,
    render_chat,
)
from tests.fakes.fake_llama_server import CHATML_TEMPLATE

HELLO = [{"role": "user", "content": "Hello"}]


def test_chatml_renders_with_the_generation_prompt():
    assert render_chat(ChatTemplate(CHATML_TEMPLATE), HELLO) == \
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    assert render_chat(ChatTemplate(CHATML_TEMPLATE), HELLO, add_generation_prompt=False) == \
        "<|im_start|>user\nHello<|im_end|>\n"


def test_blocks_trim_their_newlines_and_leading_space_as_transformers_sets_them():
    source = "{% for m in messages %}\n  {% if m.role == 'user' %}\n[{{ m.content }}]\n  {% endif %}\n{% endfor %}\n"
    assert render_chat(ChatTemplate(source), HELLO) == "[Hello]\n"


def test_a_leading_bos_token_is_dropped_when_the_vocabulary_adds_one():
    source = "{{ bos_token }}{% for m in messages %}{{ m.content }}{{ eos_token }}{% endfor %}"
    assert render_chat(ChatTemplate(source, "<s>", "</s>", add_bos=False), HELLO) == "<s>Hello</s>"
    assert render_chat(ChatTemplate(source, "<s>", "</s>", add_bos=True), HELLO) == "Hello</s>"
    assert render_chat(ChatTemplate(source, "<s>", "</s>", add_bos=True, add_eos=True), HELLO) == "Hello"


def test_tojson_is_pythons_json_without_ascii_escapes():
    tools = [{"type": "function", "function": {"name": "météo", "parameters": {"a": [1, 2]}}}]
    source = "{{ tools[0] | tojson }}|{{ tools[0].function.parameters | tojson(indent=2) }}"
    assert render_chat(ChatTemplate(source), HELLO, tools=tools) == (
        '{"type": "function", "function": {"name": "météo", "parameters": {"a": [1, 2]}}}|'
        '{\n  "a": [\n    1,\n    2\n  ]\n}')


def test_loop_controls_strftime_now_and_the_date_variables():
    source = ("{% for i in range(5) %}{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}"
              "|{{ strftime_now('%Y') }}|{{ date_string }}|{{ datetime }}")
    for _ in range(2):  # the second render takes the dates made for the first (once a second)
        assert render_chat(ChatTemplate(source), HELLO) == \
            f"012|{time.strftime('%Y')}|{time.strftime('%d %b %Y')}|{time.strftime('%b %d %Y')}"


def test_tools_and_enable_thinking_are_passed_as_llama_server_passes_them():
    source = "{{ tools is defined }} {{ enable_thinking }} {{ add_generation_prompt is defined }}"
    assert render_chat(ChatTemplate(source), HELLO) == "False True True"
    assert render_chat(ChatTemplate(source), HELLO, tools=[{"type": "function"}], enable_thinking=False,
                       add_generation_prompt=False) == "True False False"


def test_generation_blocks_render_their_body():
    source = "{% for m in messages %}{% generation %}{{ m.content }}{% endgeneration %}{% endfor %}"
    assert render_chat(ChatTemplate(source), HELLO) == "Hello"


@pytest.mark.parametrize("source", [
    pytest.param("{{ raise_exception('Conversation roles must alternate') }}", id="raise_exception"),
    pytest.param("{% if %}", id="syntax"),
    pytest.param("{% frobnicate %}", id="unknown-tag"),
    pytest.param("{{ messages.__class__ }}{{ ''.__class__.__mro__ }}{{ x.y.z() }}", id="undefined-call"),
    pytest.param("{{ messages.append(1) }}", id="mutation"),
])
def test_what_the_sandbox_does_not_render_is_unsupported_not_an_error(source):
    with pytest.raises(JinjaUnsupported):
        render_chat(ChatTemplate(source), HELLO)
    assert check_chat_template(ChatTemplate(source)) is False  # cannot judge: the runner's engine may render it


def test_the_sandbox_keeps_templates_from_python_internals():
    assert render_chat(ChatTemplate("{{ messages[0].__class__ }}"), HELLO) == ""
    with pytest.raises(JinjaUnsupported, match="unsafe"):
        render_chat(ChatTemplate("{{ cycler.__init__.__globals__ }}"), HELLO)


@pytest.mark.parametrize("source", [
    pytest.param("{% for i in range(100000000) %}x{% endfor %}", id="range-1e8"),
    pytest.param("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                 id="nested-loops"),
    pytest.param("{% for m in messages %}{% for i in range(1000000) %}{{ m.content }}{% endfor %}{% endfor %}",
                 id="output"),
    pytest.param("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
                 id="doubling-plus"),
    pytest.param("{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 id="doubling-tilde"),
    pytest.param("{{ 'x' * 10000000000 }}", id="repeat"),
    pytest.param("{{ ['x'] * 10000000000 }}", id="list-repeat"),
    pytest.param("{{ 7 ** 100000000 }}", id="power"),
    pytest.param("{{ 'x' | center(1000000000) }}", id="center-filter"),
    pytest.param("{{ 'x' | indent(1000000000) }}", id="indent-filter"),
    pytest.param("{{ [1] | batch(1000000000, 'x') | list }}", id="batch-filter"),
    pytest.param("{{ 'x'.ljust(1000000000) }}", id="ljust"),
    pytest.param("{{ 'ab' | replace('', 'x' * 1000000) }}", id="replace-filter"),
    pytest.param("{{ 'ab'.replace('', 'x' * 1000000) }}", id="replace-method"),
    pytest.param("{{ (['x' * 1000000] * 1000) | join }}", id="join"),
    pytest.param("{{ '%1000000000s' % 'x' }}", id="percent-width"),
    pytest.param("{{ '{:>1000000000}'.format('x') }}", id="format-width"),
    pytest.param("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", id="recursion"),
])
def test_a_template_that_loops_or_explodes_is_stopped_quickly(source):
    t0 = time.monotonic()
    with pytest.raises(JinjaLimit):
        check_chat_template(ChatTemplate(source))
    assert time.monotonic() - t0 < 10 * CHECK_LIMITS.seconds  # structure, not speed: never the minutes it would take


def test_a_real_template_passes_the_check():
    assert check_chat_template(ChatTemplate(CHATML_TEMPLATE)) is True


def test_the_limit_is_a_400_naming_the_chat_template():
    with pytest.raises(JinjaLimit) as e:
        render_chat(ChatTemplate("{% for i in range(100000000) %}{% endfor %}"), HELLO)
    assert e.value.status == 400 and "chat template" in str(e.value)
