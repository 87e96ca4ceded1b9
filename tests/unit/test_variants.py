"""Runner variant choice (pure, with fake hosts), built-runner discovery and the on-disk list of bad variants."""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path

import pytest

from ollama_py.errors import OllamaError
from ollama_py.runner.variants import (
    BadVariants,
    HostInfo,
    _linux_cpu_flags,
    built_variants,
    candidate_order,
    choose_variant,
    is_sigill,
    probe_host,
)

AVX2 = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c"})
NO_F16C = frozenset({"sse4_2", "avx", "avx2", "fma"})
LINUX_X86 = HostInfo("x86_64", "Linux", AVX2, 0)
LINUX_X86_GPU = HostInfo("x86_64", "Linux", AVX2, 2)
OLD_X86 = HostInfo("x86_64", "Linux", NO_F16C, 0)
APPLE = HostInfo("arm64", "Darwin", frozenset(), 0)
INTEL_MAC = HostInfo("x86_64", "Darwin", AVX2, 0)
LINUX_ARM = HostInfo("aarch64", "Linux", frozenset({"fp", "asimd"}), 0)
LINUX_X86_VULKAN = HostInfo("x86_64", "Linux", AVX2, 0, vulkan_gpus=1)
LINUX_X86_BOTH = HostInfo("x86_64", "Linux", AVX2, 1, vulkan_gpus=1)
ALL = ("cuda", "metal", "cpu_avx2", "cpu")
WITH_VULKAN = ("cuda", "metal", "vulkan", "cpu_avx2", "cpu")


@pytest.mark.parametrize(
    ("host", "built", "bad", "expected"),
    [
        pytest.param(LINUX_X86_GPU, ALL, set(), ["cuda", "cpu_avx2", "cpu"], id="nvidia-gpu-cuda-first"),
        pytest.param(LINUX_X86, ALL, set(), ["cpu_avx2", "cpu"], id="no-gpu-skips-cuda"),
        pytest.param(LINUX_X86_GPU, ("cpu_avx2", "cpu"), set(), ["cpu_avx2", "cpu"], id="gpu-but-cuda-not-built"),
        pytest.param(OLD_X86, ALL, set(), ["cpu"], id="avx2-without-f16c"),
        pytest.param(APPLE, ALL, set(), ["metal", "cpu"], id="apple-silicon"),
        pytest.param(INTEL_MAC, ALL, set(), ["cpu_avx2", "cpu"], id="intel-mac-no-metal"),
        pytest.param(LINUX_ARM, ALL, set(), ["cpu"], id="arm-linux"),
        pytest.param(LINUX_X86, ALL, {"cpu_avx2"}, ["cpu"], id="bad-avx2-skipped"),
        pytest.param(LINUX_X86_GPU, ALL, {"cuda"}, ["cpu_avx2", "cpu"], id="bad-cuda-skipped"),
        pytest.param(LINUX_X86, ("cpu", "cpu_avx2", "custom"), set(), ["cpu_avx2", "cpu"], id="unknown-built-ignored"),
        pytest.param(LINUX_X86_VULKAN, WITH_VULKAN, set(), ["vulkan", "cpu_avx2", "cpu"], id="vulkan-gpu"),
        pytest.param(LINUX_X86, WITH_VULKAN, set(), ["cpu_avx2", "cpu"], id="vulkan-built-no-device"),
        pytest.param(LINUX_X86_BOTH, WITH_VULKAN, set(), ["cuda", "vulkan", "cpu_avx2", "cpu"],
                     id="cuda-before-vulkan"),
        pytest.param(LINUX_X86_VULKAN, WITH_VULKAN, {"vulkan"}, ["cpu_avx2", "cpu"], id="bad-vulkan-skipped"),
    ],
)
def test_candidate_order(host: HostInfo, built: tuple[str, ...], bad: set[str], expected: list[str]) -> None:
    assert candidate_order(host, built, bad=bad) == expected
    assert choose_variant(host, built, bad=bad) == expected[0]


@pytest.mark.parametrize(
    ("forced", "built", "bad", "expected"),
    [
        pytest.param("cpu", ALL, set(), "cpu", id="forced-cpu-over-avx2"),
        pytest.param("cuda", ALL, set(), "cuda", id="forced-cuda-without-gpu"),
        pytest.param("cpu_avx2", ALL, {"cpu_avx2"}, "cpu_avx2", id="forced-even-if-bad"),
        pytest.param("custom", ("custom", "cpu"), set(), "custom", id="forced-custom-built"),
    ],
)
def test_forced_variant_wins(forced: str, built: tuple[str, ...], bad: set[str], expected: str) -> None:
    assert candidate_order(LINUX_X86, built, forced=forced, bad=bad) == [expected]


