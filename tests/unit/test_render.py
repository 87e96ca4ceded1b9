"""What the CLI prints, as Ollama prints it: sizes, relative times, Go durations, PROCESSOR/UNTIL, tables."""

from __future__ import annotations

import datetime as dt

import pytest

from ollama_py.cli.render import (
    go_duration,
    human_bytes,
    human_number,
    human_time,
    list_table,
    metrics_summary,
    parse_time,
    processor,
    ps_table,
    show_info,
    table,
    until,
)

NOW = dt.datetime(2026, 5, 1, 12, 0, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("n", "text"),
    [(0, "0 B"), (999, "999 B"), (1000, "1 KB"), (1500, "1.5 KB"), (98_234_112, "98 MB"), (270_000_000, "270 MB"),
     (1_500_000_000, "1.5 GB"), (4_700_000_000, "4.7 GB"), (10_400_000_000, "10 GB"), (2_000_000_000_000, "2 TB")],
    ids=["zero", "bytes", "one-kb", "fraction-kb", "smollm2", "hundreds-mb", "fraction-gb", "llama3", "ten-gb",
         "tb"],
)
def test_human_bytes(n: int, text: str) -> None:
    assert human_bytes(n) == text


@pytest.mark.parametrize(
    ("n", "text"),
    [(134_515_008, "134.52M"), (135_000_000, "135M"), (7_000_000_000, "7B"), (1_540_000_000, "1.5B"),
     (812_345, "812K"), (42, "42")],
    ids=["millions-fraction", "millions-whole", "billions-whole", "billions-fraction", "thousands", "small"],
)
def test_human_number(n: int, text: str) -> None:
    assert human_number(n) == text


@pytest.mark.parametrize(
    ("delta", "text"),
    [(dt.timedelta(seconds=-0.5), "Less than a second ago"), (dt.timedelta(seconds=-1), "1 second ago"),
     (dt.timedelta(seconds=-45), "45 seconds ago"), (dt.timedelta(seconds=-90), "About a minute ago"),
     (dt.timedelta(minutes=-2, seconds=-5), "2 minutes ago"), (dt.timedelta(minutes=-70), "About an hour ago"),
     (dt.timedelta(hours=-30), "30 hours ago"), (dt.timedelta(days=-3), "3 days ago"),
     (dt.timedelta(days=-20), "2 weeks ago"), (dt.timedelta(days=-100), "3 months ago"),
     (dt.timedelta(days=-1000), "2 years ago"), (dt.timedelta(minutes=4, seconds=30), "4 minutes from now"),
     (dt.timedelta(days=365 * 30), "Forever")],
    ids=["sub-second", "one-second", "seconds", "about-a-minute", "minutes", "about-an-hour", "hours", "days",
         "weeks", "months", "years", "from-now", "forever"],
)
def test_human_time(delta: dt.timedelta, text: str) -> None:
    assert human_time(NOW + delta, NOW) == text


def test_human_time_of_nothing_is_never() -> None:
    assert human_time(None, NOW) == "Never"


@pytest.mark.parametrize(
    ("text", "expected"),
    [("2026-05-01T14:00:00.123456789+02:00", dt.datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=dt.UTC)),
     ("2026-05-01T12:00:00Z", NOW), ("0001-01-01T00:00:00Z", None), ("", None), ("yesterday", None)],
    ids=["nanoseconds-offset", "zulu", "go-zero-time", "empty", "garbage"],
)
def test_parse_time(text: str, expected: dt.datetime | None) -> None:
    assert parse_time(text) == expected


@pytest.mark.parametrize(
    ("ns", "text"),
    [(0, "0s"), (512, "512ns"), (845_100, "845.1µs"), (93_480_123, "93.480123ms"), (1_500_000_000, "1.5s"),
     (2_000_000_000, "2s"), (123_250_000_000, "2m3.25s"), (3_600_000_000_000, "1h0m0s")],
    ids=["zero", "ns", "us", "ms", "fraction-s", "whole-s", "minutes", "hours"],
)
def test_go_duration(ns: int, text: str) -> None:
    assert go_duration(ns) == text


@pytest.mark.parametrize(
    ("size", "vram", "text"),
    [(1000, 0, "100% CPU"), (1000, 1000, "100% GPU"), (1000, 520, "48%/52% CPU/GPU"), (1000, 2000, "Unknown")],
    ids=["cpu", "gpu", "split", "more-vram-than-size"],
)
def test_processor_column(size: int, vram: int, text: str) -> None:
    assert processor(size, vram) == text


@pytest.mark.parametrize(
    ("expires", "text"),
    [(NOW + dt.timedelta(minutes=4, seconds=59), "4 minutes from now"),
     (dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC), "Forever"),
     (NOW - dt.timedelta(seconds=3), "Stopping...")],
    ids=["keep-alive", "forever", "expired"],
)
def test_until_column(expires: dt.datetime, text: str) -> None:
    assert until(expires, NOW) == text


def test_table_pads_columns_with_four_spaces() -> None:
    assert table(["A", "LONGER"], [["xyz", "1"], ["q", "22"]]) == "A      LONGER\nxyz    1\nq      22\n"


def test_list_table_like_ollama_list() -> None:
    models = [{"name": "smollm2:135m", "digest": "d4c0a6a1e2b3f4" + "0" * 50, "size": 98_234_112,
               "modified_at": "2026-05-01T11:58:00Z"},
              {"name": "other:latest", "digest": "abcdef012345" + "1" * 52, "size": 4_700_000_000,
               "modified_at": "2026-04-28T12:00:00+00:00"}]
    assert list_table(models, NOW).splitlines() == [
        "NAME            ID              SIZE      MODIFIED",
        "smollm2:135m    d4c0a6a1e2b3    98 MB     2 minutes ago",
        "other:latest    abcdef012345    4.7 GB    3 days ago",
    ]


