"""Which llama-server build (runner variant) to run on this host, and which ones crashed here before.

Runners live in `runners/<variant>/llama-server` (built by scripts/build_runners.sh, each with a
build-info.json). The choice is a pure function of a `HostInfo` and the set of built variants; the
host probe and the on-disk list of bad variants are the only I/O.

CPU flags alone are not trusted: a flag can be present while the kernel or hypervisor does not let
the code run (and an over-eager build can hold instructions the CPU lacks). A runner that dies with
SIGILL is recorded in `BadVariants` and the caller moves on to the next entry of `candidate_order`.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ollama_py.errors import OllamaError

log = logging.getLogger(__name__)

# Best first. Vulkan comes after the vendor backends (CUDA is faster on NVIDIA cards) and before the CPU builds.
VARIANT_ORDER: tuple[str, ...] = ("cuda", "metal", "vulkan", "cpu_avx2", "cpu")
AVX2_FLAGS = frozenset({"avx2", "fma", "f16c"})
SERVER_BINARY = "llama-server"
BUILD_INFO = "build-info.json"
BUILD_HINT = "run scripts/build_runners.sh to build one"


@dataclass(frozen=True)
class HostInfo:
    machine: str  # platform.machine(): "x86_64", "arm64", "aarch64", ...
    system: str  # platform.system(): "Linux", "Darwin", ...
    cpu_flags: frozenset[str]
    nvidia_gpus: int
    vulkan_gpus: int = 0  # GPUs the vulkan runner lists (0 when it is not built or OLLAMA_VULKAN=0)


def _linux_cpu_flags(cpuinfo: str) -> frozenset[str]:
    # x86 kernels say "flags", arm64 kernels say "Features"; every core repeats the same line.
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.lower().split())
    return frozenset()


def _macos_cpu_flags() -> frozenset[str]:
    flags: set[str] = set()
    for key in ("machdep.cpu.features", "machdep.cpu.leaf7_features"):  # absent on Apple Silicon
        try:
            out = subprocess.run(["sysctl", "-n", key], capture_output=True, text=True, timeout=5, check=False)
        except (OSError, subprocess.SubprocessError):
            continue
        flags.update(out.stdout.lower().split())
    return frozenset(flags)


def vulkan_enabled(env: Mapping[str, str]) -> bool:
    """OLLAMA_VULKAN=0 (or false/no/off) keeps the vulkan runner out of the automatic choice."""
    return env.get("OLLAMA_VULKAN", "").strip().lower() not in ("0", "false", "no", "off")


def count_vulkan_gpus(runners_dir: Path, env: Mapping[str, str]) -> int:
    """How many Vulkan devices the built vulkan runner sees under `env` (its own --list-devices); 0 without one."""
    binary = runners_dir / "vulkan" / SERVER_BINARY
    if not vulkan_enabled(env) or not (binary.is_file() and os.access(binary, os.X_OK)):
        return 0
    from ollama_py.estimate.devices import list_devices, runner_gpus  # noqa: PLC0415 - a probe, on use

    return len(runner_gpus(list_devices(binary, runner_env(binary, env)), "vulkan"))


def runner_env(binary: Path, env: Mapping[str, str]) -> dict[str, str]:
    """`env` for running `binary`: the directories its build-info.json lists as "library_path" (a cuda runner's
    libcudart and cuBLAS, in the toolkit it was built with: scripts/build_runners.sh writes them) first on
    LD_LIBRARY_PATH, those of them that exist. Without such a list, `env` as it is."""
    listed = read_build_info(binary.parent).get("library_path")
    dirs = [d for d in listed if isinstance(d, str) and d and os.path.isdir(d)] if isinstance(listed, list) else []
    if not dirs:
        return dict(env)
    current = env.get("LD_LIBRARY_PATH", "")
    return {**env, "LD_LIBRARY_PATH": os.pathsep.join([*dirs, *([current] if current else [])])}


# What a GPU variant looks for, and what to check when it finds nothing.
_NO_DEVICE = {
    "vulkan": ("--list-devices showed no Vulkan device",
               "is a Vulkan driver installed (mesa-vulkan-drivers for AMD and Intel GPUs, the NVIDIA driver's Vulkan "
               "ICD for NVIDIA) together with the Vulkan loader (libvulkan1)?"),
    "cuda": ("neither NVML nor its --list-devices found an NVIDIA GPU",
             "is the NVIDIA driver loaded (does `nvidia-smi -L` list the GPU?), and does CUDA_VISIBLE_DEVICES leave "
             "one visible?"),
    "metal": ("--list-devices showed no Metal device", "Metal offload needs a Mac with Apple Silicon."),
}


def no_device_warning(variant: str, *, forced: bool) -> str:
    """The warning for a GPU variant that sees no device: which variant, what was looked for, what to check, and
    that models run on the CPU."""
    looked, hint = _NO_DEVICE.get(variant, (f"--list-devices showed no {variant} device", ""))
    chosen = f"OLLAMA_LLM_LIBRARY={variant} forces the {variant} runner" if forced else f"the {variant} runner"
    return f"{chosen}, but {looked}; {hint + ' ' if hint else ''}Every model runs on the CPU."


def probe_host(*, count_nvidia_gpus: Callable[[], int] | None = None, runners_dir: Path | None = None,
               env: Mapping[str, str] | None = None) -> HostInfo:
    """This machine: architecture, OS, CPU flags, the visible NVIDIA GPUs and (given runners_dir) the Vulkan
    devices its vulkan runner lists."""
    system, machine = platform.system(), platform.machine()
    if system == "Linux":
        try:
            flags = _linux_cpu_flags(Path("/proc/cpuinfo").read_text(errors="replace"))
        except OSError:
            flags = frozenset()
    elif system == "Darwin":
        flags = _macos_cpu_flags()
    else:
        flags = frozenset()
    if count_nvidia_gpus is None:
        from ollama_py.estimate.gpus import probe_nvidia  # noqa: PLC0415 - keeps NVML out of import time

        def count_nvidia_gpus() -> int:
            return len(probe_nvidia(os.environ)[0])

    vulkan = count_vulkan_gpus(runners_dir, os.environ if env is None else env) if runners_dir else 0
    return HostInfo(machine=machine, system=system, cpu_flags=flags, nvidia_gpus=count_nvidia_gpus(),
                    vulkan_gpus=vulkan)


def read_build_info(variant_dir: Path) -> dict[str, object]:
    """The variant's build-info.json, or {} when it is missing or unreadable."""
    try:
        data = json.loads((variant_dir / BUILD_INFO).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def built_variants(runners_dir: Path) -> dict[str, Path]:
    """Variant name -> its llama-server binary, for every runners/<v>/llama-server that is executable."""
    found: dict[str, Path] = {}
    try:
        entries = sorted(runners_dir.iterdir())
    except OSError:
        return found
    for entry in entries:
        binary = entry / SERVER_BINARY
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            continue
        info = read_build_info(entry)
        if info.get("variant") not in (None, entry.name):
            log.warning("runner %s says it was built as variant %r; using it as %r", entry, info["variant"], entry.name)
        found[entry.name] = binary
    return found


def suits_host(variant: str, host: HostInfo) -> bool:
    """Whether a variant can run on this host at all (before trying it)."""
    if variant == "cuda":
        return host.nvidia_gpus > 0
    if variant == "metal":
        return host.system == "Darwin" and host.machine == "arm64"
    if variant == "vulkan":
        return host.vulkan_gpus > 0
    if variant == "cpu_avx2":
        return host.machine.lower() in ("x86_64", "amd64") and host.cpu_flags >= AVX2_FLAGS
    return variant == "cpu"


def candidate_order(
    host: HostInfo, built: Iterable[str], *, forced: str = "", bad: Iterable[str] = frozenset()
) -> list[str]:
    """The variants to try, best first; the caller falls back along the list when one dies of SIGILL.

    `forced` (OLLAMA_LLM_LIBRARY) is the only candidate when given, even one marked bad: the user asked
    for it. Raises OllamaError when the forced variant is not built or nothing usable is built.
    """
    built_set = set(built)
    names = ", ".join(sorted(built_set)) or "none"
    if forced:
        if forced in built_set:
            return [forced]
        if forced in VARIANT_ORDER:
            raise OllamaError(
                f"OLLAMA_LLM_LIBRARY={forced}: that runner is not built (built: {names}); "
                f"build it with scripts/build_runners.sh {forced}"
            )
        raise OllamaError(
            f"OLLAMA_LLM_LIBRARY={forced}: unknown runner variant (known: {', '.join(VARIANT_ORDER)}; built: {names})"
        )
    bad_set = set(bad)
    order = [v for v in VARIANT_ORDER if v in built_set and v not in bad_set and suits_host(v, host)]
    if not order:
        skipped = f"; marked bad on this host: {', '.join(sorted(bad_set & built_set))}" if bad_set & built_set else ""
        raise OllamaError(f"no usable llama-server runner for this host (built: {names}{skipped}); {BUILD_HINT}")
    return order


def choose_variant(host: HostInfo, built: Iterable[str], *, forced: str = "", bad: Iterable[str] = frozenset()) -> str:
    """The best variant to run: forced, else cuda, metal, vulkan, cpu_avx2, cpu as the host allows."""
    return candidate_order(host, built, forced=forced, bad=bad)[0]


def is_sigill(returncode: int | None) -> bool:
    """True for a child killed by SIGILL: -4 from subprocess, or 132 when a shell reports it."""
    if returncode is None:
        return False
    return returncode in (-signal.SIGILL, 128 + signal.SIGILL)


def build_key(variant_dir: Path) -> str:
    """What identifies one build of a runner: its build key and build time, else the binary's stat."""
    info = read_build_info(variant_dir)
    if info.get("key"):
        return f"{info['key']}@{info.get('built_at', '')}"
    try:
        st = (variant_dir / SERVER_BINARY).stat()
    except OSError:
        return ""
    return f"stat:{st.st_size}:{st.st_mtime_ns}"


class BadVariants:
    """Variants that crashed on this host, remembered in a JSON file in the data dir.

    An entry holds the runner's build key, so rebuilding the runner gives it another chance.
    File shape: {"cpu_avx2": {"build_key": "...", "reason": "...", "marked_at": "2025-01-01T00:00:00Z"}}.
    """

    def __init__(self, path: Path, runners_dir: Path) -> None:
        self.path = path
        self.runners_dir = runners_dir
        self._unsaved: dict[str, dict[str, str]] = {}  # marks the file could not take (a data dir not writable)

    def _read(self) -> dict[str, dict[str, str]]:
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable %s: %s", self.path, exc)
            data = {}
        marks = {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}
        return {**marks, **self._unsaved}

    def load(self) -> set[str]:
        """Variants marked bad whose runner has not been rebuilt since."""
        return {
            variant
            for variant, entry in self._read().items()
            if entry.get("build_key") == build_key(self.runners_dir / variant)
        }

    def entries(self) -> Mapping[str, dict[str, str]]:
        return self._read()

    def mark(self, variant: str, reason: str) -> None:
        """Remember that `variant` failed here; written to a temp file and renamed so readers never see half."""
        data = self._read()
        data[variant] = {
            "build_key": build_key(self.runners_dir / variant),
            "reason": reason,
            "marked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        except OSError as e:  # remembered by this process only
            self._unsaved[variant] = data[variant]
            log.warning("runner variant %s marked bad until serve stops (%s cannot be written: %s): %s", variant,
                        self.path, (e.strerror or str(e)).lower(), reason)
            return
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=1, sort_keys=True)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        log.warning("runner variant %s marked bad on this host: %s", variant, reason)