@pytest.mark.parametrize(
    ("forced", "built", "message"),
    [
        pytest.param("cuda", ("cpu", "cpu_avx2"),
                     "OLLAMA_LLM_LIBRARY=cuda: that runner is not built (built: cpu, cpu_avx2); "
                     "build it with scripts/build_runners.sh cuda", id="known-not-built"),
        pytest.param("rocm", ("cpu",),
                     "OLLAMA_LLM_LIBRARY=rocm: unknown runner variant "
                     "(known: cuda, metal, vulkan, cpu_avx2, cpu; built: cpu)",
                     id="unknown"),
        pytest.param("cpu", (), "OLLAMA_LLM_LIBRARY=cpu: that runner is not built (built: none); "
                     "build it with scripts/build_runners.sh cpu", id="nothing-built"),
    ],
)
def test_forced_variant_missing(forced: str, built: tuple[str, ...], message: str) -> None:
    with pytest.raises(OllamaError) as err:
        choose_variant(LINUX_X86, built, forced=forced)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("host", "built", "bad", "message"),
    [
        pytest.param(LINUX_X86, (), set(),
                     "no usable llama-server runner for this host (built: none); "
                     "run scripts/build_runners.sh to build one", id="nothing-built"),
        pytest.param(LINUX_X86, ("cpu_avx2", "cpu"), {"cpu_avx2", "cpu"},
                     "no usable llama-server runner for this host (built: cpu, cpu_avx2; marked bad on this host: "
                     "cpu, cpu_avx2); run scripts/build_runners.sh to build one", id="all-bad"),
        pytest.param(OLD_X86, ("cpu_avx2", "metal"), set(),
                     "no usable llama-server runner for this host (built: cpu_avx2, metal); "
                     "run scripts/build_runners.sh to build one", id="none-suits-host"),
    ],
)
def test_nothing_usable(host: HostInfo, built: tuple[str, ...], bad: set[str], message: str) -> None:
    with pytest.raises(OllamaError) as err:
        choose_variant(host, built, bad=bad)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        pytest.param(-signal.SIGILL, True, id="killed-by-sigill"),
        pytest.param(128 + signal.SIGILL, True, id="shell-reported-sigill"),
        pytest.param(-signal.SIGSEGV, False, id="sigsegv"),
        pytest.param(1, False, id="exit-1"),
        pytest.param(0, False, id="clean"),
        pytest.param(None, False, id="still-running"),
    ],
)
def test_is_sigill(code: int | None, expected: bool) -> None:
    assert is_sigill(code) is expected


@pytest.mark.parametrize(
    ("cpuinfo", "expected"),
    [
        pytest.param("processor\t: 0\nflags\t\t: fpu sse avx2 FMA f16c\n\nprocessor\t: 1\nflags\t\t: fpu\n",
                     {"fpu", "sse", "avx2", "fma", "f16c"}, id="x86-first-core"),
        pytest.param("processor\t: 0\nFeatures\t: fp asimd evtstrm\n", {"fp", "asimd", "evtstrm"}, id="arm64"),
        pytest.param("processor\t: 0\n", set(), id="no-flags"),
    ],
)
def test_linux_cpu_flags(cpuinfo: str, expected: set[str]) -> None:
    assert _linux_cpu_flags(cpuinfo) == expected


def test_probe_host_on_this_machine() -> None:
    host = probe_host(count_nvidia_gpus=lambda: 3)
    assert host.machine and host.system
    assert host.nvidia_gpus == 3
    if host.system == "Linux" and host.machine == "x86_64":
        assert "sse2" in host.cpu_flags  # every x86-64 CPU has it


def _runner(root: Path, variant: str, *, executable: bool = True, info: dict | None = None) -> Path:
    d = root / variant
    d.mkdir(parents=True)
    binary = d / "llama-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755 if executable else 0o644)
    if info is not None:
        (d / "build-info.json").write_text(json.dumps(info))
    return binary


def test_built_variants(tmp_path: Path) -> None:
    avx2 = _runner(tmp_path, "cpu_avx2", info={"variant": "cpu_avx2", "key": "abc"})
    cpu = _runner(tmp_path, "cpu")
    _runner(tmp_path, "cuda", executable=False)
    (tmp_path / "metal").mkdir()
    assert built_variants(tmp_path) == {"cpu": cpu, "cpu_avx2": avx2}


def test_built_variants_of_a_missing_dir(tmp_path: Path) -> None:
    assert built_variants(tmp_path / "nope") == {}


