"""The per-token JSON helpers give what the standard json module gives, and refuse what it refuses."""

import json

import pytest

from ollama_py import fastjson

VALUES = [
    {"model": "smollm2", "created_at": "2026-11-22T06:00:00.123456Z", "response": " the", "done": False},
    {"text": 'quote " backslash \\ newline \n tab \t control \x01 del \x7f', "emoji": "😀", "accents": "é"},
    {"html": "<b>&</b>", "nested": {"list": [1, 2.5, -0.0, None, True, False, 10**20]}},
    [], {}, "", "plain", 0, 1.5, None,
]


@pytest.mark.parametrize("value", VALUES)
def test_dumps_is_compact_json_with_unicode_kept(value):
    assert fastjson.dumps(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize("value", VALUES)
def test_loads_reads_back_what_dumps_wrote(value):
    assert fastjson.loads(fastjson.dumps(value)) == value
    assert fastjson.loads(f"  {json.dumps(value)}\n") == value


def test_dumps_refuses_what_json_cannot_encode():
    with pytest.raises(TypeError, match="not JSON serializable"):
        fastjson.dumps({"x": object()})


@pytest.mark.parametrize("text", ["", "   ", "{", '{"a": 1} trailing', "nul", '{"a": "\\x"}', "[1,]"])
def test_loads_refuses_what_is_not_one_json_value(text):
    with pytest.raises(ValueError):
        fastjson.loads(text)


@pytest.mark.parametrize("value", VALUES)
def test_dumps_ascii_is_compact_json_with_unicode_escaped(value):
    out = fastjson.dumps_ascii(value)
    assert out == json.dumps(value, separators=(",", ":")).encode()
    assert out.isascii() and json.loads(out) == value


@pytest.mark.parametrize("value", [*VALUES, {"prompt": "x" * 100_000 + "é😀", "n_predict": 8},
                                   {"lone": "a\ud800b"}, {"big": 2**70}, {1: "int key"}])
def test_to_runner_is_json_that_reads_back_as_the_value(value):
    """What goes to llama-server: UTF-8 JSON (orjson), or escapes for what orjson refuses (a lone surrogate, an
    integer past 64 bits, a key that is not a string) -- json's reading of it is the value either way."""
    out = fastjson.to_runner(value)
    expected = {str(k): v for k, v in value.items()} if isinstance(value, dict) else value
    assert json.loads(out.decode("utf-8", "surrogatepass")) == expected


@pytest.mark.parametrize("data, value", [
    (b'{"content": "caf\xc3\xa9", "stop": false}', {"content": "café", "stop": False}),
    (b' {"probs": [NaN]} ', None),
    ('{"text": "\\ud800"}', {"text": "\ud800"})])
def test_loads_reads_bytes_and_what_orjson_refuses(data, value):
    """A runner's event as bytes; NaN and a lone surrogate (orjson refuses them) read as json reads them."""
    got = fastjson.loads(data)
    if value is None:
        assert got["probs"][0] != got["probs"][0]  # NaN
    else:
        assert got == value
