"""GPU and memory probes: NVML through a stand-in with pynvml's functions, Metal through platform values."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from ollama_py.estimate.gpus import GpuInfo, probe_gpus, probe_metal, probe_nvidia, probe_system_memory

GiB = 1024**3


@dataclass
class FakeDevice:
    uuid: str
    name: str
    total: int
    free: int
    cc: tuple[int, int] = (8, 9)


class FakeNvml:
    """The slice of pynvml that probe_nvidia uses; `fail` names a function that raises like NVML does."""

    def __init__(self, devices: list[FakeDevice], *, fail: str = "", as_bytes: bool = False) -> None:
        self.devices, self.fail, self.as_bytes = devices, fail, as_bytes
        self.shutdowns = 0

    def _check(self, fn: str) -> None:
        if self.fail == fn:
            raise RuntimeError(f"{fn} failed")

    def _text(self, s: str) -> str | bytes:
        return s.encode() if self.as_bytes else s

    def nvmlInit(self) -> None:
        self._check("nvmlInit")

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeDevice:
        return self.devices[i]

    def nvmlDeviceGetUUID(self, d: FakeDevice) -> str | bytes:
        return self._text(d.uuid)

    def nvmlDeviceGetName(self, d: FakeDevice) -> str | bytes:
        return self._text(d.name)

    def nvmlDeviceGetMemoryInfo(self, d: FakeDevice) -> SimpleNamespace:
        self._check("nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=d.total, free=d.free, used=d.total - d.free)

    def nvmlDeviceGetCudaComputeCapability(self, d: FakeDevice) -> tuple[int, int]:
        return d.cc

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        return self._text("550.54.15")


THREE = [
    FakeDevice("GPU-aaaa1111-0000", "NVIDIA A100", 80 * GiB, 70 * GiB, (8, 0)),
    FakeDevice("GPU-bbbb2222-0000", "NVIDIA L4", 24 * GiB, 20 * GiB, (8, 9)),
    FakeDevice("GPU-cccc3333-0000", "NVIDIA H100", 80 * GiB, 79 * GiB, (9, 0)),
]


@pytest.mark.parametrize(
    ("visible", "names"),
    [
        pytest.param(None, ["NVIDIA A100", "NVIDIA L4", "NVIDIA H100"], id="unset-all"),
        pytest.param("2,0", ["NVIDIA H100", "NVIDIA A100"], id="indices-in-given-order"),
        pytest.param("GPU-bbbb2222-0000", ["NVIDIA L4"], id="full-uuid"),
        pytest.param("GPU-cccc", ["NVIDIA H100"], id="uuid-prefix"),
        pytest.param("1,7,0", ["NVIDIA L4"], id="stops-at-unknown-index"),
        pytest.param("0, 1", ["NVIDIA A100", "NVIDIA L4"], id="spaces"),
    ],
)
def test_cuda_visible_devices(visible: str | None, names: list[str]) -> None:
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    gpus, reason = probe_nvidia(env, nvml=FakeNvml(THREE))
    assert [g.name for g in gpus] == names
    assert [g.index for g in gpus] == list(range(len(names)))  # llama-server's CUDA0, CUDA1, ...
    assert reason is None


@pytest.mark.parametrize("visible", ["", "-1", "GPU-ffff", "NoGPU"], ids=["empty", "minus-one", "unknown-uuid", "junk"])
def test_cuda_visible_devices_hiding_everything(visible: str) -> None:
    gpus, reason = probe_nvidia({"CUDA_VISIBLE_DEVICES": visible}, nvml=FakeNvml(THREE))
    assert gpus == []
    assert reason is not None and "CUDA_VISIBLE_DEVICES" in reason


def test_nvidia_fields() -> None:
    nvml = FakeNvml(THREE[2:], as_bytes=True)
    [gpu], reason = probe_nvidia({}, nvml=nvml)
    assert gpu == GpuInfo(0, "GPU-cccc3333-0000", "NVIDIA H100", "cuda", 80 * GiB, 79 * GiB, "9.0", "550.54.15")
    assert nvml.shutdowns == 1


@pytest.mark.parametrize(
    ("nvml", "expect"),
    [
        pytest.param(FakeNvml(THREE, fail="nvmlInit"), "NVML unavailable: nvmlInit failed", id="init-fails"),
        pytest.param(FakeNvml(THREE, fail="nvmlDeviceGetMemoryInfo"), "NVML error: nvmlDeviceGetMemoryInfo failed",
                     id="query-fails"),
        pytest.param(FakeNvml([]), "NVML found no NVIDIA GPU", id="no-devices"),
    ],
)
def test_nvml_failures_mean_no_gpu_with_a_reason(nvml: FakeNvml, expect: str) -> None:
    assert probe_nvidia({}, nvml=nvml) == ([], expect)


def test_probe_nvidia_with_the_real_pynvml_on_this_machine() -> None:
    gpus, reason = probe_nvidia(dict(os.environ))
    assert (gpus == []) == (reason is not None)
    if not os.path.exists("/dev/nvidiactl"):  # no NVIDIA driver here: the library or the device is missing
        assert gpus == []
        assert "NVML" in reason


@pytest.mark.parametrize(
    ("system", "machine", "expect_gpu", "reason"),
    [
        pytest.param("Darwin", "arm64", True, None, id="apple-silicon"),
        pytest.param("Darwin", "x86_64", False, "Metal offload needs Apple Silicon, this Mac is x86_64",
                     id="intel-mac"),
        pytest.param("Linux", "x86_64", False, "not macOS", id="linux"),
    ],
)
def test_probe_metal(system: str, machine: str, expect_gpu: bool, reason: str | None) -> None:
    gpus, why = probe_metal({}, system=system, machine=machine, total_memory=48 * GiB)
    assert why == reason
    if expect_gpu:
        [gpu] = gpus
        assert (gpu.library, gpu.index, gpu.total, gpu.free) == ("metal", 0, 32 * GiB, 32 * GiB)
    else:
        assert gpus == []


def _gpu(i: int) -> GpuInfo:
    return GpuInfo(i, f"GPU-{i}", "fake", "cuda", GiB, GiB, "8.9", "550")


def test_probe_gpus_prefers_nvidia() -> None:
    assert probe_gpus({}, nvidia=lambda env: ([_gpu(0)], None), metal=lambda env: ([], "x")) == [_gpu(0)]


def test_probe_gpus_falls_back_to_cpu_with_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ollama_py.estimate.gpus")
    gpus = probe_gpus({}, nvidia=lambda env: ([], "NVML unavailable: no library"), metal=lambda env: ([], "not macOS"))
    assert gpus == []
    [record] = caplog.records
    assert "CPU" in record.getMessage() and "NVML unavailable: no library" in record.getMessage()


def test_probe_system_memory() -> None:
    mem = probe_system_memory()
    assert mem.total > 0
    assert 0 < mem.free <= mem.total
    assert mem.swap_free >= 0
