"""Per-model runner settings (a config file's [models."name"] tables) applied to a load plan.

`plan_with_settings` is the one place they take effect: slots, KV cache type and flash attention change what the
memory estimate plans for (so they go in through Settings), a pinned GPU and threads through the load options,
and the rest become llama-server flags (`runner_args`, pure); of those flags, the ones that move memory (experts
kept on the CPU, the devices, the K and V cache types; in extra_args too) reach the estimate as `RunnerMemory`.
The settings' fingerprint joins the plan's load options and the runner key (`runner_key`): two names on the same
weights with different settings get runners of their own, and a model's runner started with settings since
changed is replaced when it is next idle (the scheduler's lineage check), never mid-request.

`runner_flags(runners_dir)` lists the flags the built llama-server accepts (its `--help`, read once per binary):
an `extra_args` typo is a config error naming it rather than a runner that dies at load.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ollama_py.config import Settings
from ollama_py.config_file import (
    CACHE_K_FLAGS,
    CACHE_V_FLAGS,
    CPU_MOE_FLAGS,
    DEVICE_FLAGS,
    N_CPU_MOE_FLAGS,
    ModelSettings,
    flag_name,
    flag_value,
)
from ollama_py.runner import variants
from ollama_py.scheduler.scheduler import LoadPlan

log = logging.getLogger(__name__)

FINGERPRINT_KEY = "model_settings"


def runner_args(ms: ModelSettings, *, offload: bool = True) -> tuple[str, ...]:
    """The llama-server flags of the settings that have no LaunchSpec field of their own, then extra_args.
    `offload` False: the plan puts no layer on a GPU (its `--device none` must stay the last word)."""
    args: list[str] = []
    if ms.n_cpu_moe is not None:
        args += ["--n-cpu-moe", str(ms.n_cpu_moe)]
    if ms.device and offload:
        args += ["--device", ms.device]
    if ms.split_mode:
        args += ["--split-mode", ms.split_mode]  # after build_argv's own "--split-mode none": the last one counts
    return (*args, *ms.extra_args)


def planning_settings(settings: Settings, ms: ModelSettings) -> Settings:
    """The server settings with this model's slots, KV cache type, flash attention and prompt cache in place."""
    flash = settings.flash_attention
    if ms.flash_attention is not None:
        flash = None if ms.flash_attention == "auto" else ms.flash_attention
    return dataclasses.replace(settings, num_parallel=ms.num_parallel or settings.num_parallel,
                               kv_cache_type=ms.kv_cache_type or settings.kv_cache_type, flash_attention=flash,
                               cache_ram=settings.cache_ram if ms.cache_ram is None else ms.cache_ram)


def planning_options(options: dict[str, Any], ms: ModelSettings) -> dict[str, Any]:
    """The request's options with the model's threads (unless the request sets num_thread) and pinned GPU."""
    out = dict(options)
    if ms.threads and not out.get("num_thread"):
        out["num_thread"] = ms.threads
    if ms.main_gpu is not None:
        out["main_gpu"] = ms.main_gpu
    return out


def apply(plan: LoadPlan, ms: ModelSettings) -> LoadPlan:
    """The plan's launch spec with the model's GPU pinning, tensor split and flags, and its fingerprint."""
    changes: dict[str, Any] = {"extra": (*plan.spec.extra, *runner_args(ms, offload=plan.spec.n_gpu_layers != 0))}
    if ms.main_gpu is not None:
        changes["main_gpu"] = ms.main_gpu
    if ms.tensor_split:
        changes["tensor_split"] = ms.tensor_split
    spec = dataclasses.replace(plan.spec, **changes)
    fingerprint = ms.runner_fingerprint()
    load_options = {**plan.load_options, FINGERPRINT_KEY: fingerprint}
    return dataclasses.replace(plan, spec=spec, load_options=load_options, key=runner_key(plan.key, fingerprint))


_NO_SETTINGS = ModelSettings().runner_fingerprint()


