"""config_file: the TOML file's grammar, precedence (flag > env > file > default), errors with lines, globs,
and `ollama-py config show`."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from ollama_py import config_file as cf
from ollama_py.api.names import parse_name
from ollama_py.cli.main import cli
from ollama_py.config import FOREVER, parse_host
from ollama_py.errors import ConfigError


def resolved(text: str = "", env: dict[str, str] | None = None, flags: dict[str, object] | None = None):
    return cf.resolve(env or {}, cf.parse_config(text, "/etc/c.toml"), flags)


# -- precedence ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "env", "flags", "attr", "value", "source"), [
    pytest.param("", {}, {}, "keep_alive", 300.0, "default", id="default"),
    pytest.param('[server]\nkeep_alive = "10m"', {}, {}, "keep_alive", 600.0, "file /etc/c.toml:2", id="file"),
    pytest.param('[server]\nkeep_alive = "10m"', {"OLLAMA_KEEP_ALIVE": "1h"}, {}, "keep_alive", 3600.0,
                 "env OLLAMA_KEEP_ALIVE", id="env-over-file"),
    pytest.param('[server]\nkeep_alive = "10m"', {"OLLAMA_KEEP_ALIVE": "1h"}, {"keep_alive": "2m"}, "keep_alive",
                 120.0, "flag --set", id="flag-over-env"),
    pytest.param('[server]\nkeep_alive = "10m"', {"OLLAMA_KEEP_ALIVE": ""}, {}, "keep_alive", 600.0,
                 "file /etc/c.toml:2", id="empty-env-is-unset"),
    pytest.param("[server]\nkeep_alive = -1", {}, {}, "keep_alive", FOREVER, "file /etc/c.toml:2", id="forever"),
    pytest.param("[server]\nload_timeout = 0", {}, {}, "load_timeout", FOREVER, "file /etc/c.toml:2",
                 id="no-load-timeout"),
    pytest.param('[server]\nhost = "0.0.0.0:8080"', {}, {}, "host", parse_host("0.0.0.0:8080"),
                 "file /etc/c.toml:2", id="host"),
    pytest.param('[server]\nmodels = "/srv/models"', {}, {}, "models", Path("/srv/models"), "file /etc/c.toml:2",
                 id="models"),
    pytest.param('[server]\norigins = ["http://a", "http://b"]', {}, {}, "origins", ("http://a", "http://b"),
                 "file /etc/c.toml:2", id="origins-list"),
    pytest.param("[server]\nflash_attention = false", {}, {}, "flash_attention", "off", "file /etc/c.toml:2",
                 id="flash-off"),
    pytest.param('[server]\nflash_attention = "auto"', {}, {}, "flash_attention", None, "file /etc/c.toml:2",
                 id="flash-auto"),
    pytest.param("[server]\nno_prune = true", {}, {}, "noprune", True, "file /etc/c.toml:2", id="no-prune"),
    pytest.param("[server]\napi_keys = ['k1']", {"OLLAMA_API_KEY_SERVER": "k2"}, {}, "api_keys", ("k2",),
                 "env OLLAMA_API_KEY_SERVER", id="second-variable"),
    pytest.param("[server]\ncontext_length = 0", {}, {}, "context_length", 4096, "file /etc/c.toml:2",
                 id="context-zero-is-default"),
    pytest.param("", {}, {"num_parallel": 2}, "num_parallel", 2, "flag --set", id="flag-only"),
])
def test_precedence(text, env, flags, attr, value, source) -> None:
    r = resolved(text, env, flags)
    name = next(f.name for f in cf.SERVER_FIELDS if f.attr == attr)
    assert getattr(r.settings, attr) == value
    assert r.sources[name] == source


def test_every_variable_has_a_readable_name() -> None:
    from ollama_py.cli.envvars import SERVE_VARS

    named = {var for f in cf.SERVER_FIELDS for var in f.env}
    assert set(SERVE_VARS) - {"OLLAMA_PY_CONFIG"} <= named
    assert {"OLLAMA_NOUI", "OLLAMA_NOHISTORY", "OLLAMA_PY_READ_TIMEOUT", "OLLAMA_PY_MAX_CONNECTIONS"} <= named


def test_settings_remember_their_file() -> None:
    assert resolved("[server]\ndebug = true").settings.config_file == Path("/etc/c.toml")
    assert cf.resolve({}, None).settings.config_file is None


# -- errors name the file and the line -----------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "line", "words"), [
    pytest.param('[server]\nkeep_alive = 5x\n', 2, "Expected newline", id="toml-syntax"),
    pytest.param('[server]\n\nkep_alive = "5m"\n', 3, "unknown setting 'kep_alive' in [server] (did you mean "
                 "'keep_alive'?)", id="unknown-server-key"),
    pytest.param('[sever]\n', 1, "unknown table 'sever'", id="unknown-table"),
    pytest.param('[server]\nnum_parallel = "4"\n', 2, "server.num_parallel must be a whole number", id="wrong-type"),
    pytest.param('[server]\nnum_parallel = -1\n', 2, "must be a whole number, 0 or more", id="negative"),
    pytest.param('[server]\nkeep_alive = "5 minutes"\n', 2, 'server.keep_alive: time: unknown unit', id="duration"),
    pytest.param('[server]\nkv_cache_type = "q9"\n', 2, "must be one of f32, f16", id="kv-type"),
    pytest.param('[server]\nflash_attention = "yes"\n', 2, 'must be true, false, "on", "off" or "auto"', id="flash"),
    pytest.param('[models."a"]\nthreads = 0\n', 2, 'models."a".threads must be 1 or more', id="threads"),
    pytest.param('[models."a"]\n# a comment\nkv_cache_type = "q9"\n', 3, 'models."a".kv_cache_type', id="model-key"),
    pytest.param('[models."a"]\nkeep_alive = "1h"\ntemperature = 1\n', 3, "unknown setting 'temperature' in "
                 '[models."a"]', id="option-at-top"),
    pytest.param('[models."a"]\noptions.temprature = 1\n', 2, "unknown option 'temprature' (did you mean "
                 "'temperature'?)", id="unknown-option"),
    pytest.param('[models."a"]\n[models."a".options]\ntop_k = "x"\n', 2, 'option "top_k" must be of type integer',
                 id="option-type"),
    pytest.param('[models."a"]\nextra_args = ["--port", "9"]\n', 2, "--port is set by ollama-py itself",
                 id="owned-flag"),
    pytest.param('[models."a"]\nextra_args = ["-m=/x"]\n', 2, "-m is set by ollama-py itself", id="owned-short"),
    pytest.param('[models."a"]\nextra_args = "--jinja"\n', 2, "must be a list", id="extra-not-list"),
    pytest.param('[models."a*"]\naliases = ["b"]\n', 2, "aliases need an exact model name", id="glob-alias"),
    pytest.param('[models."a"]\naliases = ["b"]\n[models."c"]\naliases = ["b:latest"]\n', 4,
                 "alias 'b:latest' is given twice", id="alias-twice"),
    pytest.param('[models."a"]\naliases = ["a:latest"]\n', 2, "names the model itself", id="alias-self"),
    pytest.param('[models."a b"]\n', 1, "'a b' is not a valid model name", id="bad-name"),
    pytest.param('[models."a"]\ntensor_split = [1, "x"]\n', 2, "must be a list of proportions", id="tensor-split"),
    pytest.param('[models."a"]\nsplit_mode = "rows"\n', 2, "must be one of none, layer, row, tensor",
                 id="split-mode"),
    pytest.param('models = 3\n', 1, "'models' must be tables", id="models-not-table"),
])
def test_errors_name_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        cf.parse_config(text, "/etc/c.toml")
    assert info.value.line == line, str(info.value)
    assert str(info.value).startswith(f"/etc/c.toml:{line}: ")
    assert words in str(info.value)


@pytest.mark.parametrize(("text", "words"), [
    pytest.param("max_queue", "must be NAME=VALUE", id="no-value"),
    pytest.param("max_qeue=3", "unknown setting 'max_qeue' (did you mean 'max_queue'?)", id="unknown"),
    pytest.param("max_queue=lots", "max_queue must be a whole number", id="bad-value"),
])
def test_flag_errors(text: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        name, value = cf.parse_flag(text)
        cf.resolve({}, None, {name: value})
    assert str(info.value).startswith("--set: ") and words in str(info.value)


def test_flag_values_are_toml_or_text() -> None:
    assert cf.parse_flag("num_parallel=2") == ("num_parallel", 2)
    assert cf.parse_flag("keep_alive=10m") == ("keep_alive", "10m")
    assert cf.parse_flag('origins=["http://a"]') == ("origins", ["http://a"])
    assert cf.parse_flag("debug=true") == ("debug", True)


def test_extra_args_are_checked_against_the_runners_flags() -> None:
    config = cf.parse_config('[models."a"]\nkeep_alive = 1\nextra_args = ["--top-nsigm", "1", "--jinja"]\n', "c.toml")
    with pytest.raises(ConfigError) as info:
        cf.check_extra_args(config, frozenset({"--top-nsigma", "--jinja"}))
    assert str(info.value) == ("c.toml:3: models.\"a\".extra_args: llama-server has no flag --top-nsigm "
                               "(did you mean '--top-nsigma'?)")
    cf.check_extra_args(cf.parse_config('[models."a"]\nextra_args = ["--top-nsigma=1", "-1"]\n'),
                        frozenset({"--top-nsigma"}))  # "=value" forms and negative numbers are fine


def test_a_named_file_must_exist(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        cf.find_path({"OLLAMA_PY_CONFIG": str(tmp_path / "none.toml")})
    with pytest.raises(ConfigError, match="config file not found"):
        cf.find_path({}, tmp_path / "none.toml")


# -- models: globs, merging, aliases -------------------------------------------------------------------------------
MODELS = """
[models."qwen3*"]
kv_cache_type = "q8_0"
options = { temperature = 0.5, top_k = 20 }
extra_args = ["--jinja"]

