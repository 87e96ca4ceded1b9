"""The CUDA build on a machine with only the NVIDIA driver: no nvcc on PATH, no CUDA_HOME, a GPU that nvidia-smi
lists. scripts/build_runners.sh assembles the toolkit from the pinned PyPI wheels (scripts/cuda-wheels-13.txt)
into the cache and compiles for this machine's GPU architecture only.

The GPU is a stand-in `nvidia-smi` (an H200: compute capability 9.0, a driver that runs CUDA 13.0); everything
else is real: pip checks the wheels' hashes, the toolkit is laid out in ~/.cache/ollama-py/cuda-toolkit-13, CMake
configures the cuda variant with it and nvcc compiles ggml-cuda.cu. The first run downloads ~0.5 GB of wheels
into the cache; later runs find the toolkit and the compiled object there.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

pytestmark = pytest.mark.integration

FAKE_NVIDIA_SMI = """#!/bin/sh
case "$*" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-8c2e1c1a-93e3-5b7f-0b43-5d8a1fa5c0de)" ;;
  *--query-gpu=compute_cap*) echo "9.0" ;;
  "") echo "| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |" ;;
  *) exit 6 ;;
esac
"""


def driver_only_env(tmp_path: Path, cuda_version: str = "13.0") -> dict[str, str]:
    """This machine as a driver-only GPU host: the fake nvidia-smi (its driver running CUDA `cuda_version`) first
    on PATH, every directory holding an nvcc left out, and no CUDA_HOME or architecture override."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI.replace("CUDA Version: 13.0", f"CUDA Version: {cuda_version}"))
    smi.chmod(0o755)
    path = [str(bin_dir)] + [d for d in os.environ["PATH"].split(os.pathsep) if d and not (Path(d) / "nvcc").exists()]
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_HOME", "CUDA_PATH", "CMAKE_CUDA_ARCHITECTURES", "OLLAMA_PY_CUDA_ARCHITECTURES",
                        "CUDACXX")}
    env["PATH"] = os.pathsep.join(path)
    return env


def test_check_cuda_on_a_driver_only_host_builds_the_toolkit_from_wheels_for_sm_90_only(tmp_path: Path) -> None:
    env = driver_only_env(tmp_path)
    assert subprocess.run(["bash", "-c", "command -v nvcc"], env=env, capture_output=True).returncode != 0

    done = subprocess.run([str(ROOT / "scripts/build_runners.sh"), "--check-cuda"], env=env, capture_output=True,
                          text=True, timeout=3600, check=False)

    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    cache = Path(env.get("OLLAMA_PY_CACHE") or Path.home() / ".cache/ollama-py")
    toolkit = cache / "cuda-toolkit-13"
    # the toolkit came from the wheels (this run or an earlier one), laid out as nvcc and CMake expect it
    assert re.search(r"(assembling the CUDA 13 toolkit|using the CUDA 13 toolkit assembled) from PyPI wheels", out), out
    for part in ("bin/nvcc", "include/cuda_runtime.h", "include/cublas_v2.h", "lib64/libcudart.so", "nvvm/bin/cicc"):
        assert (toolkit / part).exists(), part
    # ... and compiled the CUDA backend for this GPU's architecture, and that one only
    assert "compiles for sm_90 only" in out, out
    assert f"nvcc {toolkit}/bin/nvcc" in out, out


def test_a_driver_that_runs_only_cuda_12_is_told_what_to_install(tmp_path: Path) -> None:
    """CUDA 12's PyPI nvcc wheel has no compiler: such a host gets no cuda variant, and one line saying why."""
    env = driver_only_env(tmp_path, cuda_version="12.4")

    done = subprocess.run([str(ROOT / "scripts/build_runners.sh"), "--check-cuda"], env=env, capture_output=True,
                          text=True, timeout=600, check=False)

    assert done.returncode != 0
    assert "the NVIDIA driver runs CUDA 12" in done.stderr and "install a CUDA 12 toolkit" in done.stderr
    assert "update the driver to 580 or newer" in done.stderr
