"""Real Ollama templates render the prompts Ollama renders.

tests/unit/templates/ holds copies of Ollama's template/*.gotmpl files (several versions of some)
and of library templates (qwen2.5, llama3.2, phi4-mini, gemma3); templates/testdata/<name>/<case>
are Ollama's own expected outputs (template/testdata in ollama/ollama). Expected strings written
inline below were derived by hand from Go's template semantics; see templates/SOURCES.md.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ollama_py.errors import TemplateError
from ollama_py.template import collate, render_prompt, template_uses, template_vars

# every template here rendered by both engines (conftest.both_engines)
pytestmark = pytest.mark.usefixtures("both_engines")

TEMPLATES = Path(__file__).parent / "templates"

HELLO = {"role": "user", "content": "Hello, how are you?"}
GREAT = {"role": "assistant", "content": "I'm doing great. How can I help you today?"}
SHOW = {"role": "user", "content": "I'd like to show off how chat templating works!"}
SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get current weather information for a location",
        "parameters": {
            "type": "object",
            "required": ["location"],
            "properties": {
                "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
                "unit": {
                    "type": "string",
                    "description": "The unit of temperature to use",
                    "enum": ["celsius", "fahrenheit"],
                },
            },
        },
    },
}

# Ollama's template_test.go cases, keyed by the testdata file names.
CASES: dict[str, dict] = {
    "user": {"messages": [HELLO]},
    "user-assistant-user": {"messages": [HELLO, GREAT, SHOW]},
    "system-user-assistant-user": {"messages": [SYSTEM, HELLO, GREAT, SHOW]},
    "tools-single": {"messages": [], "tools": [WEATHER_TOOL]},
    "tools-single-call": {
        "messages": [
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": "get_weather", "arguments": {"location": "San Francisco, CA"}}}],
            }
        ]
    },
    "tools-single-result": {
        "messages": [{"role": "tool", "content": '{"temperature": 22, "condition": "Sunny", "humidity": 45, "wind_speed": 10}'}]
    },
}
# Ollama's test drops one trailing space from these templates' output before comparing.
TRAILING_SPACE_TRIMMED = {"chatqa", "llama2-chat", "mistral-instruct", "openchat", "vicuna"}


def template(name: str) -> str:
    return (TEMPLATES / f"{name}.gotmpl").read_text()


def golden_cases() -> list:
    params = []
    for case_dir in sorted((TEMPLATES / "testdata").iterdir()):
        name = case_dir.name.removesuffix(".gotmpl")
        for expected in sorted(case_dir.iterdir()):
            params.append(pytest.param(name, expected.name, expected.read_text(), id=f"{name}/{expected.name}"))
    return params


@pytest.mark.parametrize(("name", "case", "expected"), golden_cases())
def test_matches_ollama_testdata(name: str, case: str, expected: str) -> None:
    out = render_prompt(template(name), **CASES[case])
    if name in TRAILING_SPACE_TRIMMED and out.endswith(" "):
        out = out[:-1]
    assert out == expected


SUAU = "system-user-assistant-user"
UAU = "user-assistant-user"


@pytest.mark.parametrize(
    ("name", "case", "expected"),
    [
        # Legacy .System/.Prompt/.Response templates: one execution per exchange, the last cut
        # after {{ .Response }}.
        pytest.param(
            "phi-3-legacy",
            UAU,
            "<|user|>\nHello, how are you?<|end|>\n<|assistant|>\nI'm doing great. How can I help you today?<|end|>"
            "<|user|>\nI'd like to show off how chat templating works!<|end|>\n<|assistant|>\n",
            id="phi-3-legacy/" + UAU,
        ),
        pytest.param(
            "phi-3-legacy",
            SUAU,
            "<|system|>\nYou are a helpful assistant.<|end|>\n<|user|>\nHello, how are you?<|end|>\n<|assistant|>\n"
            "I'm doing great. How can I help you today?<|end|><|user|>\nI'd like to show off how chat templating works!"
            "<|end|>\n<|assistant|>\n",
            id="phi-3-legacy/" + SUAU,
        ),
        pytest.param("vicuna", "user", "USER: Hello, how are you?\nASSISTANT: ", id="vicuna/user-keeps-trailing-space"),
        # Older "{{ if .Messages }} ... {{ else }} legacy {{ end }}" templates: .System and the
        # system message in .Messages both render (why Ollama rewrote them).
        pytest.param(
            "chatml-legacy",
            SUAU,
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>system\nYou are a helpful assistant."
            "<|im_end|>\n<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\nI'm doing great. How can "
            "I help you today?<|im_end|>\n<|im_start|>user\nI'd like to show off how chat templating works!<|im_end|>\n"
            "<|im_start|>assistant\n",
            id="chatml-legacy/" + SUAU,
        ),
        pytest.param(
            "llama3-instruct-legacy",
            "user",
            "<|start_header_id|>user<|end_header_id|>\n\nHello, how are you?<|eot_id|><|start_header_id|>assistant"
            "<|end_header_id|>\n\n",
            id="llama3-instruct-legacy/user",
        ),
        pytest.param(
            "gemma-instruct-legacy",
            SUAU,
            "<start_of_turn>\nYou are a helpful assistant.<end_of_turn>\n<start_of_turn>user\nHello, how are you?"
            "<end_of_turn>\n<start_of_turn>model\nI'm doing great. How can I help you today?<end_of_turn>\n"
            "<start_of_turn>user\nI'd like to show off how chat templating works!<end_of_turn>\n<start_of_turn>model\n",
            id="gemma-instruct-legacy/" + SUAU,
        ),
        # mistral-instruct v3 puts the system prompt in the last user turn.
        pytest.param(
            "mistral-instruct-v3",
            SUAU,
            "[INST] Hello, how are you?[/INST] I'm doing great. How can I help you today?</s>[INST] You are a helpful "
            "assistant.\nI'd like to show off how chat templating works![/INST]",
            id="mistral-instruct-v3/" + SUAU,
        ),
        pytest.param(
            "gemma3",
            SUAU,
            "<start_of_turn>user\nYou are a helpful assistant.<end_of_turn>\n<start_of_turn>user\nHello, how are you?"
            "<end_of_turn>\n<start_of_turn>model\nI'm doing great. How can I help you today?<end_of_turn>\n"
            "<start_of_turn>user\nI'd like to show off how chat templating works!<end_of_turn>\n<start_of_turn>model\n",
            id="gemma3/" + SUAU,
        ),
        pytest.param(
            "qwen2.5",
            SUAU,
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello, how are you?<|im_end|>\n"
            "<|im_start|>assistant\nI'm doing great. How can I help you today?<|im_end|>\n<|im_start|>user\nI'd like to "
            "show off how chat templating works!<|im_end|>\n<|im_start|>assistant\n",
            id="qwen2.5/" + SUAU,
        ),
    ],
)
def test_template_versions(name: str, case: str, expected: str) -> None:
    assert render_prompt(template(name), **CASES[case]) == expected


# -- tools with library templates ----------------------------------------------------------------------
CITY_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather",
        "parameters": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string", "description": "City name"}}},
    },
}
CITY_FUNCTION_JSON = (
    '{"name":"get_weather","description":"Get the weather","parameters":{"type":"object","required":["city"],'
    '"properties":{"city":{"type":"string","description":"City name"}}}}'
)
CITY_TOOL_JSON = '{"type":"function","function":' + CITY_FUNCTION_JSON + "}"
ASK = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}]
TOOL_ROUND = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}}],
    },
    {"role": "tool", "content": "18C", "tool_name": "get_weather"},
]
QWEN_TOOLS_BLOCK = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function "
    "signatures within <tools></tools> XML tags:\n<tools>\n"
    '{"type": "function", "function": ' + CITY_FUNCTION_JSON + "}\n</tools>\n\nFor each function call, return a json "
    "object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
)
LLAMA32_HEAD = "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n\n"
LLAMA32_TOOLS = (
    "When you receive a tool call response, use the output to format an answer to the orginal user question.\n\n"
    "You are a helpful assistant with tool calling capabilities.<|eot_id|>"
)
PHI4_TOOLS = "<|tool|>[" + CITY_TOOL_JSON + "]<|/tool|><|end|>"


@pytest.mark.parametrize(
    ("name", "messages", "expected"),
    [
        pytest.param(
            "qwen2.5",
            ASK,
            "<|im_start|>system\nBe brief.\n\n" + QWEN_TOOLS_BLOCK + "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
            "<|im_start|>assistant\n",
            id="qwen2.5-tools",
        ),
        pytest.param(
            "qwen2.5",
            TOOL_ROUND,
            "<|im_start|>system\n\n" + QWEN_TOOLS_BLOCK + "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
            '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city":"Paris","days":2}}\n'
            "</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n18C\n</tool_response><|im_end|>\n"
            "<|im_start|>assistant\n",
            id="qwen2.5-tool-call-and-result",
        ),
        pytest.param(
            "llama3.2",
            ASK,
            LLAMA32_HEAD + "Be brief." + LLAMA32_TOOLS + "<|start_header_id|>user<|end_header_id|>\n\nGiven the following "
            "functions, please respond with a JSON for a function call with its proper arguments that best answers the "
            'given prompt.\n\nRespond in the format {"name": function name, "parameters": dictionary of argument name '
            "and its value}. Do not use variables.\n\n" + CITY_TOOL_JSON + "\n\nWeather in Paris?<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n",
            id="llama3.2-tools",
        ),
        pytest.param(
            "llama3.2",
            TOOL_ROUND,
            LLAMA32_HEAD + LLAMA32_TOOLS + "<|start_header_id|>user<|end_header_id|>\n\nWeather in Paris?<|eot_id|>"
            '<|start_header_id|>assistant<|end_header_id|>\n\n{"name": "get_weather", "parameters": {"city":"Paris",'
            '"days":2}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n18C<|eot_id|><|start_header_id|>'
            "assistant<|end_header_id|>\n\n",
            id="llama3.2-tool-call-and-result",
        ),
        pytest.param(
            "phi4-mini",
            ASK,
            "<|system|>Be brief." + PHI4_TOOLS + "<|user|>Weather in Paris?<|end|><|assistant|>",
            id="phi4-mini-tools",
        ),
        pytest.param(
            "phi4-mini",
            TOOL_ROUND,
            "<|system|>You are a helpful assistant with some tools." + PHI4_TOOLS + "<|user|>Weather in Paris?<|end|>"
            # The library template really does leave each call object unclosed.
            '<|assistant|><|tool_call|>[{"name":"get_weather","arguments":{"city":"Paris","days":2}]<|/tool_call|>'
            "<|end|><|tool|>18C<|end|><|assistant|>",
            id="phi4-mini-tool-call-and-result",
        ),
        pytest.param(
            "gemma3",
            TOOL_ROUND,
            "<start_of_turn>user\nWeather in Paris?<end_of_turn>\n<start_of_turn>model\n<end_of_turn>\n",
            id="gemma3-ignores-tool-messages",
        ),
    ],
)
def test_tool_prompts(name: str, messages: list, expected: str) -> None:
    assert render_prompt(template(name), messages=messages, tools=[CITY_TOOL]) == expected


# -- Ollama's TestExecuteWithMessages: legacy and messages templates agree ------------------------------
MISTRAL_TEMPLATES = {
    "no-response": "[INST] {{ if .System }}{{ .System }}\n\n{{ end }}{{ .Prompt }}[/INST] ",
    "response": "[INST] {{ if .System }}{{ .System }}\n\n{{ end }}{{ .Prompt }}[/INST] {{ .Response }}",
    "messages": "[INST] {{ if .System }}{{ .System }}\n\n{{ end }}\n{{- range .Messages }}\n{{- if eq .Role \"user\" }}"
    '{{ .Content }}[/INST] {{ else if eq .Role "assistant" }}{{ .Content }}[INST] {{ end }}\n{{- end }}',
}
FRIEND = [
    {"role": "user", "content": "Hello friend!"},
    {"role": "assistant", "content": "Hello human!"},
    {"role": "user", "content": "What is your name?"},
]


@pytest.mark.parametrize("variant", sorted(MISTRAL_TEMPLATES))
@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        pytest.param(FRIEND, "[INST] Hello friend![/INST] Hello human![INST] What is your name?[/INST] ", id="plain"),
        pytest.param(
            [{"role": "system", "content": "You are a helpful assistant!"}, *FRIEND],
            "[INST] You are a helpful assistant!\n\nHello friend![/INST] Hello human![INST] What is your name?[/INST] ",
            id="system",
        ),
    ],
)
def test_legacy_and_messages_templates_render_alike(variant: str, messages: list, expected: str) -> None:
    assert render_prompt(MISTRAL_TEMPLATES[variant], messages=messages) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("[INST] {{ .Prompt }}[/INST] ", id="no-response"),
        pytest.param("[INST] {{ .Prompt }}[/INST] {{ .Response }}", id="response"),
        pytest.param(
            '\n{{- range $i, $m := .Messages }}\n{{- if eq .Role "user" }}[INST] {{ .Content }}[/INST] '
            '{{ else if eq .Role "assistant" }}{{ .Content }}{{ end }}\n{{- end }}',
            id="messages",
        ),
    ],
)
def test_trailing_assistant_message_is_continued(text: str) -> None:
    messages = [*FRIEND, {"role": "assistant", "content": "My name is Ollama and I"}]
    assert render_prompt(text, messages=messages) == (
        "[INST] Hello friend![/INST] Hello human![INST] What is your name?[/INST] My name is Ollama and I"
    )


def test_chatml_legacy_and_messages_agree() -> None:
    legacy = (
        "{{ if .System }}<|im_start|>system\n{{ .System }}<|im_end|>\n{{ end }}{{ if .Prompt }}<|im_start|>user\n"
        "{{ .Prompt }}<|im_end|>\n{{ end }}<|im_start|>assistant\n{{ .Response }}<|im_end|>\n"
    )
    messages_tmpl = "\n{{- range $index, $_ := .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}<|im_start|>assistant\n"
    messages = [{"role": "system", "content": "You are a helpful assistant!"}, *FRIEND]
    expected = (
        "<|im_start|>system\nYou are a helpful assistant!<|im_end|>\n<|im_start|>user\nHello friend!<|im_end|>\n"
        "<|im_start|>assistant\nHello human!<|im_end|>\n<|im_start|>user\nWhat is your name?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert render_prompt(legacy, messages=messages) == expected
    assert render_prompt(messages_tmpl, messages=messages) == expected


# -- fill in the middle ----------------------------------------------------------------------------------
SUFFIX_TEMPLATE = "{{- if .Suffix }}<PRE> {{ .Prompt }} <SUF>{{ .Suffix }} <MID>\n{{- else }}{{ .Prompt }}\n{{- end }}"


def test_suffix_renders_prompt_and_suffix() -> None:
    out = render_prompt(SUFFIX_TEMPLATE, messages=[{"role": "user", "content": "def add("}], suffix="return x")
    assert out == "<PRE> def add( <SUF>return x <MID>"


def test_without_suffix_the_prompt_is_a_message() -> None:
    assert render_prompt(SUFFIX_TEMPLATE, messages=[{"role": "user", "content": "hello"}], suffix=None) == "hello"


def test_suffix_without_prompt_renders_no_messages() -> None:
    out = render_prompt(template("chatml"), messages=[{"role": "user", "content": ""}], suffix="tail")
    assert out == "<|im_start|>assistant\n"


def test_suffix_mode_has_no_system() -> None:
    text = "{{ .System }}|{{ .Prompt }}|{{ .Suffix }}"
    out = render_prompt(text, messages=[{"role": "user", "content": "p"}], system="sys", suffix="s")
    assert out == "<no value>|p|s"


# -- collate, system, think, response --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("messages", "system", "collated"),
    [
        pytest.param(
            [{"role": "user", "content": "Hello"}, {"role": "user", "content": "How are you?"}],
            "",
            [("user", "Hello\n\nHow are you?")],
            id="consecutive-users-merge",
        ),
        pytest.param(
            [{"role": "tool", "content": "sunny"}, {"role": "tool", "content": "72F"}],
            "",
            [("tool", "sunny"), ("tool", "72F")],
            id="tool-messages-stay-apart",
        ),
        pytest.param(
            [
                {"role": "system", "content": "A"},
                {"role": "system", "content": "B"},
                {"role": "user", "content": "Hi"},
                {"role": "system", "content": "C"},
            ],
            "A\n\nB\n\nC",
            [("system", "A\n\nB"), ("user", "Hi"), ("system", "C")],
            id="all-system-contents-joined",
        ),
    ],
)
def test_collate(messages: list, system: str, collated: list) -> None:
    got_system, got = collate(messages)
    assert got_system == system
    assert [(m["role"], m["content"]) for m in got] == collated


def test_collate_keeps_the_first_message_fields() -> None:
    call = [{"function": {"name": "f", "arguments": {}}}]
    _, got = collate([{"role": "assistant", "content": "a", "tool_calls": call}, {"role": "assistant", "content": "b"}])
    assert got == [{"role": "assistant", "content": "a\n\nb", "tool_calls": call}]


def test_system_argument_is_put_first() -> None:
    out = render_prompt(template("chatml"), messages=[HELLO], system="Be nice.")
    assert out == "<|im_start|>system\nBe nice.<|im_end|>\n<|im_start|>user\nHello, how are you?<|im_end|>\n<|im_start|>assistant\n"


def test_system_argument_gives_way_to_a_system_message() -> None:
    out = render_prompt(template("chatml"), messages=[SYSTEM, HELLO], system="Be nice.")
    assert out.startswith("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user")


@pytest.mark.parametrize(
    ("think", "expected"),
    [
        pytest.param(None, "<｜User｜>Hi<｜Assistant｜>", id="unset"),
        pytest.param(False, "<｜User｜>Hi<｜Assistant｜><think> </think>\n    ", id="off-closes-think"),
        pytest.param(True, "<｜User｜>Hi<｜Assistant｜>", id="on"),
    ],
)
def test_think_flags_reach_the_template(think: bool | None, expected: str) -> None:
    assert render_prompt(template("deepseek"), messages=[{"role": "user", "content": "Hi"}], think=think) == expected


def test_thinking_of_the_last_assistant_message_renders_when_think_is_set() -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello", "thinking": "greet"}]
    assert render_prompt(template("deepseek"), messages=messages, think=True) == (
        "<｜User｜>Hi<｜Assistant｜><think>\n        greet\n      </think>Hello"
    )
    assert render_prompt(template("deepseek"), messages=messages) == "<｜User｜>Hi<｜Assistant｜>Hello"


def test_think_level_sets_think_and_level() -> None:
    text = "{{ .Think }} {{ .ThinkLevel }} {{ .IsThinkSet }}{{ range .Messages }}{{ end }}"
    assert render_prompt(text, messages=[HELLO], think="high") == "true high true"
    assert render_prompt(text, messages=[HELLO], think=None) == "false  false"


def test_messages_template_sees_no_prompt() -> None:
    # Ollama's map for .Messages templates has no Prompt key: missingkey=zero prints <no value>.
    assert render_prompt("{{ .Prompt }}{{ range .Messages }}{{ end }}", messages=[HELLO]) == "<no value>"


def test_legacy_turns_skip_tool_messages_and_keep_the_last_prompt() -> None:
    messages = [{"role": "user", "content": "Hi"}, {"role": "tool", "content": "x"}, {"role": "user", "content": "Again"}]
    assert render_prompt(template("phi-3-legacy"), messages=messages) == "<|user|>\nAgain<|end|>\n<|assistant|>\n"


def test_legacy_system_message_starts_a_new_turn() -> None:
    messages = [
        {"role": "system", "content": "A"},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Yo"},
        {"role": "system", "content": "B"},
        {"role": "user", "content": "Q"},
    ]
    assert render_prompt(template("phi-3-legacy"), messages=messages) == (
        "<|system|>\nA<|end|>\n<|user|>\nHi<|end|>\n<|assistant|>\nYo<|end|><|system|>\nB<|end|>\n<|user|>\nQ<|end|>\n"
        "<|assistant|>\n"
    )


def test_generate_response_fills_the_open_turn() -> None:
    out = render_prompt(template("phi-3-legacy"), messages=[{"role": "user", "content": "Hi"}], generate_response="Hello")
    assert out == "<|user|>\nHi<|end|>\n<|assistant|>\nHello"


def test_template_without_prompt_fields_gets_response_appended() -> None:
    assert render_prompt("Q: {{ .Prompt }}\nA: ", messages=[{"role": "user", "content": "1+1"}], generate_response="2") == (
        "Q: 1+1\nA: 2"
    )


def test_legacy_response_inside_if_with_else_is_refused() -> None:
    text = "{{ .Prompt }}{{ if .System }}{{ .Response }}{{ else }}x{{ end }}"
    with pytest.raises(TemplateError, match="cannot cut"):
        render_prompt(text, messages=[HELLO])


def test_broken_template_raises_template_error() -> None:
    with pytest.raises(TemplateError, match='function "foo" not defined'):
        render_prompt("{{ foo }}", messages=[HELLO])


def test_malformed_tool_is_a_template_error() -> None:
    with pytest.raises(TemplateError, match=r"tools\[0\]\.function\.name must be a string"):
        render_prompt(template("qwen2.5"), messages=[HELLO], tools=[{"type": "function", "function": {"name": 3}}])


# -- Vars and capabilities -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "names"),
    [
        pytest.param("{{ .Prompt }}", ["prompt", "response"], id="response-appended"),
        pytest.param("{{ .System }} {{ .Prompt }} {{ .Response }}", ["prompt", "response", "system"], id="legacy"),
        pytest.param(
            "{{ with .Tools }}{{ . }}{{ end }} {{ .System }} {{ .Prompt }}",
            ["prompt", "response", "system", "tools"],
            id="with-tools",
        ),
        pytest.param("{{ range .Messages }}{{ .Role }} {{ .Content }}{{ end }}", ["content", "messages", "role"], id="messages"),
        pytest.param(
            '{{ range .Messages }}{{ if eq .Role "tool" }}Tool Result: {{ .ToolName }} {{ .Content }}{{ end }}{{ end }}',
            ["content", "messages", "role", "toolname"],
            id="nested",
        ),
        # Declared names are not walked (they sit in the pipeline's declarations), uses are.
        pytest.param("{{ range $i, $m := $.Messages }}{{ $m.Role }}{{ end }}", ["$", "$m", "messages", "role"], id="variables"),
    ],
)
def test_template_vars_match_ollama(text: str, names: list[str]) -> None:
    assert template_vars(text) == names


@pytest.mark.parametrize(
    ("name", "field", "uses"),
    [
        pytest.param("qwen2.5", "Tools", True, id="qwen-tools"),
        pytest.param("command-r", ".Tools", True, id="command-r-tools"),
        pytest.param("llama3-instruct", "tools", False, id="llama3-no-tools"),
        pytest.param("chatml", "Suffix", False, id="chatml-no-insert"),
        pytest.param("deepseek", "Thinking", True, id="deepseek-thinking"),
    ],
)
def test_template_uses(name: str, field: str, uses: bool) -> None:
    assert template_uses(template(name), field) is uses


def test_template_uses_suffix_for_insert_capability() -> None:
    assert template_uses(SUFFIX_TEMPLATE, "Suffix")


def test_template_uses_falls_back_to_text_for_unsupported_templates() -> None:
    text = '{{ 1+2i }}{{ range .Tools }}{{ . }}{{ end }}'
    assert template_uses(text, "Tools")
    assert not template_uses(text, "Suffix")


def test_the_same_tool_is_one_value_its_json_written_once() -> None:
    """An agent sends the same tools every turn: each is converted once (by its value) and its JSON written once;
    what a template prints is as before, a changed tool is converted anew, a bad one still refused."""
    from ollama_py.template import ollama_data

    printed = "{{ range .Messages }}{{ end }}{{ range .Tools }}{{ json . }}|{{ .Function }}{{ end }}"
    tool = {"type": "function", "function": {"name": "edit", "description": "Edit <a> & <b>",
                                             "parameters": {"type": "object", "required": ["path"],
                                                            "properties": {"path": {"type": "string"}}}}}
    first = ollama_data.template_tool(tool)
    assert ollama_data.template_tool(dict(tool)) is first
    assert ollama_data.template_tool(json.loads(json.dumps(tool))) is first  # the next request's equal tool
    text = render_prompt(printed, messages=[HELLO], tools=[tool], system=None, suffix=None, think=None)
    assert text == render_prompt(printed, messages=[HELLO], tools=[tool], system=None, suffix=None, think=None)
    assert '"description":"Edit \\u003ca\\u003e \\u0026 \\u003cb\\u003e"' in text  # Go's HTML-safe escapes
    assert '"required":["path"]' in text
    changed = {**tool, "function": {**tool["function"], "name": "write"}}
    assert ollama_data.template_tool(changed) is not first
    assert '"name":"write"' in render_prompt(printed, messages=[HELLO], tools=[changed], system=None, suffix=None,
                                              think=None)
    with pytest.raises(TemplateError):
        ollama_data.template_tool({"type": "function", "function": {"name": 3}}, 2)


def test_tools_that_differ_only_in_a_value_s_type_are_different_tools() -> None:
    """A tool is known again by its value: an enum of 1, true, "1" or ["1"] is each its own tool and prints as
    itself; 1 and 1.0 print alike, as Go's float64 (encoding/json into any)."""
    printed = "{{ range .Messages }}{{ end }}{{ range .Tools }}{{ .Function }};{{ end }}"

    def tool(value: object) -> dict[str, object]:
        return {"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"n": {"type": "number", "enum": [value]}}}}}

    texts = [render_prompt(printed, messages=[HELLO], tools=[tool(v)], system=None, suffix=None, think=None)
             for v in (1, True, "1", ["1"], 1.0, True)]
    assert [t.split('"enum":')[1].split("}")[0] for t in texts] == ["[1]", "[true]", '["1"]', '[["1"]]', "[1]",
                                                                     "[true]"]


def test_a_message_with_tool_calls_is_converted_once_and_prints_as_itself() -> None:
    """An agent's earlier tool calls come again every turn: each such message is converted once (by its value);
    a changed call is a new message, and each prints its own call."""
    from ollama_py.template import ollama_data

    def calling(path: str) -> dict[str, object]:
        return {"role": "assistant", "content": "",
                "tool_calls": [{"id": "c1", "function": {"name": "read", "arguments": {"path": path}}}]}

    first = ollama_data.template_message(calling("a.py"))
    assert ollama_data.template_message(json.loads(json.dumps(calling("a.py")))) is first  # the next turn's copy
    assert ollama_data.template_message(calling("b.py")) is not first
    printed = "{{ range .Messages }}{{ range .ToolCalls }}{{ .Function.Name }}({{ .Function.Arguments }});{{ end }}{{ end }}"
    turns = [HELLO, calling("a.py"), HELLO, calling("b.py"), HELLO, calling("a.py"), HELLO]
    text = render_prompt(printed, messages=turns, tools=None, system=None, suffix=None, think=None)
    assert text == 'read({"path":"a.py"});read({"path":"b.py"});read({"path":"a.py"});'
