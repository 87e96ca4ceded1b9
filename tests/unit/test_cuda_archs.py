"""Which CUDA architectures a from-source cuda build compiles for (issue 35): this machine's GPUs, as nvidia-smi
reports their compute capability, not every architecture nvcc knows (each one costs as much compile time again);
OLLAMA_PY_CUDA_ARCHITECTURES or CMAKE_CUDA_ARCHITECTURES name others. The GPUs are a stand-in nvidia-smi."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

NVIDIA_SMI = """#!/bin/sh
case "$*" in
  -L) printf '%s\\n' "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)" "GPU 1: NVIDIA GeForce RTX 3090 (UUID: GPU-2)" \\
        "GPU 2: NVIDIA H100 80GB HBM3 (UUID: GPU-3)" ;;
  *--query-gpu=compute_cap*) printf '%s\\n' "9.0" "8.6" "9.0" ;;
  "") echo "| NVIDIA-SMI 580.95.05              Driver Version: 580.95.05      CUDA Version: 13.0     |" ;;
esac
"""


def cuda_archs(tmp_path: Path, **env: str) -> tuple[str, str]:
    (tmp_path / "nvidia-smi").write_text(NVIDIA_SMI)
    (tmp_path / "nvidia-smi").chmod(0o755)
    overrides = ("OLLAMA_PY_CUDA_ARCHITECTURES", "CMAKE_CUDA_ARCHITECTURES")
    base = {k: v for k, v in os.environ.items() if k not in overrides}
    done = subprocess.run([str(ROOT / "scripts/build_runners.sh"), "--cuda-archs"], capture_output=True, text=True,
                          env={**base, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}", **env}, check=True,
                          timeout=60)
    return done.stdout.strip(), done.stderr.strip()


def test_a_build_targets_this_machines_gpus_only(tmp_path: Path) -> None:
    archs, said = cuda_archs(tmp_path)
    assert archs == "86;90"
    assert said == ("cuda: compiling for sm_86 sm_90 only: this machine's GPU(s), compute capability 8.6,9.0 "
                    "(OLLAMA_PY_CUDA_ARCHITECTURES=all builds every architecture)")


@pytest.mark.parametrize("env", [
    pytest.param({"OLLAMA_PY_CUDA_ARCHITECTURES": "120"}, id="ollama-py-variable"),
    pytest.param({"CMAKE_CUDA_ARCHITECTURES": "120"}, id="cmake-variable"),
])
def test_a_named_architecture_wins(tmp_path: Path, env: dict[str, str]) -> None:
    assert cuda_archs(tmp_path, **env)[0] == "120"
