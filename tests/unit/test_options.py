"""Ollama's options: API validation, Modelfile parameter strings, and /api/show's parameters text."""

from __future__ import annotations

import logging
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ollama_py.api.options import (
    DEFAULT_OPTIONS,
    DEPRECATED_PARAMETERS,
    LOAD_OPTIONS,
    MAX_NUM_CTX,
    OPTION_TYPES,
    format_params,
    format_value,
    parse_parameter,
    validate_options,
)
from ollama_py.errors import BadRequest


@pytest.mark.parametrize(
    ("opts", "expected"),
    [
        pytest.param(None, {}, id="absent"),
        pytest.param({}, {}, id="empty"),
        pytest.param({"temperature": 0.2, "num_ctx": 8192}, {"temperature": 0.2, "num_ctx": 8192}, id="typed"),
        pytest.param({"temperature": 1}, {"temperature": 1.0}, id="int-for-float"),
        pytest.param({"num_ctx": 2048.0}, {"num_ctx": 2048}, id="whole-float-for-int"),
        pytest.param({"stop": "\n\n"}, {"stop": ["\n\n"]}, id="stop-string"),
        pytest.param({"stop": ["</s>", "User:"]}, {"stop": ["</s>", "User:"]}, id="stop-list"),
        pytest.param({"stop": []}, {"stop": []}, id="stop-empty-list"),
        pytest.param({"use_mmap": False, "main_gpu": 0}, {"use_mmap": False, "main_gpu": 0}, id="bool-and-pointer"),
        pytest.param({"seed": -1, "num_predict": -2, "num_gpu": -1}, {"seed": -1, "num_predict": -2, "num_gpu": -1},
                     id="sentinels"),
        pytest.param({"top_p": 0, "min_p": 1}, {"top_p": 0.0, "min_p": 1.0}, id="closed-bounds"),
        pytest.param({"num_ctx": MAX_NUM_CTX}, {"num_ctx": MAX_NUM_CTX}, id="num-ctx-max"),
        pytest.param({"temperature": None, "top_k": 5}, {"top_k": 5}, id="null-skipped"),
        pytest.param({"mirostat": 2, "top_k": 5}, {"top_k": 5}, id="deprecated-dropped"),
    ],
)  # fmt: skip
def test_validate_options_accepts(opts: object, expected: dict[str, object]) -> None:
    got = validate_options(opts)
    assert got == expected
    assert {k: type(v) for k, v in got.items()} == {k: type(v) for k, v in expected.items()}


def test_validate_options_drops_unknown_keys_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert validate_options({"temprature": 0.1, "top_k": 3}) == {"top_k": 3}
    assert "invalid option provided: temprature" in caplog.text


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        pytest.param(["temperature"], "option must be an object", id="not-an-object"),
        pytest.param("fast", "option must be an object", id="string-not-an-object"),
        pytest.param({"num_ctx": "2048"}, 'option "num_ctx" must be of type integer', id="int-as-string"),
        pytest.param({"num_ctx": 2.5}, 'option "num_ctx" must be of type integer', id="int-with-fraction"),
        pytest.param({"num_ctx": True}, 'option "num_ctx" must be of type integer', id="int-as-bool"),
        pytest.param({"temperature": "hot"}, 'option "temperature" must be of type float32', id="float-as-string"),
        pytest.param({"temperature": False}, 'option "temperature" must be of type float32', id="float-as-bool"),
        pytest.param({"use_mmap": 1}, 'option "use_mmap" must be of type boolean', id="bool-as-int"),
        pytest.param({"use_mmap": "true"}, 'option "use_mmap" must be of type boolean', id="bool-as-string"),
        pytest.param({"stop": 5}, 'option "stop" must be of type array', id="stop-number"),
        pytest.param({"stop": {"a": 1}}, 'option "stop" must be of type array', id="stop-object"),
        pytest.param({"stop": ["a", 1]}, 'option "stop" must be of an array of strings', id="stop-mixed"),
        pytest.param({"num_ctx": -1}, 'option "num_ctx" must be between 0 and 16777216', id="num-ctx-negative"),
        pytest.param({"num_ctx": MAX_NUM_CTX + 1}, 'option "num_ctx" must be between 0 and 16777216',
                     id="num-ctx-huge"),
        pytest.param({"num_batch": -512}, 'option "num_batch" must be between 0 and 16777216', id="num-batch-neg"),
        pytest.param({"num_thread": -1}, 'option "num_thread" must be between 0 and 4096', id="num-thread-negative"),
        pytest.param({"temperature": -0.1}, 'option "temperature" must be at least 0', id="temperature-negative"),
        pytest.param({"top_p": 1.5}, 'option "top_p" must be between 0 and 1', id="top-p-above-one"),
        pytest.param({"top_p": -0.5}, 'option "top_p" must be between 0 and 1', id="top-p-negative"),
        pytest.param({"min_p": 2}, 'option "min_p" must be between 0 and 1', id="min-p-above-one"),
        pytest.param({"main_gpu": -1}, 'option "main_gpu" must be at least 0', id="main-gpu-negative"),
        pytest.param({"num_predict": -3}, 'option "num_predict" must be at least -2', id="num-predict-below-sentinel"),
        pytest.param({"temperature": math.nan}, 'option "temperature" must be a finite float32', id="nan"),
        pytest.param({"repeat_penalty": math.inf}, 'option "repeat_penalty" must be a finite float32', id="inf"),
        pytest.param({"presence_penalty": 1e39}, 'option "presence_penalty" must be a finite float32',
                     id="beyond-float32"),
        pytest.param({"seed": 1 << 70}, 'option "seed" is out of range', id="beyond-int64"),
    ],
)  # fmt: skip
def test_validate_options_rejects(opts: object, message: str) -> None:
    with pytest.raises(BadRequest) as info:
        validate_options(opts)
    assert str(info.value) == message
    assert info.value.status == 400


