"""The config file: one optional TOML file for the server's settings and per-model settings.

Where it is: `serve --config FILE`, else $OLLAMA_PY_CONFIG, else `config.toml` in the platform's user config dir
(platformdirs: ~/.config/ollama-py/ on Linux). Only the last may be absent; with no file everything behaves as
the OLLAMA_* variables say. Grammar (TOML):

    [server]                      every setting an OLLAMA_* variable sets, under a readable name (SERVER_FIELDS)
    keep_alive = "10m"
    [models."smollm2:135m"]       a local model name, or a glob ("qwen3*") matched against its short name
    aliases = ["small"]           extra names that resolve to it (exact names only)
    keep_alive = "1h"             default when a request gives none
    preload = true                loaded when serve starts
    num_parallel = 2              slots for this model only
    options = { temperature = 0.2 }          default options (over the Modelfile's, under the request's)
    kv_cache_type = "q8_0"        ... and the other runner settings in MODEL_FIELDS -> llama-server flags
    extra_args = ["--top-nsigma", "1"]
    [groups."small-box"]          models that may stay loaded together
    members = ["qwen3*", "smollm2:135m"]     names or globs, matched as [models."..."] are
    exclusive = true              loading a member first unloads (when idle) every model outside the group

Precedence, per server setting: flag (`--set name=value`) > environment variable > file > default. A section
for a glob applies first (in file order), an exact name's section last. Everything here is pure but `find_path`
and `read_config` (which read the file): parse into values, validate with the key's line, report the source.
"""

from __future__ import annotations

import difflib
import fnmatch
import math
import os
import re
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import platformdirs

from ollama_py.api.names import ModelName, parse_name
from ollama_py.api.options import OPTION_TYPES, validate_options
from ollama_py.config import FOREVER, Settings, _var, parse_duration, parse_host
from ollama_py.errors import ConfigError, OllamaError

CONFIG_ENV = "OLLAMA_PY_CONFIG"
KV_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")
SPLIT_MODES = ("none", "layer", "row", "tensor")
# Flags ollama-py sets itself on every runner: an extra_args entry naming one would break the gateway's control.
OWNED_FLAGS = frozenset({"--port", "--host", "--model", "-m", "--api-key", "--api-key-file", "--slot-save-path"})
# Flags ollama-py sets from its own plan (context per slot, slots, GPU layers, batch): one in extra_args would win
# over the plan's (the last flag counts) unseen by the memory estimate and the context the server truncates to.
# Each is refused with the setting that does the same through the plan.
PLANNED_FLAGS = {
    **dict.fromkeys(("-c", "--ctx-size"), "options = { num_ctx = N } (the context of each slot)"),
    **dict.fromkeys(("-np", "--parallel"), "num_parallel = N"),
    **dict.fromkeys(("-ngl", "--gpu-layers", "--n-gpu-layers"), "options = { num_gpu = N }"),
    **dict.fromkeys(("-b", "--batch-size", "-ub", "--ubatch-size"), "options = { num_batch = N }"),
    **dict.fromkeys(("-cram", "--cache-ram"), "cache_ram = MiB (the prompt cache, counted in the plan)"),
}
# Flags in extra_args that change memory and that the estimate reads (scheduler/model_settings.runner_memory)
CPU_MOE_FLAGS = ("-cmoe", "--cpu-moe")
N_CPU_MOE_FLAGS = ("-ncmoe", "--n-cpu-moe")
DEVICE_FLAGS = ("-dev", "--device")
CACHE_K_FLAGS = ("-ctk", "--cache-type-k")
CACHE_V_FLAGS = ("-ctv", "--cache-type-v")


def default_path() -> Path:
    return Path(platformdirs.user_config_dir("ollama-py")) / "config.toml"


def find_path(env: Mapping[str, str], flag: str | Path | None = None) -> Path | None:
    """The config file to read: the flag's, else $OLLAMA_PY_CONFIG's (both must exist), else the default one if
    it exists, else None."""
    named = str(flag) if flag else _var(dict(env), CONFIG_ENV)
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ConfigError(str(path), 0, "config file not found" if not path.exists() else "not a file")
        return path
    path = default_path()
    return path if path.is_file() else None


