"""A GPU runner on the user's machine (issue 35): the cuda runner finds the CUDA libraries it was built with by
itself (build-info.json's library_path on its LD_LIBRARY_PATH), a forced GPU variant that sees no device says so
once and clearly, and a load plan on a GPU holds the runner's own context."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ollama_py.estimate.gpus import GpuInfo
from ollama_py.estimate.memory import GPU_MINIMUM
from ollama_py.runner import variants
from ollama_py.runner.argv import LaunchSpec
from ollama_py.runner.process import RunnerProcess
from ollama_py.scheduler.factory import chosen_gpus, plan_load, runner_factory
from ollama_py.scheduler.scheduler import LoadPlan
from tests.fakes.gguf_files import write_sized_llama_gguf
from tests.helpers.app import make_settings
from tests.helpers.paths import FAKE_SERVER

GiB = 1 << 30
# A runner that, like a llama-server linked against libcudart.so.13, does not start unless the loader finds its
# libraries: here, unless LIBS is on LD_LIBRARY_PATH.
NEEDS_LIBS = """#!/bin/sh
case ":$LD_LIBRARY_PATH:" in
  *":{libs}:"*) ;;
  *) echo "llama-server: error while loading shared libraries: libcudart.so.13: cannot open shared object file" >&2
     exit 127 ;;