[models."*"]
threads = 4

[models."qwen3:8b"]
aliases = ["fast", "team/fast:v1"]
kv_cache_type = "q4_0"
options.temperature = 0.2
preload = true
keep_alive = "1h"
"""


@pytest.mark.parametrize(("name", "expected"), [
    pytest.param("qwen3:8b", {"kv_cache_type": "q4_0", "threads": 4, "preload": True, "keep_alive": 3600.0,
                              "options": {"temperature": 0.2, "top_k": 20}, "extra_args": ("--jinja",)},
                 id="exact-over-globs"),
    pytest.param("qwen3:0.6b", {"kv_cache_type": "q8_0", "threads": 4, "preload": False, "keep_alive": None,
                                "options": {"temperature": 0.5, "top_k": 20}}, id="glob"),
    pytest.param("QWEN3:8B", {"kv_cache_type": "q4_0"}, id="case-insensitive"),
    pytest.param("qwen3", {"kv_cache_type": "q8_0"}, id="glob-without-tag"),
    pytest.param("llama3.2", {"kv_cache_type": None, "threads": 4, "options": {}}, id="catch-all"),
])
def test_model_settings_merge(name: str, expected: dict[str, object]) -> None:
    ms = cf.parse_config(MODELS).models.for_name(parse_name(name))
    for key, value in expected.items():
        assert getattr(ms, key) == value, key


def test_a_models_settings_are_merged_once_per_table() -> None:
    """Every inference request asks for its model's settings (twice): the table answers the same object for the
    same name in any case, and a reload's new table merges its own."""
    table = cf.parse_config(MODELS).models
    first = table.for_name(parse_name("qwen3:8b"))
    assert table.for_name(parse_name("QWEN3:8B")) is first
    assert table.for_name(parse_name("qwen3:0.6b")) is not first
    reloaded = cf.parse_config(MODELS.replace('kv_cache_type = "q4_0"', 'kv_cache_type = "f16"')).models
    assert reloaded.for_name(parse_name("qwen3:8b")).kv_cache_type == "f16"
    assert table.for_name(parse_name("qwen3:8b")).kv_cache_type == "q4_0"
    copy = dataclasses.replace(table, sections=table.sections[:1])  # a table made from another starts afresh
    assert copy.for_name(parse_name("qwen3:8b")).kv_cache_type == "q8_0"
    assert copy == cf.ModelTable(table.sections[:1])  # (what is remembered is no part of a table's value)


