"""Ollama's model options: their names, types, defaults and sane ranges, and the three ways they arrive.

    validate_options(obj)        the API's JSON `options` object        -> {name: typed value}
    parse_parameter(name, text)  a Modelfile PARAMETER / CLI /set value  -> typed value (None if deprecated)
    format_params(params)        /api/show's `parameters` text           -> "name<pad> value" lines

The names and defaults are the JSON tags of Ollama's `api.Options` (api/types.go, `DefaultOptions`). Texts of
errors follow Ollama's (`option "x" must be of type integer`, `unknown parameter 'x'`,
`invalid float value [x]`); range checks are ours, so a value that would crash or wedge llama-server is a 400
before anything is loaded.

Deliberate differences from Ollama: a JSON float with a fraction is refused for an integer option (Ollama
truncates 2.5 to 2); `stop` may be a single string; integers are shown as integers (Ollama stores every
number as float64 and prints num_ctx 1048576 as `1.048576e+06`).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from types import MappingProxyType
from typing import Any

from ollama_py.errors import InvalidOption
from ollama_py.template.gofmt import go_quote

log = logging.getLogger(__name__)

OPTION_TYPES: Mapping[str, type] = MappingProxyType(
    {
        "num_keep": int,
        "seed": int,
        "num_predict": int,
        "top_k": int,
        "top_p": float,
        "min_p": float,
        "typical_p": float,
        "repeat_last_n": int,
        "temperature": float,
        "repeat_penalty": float,
        "presence_penalty": float,
        "frequency_penalty": float,
        "stop": list,
        "num_ctx": int,
        "num_batch": int,
        "num_gpu": int,
        "main_gpu": int,
        "use_mmap": bool,
        "num_thread": int,
        "draft_num_predict": int,
        # ours, not Ollama's: prompt-lookup (n-gram) speculation, which needs no draft model: llama-server drafts
        # tokens by finding the text just generated earlier in the context (copying, editing, summarising).
        "draft_ngram": bool,
        # ours, not Ollama's: llama.cpp RPC workers ("host:port,host:port") for this model, a subset of the
        # operator's OLLAMA_RPC_SERVERS; "" means none (load locally). A Modelfile PARAMETER only, never per request.
        "rpc_servers": str,
        # ours: this model is a reranker (runs with llama-server's --reranking and answers /api/rerank), for a
        # GGUF whose metadata does not say so; false makes one that does an ordinary model. A Modelfile PARAMETER.
        "rerank": bool,
        # ours (Ollama #10925): the most tokens a thinking model may think before its closing tag is forced
        # (llama-server's reasoning budget); -1 no limit, 0 answer at once. Without it a `think` level sets one
        # (template/thinking.py); a config file's reasoning_budget is the model's default.
        "reasoning_budget": int,
    }
)

# api.DefaultOptions. num_ctx 0 means "the server decides" (OLLAMA_CONTEXT_LENGTH or the VRAM tier); None
# means auto (main_gpu: llama.cpp's choice, use_mmap: decided per model). `stop` has no default.
DEFAULT_OPTIONS: Mapping[str, int | float | bool | None] = MappingProxyType(
    {
        "num_keep": 4,
        "seed": -1,
        "num_predict": -1,
        "top_k": 40,
        "top_p": 0.9,
        "min_p": 0.0,
        "typical_p": 1.0,
        "repeat_last_n": 64,
        "temperature": 0.8,
        "repeat_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "num_ctx": 0,
        "num_batch": 512,
        "num_gpu": -1,
        "main_gpu": None,
        "use_mmap": None,
        "num_thread": 0,
        "draft_num_predict": 4,
        "draft_ngram": False,
        "rpc_servers": None,  # None: OLLAMA_RPC_SERVERS
        "rerank": None,  # None: the GGUF's metadata decides (GGUFInfo.is_reranker)
        "reasoning_budget": None,  # None: the think level decides (none for true)
    }
)

# Options fixed when llama-server starts; a change means a reload rather than a per-request field.
LOAD_OPTIONS: frozenset[str] = frozenset({"num_ctx", "num_batch", "num_gpu", "main_gpu", "use_mmap", "num_thread",
                                          "rpc_servers"})

# Options a request may not set, with why. rpc_servers would let a client choose where the weights are uploaded
# (any host:port): RPC workers are the operator's choice (OLLAMA_RPC_SERVERS, or a Modelfile within it).
MODEL_ONLY_OPTIONS: Mapping[str, str] = MappingProxyType({
    "rpc_servers": 'option "rpc_servers" cannot be set per request: RPC workers are chosen by the server '
                   "(OLLAMA_RPC_SERVERS, or a Modelfile PARAMETER naming some of them)",
    "rerank": 'option "rerank" cannot be set per request: whether a model is a reranker is a Modelfile PARAMETER',
})

# Accepted by older Ollama releases; a Modelfile naming one still parses (with a warning) and it is ignored.
DEPRECATED_PARAMETERS: frozenset[str] = frozenset(
    {
        "penalize_newline",
        "low_vram",
        "f16_kv",
        "logits_all",
        "vocab_only",
        "use_mlock",
        "mirostat",
        "mirostat_tau",
        "mirostat_eta",
        "numa",
        "tfs_z",
        "num_gqa",
    }
)

MAX_NUM_CTX = 1 << 24
_INT64 = (-(1 << 63), (1 << 63) - 1)
_FLOAT32_MAX = 3.4028234663852886e38

# (low, high) inclusive; None = open. Lower bounds keep llama.cpp's sentinels: -1 = all/infinite/auto,
# num_predict -2 = fill the context.
_RANGES: Mapping[str, tuple[float | None, float | None]] = MappingProxyType(
    {
        "num_keep": (-1, None),
        "num_predict": (-2, None),
        "top_k": (-1, None),
        "top_p": (0, 1),
        "min_p": (0, 1),
        "typical_p": (0, 1),
        "repeat_last_n": (-1, None),
        "temperature": (0, None),
        "repeat_penalty": (0, None),
        "num_ctx": (0, MAX_NUM_CTX),
        "num_batch": (0, MAX_NUM_CTX),
        "num_gpu": (-1, None),
        "main_gpu": (0, None),
        "num_thread": (0, 4096),
        "draft_num_predict": (0, 64),
        "reasoning_budget": (-1, None),
    }
)

_TYPE_WORDS = {int: "integer", float: "float32", bool: "boolean", str: "string", list: "array"}

# Go's strconv grammar for base-10 ParseInt and decimal ParseFloat (no hex floats, no inf/nan: absurd here).
_INT_TEXT = re.compile(r"[+-]?[0-9]+\Z", re.ASCII)
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?\Z", re.ASCII)
_BOOL_TEXT = {
    "1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True,
    "0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False,
}  # fmt: skip


def option_range(name: str) -> tuple[float | None, float | None]:
    """(low, high) an option's value must lie in, inclusive; None = open (openapi.json states them)."""
    return _RANGES.get(name, (None, None))


