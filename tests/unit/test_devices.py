"""estimate.devices: what `llama-server --list-devices` says, read back; the probe never outlives its deadline."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import psutil
import pytest

from ollama_py.estimate.devices import list_devices, parse_devices, runner_gpus

LISTING = """\
ggml_vulkan: Found 2 Vulkan devices:
Available devices:
  Vulkan0: llvmpipe (LLVM 15.0.6, 256 bits) (2048 MiB, 1500 MiB free)
  Vulkan1: AMD Radeon RX 7900 XTX (RADV NAVI31) (24560 MiB, 24000 MiB free)
  CUDA0: NVIDIA H100 80GB HBM3 (81079 MiB, 80542 MiB free)
  RPC0: 127.0.0.1:50052 (4096 MiB, 4000 MiB free)
"""


def test_parse_every_backend_in_order() -> None:
    devices = parse_devices(LISTING)
    assert [(d.name, d.backend, d.index) for d in devices] == [
        ("Vulkan0", "Vulkan", 0), ("Vulkan1", "Vulkan", 1), ("CUDA0", "CUDA", 0), ("RPC0", "RPC", 0)]
    assert devices[0].description == "llvmpipe (LLVM 15.0.6, 256 bits)"
    assert (devices[0].total, devices[0].free) == (2048 << 20, 1500 << 20)
    assert devices[3].description == "127.0.0.1:50052"


@pytest.mark.parametrize("text", [
    pytest.param("Available devices:\n", id="none"),
    pytest.param("", id="empty"),
    pytest.param("  Vulkan0: x (lots MiB, 1 MiB free)\n", id="garbled-memory"),
])
def test_parse_nothing(text: str) -> None:
    assert parse_devices(text) == []


def test_runner_gpus_keeps_one_library_with_the_runners_indices() -> None:
    gpus = runner_gpus(parse_devices(LISTING), "vulkan")
    assert [(g.index, g.uuid, g.library) for g in gpus] == [(0, "Vulkan0", "vulkan"), (1, "Vulkan1", "vulkan")]
    assert gpus[1].name == "AMD Radeon RX 7900 XTX (RADV NAVI31)"
    assert [g.uuid for g in runner_gpus(parse_devices(LISTING), "cuda")] == ["CUDA0"]


def _script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "llama-server"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_list_devices_runs_the_runner(tmp_path: Path) -> None:
    binary = _script(tmp_path, '[ "$1" = "--list-devices" ] || exit 3\n'
                               'echo "Available devices:"\necho "  Vulkan0: Test GPU ($VRAM MiB, 100 MiB free)"\n')
    devices = list_devices(binary, {"PATH": os.environ["PATH"], "VRAM": "512"})
    assert [(d.name, d.total, d.free) for d in devices] == [("Vulkan0", 512 << 20, 100 << 20)]


def test_a_hanging_probe_is_killed_with_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    binary = _script(tmp_path, f'sleep 300 & echo $! > {pidfile}\nwait\n')
    assert list_devices(binary, {"PATH": os.environ["PATH"]}, timeout=1.0) == []
    child = int(pidfile.read_text())

    def gone() -> bool:
        try:
            return psutil.Process(child).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True

    # the group was sent SIGKILL; on a busy machine its delivery can lag the probe's return by a moment
    deadline = time.monotonic() + 10
    while not gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone()


def test_a_missing_binary_is_no_devices(tmp_path: Path) -> None:
    assert list_devices(tmp_path / "nope", {}) == []