def test_the_memo_of_merged_settings_is_bounded() -> None:
    table = cf.parse_config(MODELS).models
    for k in range(table.MEMO + 10):
        assert table.for_name(parse_name(f"qwen3:t{k}")).kv_cache_type == "q8_0"
    assert len(table._merged) <= table.MEMO


def test_aliases_and_preloads() -> None:
    table = cf.parse_config(MODELS).models
    assert table.aliases() == {parse_name("fast").key(): parse_name("qwen3:8b"),
                               parse_name("team/fast:v1").key(): parse_name("qwen3:8b")}
    assert [s.pattern for s in table.preloads()] == ["qwen3:8b"]


def test_runner_fingerprint_ignores_what_needs_no_restart() -> None:
    a = cf.parse_config('[models."a"]\nkv_cache_type = "q8_0"\nkeep_alive = "1m"').models.for_name(parse_name("a"))
    b = cf.parse_config('[models."a"]\nkv_cache_type = "q8_0"\noptions = { top_k = 3 }').models.for_name(
        parse_name("a"))
    c = cf.parse_config('[models."a"]\nkv_cache_type = "q4_0"').models.for_name(parse_name("a"))
    assert a.runner_fingerprint() == b.runner_fingerprint() != c.runner_fingerprint()


# -- config show ---------------------------------------------------------------------------------------------------
def test_config_show_prints_values_and_sources(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[server]\nkeep_alive = "10m"\napi_keys = ["secret"]\n\n[models."smollm2"]\nkv_cache_type = '
                    '"q8_0"\naliases = ["small"]\n')
    env = {"OLLAMA_PY_CONFIG": str(path), "OLLAMA_NUM_PARALLEL": "2", "OLLAMA_RUNNERS_DIR": str(tmp_path)}
    result = CliRunner().invoke(cli, ["config", "show", "--set", "max_queue=7"], env=env)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == f"# config file: {path}"

    def row(name: str) -> tuple[str, str]:
        text = next(line for line in lines if line.startswith(f"{name} = "))
        value, _, source = text.partition("#")
        return value.strip(), source.strip()

    assert row("keep_alive") == ('keep_alive = "10m"', f"file {path}:2")
    assert row("num_parallel") == ("num_parallel = 2", "env OLLAMA_NUM_PARALLEL")
    assert row("max_queue") == ("max_queue = 7", "flag --set")
    assert row("load_timeout") == ('load_timeout = "5m"', "default")
    assert row("api_keys") == ('api_keys = ["***"]', f"file {path}:3")  # never the secret itself
    assert "secret" not in result.output
    assert '[models."smollm2"]  # line 5' in lines
    assert 'kv_cache_type = "q8_0"' in lines


def test_config_show_output_is_a_valid_config(tmp_path: Path) -> None:
    env = {"OLLAMA_RUNNERS_DIR": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path), "OLLAMA_PY_CONFIG": ""}
    result = CliRunner().invoke(cli, ["config", "show"], env=env)
    assert result.exit_code == 0, result.output
    assert "# config file: none" in result.output
    reparsed = cf.resolve({}, cf.parse_config(result.output)).settings
    assert reparsed.keep_alive == 300.0 and math.isinf(cf.resolve({}, cf.parse_config(
        "[server]\nload_timeout = -1")).settings.load_timeout)


def test_serve_refuses_a_bad_file_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[server]\nnum_parallel = true\n")
    result = CliRunner().invoke(cli, ["serve", "--config", str(path)], env={"OLLAMA_RUNNERS_DIR": str(tmp_path)})
    assert result.exit_code == 1
    assert f"Error: {path}:2: server.num_parallel must be a whole number" in result.output
