"""Modelfiles: parsing (with line-numbered errors), writing them back, and the round trip between the two."""

from __future__ import annotations

import logging

import pytest
from hypothesis import HealthCheck, assume, given, reject, settings
from hypothesis import strategies as st

from ollama_py.api.options import format_value
from ollama_py.errors import BadRequest, ModelfileError
from ollama_py.modelfile import (
    Command,
    Modelfile,
    build_modelfile,
    decode_modelfile,
    parse_modelfile,
    quote,
    representable,
    serialize_modelfile,
)

LLAMA3_TEMPLATE = (
    "{{ if .System }}<|start_header_id|>system<|end_header_id|>\n\n{{ .System }}<|eot_id|>{{ end }}"
    "{{ if .Prompt }}<|start_header_id|>user<|end_header_id|>\n\n{{ .Prompt }}<|eot_id|>{{ end }}"
    "<|start_header_id|>assistant<|end_header_id|>\n\n{{ .Response }}<|eot_id|>"
)


def frm(name: str = "foo") -> Command:
    return Command("from", name)


@pytest.mark.parametrize(
    ("text", "commands"),
    [
        pytest.param(
            f'\nFROM model1\nADAPTER adapter1\nLICENSE MIT\nPARAMETER temperature 0.5\nPARAMETER top_k 20\n'
            f'TEMPLATE """{LLAMA3_TEMPLATE}"""    \n',
            [frm("model1"), Command("adapter", "adapter1"), Command("license", "MIT"),
             Command("temperature", "0.5"), Command("top_k", "20"), Command("template", LLAMA3_TEMPLATE)],
            id="full-file",
        ),
        pytest.param(
            'FROM "     model 1"\nADAPTER      adapter3\nLICENSE "MIT       "\nPARAMETER num_ctx        4096\n'
            'TEMPLATE """   {{ .Prompt }}   """    \n',
            [frm("     model 1"), Command("adapter", "adapter3"), Command("license", "MIT       "),
             Command("num_ctx", "4096"), Command("template", "   {{ .Prompt }}   ")],
            id="blanks-trimmed-outside-quotes-kept-inside",
        ),
        pytest.param('FROM "FOO  BAR  "', [frm("FOO  BAR  ")], id="quoted-from"),
        pytest.param("FROM     FOOO BAR    ", [frm("FOOO BAR")], id="unquoted-inner-space-kept"),
        pytest.param("FROM /what/is/the path ", [frm("/what/is/the path")], id="path-with-space"),
        pytest.param("FROM llama3:7b-instruct-q4_K_M", [frm("llama3:7b-instruct-q4_K_M")], id="tagged"),
        pytest.param("PARAMETER top_k 1\nFROM foo", [Command("top_k", "1"), frm()], id="from-need-not-be-first"),
        pytest.param("from foo\nsystem hi\nSyStEm there", [frm(), Command("system", "hi"), Command("system", "there")],
                     id="instructions-case-insensitive"),
        pytest.param("\n# comment\n   # indented comment\nFROM foo\n\t", [frm()], id="comments-and-blank-lines"),
        pytest.param("FROM foo\nSYSTEM a # not a comment", [frm(), Command("system", "a # not a comment")],
                     id="hash-inside-value"),
        pytest.param("   FROM foo\n\tSYSTEM indented", [frm(), Command("system", "indented")], id="indented"),
        pytest.param("FROM\tfoo\nPARAMETER\tstop\t</s>", [frm(), Command("stop", "</s>")], id="tab-separators"),
        pytest.param("FROM foo\nPARAMETER   stop   x", [frm(), Command("stop", "x")], id="extra-blanks-before-name"),
        pytest.param("FROM foo\nSYSTEM \n", [frm(), Command("system", "")], id="empty-unquoted-value"),
        pytest.param('FROM foo\nSYSTEM ""', [frm(), Command("system", "")], id="empty-quoted"),
        pytest.param('FROM foo\nSYSTEM """"""', [frm(), Command("system", "")], id="empty-triple-quoted"),
        pytest.param("FROM foo\nSYSTEM \"'\"", [frm(), Command("system", "'")], id="single-quote-char"),
        pytest.param('FROM foo\nSYSTEM """\'\'"\'""\'""\'"\'\'\'\'\'""\'""\'"""',
                     [frm(), Command("system", '\'\'"\'""\'""\'"\'\'\'\'\'""\'""\'')], id="quote-soup"),
        pytest.param('FROM foo\nSYSTEM """\nThis is a\nmultiline system.\n"""\n\t\t\t',
                     [frm(), Command("system", "\nThis is a\nmultiline system.\n")], id="multiline-triple"),
        pytest.param('FROM foo\nSYSTEM """This is a\nmultiline system."""',
                     [frm(), Command("system", "This is a\nmultiline system.")], id="multiline-triple-tight"),
        pytest.param('FROM foo\nSYSTEM "one\ntwo"', [frm(), Command("system", "one\ntwo")], id="multiline-double"),
        pytest.param('FROM foo\nSYSTEM """a """ b"""', [frm(), Command("system", 'a """ b')],
                     id="triple-quote-inside-a-line"),
        pytest.param('FROM foo\nSYSTEM """\nSay "Hello!".\n"""',
                     [frm(), Command("system", '\nSay "Hello!".\n')], id="quotes-inside-triple"),
        pytest.param('FROM foo\nSYSTEM say "hi"', [frm(), Command("system", 'say "hi"')], id="bare-value-with-quotes"),
        pytest.param("FROM foo\nMESSAGE system You are a file parser. Always parse things.",
                     [frm(), Command("message", "You are a file parser. Always parse things.", role="system")],
                     id="message"),
        pytest.param("FROM foo\nMESSAGE user Hey there!\nMESSAGE assistant Hello!\n",
                     [frm(), Command("message", "Hey there!", role="user"),
                      Command("message", "Hello!", role="assistant")], id="messages"),
        pytest.param('FROM foo\nMESSAGE system """\nYou are a multiline file parser.\n"""\n',
                     [frm(), Command("message", "\nYou are a multiline file parser.\n", role="system")],
                     id="message-multiline"),
        pytest.param("FROM base\nDRAFT ./assistant\nRENDERER qwen3-coder\nPARSER qwen3-coder",
                     [frm("base"), Command("draft", "./assistant"), Command("renderer", "qwen3-coder"),
                      Command("parser", "qwen3-coder")], id="draft-renderer-parser"),
        pytest.param("FROM foo\nREQUIRES 0.14.0\nREQUIRES v1.2.3-rc.1+build.5\nREQUIRES 1\nREQUIRES 0.14",
                     [frm(), Command("requires", "0.14.0"), Command("requires", "v1.2.3-rc.1+build.5"),
                      Command("requires", "1"), Command("requires", "0.14")], id="requires-semver-forms"),
        pytest.param("FROM foo\nPARAMETER stop ### User:\nPARAMETER stop \"### User: \"\nPARAMETER stop <|eot_id|>",
                     [frm(), Command("stop", "### User:"), Command("stop", "### User: "),
                      Command("stop", "<|eot_id|>")], id="stop-words"),
        pytest.param("FROM foo\nPARAMETER mirostat 2\nPARAMETER numa true", [frm()], id="deprecated-skipped"),
        pytest.param("\ufeffFROM foo", [frm()], id="utf8-bom"),
        pytest.param("FROM foo\r\nSYSTEM hi\r\n", [frm(), Command("system", "hi")], id="crlf"),
        pytest.param('FROM foo\r\nSYSTEM """a\r\nb"""\r\n', [frm(), Command("system", "a\r\nb")],
                     id="crlf-inside-a-value-kept"),
        pytest.param("FROM foo\rSYSTEM hi\r", [frm(), Command("system", "hi")], id="lone-cr"),
        pytest.param("FROM test\n\tSYSTEM \u4f60\u597d\U0001f44b",
                     [frm("test"), Command("system", "\u4f60\u597d\U0001f44b")], id="multibyte"),
    ],
)  # fmt: skip
def test_parse(text: str, commands: list[Command]) -> None:
    assert parse_modelfile(text).commands == commands


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        pytest.param("\nFROM foo\nBADCOMMAND param1 value1\n", 3, "command", id="unknown-instruction"),
        pytest.param("FROM foo\nFR0M bar", 2, "command", id="digit-in-instruction"),
        pytest.param("FROM foo\n1FROM bar", 2, "command", id="instruction-starts-with-digit"),
        pytest.param("FROM foo\nSYSTEM: hi", 2, "command", id="punctuation-after-instruction"),
        pytest.param("FROM\nSYSTEM x", 1, "command", id="instruction-then-newline"),
        pytest.param("FROM foo\nSYSTEM", 2, "unexpected EOF", id="instruction-then-eof"),
        pytest.param("FROM foo\nMESSAGE badguy I'm a bad guy!\n", 2, "role", id="bad-role"),
        pytest.param("FROM foo\nMESSAGE User hi", 2, "role", id="role-case-sensitive"),
        pytest.param("FROM foo\nMESSAGE user: hi", 2, "role", id="role-with-colon"),
        pytest.param("FROM foo\nMESSAGE tool result", 2, "role", id="tool-role"),
        pytest.param("\nFROM foo\nMESSAGE system\n", 3, "unexpected EOF", id="role-without-content"),
        pytest.param("\nFROM foo\nMESSAGE system", 3, "unexpected EOF", id="role-then-eof"),
        pytest.param("\nFROM foo\nMESSAGE   \n", 3, "unexpected EOF", id="message-without-role"),
        pytest.param("\nFROM foo\nPARAMETER num_ctx\n", 3, "unexpected EOF", id="parameter-without-value"),
        pytest.param("FROM foo\nPARAMETER temprature 0.5", 2, "unknown parameter 'temprature'", id="unknown-parameter"),
        pytest.param("FROM foo\nPARAMETER top-k 3", 2, "unknown parameter 'top-k'", id="dash-in-parameter"),
        pytest.param("FROM foo\n\nPARAMETER temperature hot", 3, "invalid float value [hot]", id="bad-float"),
        pytest.param("FROM foo\nPARAMETER num_ctx 1.5", 2, "invalid int value [1.5]", id="bad-int"),
        pytest.param("FROM foo\nPARAMETER use_mmap maybe", 2, "invalid bool value [maybe]", id="bad-bool"),
        pytest.param("FROM foo\nPARAMETER num_ctx -1", 2, 'option "num_ctx" must be between 0 and 16777216',
                     id="num-ctx-out-of-range"),
        pytest.param('FROM foo\nSYSTEM """This is a multiline system.""\n', 2, "unexpected EOF",
                     id="triple-closed-with-two"),
        pytest.param('FROM foo\nSYSTEM "\n', 2, "unexpected EOF", id="lone-double-quote"),
        pytest.param('FROM foo\nSYSTEM hi\nTEMPLATE """\n{{ .Prompt }}\n\nLICENSE MIT\n', 3, "unexpected EOF",
                     id="unterminated-names-the-opening-line"),
        pytest.param('FROM foo\nSYSTEM "a" b\n', 2, "unexpected EOF", id="text-after-closing-quote"),
        pytest.param("FROM foo\nREQUIRES banana", 2, "semver", id="requires-word"),
        pytest.param("FROM foo\nREQUIRES 1.2.3.4", 2, "semver", id="requires-four-parts"),
        pytest.param("FROM foo\nREQUIRES 01.2.3", 2, "semver", id="requires-leading-zero"),
        pytest.param("FROM foo\nREQUIRES 1.2-rc1", 2, "semver", id="requires-short-with-prerelease"),
        pytest.param("FROM foo\nREQUIRES vv1.2.3", 2, "semver", id="requires-double-v"),
        pytest.param("FROM a\r\n\r\nBADCOMMAND x", 3, "command", id="crlf-counts-one-line"),
        pytest.param("FROM a\r\rBADCOMMAND x", 3, "command", id="lone-cr-counts-one-line"),
    ],
)  # fmt: skip
def test_parse_error_names_the_line(text: str, line: int, message: str) -> None:
    full = {
        "command": 'command must be one of "from", "license", "template", "system", "adapter", "draft", '
        '"renderer", "parser", "parameter", "message", or "requires"',
        "role": 'message role must be one of "system", "user", or "assistant"',
        "semver": "requires must be a valid semver (e.g. 0.14.0)",
    }.get(message, message)
    with pytest.raises(ModelfileError) as info:
        parse_modelfile(text)
    assert (info.value.line, info.value.reason) == (line, full)
    assert str(info.value) == f"(line {line}): {full}"
    assert isinstance(info.value, BadRequest) and info.value.status == 400


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("# only a comment\n\n", id="comments-only"),
        pytest.param("PARAMETER top_k 1", id="parameter-only"),
        pytest.param("SYSTEM FROM foo", id="from-inside-a-value"),
    ],
)
def test_parse_without_from(text: str) -> None:
    with pytest.raises(ModelfileError) as info:
        parse_modelfile(text)
    assert str(info.value) == "no FROM line"
    assert info.value.line == 0


