"""Accelerators as a runner sees them: `llama-server --list-devices`.

Ollama asks its runner which devices it can use rather than asking each vendor's library; so do we. One path
serves every backend llama.cpp was built with (CUDA, Vulkan, Metal, RPC): the runner prints

    Available devices:
      Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (2048 MiB, 2048 MiB free)
      CUDA0: NVIDIA H100 80GB HBM3 (81079 MiB, 80542 MiB free)

and `parse_devices` reads that. `list_devices` runs the probe with a deadline, in its own process group, tied
to our life (it must never outlive serve: a probe can hang on an unreachable RPC worker or a wedged driver).
`runner_gpus` turns the devices of one backend into the `GpuInfo`s the estimate places layers on.
Blocking: the server calls these through asyncio.to_thread (or once at start-up, before the loop serves).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ollama_py.estimate.gpus import GpuInfo

log = logging.getLogger(__name__)

# "  Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (2048 MiB, 2048 MiB free)": the last parenthesis holds memory
_LINE = re.compile(r"^\s*(?P<name>(?P<backend>[A-Za-z_]+?)(?P<index>\d+)):\s*(?P<desc>.*?)\s*"
                   r"\((?P<total>\d+) MiB, (?P<free>\d+) MiB free\)\s*$")

# llama.cpp's backend prefix -> our runner library name
LIBRARIES = {"CUDA": "cuda", "Vulkan": "vulkan", "MTL": "metal", "Metal": "metal", "RPC": "rpc", "ROCm": "rocm"}


@dataclass(frozen=True, slots=True)
class RunnerDevice:
    name: str  # "Vulkan0": what -dev / --device and the buffer log lines call it
    backend: str  # "Vulkan"
    index: int  # position among this backend's devices: what --main-gpu and --tensor-split count
    description: str
    total: int  # bytes
    free: int  # bytes


def parse_devices(text: str) -> list[RunnerDevice]:
    """Every device line of `llama-server --list-devices` output, in the order printed."""
    devices = []
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            devices.append(RunnerDevice(name=m["name"], backend=m["backend"], index=int(m["index"]),
                                        description=m["desc"], total=int(m["total"]) << 20,
                                        free=int(m["free"]) << 20))
    return devices


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    try:
        import ctypes  # noqa: PLC0415 - only in the forked child

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def list_devices(binary: Path | str, env: Mapping[str, str], *, extra: tuple[str, ...] = (),
                 timeout: float = 20.0) -> list[RunnerDevice]:
    """The devices `binary` would use under `env` (extra: e.g. ("--rpc", "host:port")). [] when the probe
    fails or runs past `timeout` (then its whole process group is killed)."""
    argv = [str(binary), *extra, "--list-devices"]
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**env, "GGML_NO_BACKTRACE": "1"}, start_new_session=True,
                                preexec_fn=_die_with_parent if os.name == "posix" else None)  # noqa: PLW1509
    except OSError as e:
        log.warning("could not list the devices of %s: %s", binary, e)
        return []
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.communicate()
        log.warning("%s --list-devices did not answer within %.0f s; assuming no devices", binary, timeout)
        return []
    return parse_devices(out.decode(errors="replace"))


def runner_gpus(devices: list[RunnerDevice], library: str) -> list[GpuInfo]:
    """The devices of one library ("vulkan", "cuda", "metal") as GpuInfo, indexed as the runner counts them."""
    return [GpuInfo(index=d.index, uuid=d.name, name=d.description or d.name, library=library, total=d.total,
                    free=d.free, compute="", driver="")
            for d in devices if LIBRARIES.get(d.backend) == library]


def device_names(gpu: GpuInfo) -> frozenset[str]:
    """What `--device` may call this GPU, lower-cased: its backend's name and index (CUDA0, Vulkan1, MTL0, ...),
    and the runner's own name for it when it came from `--list-devices` (runner_gpus keeps it as the uuid)."""
    names = {f"{backend}{gpu.index}".lower() for backend, library in LIBRARIES.items() if library == gpu.library}
    return frozenset({*names, gpu.uuid.lower()})


def pinned_gpus(gpus: list[GpuInfo], names: tuple[str, ...] | None) -> list[GpuInfo]:
    """The GPUs a `--device` list leaves a runner, in the list's order and indexed by their place in it (what
    llama.cpp's --main-gpu and --tensor-split then count). None: every GPU, as they are; () (`none`): no GPU. A
    name that matches no GPU here is left out (llama-server itself refuses a device it does not have)."""
    if names is None:
        return gpus
    chosen: list[GpuInfo] = []
    for name in names:
        gpu = next((g for g in gpus if name.strip().lower() in device_names(g) and g not in chosen), None)
        if gpu is not None:
            chosen.append(gpu)
    return [dataclasses.replace(g, index=i) for i, g in enumerate(chosen)]
