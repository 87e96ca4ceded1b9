"""Settings: one frozen dataclass built once from the environment (and CLI flags), then passed down.

Nothing below the CLI and the server's start-up reads os.environ; they get a Settings.
Variable names, defaults and parsing follow Ollama's envconfig.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import platformdirs

log = logging.getLogger(__name__)

DEFAULT_PORT = 11434
FOREVER = float("inf")
DEFAULT_RUNNERS_DIR = Path(__file__).resolve().parent.parent / "runners"

_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "μs": 1_000, "ms": 1_000_000, "s": 10**9, "m": 60 * 10**9,
            "h": 3600 * 10**9}  # µ is U+00B5 (micro sign), μ U+03BC (Greek mu): Go takes both
_DURATION_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")
MAX_DURATION_NS = (1 << 63) - 1  # Go's longest time.Duration, ~292 years: Ollama's "forever"


def parse_go_duration(text: str) -> int:
    """Nanoseconds from a Go duration string, by time.ParseDuration's grammar and errors.

        duration := "0" | [sign] (number unit)+      sign := "-" | "+"
        number   := digits ["." [digits]] | "." digits      unit := ns | us | µs | μs | ms | s | m | h

    One sign at most ("--5m" is refused), a unit after every number ("5" is refused; "0" alone is allowed),
    and a total beyond int64 nanoseconds is "invalid duration", as in Go. Raises ValueError with Go's text.
    """
    invalid = ValueError(f'time: invalid duration "{text}"')
    body = text
    negative = body[:1] == "-"
    if body[:1] in ("-", "+"):
        body = body[1:]
    if body == "0":
        return 0
    if not body:
        raise invalid
    total = 0
    pos = 0
    while pos < len(body):
        m = _DURATION_PART.match(body, pos)
        assert m is not None  # every part of the pattern may be empty
        whole, frac, unit = m.group(1), m.group(2) or "", m.group(3)
        if not whole and not frac:
            raise invalid
        if not unit:
            raise ValueError(f'time: missing unit in duration "{text}"')
        scale = _UNIT_NS.get(unit)
        if scale is None:
            raise ValueError(f'time: unknown unit "{unit}" in duration "{text}"')
        total += int(whole or "0") * scale + int(frac or "0") * scale // 10 ** len(frac)
        if total > MAX_DURATION_NS + negative:
            raise invalid
        pos = m.end()
    return -total if negative else total


def parse_duration(value: object) -> float:
    """Seconds from an Ollama duration: a number of seconds, or a Go duration string ("5m", "1h30m", "-1s").

    Negative means forever (returned as +inf), and so does a number of seconds past the longest Go duration
    (~292 years: Ollama's own "forever"), so no expiry time ever lies beyond what a clock can show. A numeric
    string counts as seconds (OLLAMA_KEEP_ALIVE=300, as Ollama's envconfig reads it). Raises ValueError else.
    """
    if isinstance(value, bool):
        raise ValueError(f"invalid duration {value!r}")
    if isinstance(value, (int, float)):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip().strip("\"'")
        try:
            seconds = float(text) if text.lstrip("+-")[:1].isdigit() else parse_go_duration(text) / 1e9
        except ValueError:
            seconds = parse_go_duration(text) / 1e9  # Go's error text
    else:
        raise ValueError(f"invalid duration {value!r}")
    if seconds != seconds:  # NaN
        raise ValueError(f"invalid duration {value!r}")
    return FOREVER if seconds < 0 or seconds * 1e9 >= MAX_DURATION_NS else seconds + 0.0  # -0 is 0


def _var(env: dict[str, str], key: str) -> str:
    return env.get(key, "").strip().strip("\"'").strip()


def _bool(env: dict[str, str], key: str) -> bool:
    raw = _var(env, key).lower()
    if not raw:
        return False
    return raw not in ("0", "false", "f", "no", "off")  # like Ollama: unparsable non-empty counts as true


def _uint(env: dict[str, str], key: str, default: int) -> int:
    raw = _var(env, key)
    if not raw:
        return default
    try:
        value = int(raw)
        if value < 0:
            raise ValueError
        return value
    except ValueError:
        log.warning("invalid environment variable, using default: %s=%r default=%s", key, raw, default)
        return default


def _optional_uint(env: dict[str, str], key: str) -> int | None:
    """A whole number 0 or more; None when unset (or invalid: logged, as _uint does)."""
    value = _uint(env, key, -1)
    return None if value < 0 else value


@dataclass(frozen=True, slots=True)
class Host:
    scheme: str
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"

    @property
    def is_loopback(self) -> bool:
        return self.host in ("127.0.0.1", "localhost", "::1") or self.host.startswith("127.")


def parse_host(raw: str) -> Host:
    """OLLAMA_HOST forms: "", "host", "host:port", ":port", "scheme://host[:port][/path]"."""
    raw = raw.strip().strip("\"'").strip()
    if not raw:
        return Host("http", "127.0.0.1", DEFAULT_PORT)
    scheme, default_port = "http", DEFAULT_PORT
    if "://" in raw:
        scheme, _, rest = raw.partition("://")
        default_port = {"http": 80, "https": 443}.get(scheme, DEFAULT_PORT)
    else:
        rest = raw
    parts = urlsplit(f"//{rest}")
    host = parts.hostname or "127.0.0.1"
    try:
        port = parts.port or default_port
    except ValueError:
        port = DEFAULT_PORT
    if host == "ollama.com" and "://" not in raw:
        scheme, port = "https", 443
    return Host(scheme, host, port)


def parse_import_dirs(value: str) -> tuple[Path, ...]:
    """OLLAMA_PY_IMPORT_DIRS: directories separated by os.pathsep (":"), as PATH is."""
    return tuple(Path(part.strip()).expanduser() for part in value.split(os.pathsep) if part.strip())


def default_models_dir() -> Path:
    return Path(platformdirs.user_data_dir("ollama-py")) / "models"


def data_dir() -> Path:
    return Path(platformdirs.user_data_dir("ollama-py"))


@dataclass(frozen=True, slots=True)
class Settings:
    host: Host = field(default_factory=lambda: parse_host(""))
    models: Path = field(default_factory=default_models_dir)
    runners_dir: Path = DEFAULT_RUNNERS_DIR
    keep_alive: float = 300.0
    load_timeout: float = 300.0
    request_timeout: float = 600.0  # a runner silent this long mid-request is hung: killed, the request fails
    max_loaded_models: int = 0  # 0 = auto (3 per GPU, 3 on CPU)
    num_parallel: int = 0  # 0 = auto: 4 slots where memory allows, else 1 (scheduler/policy.choose_parallel)
    max_queue: int = 512
    context_length: int = 4096
    origins: tuple[str, ...] = ()
    flash_attention: str | None = None  # "on" | "off" | None (auto)
    kv_cache_type: str = ""
    noprune: bool = False
    sched_spread: bool = False
    llm_library: str = ""
    debug: bool = False
    gpu_overhead: int = 0
    nohistory: bool = False
    no_cloud: bool = False  # OLLAMA_NO_CLOUD: cloud features are off here either way; /api/status names who said so
    noui: bool = False  # OLLAMA_NOUI: no web console at /ui
    api_keys: tuple[str, ...] = ()
    rpc_servers: tuple[str, ...] = ()
    max_body_bytes: int = 64 * 1024 * 1024  # OLLAMA_PY_MAX_BODY: a larger request body is a 413 (README)
    loop_warn_ms: int = 0  # OLLAMA_PY_LOOP_WARN_MS: log each time the event loop is held longer (0: off)
    prune_interval: float = 3600.0  # OLLAMA_PY_PRUNE_INTERVAL: seconds between two passes of the blob prune
    max_connections: int = 0  # OLLAMA_PY_MAX_CONNECTIONS; 0: half the open-file limit, at most 16384
    read_timeout: float = 30.0  # OLLAMA_PY_READ_TIMEOUT: a request head, or a pause in a body, may take this long
    # OLLAMA_PY_PULL_MIN_RATE: bytes/s a blob download must average over each minute, or the pull fails; 0: none
    pull_min_rate: int = 8 * 1024
    # OLLAMA_PY_IMPORT_DIRS (os.pathsep-separated): server directories whose GGUFs /api/create may name as `from`
    # paths; empty: none (clients upload blobs, as Ollama's do)
    import_dirs: tuple[Path, ...] = ()
    convert_timeout: float = 3600.0  # OLLAMA_PY_CONVERT_TIMEOUT: one Hugging Face conversion may run this long
    data_dir: Path = field(default_factory=data_dir)
    # OLLAMA_CACHE_RAM: MiB of host RAM each runner's prompt cache may hold (llama-server's --cache-ram); 0 turns
    # it off; None: as much as the runner's own KV cache, at most 1 GiB (estimate/memory.prompt_cache_bytes)
    cache_ram: int | None = None
    # OLLAMA_PY_PROMPT_CACHE_DISK: MiB of disk for runners' slots saved at unload and restored at the next load
    # (runner/slot_cache.py); 0 turns it off
    prompt_cache_disk: int = 4096
    runner_memory_limit: bool = True  # OLLAMA_PY_RUNNER_MEMORY_LIMIT: CPU runners get an address-space limit
    config_file: Path | None = None  # the TOML file these came from in part (config_file.py), watched by serve

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides: Any) -> Settings:
        env = dict(os.environ if env is None else env)

        def duration(key: str, default: float) -> float:
            raw = _var(env, key)
            if not raw:
                return default
            try:
                return parse_duration(raw)
            except ValueError:
                log.warning("invalid environment variable, using default: %s=%r", key, raw)
                return default

        load_timeout = duration("OLLAMA_LOAD_TIMEOUT", 300.0)
        if load_timeout <= 0:
            load_timeout = FOREVER
        request_timeout = duration("OLLAMA_REQUEST_TIMEOUT", 600.0)
        if request_timeout <= 0:
            request_timeout = FOREVER
        read_timeout = duration("OLLAMA_PY_READ_TIMEOUT", 30.0)
        convert_timeout = duration("OLLAMA_PY_CONVERT_TIMEOUT", 3600.0)
        fa = _var(env, "OLLAMA_FLASH_ATTENTION")
        flash = None if not fa else ("off" if fa.lower() in ("0", "false", "off", "no") else "on")
        models = _var(env, "OLLAMA_MODELS")
        runners = _var(env, "OLLAMA_RUNNERS_DIR")
        keys = _var(env, "OLLAMA_API_KEYS") or _var(env, "OLLAMA_API_KEY_SERVER")
        settings = cls(
            host=parse_host(env.get("OLLAMA_HOST", "")),
            models=Path(models).expanduser() if models else default_models_dir(),
            runners_dir=Path(runners).expanduser() if runners else DEFAULT_RUNNERS_DIR,
            keep_alive=duration("OLLAMA_KEEP_ALIVE", 300.0),
            load_timeout=load_timeout,
            request_timeout=request_timeout,
            max_loaded_models=_uint(env, "OLLAMA_MAX_LOADED_MODELS", 0),
            num_parallel=_uint(env, "OLLAMA_NUM_PARALLEL", 0),
            max_queue=_uint(env, "OLLAMA_MAX_QUEUE", 512),
            context_length=_uint(env, "OLLAMA_CONTEXT_LENGTH", 0) or 4096,
            origins=tuple(o.strip() for o in _var(env, "OLLAMA_ORIGINS").split(",") if o.strip()),
            flash_attention=flash,
            kv_cache_type=_var(env, "OLLAMA_KV_CACHE_TYPE"),
            noprune=_bool(env, "OLLAMA_NOPRUNE"),
            sched_spread=_bool(env, "OLLAMA_SCHED_SPREAD"),
            llm_library=_var(env, "OLLAMA_LLM_LIBRARY"),
            debug=_bool(env, "OLLAMA_DEBUG"),
            gpu_overhead=_uint(env, "OLLAMA_GPU_OVERHEAD", 0),
            nohistory=_bool(env, "OLLAMA_NOHISTORY"),
            no_cloud=_bool(env, "OLLAMA_NO_CLOUD"),
            noui=_bool(env, "OLLAMA_NOUI"),
            api_keys=tuple(k.strip() for k in keys.split(",") if k.strip()),
            data_dir=Path(_var(env, "OLLAMA_PY_DATA_DIR")).expanduser() if _var(env, "OLLAMA_PY_DATA_DIR")
            else data_dir(),
            rpc_servers=tuple(s.strip() for s in _var(env, "OLLAMA_RPC_SERVERS").split(",") if s.strip()),
            max_connections=_uint(env, "OLLAMA_PY_MAX_CONNECTIONS", 0),
            max_body_bytes=_uint(env, "OLLAMA_PY_MAX_BODY", 64 * 1024 * 1024) or 64 * 1024 * 1024,
            loop_warn_ms=_uint(env, "OLLAMA_PY_LOOP_WARN_MS", 0),
            prune_interval=float(_uint(env, "OLLAMA_PY_PRUNE_INTERVAL", 3600) or 3600),
            read_timeout=read_timeout if read_timeout > 0 else FOREVER,
            pull_min_rate=_uint(env, "OLLAMA_PY_PULL_MIN_RATE", 8 * 1024),
            import_dirs=parse_import_dirs(_var(env, "OLLAMA_PY_IMPORT_DIRS")),
            convert_timeout=convert_timeout if convert_timeout > 0 else FOREVER,
            cache_ram=_optional_uint(env, "OLLAMA_CACHE_RAM"),
            prompt_cache_disk=_uint(env, "OLLAMA_PY_PROMPT_CACHE_DISK", 4096),
            runner_memory_limit=not _var(env, "OLLAMA_PY_RUNNER_MEMORY_LIMIT")
            or _bool(env, "OLLAMA_PY_RUNNER_MEMORY_LIMIT"),
        )
        return replace(settings, **overrides) if overrides else settings
