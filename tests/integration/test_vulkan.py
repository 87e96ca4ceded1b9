"""GPU offload for real, on a software GPU: the vulkan runner on Mesa's lavapipe.

lavapipe is a Vulkan device that runs on the CPU; ggml-vulkan skips CPU-type devices unless
GGML_VK_VISIBLE_DEVICES names them (`0,0` names the one device twice: two devices, enough for a tensor split).
Its memory is fixed at 2 GiB with no budget, so tests/fakes/fakevram.c (built here with cc) is preloaded to make
it report the size and free memory a test needs. Everything else is real: serve picks the vulkan runner because
that runner lists a GPU, places layers from the listed memory, llama-server offloads them and reports its
buffers, and /api/ps shows the split. lavapipe decodes at a few tokens a second: every answer here is short.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import requests

from ollama_py.estimate.devices import list_devices
from tests.helpers.paths import ROOT, required_path
from tests.helpers.serve import create_from_file, start_serve, stop_serve

pytestmark = pytest.mark.integration

PROMPT = "What is the capital of France? Answer in one sentence."
MiB = 1 << 20


def runners_dir() -> Path:
    return Path(os.environ.get("OLLAMA_PY_TEST_RUNNERS_DIR") or ROOT / "runners")


@pytest.fixture(scope="module")
def vulkan_runner() -> Path:
    binary = runners_dir() / "vulkan" / "llama-server"
    if not binary.exists():
        pytest.fail(f"{binary} is not built: `make test` builds it (scripts/build_runners.sh vulkan)")
    return binary


@pytest.fixture(scope="module")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("shim") / "fakevram.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(ROOT / "tests/fakes/fakevram.c"), "-ldl"],
                   check=True)
    return out


def gpu_env(shim: Path, *, vram: int, free: int | None = None, devices: str = "0") -> dict[str, str]:
    env = {"GGML_VK_VISIBLE_DEVICES": devices, "LD_PRELOAD": str(shim), "FAKE_VK_VRAM_MIB": str(vram)}
    if free is not None:
        env["FAKE_VK_FREE_MIB"] = str(free)
    return env


def ask(url: str, **options: object) -> dict:
    r = requests.post(f"{url}/api/chat", timeout=600, json={
        "model": "smollm2:135m", "stream": False, "messages": [{"role": "user", "content": PROMPT}],
        "options": {"temperature": 0, "seed": 1, "num_predict": 8, "num_ctx": 1024, **options}})
    assert r.status_code == 200, r.text
    return r.json()


def running(url: str) -> dict:
    models = requests.get(f"{url}/api/ps", timeout=30).json()["models"]
    assert len(models) == 1, models
    return models[0]


def memory_line(log: Path) -> tuple[float, float, float]:
    """serve's log line after a load: estimated MiB, what llama-server allocated, and how much of it on GPUs."""
    m = re.findall(r"estimated ([\d.]+) MiB, llama-server allocated ([\d.]+) MiB \([^)]*\), ([\d.]+) MiB on GPUs",
                   log.read_text())
    assert m, log.read_text()[-3000:]
    return tuple(float(x) for x in m[-1])  # type: ignore[return-value]


@pytest.fixture
def gpu_serve(tmp_path: Path, vulkan_runner: Path):
    model = required_path("OLLAMA_PY_TEST_MODEL")
    started = []

    def start(env: dict[str, str]) -> str:
        proc, url, _ = start_serve(tmp_path, {"OLLAMA_KEEP_ALIVE": "10m", **env})
        started.append(proc)
        create_from_file(url, "smollm2:135m", model)
        return url

    yield start
    for proc in started:
        stop_serve(proc)