def validate_options(opts: object, *, per_request: bool = True) -> dict[str, Any]:
    """The API's `options` object checked and normalised: known names only, values of the option's type.

    Unknown keys are dropped (logged `invalid option provided`, as Ollama does); a null value is skipped. Ints
    are accepted for floats and whole floats for ints; a bool is never a number. `stop` may be one string.
    A request's options (per_request) may not name MODEL_ONLY_OPTIONS; a model's parameters may.
    """
    if opts is None:
        return {}
    if not isinstance(opts, dict):
        raise InvalidOption("option must be an object")
    out: dict[str, Any] = {}
    for name, value in opts.items():
        kind = OPTION_TYPES.get(name)
        if kind is None:
            if name in DEPRECATED_PARAMETERS:
                log.debug("deprecated option ignored: %s", name)
            else:
                log.warning("invalid option provided: %s", name)
            continue
        if value is None:
            continue
        if per_request and name in MODEL_ONLY_OPTIONS:
            raise InvalidOption(MODEL_ONLY_OPTIONS[name])
        out[name] = _check_range(name, _coerce_json(name, kind, value))
    return out


def _coerce_json(name: str, kind: type, value: object) -> Any:
    if kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
    elif kind is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif kind is list:
        if isinstance(value, str):
            return [value]
        if isinstance(value, list):
            if not all(isinstance(item, str) for item in value):
                raise InvalidOption(f'option "{name}" must be of an array of strings')
            return list(value)
    elif isinstance(value, str):
        return value
    raise InvalidOption(f'option "{name}" must be of type {_TYPE_WORDS[kind]}')