def test_deprecated_parameter_is_reported_not_kept(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        mf = parse_modelfile("FROM foo\nPARAMETER penalize_newline true\nPARAMETER top_k 3")
    assert mf.commands == [frm(), Command("top_k", "3")]
    assert mf.warnings == ["parameter penalize_newline is deprecated"]
    assert "warning: parameter penalize_newline is deprecated" in caplog.text


def test_accessors() -> None:
    mf = parse_modelfile(
        "FROM llama3.2\nFROM ./mmproj.gguf\nADAPTER ./lora.gguf\nTEMPLATE first\nTEMPLATE {{ .Prompt }}\n"
        "SYSTEM You are Mario.\nPARAMETER temperature 0.5\nPARAMETER stop <|eot_id|>\nPARAMETER temperature 1\n"
        "PARAMETER stop </s>\nPARAMETER use_mmap false\nPARAMETER num_ctx 8192\nLICENSE MIT\nLICENSE Apache\n"
        "MESSAGE user Hello\nMESSAGE assistant Hi!\nREQUIRES v0.14.0\nDRAFT ./draft.gguf\n"
        "RENDERER qwen3\nPARSER qwen3\n"
    )
    assert mf.from_ == "llama3.2"
    assert mf.froms == ["llama3.2", "./mmproj.gguf"]
    assert mf.adapters == ["./lora.gguf"]
    assert mf.template == "{{ .Prompt }}"
    assert mf.system == "You are Mario."
    assert mf.parameters == {"temperature": 1.0, "stop": ["<|eot_id|>", "</s>"], "use_mmap": False, "num_ctx": 8192}
    assert mf.licenses == ["MIT", "Apache"]
    assert mf.messages == [{"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi!"}]
    assert mf.requires == "0.14.0"
    assert (mf.draft, mf.renderer, mf.parser) == ("./draft.gguf", "qwen3", "qwen3")


def test_accessors_when_absent() -> None:
    mf = parse_modelfile("FROM foo")
    assert (mf.template, mf.system, mf.requires, mf.draft, mf.renderer, mf.parser) == (None,) * 6
    assert (mf.parameters, mf.adapters, mf.licenses, mf.messages) == ({}, [], [], [])


@pytest.mark.parametrize(
    ("data", "text"),
    [
        pytest.param(b"FROM foo\n", "FROM foo\n", id="utf8"),
        pytest.param(b"\xef\xbb\xbfFROM foo\n", "FROM foo\n", id="utf8-bom"),
        pytest.param(b"\xff\xfe" + "FROM \u4f60\n".encode("utf-16-le"), "FROM \u4f60\n", id="utf16-le"),
        pytest.param(b"\xfe\xff" + "FROM \u4f60\n".encode("utf-16-be"), "FROM \u4f60\n", id="utf16-be"),
        pytest.param(b"FROM f\xffo\n", "FROM f\ufffdo\n", id="invalid-byte-replaced"),
    ],
)
def test_decode_modelfile(data: bytes, text: str) -> None:
    assert decode_modelfile(data) == text


@pytest.mark.parametrize(
    ("command", "line"),
    [
        pytest.param(frm("llama3.2:latest"), "FROM llama3.2:latest", id="from"),
        pytest.param(Command("system", "You are Mario."), "SYSTEM You are Mario.", id="bare"),
        pytest.param(Command("system", " lead"), 'SYSTEM " lead"', id="leading-space"),
        pytest.param(Command("system", "trail "), 'SYSTEM "trail "', id="trailing-space"),
        pytest.param(Command("system", "\ttab"), 'SYSTEM "\ttab"', id="leading-tab"),
        pytest.param(Command("template", "a\nb"), 'TEMPLATE "a\nb"', id="newline"),
        pytest.param(Command("template", "a\r\nb"), 'TEMPLATE "a\r\nb"', id="crlf"),
        pytest.param(Command("template", 'say "hi"\n'), 'TEMPLATE """say "hi"\n"""', id="newline-and-quote"),
        pytest.param(Command("system", 'say "hi"'), 'SYSTEM say "hi"', id="inner-quotes-stay-bare"),
        pytest.param(Command("system", '"quoted"'), 'SYSTEM """"quoted""""', id="leading-quote"),
        pytest.param(Command("system", ""), 'SYSTEM ""', id="empty"),
        pytest.param(Command("license", "MIT"), "LICENSE MIT", id="license"),
        pytest.param(Command("adapter", "/blobs/sha256-ab"), "ADAPTER /blobs/sha256-ab", id="adapter"),
        pytest.param(Command("draft", "./d.gguf"), "DRAFT ./d.gguf", id="draft"),
        pytest.param(Command("renderer", "qwen3"), "RENDERER qwen3", id="renderer"),
        pytest.param(Command("parser", "qwen3"), "PARSER qwen3", id="parser"),
        pytest.param(Command("requires", "0.14.0"), "REQUIRES 0.14.0", id="requires"),
        pytest.param(Command("temperature", "0.7"), "PARAMETER temperature 0.7", id="parameter"),
        pytest.param(Command("stop", "<|eot_id|>"), "PARAMETER stop <|eot_id|>", id="stop"),
        pytest.param(Command("stop", "\n\n"), 'PARAMETER stop "\n\n"', id="stop-newlines"),
        pytest.param(Command("message", "Hello there!", role="user"), "MESSAGE user Hello there!", id="message"),
        pytest.param(Command("message", "line\nline", role="assistant"), 'MESSAGE assistant "line\nline"',
                     id="message-multiline"),
    ],
)  # fmt: skip
def test_serialize_command(command: Command, line: str) -> None:
    assert serialize_modelfile(Modelfile([command])) == line + "\n"


def test_show_modelfile_text() -> None:
    mf = build_modelfile(
        "/root/.ollama/models/blobs/sha256-6a0746a1ec1a",
        template=LLAMA3_TEMPLATE,
        system="",
        parameters={"stop": ["<|start_header_id|>", "<|eot_id|>"], "temperature": 0.6, "num_ctx": 4096},
        licenses=["LLAMA 3.2 COMMUNITY LICENSE\n\n\"Agreement\" means..."],
        messages=[{"role": "user", "content": "Hi"}],
        adapters=["/root/.ollama/models/blobs/sha256-adapter"],
        requires="0.14.0",
    )
    assert serialize_modelfile(mf, header="llama3.2:latest") == (
        '# Modelfile generated by "ollama show"\n'
        "# To build a new Modelfile based on this, replace FROM with:\n"
        "# FROM llama3.2:latest\n"
        "\n"
        "FROM /root/.ollama/models/blobs/sha256-6a0746a1ec1a\n"
        "ADAPTER /root/.ollama/models/blobs/sha256-adapter\n"
        f'TEMPLATE "{LLAMA3_TEMPLATE}"\n'
        "REQUIRES 0.14.0\n"
        "PARAMETER stop <|start_header_id|>\n"
        "PARAMETER stop <|eot_id|>\n"
        "PARAMETER temperature 0.6\n"
        "PARAMETER num_ctx 4096\n"
        'LICENSE """LLAMA 3.2 COMMUNITY LICENSE\n\n"Agreement" means..."""\n'
        "MESSAGE user Hi\n"
    )


def test_build_modelfile_reads_back_its_values() -> None:
    params = {"stop": ["\n\n", " User:"], "temperature": 1.0, "top_p": 0.95, "num_ctx": 1048576, "use_mmap": True}
    mf = build_modelfile("base", system=" leading", parameters=params, draft="./d.gguf", renderer="r", parser="p")
    back = parse_modelfile(serialize_modelfile(mf))
    assert back == mf
    assert back.parameters == params
    assert (back.system, back.draft, back.renderer, back.parser) == (" leading", "./d.gguf", "r", "p")


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(
            "FROM foo\nADAPTER adapter1\nLICENSE MIT\nPARAMETER top_k 1\nPARAMETER num_ctx 2\nTEMPLATE template1\n"
            "MESSAGE system You are a file parser. Always parse things.\nMESSAGE user Hey there!\n",
            id="plain",
        ),
        pytest.param(
            'FROM foo\nLICENSE """\nVery long and boring legal text.\nBlah blah blah.\n"Oh look, a quote!"\n"""\n\n'
            'MESSAGE system """\nYou are a store greeter. Always respond with "Hello!".\n"""\n',
            id="quotes-in-multiline",
        ),
        pytest.param('FROM foo\nSYSTEM ""\n', id="empty-system"),
    ],
)
def test_format_parse_format(text: str) -> None:
    once = parse_modelfile(text)
    assert parse_modelfile(serialize_modelfile(once)) == once