@pytest.mark.parametrize(
    ("name", "text", "expected"),
    [
        pytest.param("temperature", "0.5", 0.5, id="float"),
        pytest.param("temperature", "1", 1.0, id="float-from-int-text"),
        pytest.param("top_p", ".9", 0.9, id="float-leading-dot"),
        pytest.param("repeat_penalty", "1.", 1.0, id="float-trailing-dot"),
        pytest.param("presence_penalty", "-1.5e0", -1.5, id="float-exponent"),
        pytest.param("num_ctx", "4096", 4096, id="int"),
        pytest.param("top_k", "+5", 5, id="int-plus-sign"),
        pytest.param("seed", "-1", -1, id="int-negative"),
        pytest.param("num_ctx", " 4096 ", 4096, id="int-blanks-trimmed"),
        pytest.param("use_mmap", "true", True, id="bool-true"),
        pytest.param("use_mmap", "T", True, id="bool-T"),
        pytest.param("use_mmap", "1", True, id="bool-1"),
        pytest.param("use_mmap", "FALSE", False, id="bool-FALSE"),
        pytest.param("use_mmap", "f", False, id="bool-f"),
        pytest.param("stop", "### User:", "### User:", id="stop"),
        pytest.param("stop", " <|eot_id|> ", " <|eot_id|> ", id="stop-kept-verbatim"),
    ],
)
def test_parse_parameter(name: str, text: str, expected: object) -> None:
    got = parse_parameter(name, text)
    assert got == expected
    assert type(got) is type(expected)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        pytest.param("temprature", "1", "unknown parameter 'temprature'", id="unknown"),
        pytest.param("Temperature", "1", "unknown parameter 'Temperature'", id="case-sensitive"),
        pytest.param("temperature", "hot", "invalid float value [hot]", id="float-word"),
        pytest.param("temperature", "inf", "invalid float value [inf]", id="float-inf"),
        pytest.param("temperature", "NaN", "invalid float value [NaN]", id="float-nan"),
        pytest.param("temperature", "0x1p-2", "invalid float value [0x1p-2]", id="float-hex"),
        pytest.param("temperature", "1_0", "invalid float value [1_0]", id="float-underscore"),
        pytest.param("temperature", "1e39", "invalid float value [1e39]", id="float-beyond-float32"),
        pytest.param("num_ctx", "2.0", "invalid int value [2.0]", id="int-with-point"),
        pytest.param("num_ctx", "1_000", "invalid int value [1_000]", id="int-underscore"),
        pytest.param("num_ctx", "\u0663", "invalid int value [\u0663]", id="int-arabic-digit"),
        pytest.param("seed", "9223372036854775808", "invalid int value [9223372036854775808]", id="int-overflow"),
        pytest.param("num_ctx", "", "invalid int value []", id="int-empty"),
        pytest.param("use_mmap", "yes", "invalid bool value [yes]", id="bool-yes"),
        pytest.param("use_mmap", "tRUE", "invalid bool value [tRUE]", id="bool-mixed-case"),
        pytest.param("top_p", "2", 'option "top_p" must be between 0 and 1', id="out-of-range"),
        pytest.param("num_ctx", "-1", 'option "num_ctx" must be between 0 and 16777216', id="negative-num-ctx"),
    ],
)
def test_parse_parameter_rejects(name: str, text: str, message: str) -> None:
    with pytest.raises(BadRequest) as info:
        parse_parameter(name, text)
    assert str(info.value) == message