def _check_range(name: str, value: Any) -> Any:
    if isinstance(value, float):
        if not math.isfinite(value) or abs(value) > _FLOAT32_MAX:
            raise InvalidOption(f'option "{name}" must be a finite float32')
    elif isinstance(value, int) and not isinstance(value, bool) and not _INT64[0] <= value <= _INT64[1]:
        raise InvalidOption(f'option "{name}" is out of range')
    low, high = _RANGES.get(name, (None, None))
    if low is not None and high is not None and not low <= value <= high:
        raise InvalidOption(f'option "{name}" must be between {format_value(low)} and {format_value(high)}')
    if low is not None and value < low:
        raise InvalidOption(f'option "{name}" must be at least {format_value(low)}')
    return value


def parse_parameter(name: str, value: str) -> int | float | bool | str | None:
    """A Modelfile / CLI parameter string as its option's type; None (with a warning) for a deprecated name.

    `stop` gives the one string (callers accumulate a list). Errors are InvalidOption with Ollama's texts,
    which the Modelfile parser prefixes with the line number.
    """
    if name in DEPRECATED_PARAMETERS:
        log.warning("warning: parameter %s is deprecated", name)
        return None
    kind = OPTION_TYPES.get(name)
    if kind is None:
        raise InvalidOption(f"unknown parameter '{name}'")
    if kind is list or kind is str:
        return value
    text = value.strip(" \t")
    parsed: int | float | bool
    if kind is bool:
        if text not in _BOOL_TEXT:
            raise InvalidOption(f"invalid bool value [{value}]")
        parsed = _BOOL_TEXT[text]
    elif kind is int:
        if not _INT_TEXT.match(text):
            raise InvalidOption(f"invalid int value [{value}]")
        parsed = int(text)
        if not _INT64[0] <= parsed <= _INT64[1]:
            raise InvalidOption(f"invalid int value [{value}]")
    else:
        if not _FLOAT_TEXT.match(text):
            raise InvalidOption(f"invalid float value [{value}]")
        parsed = float(text)
        if not math.isfinite(parsed) or abs(parsed) > _FLOAT32_MAX:
            raise InvalidOption(f"invalid float value [{value}]")
    return _check_range(name, parsed)


def format_value(value: object) -> str:
    """A parameter value as Go's `%v` writes it: Modelfile PARAMETER lines, show's parameters text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _go_float(value)
    return str(value)


def format_params(params: Mapping[str, Any]) -> str:
    """/api/show's `parameters`: `fmt.Sprintf("%-30s %#v")` per value, one line per stop string."""
    lines: list[str] = []
    for name, value in params.items():
        for item in value if isinstance(value, list | tuple) else (value,):
            shown = go_quote(item) if isinstance(item, str) else format_value(item)
            lines.append(f"{name:<30} {shown}")
    return "\n".join(lines)


def _go_float(v: float) -> str:
    """strconv.FormatFloat(v, 'g', -1, 64): shortest digits; exponent form below 1e-4 and from 1e6."""
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    sign = "-" if math.copysign(1.0, v) < 0 else ""
    if v == 0:
        return sign + "0"
    dec = Decimal(repr(abs(v))).as_tuple()  # repr is the shortest round-tripping form, as Go's -1 precision
    raw = "".join(map(str, dec.digits))
    point = len(raw) + int(dec.exponent)  # how many digits stand before the decimal point
    digits = raw.rstrip("0")
    exp = point - 1
    if exp < -4 or exp >= 6:  # %g at shortest precision decides with precision 6
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{sign}{mantissa}e{'-' if exp < 0 else '+'}{abs(exp):02d}"
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"