def test_unrepresentable_value_is_written_as_ollama_writes_it() -> None:
    value = 'x"""\ny'  # a line ending in """ closes any quote; Modelfiles have no escapes
    assert not representable(value)
    assert quote(value) == '"""x"""\ny"""'
    assert representable('x""" \ny"') is False
    assert representable('x"""y\nz') is True


# Values with every character the grammar cares about, plus unicode and invisible ones.
VALUE_CHARS = st.sampled_from(
    list('"""\'#  \t\n\r:{}.-_aZ0') + ["\u00e9", "\u4f60", "\U0001f44b", "\u00a0", "\u200b", "\x00", "\x0b", "\ufeff"]
)
values = st.text(VALUE_CHARS, max_size=24) | st.text(max_size=12)
representable_values = values.filter(representable)
typed_parameters = st.one_of(
    st.tuples(st.just("temperature"), st.floats(0, 2)),
    st.tuples(st.just("top_p"), st.floats(0, 1)),
    st.tuples(st.just("presence_penalty"), st.floats(-2, 2)),
    st.tuples(st.just("num_ctx"), st.integers(0, 1 << 24)),
    st.tuples(st.just("seed"), st.integers(-1, 1 << 40)),
    st.tuples(st.just("use_mmap"), st.booleans()),
).map(lambda nv: Command(nv[0], format_value(nv[1])))
commands = st.one_of(
    st.builds(Command, st.sampled_from(["from", "template", "system", "license", "adapter", "draft", "renderer",
                                        "parser"]), representable_values),
    st.builds(lambda role, text: Command("message", text, role=role),
              st.sampled_from(["system", "user", "assistant"]), representable_values),
    st.builds(Command, st.just("stop"), representable_values),
    st.builds(Command, st.just("requires"), st.sampled_from(["0.14.0", "v1", "1.2", "2.0.0-rc.1+b7"])),
    typed_parameters,
)  # fmt: skip
modelfiles = st.tuples(st.lists(commands, max_size=8), representable_values, st.integers(0, 8)).map(
    lambda t: Modelfile(t[0][: t[2]] + [frm(t[1])] + t[0][t[2] :])
)