def runner_key(key: str, fingerprint: tuple[Any, ...]) -> str:
    """A plan's runner key with the runner settings in it: two names on the same weights share a runner only when
    their settings are the same (a key without settings for a model with none, as the plan made it)."""
    if fingerprint == _NO_SETTINGS:
        return key
    digest = hashlib.sha256(repr(fingerprint).encode()).hexdigest()[:12]
    return f"{key}|settings={digest}"


def plan_with_settings(ms: ModelSettings, settings: Settings, options: dict[str, Any],
                       plan: Callable[[Settings, dict[str, Any], RunnerMemory], LoadPlan]) -> LoadPlan:
    """plan(settings, options, memory) (e.g. factory.plan_load) as this model's settings want it."""
    return apply(plan(planning_settings(settings, ms), planning_options(options, ms), runner_memory(ms)), ms)


ALL_LAYERS = 1 << 30  # --cpu-moe: the experts of every block


@dataclass(frozen=True, slots=True)
class RunnerMemory:
    """What a model's runner flags change about where its memory goes, for the estimate (factory.plan_load): the
    flags of its settings and of its extra_args, the last of a flag winning as in llama-server's own parsing."""

    n_cpu_moe: int = 0  # blocks whose MoE experts stay in host memory (ALL_LAYERS for --cpu-moe)
    devices: tuple[str, ...] | None = None  # --device: the only devices it may use; None: any, (): none
    kv_type_k: str | None = None  # -ctk / -ctv: over the kv_cache_type setting for K / V
    kv_type_v: str | None = None


def runner_memory(ms: ModelSettings) -> RunnerMemory:
    """The RunnerMemory of a model's runner flags (runner_args: its settings', then its extra_args). Pure."""
    args = runner_args(ms)
    n_cpu_moe, devices, kv_k, kv_v = 0, None, None, None
    for i, arg in enumerate(args):
        flag = flag_name(arg)
        if flag in CPU_MOE_FLAGS:
            n_cpu_moe = ALL_LAYERS
            continue
        value = flag_value(args, i)
        if value is None:
            continue
        if flag in N_CPU_MOE_FLAGS and value.isdigit():
            n_cpu_moe = max(n_cpu_moe, int(value))  # each one adds its overrides to llama-server's list
        elif flag in DEVICE_FLAGS:
            devices = () if value.strip() == "none" else tuple(d.strip() for d in value.split(",") if d.strip())
        elif flag in CACHE_K_FLAGS:
            kv_k = value
        elif flag in CACHE_V_FLAGS:
            kv_v = value
    return RunnerMemory(n_cpu_moe, devices, kv_k, kv_v)


# A flag column in llama-server's --help: "-t,    --threads N", "--spec-draft-type-k, -ctkd, --cache-type-k-draft TYPE"
_HELP_FLAG = re.compile(r"(?:^|,\s*)(-{1,2}[A-Za-z0-9][A-Za-z0-9_-]*)")


def parse_help_flags(text: str) -> frozenset[str]:
    """Every flag named in llama-server's --help output (lines that start with a flag, up to the description)."""
    flags: set[str] = set()
    for line in text.splitlines():
        if not line.startswith("-"):
            continue
        column = re.split(r"\s{2,}(?=[^-\s])", line, maxsplit=1)[0]  # the description starts after 2+ spaces
        flags.update(_HELP_FLAG.findall(column))
    return frozenset(flags)


@functools.lru_cache(maxsize=8)
def _help_flags(binary: str, mtime_ns: int) -> frozenset[str]:
    done = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60, check=False)
    return parse_help_flags(done.stdout + done.stderr)


def runner_flags(runners_dir: Path) -> frozenset[str] | None:
    """(Blocking: runs the binary once.) The flags the built llama-server accepts; None when none is built."""
    built = variants.built_variants(runners_dir)
    if not built:
        return None
    binary = next(iter(built.values()))
    try:
        flags = _help_flags(str(binary), binary.stat().st_mtime_ns)
    except (OSError, subprocess.SubprocessError) as e:
        log.warning("could not list the flags of %s: %s", binary, e)
        return None
    return flags or None