esac
{body}
"""


def runner(runners: Path, variant: str, body: str, *, libs: Path | None = None) -> Path:
    """runners/<variant>/llama-server running `body`, built with `libs` as its library_path (none: no list)."""
    binary = runners / variant / "llama-server"
    binary.parent.mkdir(parents=True)
    info: dict[str, object] = {"variant": variant, "key": "k1"}
    if libs is not None:
        libs.mkdir(parents=True, exist_ok=True)
        info["library_path"] = [str(libs)]
        body = NEEDS_LIBS.format(libs=libs, body=body)
    else:
        body = f"#!/bin/sh\n{body}\n"
    binary.write_text(body)
    binary.chmod(0o755)
    (binary.parent / "build-info.json").write_text(json.dumps(info))
    return binary


def list_devices_script(*lines: str) -> str:
    return 'if [ "$1" = --list-devices ]; then echo "Available devices:"; ' + \
        "".join(f'echo "  {line}"; ' for line in lines) + "exit 0; fi"


# -- the cuda runner's libraries ----------------------------------------------------------------------------------

def cuda_runner(tmp_path: Path) -> RunnerProcess:
    """A cuda runner (the fake behind a script that needs its build's libraries), started with no LD_LIBRARY_PATH:
    it finds them only through build-info.json's library_path."""
    runners = tmp_path / "runners"
    runner(runners, "cuda", f'exec {sys.executable} {FAKE_SERVER} "$@"', libs=tmp_path / "cuda-toolkit-13" / "lib")
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    host = variants.HostInfo(machine="x86_64", system="Linux", cpu_flags=frozenset(), nvidia_gpus=1)
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    return runner_factory(make_settings(tmp_path, runners_dir=runners), env=env, host=host)(
        LoadPlan(key="m", spec=LaunchSpec(model=model, num_ctx=512), load_options={}), "m", lambda r: None)


async def test_the_cuda_runner_starts_with_the_libraries_it_was_built_with(tmp_path: Path) -> None:
    started = cuda_runner(tmp_path)
    try:
        await started.ensure_ready()  # without its libraries it exits 127 ("error while loading shared libraries")
        assert started.variant == "cuda"
    finally:
        await started.stop()


_OPENED: list[str] | None = None  # files opened while a test watches (an audit hook: nothing of ours is patched)


def _record_open(event: str, args: tuple) -> None:
    if event == "open" and _OPENED is not None:
        _OPENED.append(str(args[0]))


async def test_a_ready_runners_next_request_reads_no_file_and_a_restart_reads_its_libraries_again(
        tmp_path: Path) -> None:
    global _OPENED
    started = cuda_runner(tmp_path)
    if not getattr(_record_open, "installed", False):
        sys.addaudithook(_record_open)
        _record_open.installed = True  # type: ignore[attr-defined]
    try:
        await started.ensure_ready()
        _OPENED = []
        await started.ensure_ready()  # what every request through a loaded model does
        assert not _OPENED
        _OPENED = None
        await started.stop()
        started.reset()
        await started.ensure_ready()  # started again: with its libraries, read from build-info.json again
        assert started.variant == "cuda"
    finally:
        _OPENED = None
        await started.stop()


def test_the_runners_device_list_is_taken_with_its_libraries(tmp_path: Path) -> None:
    runners = tmp_path / "runners"
    runner(runners, "vulkan", list_devices_script("Vulkan0: NVIDIA H200 (143771 MiB, 143000 MiB free)"),
           libs=tmp_path / "libs")
    env = {"PATH": os.environ["PATH"], "LD_LIBRARY_PATH": "/opt/mine"}

    assert variants.count_vulkan_gpus(runners, env) == 1
    assert variants.runner_env(runners / "vulkan" / "llama-server", env)["LD_LIBRARY_PATH"] == \
        f"{tmp_path / 'libs'}{os.pathsep}/opt/mine"  # the user's own path kept, after the runner's


@pytest.mark.parametrize("info", [
    pytest.param({}, id="no-list"),
    pytest.param({"library_path": ["/nonexistent/cuda/lib"]}, id="missing-dir"),
    pytest.param({"library_path": "/not/a/list"}, id="not-a-list"),
])
def test_without_a_usable_library_path_the_environment_is_left_alone(tmp_path: Path, info: dict) -> None:
    (tmp_path / "build-info.json").write_text(json.dumps(info))
    env = {"PATH": "/bin", "LD_LIBRARY_PATH": "/opt/mine"}
    assert variants.runner_env(tmp_path / "llama-server", env) == env


# -- a GPU variant that sees no device ----------------------------------------------------------------------------

def test_a_forced_vulkan_runner_without_a_device_warns_once_and_clearly(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    binary = runner(tmp_path / "runners", "vulkan", list_devices_script())  # "Available devices:" and nothing
    with caplog.at_level(logging.INFO):
        gpus = chosen_gpus("vulkan", binary, {"PATH": os.environ["PATH"]}, forced=True)

    assert gpus == []
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage() == (
        "OLLAMA_LLM_LIBRARY=vulkan forces the vulkan runner, but --list-devices showed no Vulkan device; is a Vulkan "
        "driver installed (mesa-vulkan-drivers for AMD and Intel GPUs, the NVIDIA driver's Vulkan ICD for NVIDIA) "
        "together with the Vulkan loader (libvulkan1)? Every model runs on the CPU.")


def test_a_vulkan_runner_that_lists_a_device_says_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    binary = runner(tmp_path / "runners", "vulkan",
                    list_devices_script("Vulkan0: AMD Radeon RX 7900 XTX (24560 MiB, 24000 MiB free)"))
    with caplog.at_level(logging.WARNING):
        gpus = chosen_gpus("vulkan", binary, {"PATH": os.environ["PATH"]}, forced=True)
    assert [g.name for g in gpus] == ["AMD Radeon RX 7900 XTX"]
    assert not caplog.records


def test_a_cpu_build_is_no_gpu_variant_to_warn_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    binary = runner(tmp_path / "runners", "cpu", list_devices_script())
    with caplog.at_level(logging.WARNING):
        assert chosen_gpus("cpu", binary, {"PATH": os.environ["PATH"]}, forced=True) == []
    assert not caplog.records


# -- the plan holds the runner's context --------------------------------------------------------------------------

@pytest.mark.parametrize(("library", "name"), [("cuda", "NVIDIA H200"), ("vulkan", "NVIDIA H200"),
                                               ("metal", "Apple M3")])
def test_a_plan_on_a_gpu_holds_its_runners_context(tmp_path: Path, library: str, name: str) -> None:
    path = tmp_path / "m.gguf"
    write_sized_llama_gguf(path, blocks=8, embd=256, ff=512, vocab=256, ctx=8192)
    model = SimpleNamespace(model_path=path, adapters=(), projectors=(), name=SimpleNamespace(short="m"))
    gpu = GpuInfo(0, "GPU-0", name, library, 8 * GiB, 8 * GiB, "", "")
    settings = make_settings(tmp_path)

    on_gpu = plan_load(settings, [gpu], 64 * GiB, model, {"num_ctx": 2048}, False)
    on_cpu = plan_load(settings, [gpu], 64 * GiB, model, {"num_ctx": 2048, "num_gpu": 0}, False)

    assert on_gpu.size_vram and on_gpu.vram_reserve == GPU_MINIMUM[library]
    assert on_cpu.size_vram == on_cpu.vram_reserve == 0  # nothing on the GPU: no context there either


async def test_a_model_that_fits_once_a_loaded_runner_and_its_context_are_gone_evicts_it(tmp_path: Path) -> None:
    """A 3000 MiB GPU, 500 MiB of context per runner: with `a` (1200 MiB of buffers) loaded, `b` (2200 MiB) does
    not fit beside it, but does alone (2700 MiB with its context): `a` is evicted, not `b` refused, because what
    `a` gives back includes its context."""
    from ollama_py.runner.argv import build_argv
    from ollama_py.runner.process import RunnerProcess
    from ollama_py.scheduler.scheduler import Scheduler

    mib, total, reserve = 1 << 20, 3000 << 20, 500 << 20
    sizes = {"a": 1200 << 20, "b": 2200 << 20}
    alive: dict[str, int] = {}  # runner name -> device memory it holds, from start until its process has exited

    def plan(m: SimpleNamespace, options: dict, embedding: bool) -> LoadPlan:
        return LoadPlan(key=m.name, spec=LaunchSpec(model=m.model_path, num_ctx=512), load_options={},
                        size=sizes[m.name], size_vram=sizes[m.name], vram_reserve=reserve)

    def free_memory(p: LoadPlan) -> int:  # as factory.default_scheduler's seam counts it on a real device
        return max(total - sum(alive.values()) - p.vram_reserve, 0)

    def factory(p: LoadPlan, name: str, on_exit) -> RunnerProcess:
        def exited(r: RunnerProcess) -> None:
            alive.pop(name, None)
            on_exit(r)

        alive[name] = p.size_vram + p.vram_reserve
        return RunnerProcess(lambda port: [sys.executable, str(FAKE_SERVER), *build_argv(p.spec, "x", port)[1:]],
                             name=name, on_exit=exited)

    models = {}
    for name in sizes:
        (tmp_path / f"{name}.gguf").write_bytes(b"GGUF")
        models[name] = SimpleNamespace(name=name, model_path=tmp_path / f"{name}.gguf")
    sched = Scheduler(make_settings(tmp_path), plan=plan, runner_factory=factory, free_memory=free_memory)
    events: list[str] = []
    sched.listeners.append(lambda event, loaded: events.append(f"{event} {loaded.name}"))
    try:
        await sched.load(models["a"], {}, 600.0)
        await sched.load(models["b"], {}, 600.0)
        assert events == ["loaded a", "evicted a", "loaded b"]
        assert sum(alive.values()) == (2200 + 500) * mib
    finally:
        await sched.shutdown()