# -- the [server] table ---------------------------------------------------------------------------------------
def _duration(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("must be a duration: a Go duration string (\"5m\", \"1h30m\") or a number of seconds")
    return parse_duration(value)


def _timeout(value: object) -> float:
    seconds = _duration(value)
    return FOREVER if seconds <= 0 else seconds  # as the variables: 0 or less means no limit


def _uint(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("must be a whole number, 0 or more")
    return value


def _bool(value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError("must be true or false")
    return value


def _str(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


def _path(value: object) -> Path:
    return Path(_str(value)).expanduser()


def _paths(value: object) -> tuple[Path, ...]:
    if isinstance(value, str):  # the variable's form: separated by os.pathsep, as PATH is
        value = value.split(os.pathsep)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("must be a list of directories")
    return tuple(Path(v.strip()).expanduser() for v in value if v.strip())


def _strings(value: object) -> tuple[str, ...]:
    if isinstance(value, str):  # the variables' comma-separated form is accepted too
        value = [part for part in value.split(",")]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("must be a list of strings")
    return tuple(v.strip() for v in value if v.strip())


def _flash(value: object) -> str | None:
    if isinstance(value, bool):
        return "on" if value else "off"
    if value in ("on", "off", "auto"):
        return None if value == "auto" else str(value)
    raise ValueError('must be true, false, "on", "off" or "auto"')


def _kv_type(value: object) -> str:
    if value not in (*KV_CACHE_TYPES, ""):  # "": llama-server's default, f16
        raise ValueError(f"must be one of {', '.join(KV_CACHE_TYPES)}")
    return str(value)


def _context_length(value: object) -> int:
    return _uint(value) or 4096


@dataclass(frozen=True, slots=True)
class ServerField:
    name: str  # in the file
    env: tuple[str, ...]  # the variables that set it (the first is the documented one)
    attr: str  # Settings' field
    parse: Callable[[object], Any]
    help: str


SERVER_FIELDS: tuple[ServerField, ...] = (
    ServerField("host", ("OLLAMA_HOST",), "host", lambda v: parse_host(_str(v)), "address to listen on"),
    ServerField("models", ("OLLAMA_MODELS",), "models", _path, "the models directory"),
    ServerField("runners_dir", ("OLLAMA_RUNNERS_DIR",), "runners_dir", _path, "the llama-server builds"),
    ServerField("data_dir", ("OLLAMA_PY_DATA_DIR",), "data_dir", _path, "server.log, REPL history, bad variants"),
    ServerField("keep_alive", ("OLLAMA_KEEP_ALIVE",), "keep_alive", _duration, "how long an idle model stays"),
    ServerField("load_timeout", ("OLLAMA_LOAD_TIMEOUT",), "load_timeout", _timeout, "a load may stall this long"),
    ServerField("request_timeout", ("OLLAMA_REQUEST_TIMEOUT",), "request_timeout", _timeout,
                "a runner silent this long mid-request is replaced"),
    ServerField("read_timeout", ("OLLAMA_PY_READ_TIMEOUT",), "read_timeout", _timeout,
                "a client must send its request head within this"),
    ServerField("max_loaded_models", ("OLLAMA_MAX_LOADED_MODELS",), "max_loaded_models", _uint,
                "0: 3 per GPU, 3 on CPU"),
    ServerField("num_parallel", ("OLLAMA_NUM_PARALLEL",), "num_parallel", _uint,
                "slots per model; 0: 4 where memory allows, else 1"),
    ServerField("max_queue", ("OLLAMA_MAX_QUEUE",), "max_queue", _uint, "waiting requests before a 503 (429 on /v1)"),
    ServerField("context_length", ("OLLAMA_CONTEXT_LENGTH",), "context_length", _context_length,
                "default num_ctx"),
    ServerField("origins", ("OLLAMA_ORIGINS",), "origins", _strings, "extra allowed CORS origins"),
    ServerField("flash_attention", ("OLLAMA_FLASH_ATTENTION",), "flash_attention", _flash, "true, false or auto"),
    ServerField("kv_cache_type", ("OLLAMA_KV_CACHE_TYPE",), "kv_cache_type", _kv_type, "f16, q8_0, q4_0, ..."),
    ServerField("no_prune", ("OLLAMA_NOPRUNE",), "noprune", _bool, "keep unused blobs at start"),
    ServerField("sched_spread", ("OLLAMA_SCHED_SPREAD",), "sched_spread", _bool, "spread every model over all GPUs"),
    ServerField("llm_library", ("OLLAMA_LLM_LIBRARY",), "llm_library", _str, "force a runner variant"),
    ServerField("debug", ("OLLAMA_DEBUG",), "debug", _bool, "debug logging"),
    ServerField("gpu_overhead", ("OLLAMA_GPU_OVERHEAD",), "gpu_overhead", _uint, "bytes of VRAM kept free per GPU"),
    ServerField("no_history", ("OLLAMA_NOHISTORY",), "nohistory", _bool, "no REPL history"),
    ServerField("no_ui", ("OLLAMA_NOUI",), "noui", _bool, "no web console"),
    ServerField("no_cloud", ("OLLAMA_NO_CLOUD",), "no_cloud", _bool,
                "named by /api/status (cloud features are off either way)"),
    ServerField("api_keys", ("OLLAMA_API_KEYS", "OLLAMA_API_KEY_SERVER"), "api_keys", _strings,
                "bearer tokens required on every route"),
    ServerField("rpc_servers", ("OLLAMA_RPC_SERVERS",), "rpc_servers", _strings, "llama.cpp RPC workers"),
    ServerField("max_connections", ("OLLAMA_PY_MAX_CONNECTIONS",), "max_connections", _uint,
                "0: half the open-file limit"),
    ServerField("pull_min_rate", ("OLLAMA_PY_PULL_MIN_RATE",), "pull_min_rate", _uint,
                "bytes/s a pull's blob must average over each minute; 0: no minimum"),
    ServerField("import_dirs", ("OLLAMA_PY_IMPORT_DIRS",), "import_dirs", _paths,
                "server directories whose GGUFs /api/create may name as `from` paths; none by default"),
    ServerField("convert_timeout", ("OLLAMA_PY_CONVERT_TIMEOUT",), "convert_timeout", _timeout,
                "one Hugging Face conversion in /api/create may run this long"),
    ServerField("cache_ram", ("OLLAMA_CACHE_RAM",), "cache_ram", lambda v: None if v == "auto" else _uint(v),
                "MiB of RAM for each runner's prompt cache; 0: off; unset: its KV cache's size, at most 1 GiB"),
    ServerField("prompt_cache_disk", ("OLLAMA_PY_PROMPT_CACHE_DISK",), "prompt_cache_disk", _uint,
                "MiB of disk for slots saved at unload and restored at the next load; 0: off"),
    ServerField("runner_memory_limit", ("OLLAMA_PY_RUNNER_MEMORY_LIMIT",), "runner_memory_limit", _bool,
                "CPU runners get an address-space limit sized from their plan"),
)
SERVER_BY_NAME = {f.name: f for f in SERVER_FIELDS}


# -- the [models."name"] tables ---------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ModelSettings:
    """One [models."pattern"] table (or several merged: see ModelTable.for_name). None means unset."""

    pattern: str = ""
    line: int = 0  # of its [models."..."] header
    key_lines: Mapping[str, int] = field(default_factory=dict, compare=False)  # setting -> its line
    aliases: tuple[str, ...] = ()
    keep_alive: float | None = None
    preload: bool = False
    num_parallel: int | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    # runner settings: llama-server flags (scheduler/model_settings.runner_args)
    kv_cache_type: str | None = None
    flash_attention: str | None = None  # "on" | "off" | "auto"
    n_cpu_moe: int | None = None
    device: str | None = None
    main_gpu: int | None = None
    split_mode: str | None = None
    tensor_split: tuple[float, ...] | None = None
    reasoning_budget: int | None = None  # not a flag: the default of the request option (server/model_lookup.py)
    threads: int | None = None
    cache_ram: int | None = None  # MiB of the runner's prompt cache (--cache-ram), over the server's cache_ram
    extra_args: tuple[str, ...] = ()

    @property
    def is_glob(self) -> bool:
        return is_glob(self.pattern)

    def runner_fingerprint(self) -> tuple[Any, ...]:
        """What decides how its runner is started: a change means a restart (when idle)."""
        return tuple(getattr(self, name) for name in RUNNER_FIELDS)


RUNNER_FIELDS = ("num_parallel", "kv_cache_type", "flash_attention", "n_cpu_moe", "device", "main_gpu", "split_mode",
                 "tensor_split", "threads", "cache_ram", "extra_args")


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("must be a whole number")
    return value


def _budget(value: object) -> int:
    if _int(value) < -1:
        raise ValueError("must be -1 (no limit) or more")
    return int(value)  # type: ignore[call-overload]


def _pos_int(value: object) -> int:
    if _int(value) < 1:
        raise ValueError("must be 1 or more")
    return int(value)  # type: ignore[call-overload]


def _flash_model(value: object) -> str:
    return _flash(value) or "auto"


def _split_mode(value: object) -> str:
    if value not in SPLIT_MODES:
        raise ValueError(f"must be one of {', '.join(SPLIT_MODES)}")
    return str(value)


def _tensor_split(value: object) -> tuple[float, ...]:
    if not isinstance(value, list) or not value or not all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 for v in value):
        raise ValueError("must be a list of proportions, one per device (e.g. [3, 1])")
    return tuple(float(v) for v in value)


def _device(value: object) -> str:
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        value = ",".join(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError('must be a device name or a list of them (e.g. "CUDA0", ["CUDA0", "CUDA1"], "none")')
    return value.strip()


def _extra_args(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                              for v in value):
        raise ValueError('must be a list of llama-server arguments (e.g. ["--top-nsigma", "1"])')
    args = tuple(str(v) for v in value)
    for i, arg in enumerate(args):
        flag = flag_name(arg)
        if flag in OWNED_FLAGS:
            raise ValueError(f"{flag} is set by ollama-py itself and cannot be given here")
        if flag in PLANNED_FLAGS:
            raise ValueError(f"{flag} is planned by ollama-py (with the memory estimate) and cannot be given here: "
                             f"set {PLANNED_FLAGS[flag]} in this table instead")
        if flag in (*N_CPU_MOE_FLAGS, *DEVICE_FLAGS, *CACHE_K_FLAGS, *CACHE_V_FLAGS):
            given = flag_value(args, i)
            if given is None:
                raise ValueError(f"{flag} needs a value")
            if flag in N_CPU_MOE_FLAGS and not given.isdigit():
                raise ValueError(f"{flag} {given}: must be a number of layers (0 or more)")
            if flag in (*CACHE_K_FLAGS, *CACHE_V_FLAGS) and given not in KV_CACHE_TYPES:
                raise ValueError(f"{flag} {given}: must be one of {', '.join(KV_CACHE_TYPES)}")
    return args


def flag_value(args: tuple[str, ...], i: int) -> str | None:
    """The value of the flag at args[i]: after its "=", else the next argument (None when there is none)."""
    if "=" in args[i]:
        return args[i].split("=", 1)[1]
    return args[i + 1] if i + 1 < len(args) and not flag_name(args[i + 1]) else None


def _options(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("must be a table of options (e.g. { temperature = 0.2 })")
    unknown = [k for k in value if k not in OPTION_TYPES]
    if unknown:
        raise ValueError(f"unknown option '{unknown[0]}'{_suggest(unknown[0], OPTION_TYPES)}")
    try:
        return validate_options(value, per_request=False)
    except OllamaError as e:
        raise ValueError(str(e)) from None


def _aliases(value: object) -> tuple[str, ...]:
    names = _strings(value)
    for name in names:
        try:
            parse_name(name)
        except OllamaError:
            raise ValueError(f"'{name}' is not a valid model name") from None
    return names


MODEL_PARSERS: dict[str, Callable[[object], Any]] = {
    "aliases": _aliases, "keep_alive": _duration, "preload": _bool, "num_parallel": _pos_int,
    "options": _options, "kv_cache_type": _kv_type, "flash_attention": _flash_model, "n_cpu_moe": _uint,
    "device": _device, "main_gpu": _uint, "split_mode": _split_mode, "tensor_split": _tensor_split,
    "reasoning_budget": _budget, "threads": _pos_int, "cache_ram": _uint, "extra_args": _extra_args,
}
MODEL_FIELDS = tuple(MODEL_PARSERS)


def is_glob(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def flag_name(arg: str) -> str:
    """The flag an argument names ("--foo=1" -> "--foo"); "" for a value (including negative numbers)."""
    if not arg.startswith("-") or re.fullmatch(r"-[0-9.]+", arg):
        return ""
    return arg.split("=", 1)[0]


@dataclass(frozen=True, slots=True)
class ModelTable:
    """Every [models."..."] table, in file order; lookups by a stored model's name."""

    sections: tuple[ModelSettings, ...] = ()
    # for_name's answers by name (the tables never change: a reload makes a new ModelTable): every inference
    # request asks twice, for its options and its load plan
    _merged: dict[tuple[str, str, str, str], ModelSettings] = field(default_factory=dict, init=False, compare=False,
                                                                    repr=False)

    MEMO = 1024  # names remembered (stored models are looked up, so few); past it the memo starts again

    def for_name(self, name: ModelName) -> ModelSettings:
        """The merged settings for a model: glob sections in file order, then its exact section (later wins;
        options merge key by key, extra_args add up). The same object for the same name while the table lives."""
        key = name.key()
        merged = self._merged.get(key)
        if merged is None:
            if len(self._merged) >= self.MEMO:
                self._merged.clear()
            merged = self._merged[key] = self._merge(name)
        return merged

    def _merge(self, name: ModelName) -> ModelSettings:
        short = name.short.lower()
        globs = [s for s in self.sections if s.is_glob and _glob_matches(s.pattern, name)]
        exact = [s for s in self.sections if not s.is_glob and _same_name(s.pattern, name)]
        merged = ModelSettings(pattern=short)
        for section in [*globs, *exact]:
            changes: dict[str, Any] = {}
            for f in fields(ModelSettings):
                if f.name in ("pattern", "line", "key_lines"):
                    continue
                value = getattr(section, f.name)
                if f.name == "options":
                    changes["options"] = {**merged.options, **value}
                elif f.name == "extra_args":
                    changes["extra_args"] = merged.extra_args + value
                elif f.name == "aliases":
                    changes["aliases"] = merged.aliases + value
                elif f.name == "preload":
                    changes["preload"] = merged.preload or value
                elif value is not None:
                    changes[f.name] = value
            merged = replace(merged, **changes)
        return merged

    def aliases(self) -> dict[tuple[str, str, str, str], ModelName]:
        """Alias name (its key) -> the model it stands for."""
        out: dict[tuple[str, str, str, str], ModelName] = {}
        for section in self.sections:
            for alias in section.aliases:
                out[parse_name(alias).key()] = parse_name(section.pattern)
        return out

    def preloads(self) -> list[ModelSettings]:
        return [s for s in self.sections if s.preload]


def matches(pattern: str, name: ModelName) -> bool:
    """Whether a [models."..."] or group member pattern names this model: a glob or an exact name."""
    return _glob_matches(pattern, name) if is_glob(pattern) else _same_name(pattern, name)


@dataclass(frozen=True, slots=True)
class Group:
    """One [groups."name"] table."""

    name: str
    members: tuple[str, ...]  # model names or globs
    exclusive: bool = False
    line: int = field(default=0, compare=False)

    def has(self, model: ModelName) -> bool:
        return any(matches(member, model) for member in self.members)


@dataclass(frozen=True, slots=True)
class GroupTable:
    """Every [groups."..."] table, in file order."""

    groups: tuple[Group, ...] = ()

    def may_stay(self, loading: ModelName, loaded: ModelName) -> bool:
        """Whether `loaded` may stay loaded while `loading` is loaded: unless an exclusive group of `loading`
        leaves it out (with `loading` in several exclusive groups, `loaded` must be in each of them)."""
        return all(g.has(loaded) for g in self.groups if g.exclusive and g.has(loading))


def _same_name(pattern: str, name: ModelName) -> bool:
    try:
        return parse_name(pattern).key() == name.key()
    except OllamaError:
        return False


def _glob_matches(pattern: str, name: ModelName) -> bool:
    """A glob matches the short name ("qwen3:8b", "me/model:tag") or the name without its tag."""
    short = name.short.lower()
    pattern = pattern.lower()
    return fnmatch.fnmatchcase(short, pattern) or fnmatch.fnmatchcase(short.rsplit(":", 1)[0], pattern)


# -- parsing ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class ConfigFile:
    """A parsed, validated file: [server] values (with their lines) and the model tables."""

    path: Path | None = None
    server: Mapping[str, tuple[Any, int]] = field(default_factory=dict)
    models: ModelTable = field(default_factory=ModelTable)
    groups: GroupTable = field(default_factory=GroupTable)


_DECODE_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)$")


def parse_config(text: str, path: str = "config.toml") -> ConfigFile:
    """Parse and validate a config file's text. Raises ConfigError naming the file and line."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        message = str(e)
        m = _DECODE_POSITION.search(message)
        if m:
            raise ConfigError(path, int(m.group(1)), f"{message[:m.start()]} (column {m.group(2)})") from None
        raise ConfigError(path, 0, message) from None
    lines = KeyLines(text)
    for key in data:
        if key not in ("server", "models", "groups"):
            raise ConfigError(path, lines.find((key,)),
                              f"unknown table '{key}': the file has [server], [models.\"name\"] and "
                              f"[groups.\"name\"]{_suggest(key, ('server', 'models', 'groups'))}")
    server_table = data.get("server", {})
    if not isinstance(server_table, dict):
        raise ConfigError(path, lines.find(("server",)), "'server' must be a table: [server]")
    server: dict[str, tuple[Any, int]] = {}
    for key, raw in server_table.items():
        line = lines.find(("server", key))
        spec = SERVER_BY_NAME.get(key)
        if spec is None:
            raise ConfigError(path, line, f"unknown setting '{key}' in [server]{_suggest(key, SERVER_BY_NAME)}")
        try:
            server[key] = (spec.parse(raw), line)
        except ValueError as e:
            raise ConfigError(path, line, f"server.{key}{_reason(e)}") from None
    models_table = data.get("models", {})
    if not isinstance(models_table, dict):
        raise ConfigError(path, lines.find(("models",)), "'models' must be tables: [models.\"name\"]")
    sections = []
    seen_aliases: dict[str, str] = {}
    for pattern, table in models_table.items():
        header = lines.find(("models", pattern))
        if not isinstance(table, dict):
            raise ConfigError(path, header, f'models."{pattern}" must be a table: [models."{pattern}"]')
        if not is_glob(pattern):
            try:
                parse_name(pattern)
            except OllamaError:
                raise ConfigError(path, header, f"'{pattern}' is not a valid model name or glob") from None
        values, key_lines = _parse_table(path, lines, "models", pattern, table, MODEL_PARSERS, header)
        if values.get("aliases") and is_glob(pattern):
            raise ConfigError(path, lines.find(("models", pattern, "aliases")) or header,
                              f'models."{pattern}": aliases need an exact model name, not a glob')
        for alias in values.get("aliases", ()):
            key = "/".join(parse_name(alias).key())
            if key in seen_aliases or _same_name(alias, parse_name(pattern)):
                raise ConfigError(path, lines.find(("models", pattern, "aliases")) or header,
                                  f"alias '{alias}' is given twice" if key in seen_aliases
                                  else f"alias '{alias}' names the model itself")
            seen_aliases[key] = pattern
        sections.append(ModelSettings(pattern=pattern, line=header, key_lines=key_lines, **values))
    return ConfigFile(Path(path), server, ModelTable(tuple(sections)), _parse_groups(data, lines, path))


def _parse_table(path: str, lines: KeyLines, section: str, name: str, table: Mapping[str, Any],
                 parsers: Mapping[str, Callable[[object], Any]], header: int) -> tuple[dict[str, Any], dict[str, int]]:
    """One [section."name"] table's settings, each through its parser: (values, the line of each key). An unknown
    key or a bad value is a ConfigError at its own line."""
    values: dict[str, Any] = {}
    key_lines: dict[str, int] = {}
    for key, raw in table.items():
        line = key_lines[key] = lines.find((section, name, key)) or header
        parser = parsers.get(key)
        if parser is None:
            raise ConfigError(path, line, f"unknown setting '{key}' in [{section}.\"{name}\"]"
                                          f"{_suggest(key, parsers)}")
        try:
            values[key] = parser(raw)
        except ValueError as e:
            raise ConfigError(path, line, f'{section}."{name}".{key}{_reason(e)}') from None
    return values, key_lines


def _members(value: object) -> tuple[str, ...]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError('must be a list of model names or globs (e.g. ["qwen3*", "smollm2:135m"])')
    for member in value:
        if not is_glob(member):
            try:
                parse_name(member)
            except OllamaError:
                raise ValueError(f"'{member}' is not a valid model name or glob") from None
    return tuple(v.strip() for v in value)


GROUP_PARSERS: dict[str, Callable[[object], Any]] = {"members": _members, "exclusive": _bool}


def _parse_groups(data: Mapping[str, Any], lines: KeyLines, path: str) -> GroupTable:
    """The [groups."name"] tables: members (required) and exclusive."""
    table = data.get("groups", {})
    if not isinstance(table, dict):
        raise ConfigError(path, lines.find(("groups",)), "'groups' must be tables: [groups.\"name\"]")
    groups = []
    for name, group in table.items():
        header = lines.find(("groups", name))
        if not isinstance(group, dict):
            raise ConfigError(path, header, f'groups."{name}" must be a table: [groups."{name}"]')
        values, _ = _parse_table(path, lines, "groups", name, group, GROUP_PARSERS, header)
        if "members" not in values:
            raise ConfigError(path, header, f'groups."{name}" needs members (model names or globs)')
        groups.append(Group(name=name, line=header, **values))
    return GroupTable(tuple(groups))


def read_config(path: Path) -> ConfigFile:
    """(Blocking.) Read and parse a config file."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(str(path), 0, f"not UTF-8 text ({e.reason})") from None
    except OSError as e:
        raise ConfigError(str(path), 0, e.strerror or str(e)) from None
    return parse_config(text, str(path))


def check_extra_args(config: ConfigFile, known: frozenset[str]) -> None:
    """Every flag in an extra_args is one the runner knows (its --help lists it). Raises ConfigError."""
    for section in config.models.sections:
        for arg in section.extra_args:
            flag = flag_name(arg)
            if flag and flag not in known:
                raise ConfigError(str(config.path), section.key_lines.get("extra_args", section.line),
                                  f"models.\"{section.pattern}\".extra_args: llama-server has no flag {flag}"
                                  f"{_suggest(flag, known)}")


def _reason(e: ValueError) -> str:
    """The end of a message after the setting's name: " must be ..." or ": what is wrong"."""
    text = str(e)
    return f" {text}" if text.startswith("must") else f": {text}"


def _suggest(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


class KeyLines:
    """Where each key of a TOML text is defined (tomllib reports positions only for syntax errors).

    A light scan: table headers `[a."b".c]` / `[[a]]` set the current path, `key =` or `a.b =` lines define keys
    under it. Keys inside inline tables are found at their parent's line. Good enough to point at a line; the
    text is already known to be valid TOML."""

    def __init__(self, text: str) -> None:
        self.lines: dict[tuple[str, ...], int] = {}
        current: tuple[str, ...] = ()
        for number, line in enumerate(text.splitlines(), 1):
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                continue
            if stripped.startswith("["):
                inner = stripped.lstrip("[")
                keys, _ = _dotted_key(inner)
                if keys:
                    current = tuple(keys)
                    for i in range(1, len(current) + 1):
                        self.lines.setdefault(current[:i], number)
                continue
            keys, rest = _dotted_key(stripped)
            if keys and rest.lstrip().startswith("="):
                path = current + tuple(keys)
                for i in range(len(current) + 1, len(path) + 1):
                    self.lines.setdefault(path[:i], number)

    def find(self, path: tuple[str, ...]) -> int:
        """The line that defines this key, else that of its nearest defined parent, else 0."""
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return 0


_BARE = re.compile(r"[A-Za-z0-9_-]+")


def _dotted_key(text: str) -> tuple[list[str], str]:
    """A TOML dotted key at the start of text (bare, "basic" or 'literal' parts) and the text after it."""
    keys: list[str] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos >= len(text):
            return keys, ""
        ch = text[pos]
        if ch == '"':
            end = pos + 1
            out = []
            while end < len(text) and text[end] != '"':
                if text[end] == "\\" and end + 1 < len(text):
                    out.append(text[end + 1])
                    end += 2
                    continue
                out.append(text[end])
                end += 1
            keys.append("".join(out))
            pos = end + 1
        elif ch == "'":
            end = text.find("'", pos + 1)
            end = len(text) if end < 0 else end
            keys.append(text[pos + 1:end])
            pos = end + 1
        else:
            m = _BARE.match(text, pos)
            if not m:
                return keys, text[pos:]
            keys.append(m.group(0))
            pos = m.end()
        while pos < len(text) and text[pos] in " \t":
            pos += 1
        if pos < len(text) and text[pos] == ".":
            pos += 1
            continue
        return keys, text[pos:]


# -- precedence -------------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Resolved:
    """The effective settings, where each came from, and the model tables."""

    settings: Settings
    sources: Mapping[str, str]  # readable name -> "default" | "env OLLAMA_X" | "file PATH:LINE" | "flag --set"
    config: ConfigFile


def parse_flag(text: str) -> tuple[str, object]:
    """`name=value` of a `--set` flag; the value is read as a TOML value ("10m", 2, true, ["a"]), else as text."""
    name, eq, raw = text.partition("=")
    name = name.strip()
    if not eq or not name:
        raise ConfigError("--set", 0, f"'{text}' must be NAME=VALUE (e.g. keep_alive=10m)")
    try:
        value = tomllib.loads(f"v = {raw.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw.strip()
    return name, value


def resolve(env: Mapping[str, str], config: ConfigFile | None = None,
            flags: Mapping[str, object] | None = None) -> Resolved:
    """Settings by precedence: flag > environment variable > file > default. Raises ConfigError for a flag
    that names no setting or has a bad value."""
    env = dict(env)
    config = config or ConfigFile()
    from_env = Settings.from_env(env)
    defaults = Settings.from_env({})
    changes: dict[str, Any] = {}
    sources: dict[str, str] = {}
    parsed_flags: dict[str, Any] = {}
    for name, raw in (flags or {}).items():
        spec = SERVER_BY_NAME.get(name)
        if spec is None:
            raise ConfigError("--set", 0, f"unknown setting '{name}'{_suggest(name, SERVER_BY_NAME)}")
        try:
            parsed_flags[name] = spec.parse(raw)
        except ValueError as e:
            raise ConfigError("--set", 0, f"{name}{_reason(e)}") from None
    for spec in SERVER_FIELDS:
        set_by = next((var for var in spec.env if _var(env, var)), None)
        if spec.name in parsed_flags:
            changes[spec.attr] = parsed_flags[spec.name]
            sources[spec.name] = "flag --set"
        elif set_by is not None:
            changes[spec.attr] = getattr(from_env, spec.attr)
            sources[spec.name] = f"env {set_by}"
        elif spec.name in config.server:
            value, line = config.server[spec.name]
            changes[spec.attr] = value
            sources[spec.name] = f"file {config.path}:{line}"
        else:
            changes[spec.attr] = getattr(defaults, spec.attr)
            sources[spec.name] = "default"
    settings = replace(from_env, **changes, config_file=config.path)
    return Resolved(settings, sources, config)


def load(env: Mapping[str, str] | None = None, path: str | Path | None = None,
         flags: Mapping[str, object] | None = None) -> Resolved:
    """(Blocking.) Find, read and resolve: what `serve` and `config show` start from."""
    env = dict(os.environ if env is None else env)
    found = find_path(env, path)
    config = read_config(found) if found is not None else ConfigFile()
    return resolve(env, config, flags)


# -- showing ------------------------------------------------------------------------------------------------------
DURATIONS = frozenset({"keep_alive", "load_timeout", "request_timeout", "read_timeout"})


def format_duration(seconds: float) -> str:
    if math.isinf(seconds):
        return "-1"
    whole = int(seconds)
    if whole != seconds:
        return f'"{seconds:g}s"'
    for unit, size in (("h", 3600), ("m", 60)):
        if whole and whole % size == 0:
            return f'"{whole // size}{unit}"'
    return f'"{whole}s"'


def format_value(value: object) -> str:
    """A value as TOML, so `config show`'s output can be pasted into a file."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"{value:g}" if isinstance(value, float) else str(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(format_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {format_value(v)}" for k, v in value.items()) + " }"
    if value is None:
        return '"auto"'
    if hasattr(value, "url"):
        return format_value(value.url)  # Host
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def show(resolved: Resolved) -> str:
    """The effective settings as a commented TOML file: each [server] value with where it came from, then the
    model tables as the file gives them."""
    settings = resolved.settings
    path = resolved.config.path
    out = [f"# config file: {path}" if path else f"# config file: none (looked for ${CONFIG_ENV}, {default_path()})",
           "[server]"]
    rows = []
    for spec in SERVER_FIELDS:
        value = getattr(settings, spec.attr)
        if spec.name == "api_keys" and value:
            value = tuple("***" for _ in value)  # never print a secret
        text = format_duration(value) if spec.name in DURATIONS else format_value(value)
        rows.append((f"{spec.name} = {text}", resolved.sources[spec.name]))
    width = max(len(r[0]) for r in rows)
    out += [f"{text.ljust(width)}  # {source}" for text, source in rows]
    for section in resolved.config.models.sections:
        out += ["", f'[models."{section.pattern}"]  # line {section.line}']
        for name in MODEL_FIELDS:
            value = getattr(section, name)
            if value in (None, (), {}, False):
                continue
            out.append(f"{name} = {format_duration(value) if name in DURATIONS else format_value(value)}")
    for group in resolved.config.groups.groups:
        out += ["", f'[groups."{group.name}"]  # line {group.line}', f"members = {format_value(group.members)}",
                f"exclusive = {format_value(group.exclusive)}"]
    return "\n".join(out) + "\n"