def test_list_table_shows_no_size_for_a_remote_models_stub() -> None:
    """As `ollama list` shows a cloud model's stub: its few hundred bytes of config are not the model's size."""
    models = [{"name": "gpt-oss:20b-cloud", "remote_model": "gpt-oss:20b", "remote_host": "https://ollama.com:443",
               "digest": "a" * 64, "size": 384, "modified_at": "2026-05-01T11:58:00Z"}]
    assert list_table(models, NOW).splitlines()[1].split() == ["gpt-oss:20b-cloud", "aaaaaaaaaaaa", "-", "2",
                                                                "minutes", "ago"]


def test_list_table_filters_by_prefix() -> None:
    models = [{"name": "a:1", "digest": "0" * 64, "size": 1}, {"name": "b:1", "digest": "1" * 64, "size": 1}]
    assert [line.split()[0] for line in list_table(models, NOW, "b").splitlines()] == ["NAME", "b:1"]


def test_ps_table_like_ollama_ps() -> None:
    models = [{"name": "smollm2:135m", "model": "smollm2:135m", "digest": "d4c0a6a1e2b3" + "0" * 52,
               "size": 370_000_000, "size_vram": 0, "context_length": 4096,
               "expires_at": "2026-05-01T12:04:30Z"}]
    assert ps_table(models, NOW).splitlines() == [
        "NAME            ID              SIZE      PROCESSOR    CONTEXT    UNTIL",
        "smollm2:135m    d4c0a6a1e2b3    370 MB    100% CPU     4096       4 minutes from now",
    ]


def test_ps_table_marks_a_models_embeddings_runner() -> None:
    entry = {"name": "tiny:latest", "model": "tiny:latest", "digest": "f" * 64, "size": 209_000_000, "size_vram": 0,
             "context_length": 4096, "expires_at": "2026-05-01T12:04:30Z"}
    assert ps_table([entry, {**entry, "embedding": True}], NOW).splitlines()[1:] == [
        "tiny:latest    ffffffffffff    209 MB    100% CPU                 4096       4 minutes from now",
        "tiny:latest    ffffffffffff    209 MB    100% CPU (embeddings)    4096       4 minutes from now",
    ]


def test_ps_table_without_models_is_just_the_header() -> None:
    assert ps_table([], NOW) == "NAME    ID    SIZE    PROCESSOR    CONTEXT    UNTIL\n"


SHOW = {
    "details": {"family": "llama", "parameter_size": "134.52M", "quantization_level": "Q4_1"},
    "model_info": {"general.architecture": "llama", "llama.context_length": 8192.0, "llama.embedding_length": 576,
                   "tokenizer.ggml.tokens": ["<a>", "<b>", "hello", "world", "more"]},
    "capabilities": ["completion"],
    "parameters": 'stop                           "<|im_end|>"\ntemperature                    0.2',
    "system": "You are a helpful AI assistant named SmolLM.",
    "license": "Apache License\nVersion 2.0\nJanuary 2004\n",
}


def test_show_info_sections() -> None:
    assert show_info(SHOW) == (
        "  Model\n"
        "    architecture        llama\n"
        "    parameters          134.52M\n"
        "    context length      8192\n"
        "    embedding length    576\n"
        "    quantization        Q4_1\n"
        "\n"
        "  Capabilities\n"
        "    completion\n"
        "\n"
        "  Parameters\n"
        '    stop           "<|im_end|>"\n'
        "    temperature    0.2\n"
        "\n"
        "  System\n"
        "    You are a helpful AI assistant named SmolLM.\n"
        "\n"
        "  License\n"
        "    Apache License\n"
        "    Version 2.0\n"
        "    ...\n"
        "\n"
    )


def test_show_info_verbose_adds_metadata_with_long_arrays_cut() -> None:
    text = show_info(SHOW, verbose=True)
    assert "  Metadata\n" in text
    assert "    tokenizer.ggml.tokens     [<a> <b> ...+3 more]" in text


def test_metrics_summary_prints_ollama_lines() -> None:
    final = {"total_duration": 1_234_567_890, "load_duration": 45_600_000, "prompt_eval_count": 26,
             "prompt_eval_duration": 130_000_000, "eval_count": 259, "eval_duration": 4_232_000_000}
    assert metrics_summary(final) == (
        "total duration:       1.23456789s\n"
        "load duration:        45.6ms\n"
        "prompt eval count:    26 token(s)\n"
        "prompt eval duration: 130ms\n"
        "prompt eval rate:     200.00 tokens/s\n"
        "eval count:           259 token(s)\n"
        "eval duration:        4.232s\n"
        "eval rate:            61.20 tokens/s\n"
    )


def test_metrics_summary_leaves_out_zero_values() -> None:
    assert metrics_summary({"total_duration": 2_000_000_000, "eval_count": 3}) == (
        "total duration:       2s\neval count:           3 token(s)\n"
    )


@pytest.mark.parametrize(
    ("devices", "text"),
    [({"CPU": 10, "RPC0[127.0.0.1:50052]": 45, "RPC1[127.0.0.1:50053]": 45}, "10%/90% CPU/RPC"),
     ({"RPC0[a:1]": 50, "RPC1[b:2]": 50}, "100% RPC"),
     ({"CPU": 20, "CUDA0": 40, "RPC0[a:1]": 40}, "20%/40%/40% CPU/GPU/RPC"),
     ({"CPU": 100}, None),
     (None, None)],
    ids=["cpu-and-two-workers", "workers-only", "cpu-gpu-worker", "no-rpc", "no-devices"],
)
def test_processor_column_for_rpc_split(devices, text) -> None:
    from ollama_py.cli.render import device_split

    assert device_split(devices) == text