def test_the_runner_lists_the_software_gpu_with_the_memory_the_shim_reports(vulkan_runner: Path, shim: Path) -> None:
    env = {**os.environ, **gpu_env(shim, vram=3072, free=2000)}
    devices = list_devices(vulkan_runner, env)
    assert [(d.name, d.total // MiB, d.free // MiB) for d in devices] == [("Vulkan0", 3072, 2000)]
    assert "llvmpipe" in devices[0].description
    two = list_devices(vulkan_runner, {**env, "GGML_VK_VISIBLE_DEVICES": "0,0"})
    assert [d.name for d in two] == ["Vulkan0", "Vulkan1"]
    hidden = {k: v for k, v in env.items() if k not in ("GGML_VK_VISIBLE_DEVICES", "LD_PRELOAD")}
    assert list_devices(vulkan_runner, hidden) == []  # a CPU-type device is not a GPU unless named


def test_full_offload_answers_as_the_cpu_runner_does(gpu_serve, live_server, shim: Path, tmp_path: Path) -> None:
    expected = ask(live_server.url)["message"]["content"]
    url = gpu_serve(gpu_env(shim, vram=4096))
    got = ask(url)
    assert got["message"]["content"] == expected
    ps = running(url)
    assert ps["size_vram"] == ps["size"] and ps["devices"]["Vulkan0"] > 0, ps  # every layer on it: "100% GPU"
    estimated, allocated, on_gpu = memory_line(tmp_path / "serve.log")
    # /api/ps devices shows what llama-server put on the device (the input embeddings stay in host memory)
    assert abs(ps["devices"]["Vulkan0"] / MiB - on_gpu) < 0.2 and 0 < ps["devices"]["CPU"] < ps["size"]
    assert on_gpu > 0.6 * allocated  # weights and KV on the GPU; only host-side buffers stay behind
    assert 0.5 < estimated / allocated < 2.0, (estimated, allocated)  # the estimate is in the runner's range
    log = (tmp_path / "serve.log").read_text()
    assert "runner variant vulkan" in log


def test_partial_offload_when_little_device_memory_is_free(gpu_serve, shim: Path, tmp_path: Path) -> None:
    url = gpu_serve(gpu_env(shim, vram=4096, free=60))
    assert ask(url)["message"]["content"]
    ps = running(url)
    assert 0 < ps["size_vram"] < ps["size"], ps
    _, allocated, on_gpu = memory_line(tmp_path / "serve.log")
    assert 0 < on_gpu < 60 < allocated


def test_num_gpu_0_keeps_everything_on_the_cpu(gpu_serve, shim: Path) -> None:
    url = gpu_serve(gpu_env(shim, vram=4096))
    assert ask(url, num_gpu=0)["message"]["content"]
    assert running(url)["size_vram"] == 0


def test_two_devices_split_the_layers(gpu_serve, shim: Path, tmp_path: Path) -> None:
    # each device alone is too small for the whole model, together they hold it
    url = gpu_serve(gpu_env(shim, vram=4096, free=110, devices="0,0"))
    assert ask(url)["message"]["content"]
    ps = running(url)
    assert ps["devices"].get("Vulkan0", 0) > 0 and ps["devices"].get("Vulkan1", 0) > 0, ps
    assert ps["size_vram"] > 110 * MiB  # more than one device could hold


def _load(url: str, model: str) -> None:
    r = requests.post(f"{url}/api/generate", json={"model": model, "keep_alive": "10m", "options": {"num_ctx": 1024}},
                      timeout=600)
    assert r.status_code == 200, r.text


def _names(url: str) -> set[str]:
    return {m["name"] for m in requests.get(f"{url}/api/ps", timeout=30).json()["models"]}


@pytest.mark.parametrize(("free", "both_stay"), [
    pytest.param(1500, True, id="both-fit"),
    pytest.param(260, False, id="device-full-evicts"),
])
def test_a_second_model_evicts_the_first_only_when_the_device_is_full(gpu_serve, shim: Path, free: int,
                                                                      both_stay: bool) -> None:
    gemma = required_path("OLLAMA_PY_TEST_GEMMA")
    url = gpu_serve(gpu_env(shim, vram=4096, free=free))
    create_from_file(url, "gemma3:270m", gemma)
    _load(url, "smollm2:135m")
    _load(url, "gemma3:270m")
    assert _names(url) == ({"smollm2:135m", "gemma3:270m"} if both_stay else {"gemma3:270m"})