@given(modelfiles)
def test_serialize_then_parse_is_identity(mf: Modelfile) -> None:
    assert parse_modelfile(serialize_modelfile(mf)) == mf
    assert parse_modelfile(serialize_modelfile(mf, header="some/model:tag")) == mf


def _written(instruction: str, value: str, style: int) -> str:
    return [value, f'"{value}"', f'"""{value}"""'][style] if instruction else value


lines = st.tuples(
    st.sampled_from(["FROM", "from", "System", "TEMPLATE", "LICENSE", "PARAMETER stop", "MESSAGE user", "# x", ""]),
    values,
    st.integers(0, 2),
    st.sampled_from(["", " ", "\t "]),
    st.sampled_from(["\n", "\r\n", "\r"]),
)


@settings(suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(st.lists(lines, min_size=1, max_size=8))
def test_parse_serialize_parse_is_stable(spec: list[tuple[str, str, int, str, str]]) -> None:
    text = "FROM base\n" + "".join(
        f"{indent}{instr} {_written(instr, value, style)}{end}" if instr else end
        for instr, value, style, indent, end in spec
    )
    try:
        once = parse_modelfile(text)
    except ModelfileError:
        reject()
    assume(all(representable(c.args) for c in once.commands))
    assert parse_modelfile(serialize_modelfile(once)) == once


TOKENS = st.sampled_from(
    ["FROM", "from", "PARAMETER", "MESSAGE", "REQUIRES", "SYSTEM", "user", "temperature", "stop", "num_ctx", "0.5",
     "-1", "x", '"', '"""', "#", " ", "\t", "\n", "\r", "\r\n", "\ufeff", "\u4f60", ":", "1.2.3"]
)  # fmt: skip


@settings(max_examples=300)
@given(st.lists(TOKENS, max_size=30).map("".join) | st.text())
def test_parse_raises_only_modelfile_errors(text: str) -> None:
    try:
        mf = parse_modelfile(text)
    except ModelfileError as e:
        assert e.line >= 0 and e.reason
    else:
        assert any(c.name == "from" for c in mf.commands)
