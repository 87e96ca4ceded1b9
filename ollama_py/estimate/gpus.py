"""GPU and system-memory probes: what accelerators this host has and how much memory is free.

Every probe is a plain function the scheduler receives as a seam (`probe_gpus=`), so tests pass a
function that returns a fixed list instead. Nothing here runs at import time: pynvml is imported
inside `probe_nvidia`, and the environment is passed in rather than read from os.environ.

Indices: `GpuInfo.index` is the device's position among the *visible* CUDA devices (what llama-server
calls CUDA0, CUDA1, ... and what `--main-gpu` / `--tensor-split` count), not NVML's physical index;
`uuid` identifies the physical device.
"""

from __future__ import annotations

import logging
import platform
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import psutil

log = logging.getLogger(__name__)

GpuProbe = Callable[[Mapping[str, str]], tuple[list["GpuInfo"], str | None]]


@dataclass(frozen=True, slots=True)
class GpuInfo:
    index: int
    uuid: str
    name: str
    library: str  # "cuda" | "metal"
    total: int  # bytes
    free: int  # bytes
    compute: str  # "8.9" for CUDA; "" for Metal
    driver: str


@dataclass(frozen=True, slots=True)
class SystemMemory:
    total: int
    free: int
    swap_free: int


def _text(value: Any) -> str:
    # pynvml returned bytes before 11.5 and str after; accept both.
    return value.decode() if isinstance(value, bytes) else str(value)


def _visible(devices: list[tuple[int, str]], spec: str | None) -> list[tuple[int, str]] | None:
    """Filter (nvml_index, uuid) pairs by CUDA_VISIBLE_DEVICES, in the order it lists them.

    Like the CUDA runtime: unset means all; "" or "-1" means none; entries are indices or (prefixes of)
    "GPU-…"/"MIG-…" UUIDs; the list stops at the first entry that names no device. Returns None when the
    variable hides every device.
    """
    if spec is None:
        return devices
    chosen: list[tuple[int, str]] = []
    for raw in spec.split(","):
        entry = raw.strip()
        match: tuple[int, str] | None = None
        if entry.isdigit():
            match = next((d for d in devices if d[0] == int(entry)), None)
        elif entry.upper().startswith(("GPU-", "MIG-")):
            hits = [d for d in devices if d[1].lower().startswith(entry.lower())]
            match = hits[0] if len(hits) == 1 else None
        if match is None:
            break
        if match not in chosen:
            chosen.append(match)
    return chosen or None


def probe_nvidia(env: Mapping[str, str], *, nvml: Any = None) -> tuple[list[GpuInfo], str | None]:
    """NVIDIA GPUs through NVML, honouring CUDA_VISIBLE_DEVICES. Returns (gpus, why-none).

    `nvml` defaults to the pynvml module; tests pass a stand-in with the same functions.
    """
    if nvml is None:
        try:
            with warnings.catch_warnings():  # pynvml warns that nvidia-ml-py is its new name; same module
                warnings.simplefilter("ignore", FutureWarning)
                import pynvml  # noqa: PLC0415 - imported on use so importing us never loads NVML
        except ImportError as exc:  # pragma: no cover - pynvml is a dependency
            return [], f"pynvml is not installed ({exc})"
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
        return [], f"NVML unavailable: {exc}"
    try:
        count = nvml.nvmlDeviceGetCount()
        if not count:
            return [], "NVML found no NVIDIA GPU"
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in handles]
        visible = _visible(list(enumerate(uuids)), env.get("CUDA_VISIBLE_DEVICES"))
        if visible is None:
            return [], f"CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES', '')!r} hides every NVIDIA GPU"
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        gpus: list[GpuInfo] = []
        for ordinal, (phys, uuid) in enumerate(visible):
            handle = handles[phys]
            mem = nvml.nvmlDeviceGetMemoryInfo(handle)
            major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
            gpus.append(
                GpuInfo(
                    index=ordinal,
                    uuid=uuid,
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    library="cuda",
                    total=int(mem.total),
                    free=int(mem.free),
                    compute=f"{major}.{minor}",
                    driver=driver,
                )
            )
        return gpus, None
    except Exception as exc:
        return [], f"NVML error: {exc}"
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # shutting down after a failed init or query is best effort
            pass


def probe_metal(
    env: Mapping[str, str] | None = None,
    *,
    system: str | None = None,
    machine: str | None = None,
    total_memory: int | None = None,
) -> tuple[list[GpuInfo], str | None]:
    """The Apple Silicon GPU, sized by Metal's recommended working set (about 2/3 of RAM).

    Unified memory has no separate free figure; like Ollama we offer the whole working set.
    """
    system = platform.system() if system is None else system
    machine = platform.machine() if machine is None else machine
    if system != "Darwin":
        return [], "not macOS"
    if machine != "arm64":
        return [], f"Metal offload needs Apple Silicon, this Mac is {machine}"
    ram = psutil.virtual_memory().total if total_memory is None else total_memory
    working_set = ram * 2 // 3
    return [
        GpuInfo(
            index=0,
            uuid="0",
            name="Metal",
            library="metal",
            total=working_set,
            free=working_set,
            compute="",
            driver=platform.mac_ver()[0],
        )
    ], None


def probe_gpus(
    env: Mapping[str, str],
    *,
    nvidia: GpuProbe = probe_nvidia,
    metal: GpuProbe = probe_metal,
) -> list[GpuInfo]:
    """All usable GPUs: NVIDIA when NVML sees any, else Metal, else []. Logs one line when it is CPU."""
    gpus, why_not_nvidia = nvidia(env)
    if gpus:
        return gpus
    gpus, why_not_metal = metal(env)
    if gpus:
        return gpus
    log.info("no GPU, running on CPU: %s; %s", why_not_nvidia, why_not_metal)
    return []


def probe_system_memory() -> SystemMemory:
    vm = psutil.virtual_memory()
    return SystemMemory(total=int(vm.total), free=int(vm.available), swap_free=int(psutil.swap_memory().free))