@pytest.mark.parametrize("name", sorted(DEPRECATED_PARAMETERS))
def test_parse_parameter_deprecated_is_skipped_with_a_warning(name: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert parse_parameter(name, "not even a number") is None
    assert f"warning: parameter {name} is deprecated" in caplog.text


def test_defaults_are_valid_options_of_their_declared_type() -> None:
    assert OPTION_TYPES.keys() >= LOAD_OPTIONS
    assert DEFAULT_OPTIONS.keys() == OPTION_TYPES.keys() - {"stop"}
    present = {k: v for k, v in DEFAULT_OPTIONS.items() if v is not None}
    assert validate_options(present) == present
    for name, value in present.items():
        assert type(value) is OPTION_TYPES[name], name


@pytest.mark.parametrize(
    ("value", "text"),
    [
        pytest.param(True, "true", id="true"),
        pytest.param(False, "false", id="false"),
        pytest.param(4096, "4096", id="int"),
        pytest.param(1048576, "1048576", id="big-int-stays-an-int"),
        pytest.param(0.7, "0.7", id="float"),
        pytest.param(1.0, "1", id="whole-float"),
        pytest.param(-0.5, "-0.5", id="negative-float"),
        pytest.param(100000.0, "100000", id="float-below-exponent-form"),
        pytest.param(1e6, "1e+06", id="float-exponent-form"),
        pytest.param(1234567.0, "1.234567e+06", id="float-exponent-mantissa"),
        pytest.param(0.0001, "0.0001", id="small-float"),
        pytest.param(0.00001, "1e-05", id="tiny-float"),
        pytest.param(0.0, "0", id="zero"),
        pytest.param("<|eot_id|>", "<|eot_id|>", id="string"),
    ],
)
def test_format_value_writes_like_go(value: object, text: str) -> None:
    assert format_value(value) == text


@given(st.floats(min_value=0, max_value=3.4e38, allow_nan=False))
def test_format_value_reads_back_exactly(value: float) -> None:
    assert parse_parameter("repeat_penalty", format_value(value)) == value


def test_format_params_matches_ollama_show() -> None:
    params = {
        "stop": ["<|start_header_id|>", "<|eot_id|>"],
        "temperature": 0.6,
        "num_ctx": 4096,
        "use_mmap": True,
        "top_p": 1.0,
    }
    assert format_params(params) == (
        'stop                           "<|start_header_id|>"\n'
        'stop                           "<|eot_id|>"\n'
        "temperature                    0.6\n"
        "num_ctx                        4096\n"
        "use_mmap                       true\n"
        "top_p                          1"
    )


@pytest.mark.parametrize(
    ("stop", "shown"),
    [
        pytest.param('say "hi"', r'"say \"hi\""', id="quote"),
        pytest.param("a\\b", r'"a\\b"', id="backslash"),
        pytest.param("\n\n", r'"\n\n"', id="newlines"),
        pytest.param("\t\r", r'"\t\r"', id="tab-cr"),
        pytest.param("\x00\x7f", r'"\x00\x7f"', id="control"),
        pytest.param("\u200b\u00a0", r'"\u200b\u00a0"', id="invisible-unicode"),
        pytest.param("h\u00e9 \u4f60\U0001f44b", '"h\u00e9 \u4f60\U0001f44b"', id="printable-unicode"),
    ],
)
def test_format_params_quotes_strings_as_go(stop: str, shown: str) -> None:
    assert format_params({"stop": [stop]}) == f"{'stop':<30} {shown}"


def test_format_params_empty() -> None:
    assert format_params({}) == ""