def test_bad_variant_is_remembered_until_rebuilt(tmp_path: Path) -> None:
    runners, state = tmp_path / "runners", tmp_path / "data" / "bad-variants.json"
    _runner(runners, "cpu_avx2", info={"variant": "cpu_avx2", "key": "k1", "built_at": "2025-01-01T00:00:00Z"})
    _runner(runners, "cpu", info={"variant": "cpu", "key": "k2", "built_at": "2025-01-01T00:00:00Z"})
    assert BadVariants(state, runners).load() == set()

    BadVariants(state, runners).mark("cpu_avx2", "killed by SIGILL")
    assert BadVariants(state, runners).load() == {"cpu_avx2"}  # a new instance reads it back from disk
    entry = json.loads(state.read_text())["cpu_avx2"]
    assert entry["reason"] == "killed by SIGILL" and entry["build_key"].startswith("k1@")
    assert sorted(os.listdir(state.parent)) == ["bad-variants.json"]  # no temp file left behind

    host = LINUX_X86
    assert choose_variant(host, built_variants(runners), bad=BadVariants(state, runners).load()) == "cpu"

    (runners / "cpu_avx2" / "build-info.json").write_text(
        json.dumps({"variant": "cpu_avx2", "key": "k1", "built_at": "2025-02-01T00:00:00Z"}))
    assert BadVariants(state, runners).load() == set()  # rebuilt: it gets another chance
    assert choose_variant(host, built_variants(runners), bad=BadVariants(state, runners).load()) == "cpu_avx2"


def test_bad_variant_is_remembered_by_the_process_when_its_file_cannot_be_written(tmp_path: Path, caplog) -> None:
    """A data directory serve cannot write (a read-only HOME): the mark holds until serve stops, and the crash
    that made it still falls back to the next variant instead of failing on the write."""
    runners = tmp_path / "runners"
    _runner(runners, "cpu_avx2", info={"variant": "cpu_avx2", "key": "k1", "built_at": "2025-01-01T00:00:00Z"})
    _runner(runners, "cpu", info={"variant": "cpu", "key": "k2", "built_at": "2025-01-01T00:00:00Z"})
    (tmp_path / "data").write_text("a file where the data directory should be")
    bad = BadVariants(tmp_path / "data" / "bad-variants.json", runners)
    with caplog.at_level(logging.WARNING):
        bad.mark("cpu_avx2", "killed by SIGILL")
    assert bad.load() == {"cpu_avx2"}
    assert choose_variant(LINUX_X86, built_variants(runners), bad=bad.load()) == "cpu"
    assert "runner variant cpu_avx2 marked bad until serve stops" in caplog.text
    assert BadVariants(tmp_path / "data" / "bad-variants.json", runners).load() == set()  # this process only


def test_bad_variant_without_build_info_keys_on_the_binary(tmp_path: Path) -> None:
    runners, state = tmp_path / "runners", tmp_path / "bad.json"
    binary = _runner(runners, "cpu")
    bad = BadVariants(state, runners)
    bad.mark("cpu", "SIGILL")
    assert bad.load() == {"cpu"}
    binary.write_text("#!/bin/sh\n# rebuilt, different size\n")
    assert bad.load() == set()


def test_bad_variants_keeps_other_entries_and_survives_a_corrupt_file(tmp_path: Path) -> None:
    runners, state = tmp_path / "runners", tmp_path / "bad.json"
    _runner(runners, "cpu_avx2", info={"key": "a"})
    _runner(runners, "cuda", info={"key": "b"})
    state.write_text("{not json")
    bad = BadVariants(state, runners)
    assert bad.load() == set()
    bad.mark("cpu_avx2", "SIGILL")
    bad.mark("cuda", "SIGILL")
    assert bad.load() == {"cpu_avx2", "cuda"}


def _fake_runner(runners_dir: Path, listing: str) -> None:
    binary = runners_dir / "vulkan" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\nprintf '%s\\n' 'Available devices:' '" + listing + "'\n")
    binary.chmod(0o755)


@pytest.mark.parametrize(("listing", "env", "expected"), [
    pytest.param("  Vulkan0: Radeon (8192 MiB, 8000 MiB free)", {}, 1, id="listed"),
    pytest.param("  Vulkan0: Radeon (8192 MiB, 8000 MiB free)", {"OLLAMA_VULKAN": "0"}, 0, id="turned-off"),
    pytest.param("", {}, 0, id="no-device"),
])
def test_probe_host_counts_the_vulkan_runners_devices(tmp_path: Path, listing: str, env: dict[str, str],
                                                      expected: int) -> None:
    _fake_runner(tmp_path, listing)
    host = probe_host(count_nvidia_gpus=lambda: 0, runners_dir=tmp_path, env={"PATH": "/usr/bin:/bin", **env})
    assert host.vulkan_gpus == expected
