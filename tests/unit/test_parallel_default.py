"""Slots per model at defaults (issue 25): 4 where memory allows, else 1, in one unified KV cache whose slots each
keep the request's full num_ctx; OLLAMA_NUM_PARALLEL overrides; slot waiters count against OLLAMA_MAX_QUEUE."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from ollama_py.config import Settings
from ollama_py.estimate.gpus import GpuInfo
from ollama_py.estimate.memory import GPU_MINIMUM
from ollama_py.runner.argv import LaunchSpec, build_argv
from ollama_py.scheduler.factory import plan_load
from ollama_py.scheduler.policy import choose_parallel
from ollama_py.server.app import create_app
from tests.fakes.gguf_files import write_sized_llama_gguf
from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings

GiB = 1 << 30


@pytest.mark.parametrize(
    ("setting", "embedding", "architecture", "fits_four", "want"),
    [
        pytest.param(0, False, "llama", True, 4, id="auto-fits"),
        pytest.param(0, False, "llama", False, 1, id="auto-too-big"),
        pytest.param(2, False, "llama", True, 2, id="env-overrides"),
        pytest.param(8, False, "llama", False, 8, id="env-overrides-even-without-room"),
        pytest.param(0, True, "llama", True, 1, id="embedding"),
        pytest.param(4, True, "bert", True, 1, id="embedding-ignores-env"),
        pytest.param(0, False, "qwen3next", True, 1, id="hybrid-arch"),
        pytest.param(0, False, "mllama", True, 1, id="mllama"),
    ],
)
def test_choose_parallel(setting: int, embedding: bool, architecture: str, fits_four: bool, want: int) -> None:
    asked: list[int] = []

    def fits(slots: int) -> bool:
        asked.append(slots)
        return fits_four

    assert choose_parallel(setting, embedding=embedding, architecture=architecture, fits=fits) == want
    assert asked in ([], [4])  # only the default is ever tried


@pytest.mark.parametrize(
    ("env", "want"),
    [
        pytest.param({}, 0, id="unset-is-auto"),
        pytest.param({"OLLAMA_NUM_PARALLEL": "0"}, 0, id="zero-is-auto"),
        pytest.param({"OLLAMA_NUM_PARALLEL": "3"}, 3, id="set"),
        pytest.param({"OLLAMA_NUM_PARALLEL": "-1"}, 0, id="invalid-is-auto"),
    ],
)
def test_num_parallel_setting(env: dict[str, str], want: int) -> None:
    assert Settings.from_env(env).num_parallel == want


@pytest.fixture
def model(tmp_path: Path) -> SimpleNamespace:
    path = tmp_path / "m.gguf"
    write_sized_llama_gguf(path, blocks=8, embd=256, ff=512, vocab=256, ctx=8192)
    return SimpleNamespace(model_path=path, adapters=(), projectors=(), name=SimpleNamespace(short="m"))


def plan(tmp_path: Path, model: SimpleNamespace, *, free: int = 64 * GiB, gpus: tuple[GpuInfo, ...] = (),
         embedding: bool = False, options: dict[str, Any] | None = None, **settings: Any):
    return plan_load(make_settings(tmp_path, **settings), list(gpus), free, model, options or {}, embedding)


def argv_value(spec: LaunchSpec, flag: str) -> str | None:
    argv = build_argv(spec, "llama-server", 1234)
    return argv[argv.index(flag) + 1] if flag in argv else None


def test_four_slots_on_a_roomy_cpu_each_with_the_whole_num_ctx(tmp_path: Path, model: SimpleNamespace) -> None:
    p = plan(tmp_path, model, options={"num_ctx": 2048})
    assert p.spec.parallel == 4
    assert p.context_length == p.load_options["num_ctx"] == 2048  # what /api/ps and reload checks see
    assert argv_value(p.spec, "-np") == "4"
    assert argv_value(p.spec, "-c") == str(4 * 2048)  # the pool: no slot can starve another of its num_ctx
    assert argv_value(p.spec, "--kv-unified-per-slot") == "2048"  # a request's num_ctx keeps its meaning
    assert "--kv-unified" in build_argv(p.spec, "llama-server", 1234)


def test_one_slot_when_four_do_not_fit_in_free_memory(tmp_path: Path, model: SimpleNamespace) -> None:
    one = plan(tmp_path, model, options={"num_ctx": 2048}, num_parallel=1)
    four = plan(tmp_path, model, options={"num_ctx": 2048}, num_parallel=4)
    assert four.size > one.size  # four slots cost four contexts of KV cache
    p = plan(tmp_path, model, free=(one.size + four.size) // 2, options={"num_ctx": 2048})
    assert p.spec.parallel == 1
    argv = build_argv(p.spec, "llama-server", 1234)
    assert argv[argv.index("-c") + 1] == "2048" and "--kv-unified" not in argv


def test_num_parallel_overrides_the_memory_choice(tmp_path: Path, model: SimpleNamespace) -> None:
    p = plan(tmp_path, model, free=1, options={"num_ctx": 1024}, num_parallel=2)
    assert p.spec.parallel == 2
    assert argv_value(p.spec, "-c") == "2048"
    assert argv_value(p.spec, "--kv-unified-per-slot") == "1024"


def test_embedding_runner_has_one_slot(tmp_path: Path, model: SimpleNamespace) -> None:
    assert plan(tmp_path, model, embedding=True).spec.parallel == 1


def gpu(free: int) -> GpuInfo:
    return GpuInfo(0, "GPU-0", "Test GPU", "cuda", free, free, "", "")


def test_on_a_gpu_four_slots_only_when_they_all_fit_on_it(tmp_path: Path, model: SimpleNamespace) -> None:
    roomy = plan(tmp_path, model, gpus=(gpu(8 * GiB),), options={"num_ctx": 2048})
    # all of the model on the GPU: only the prompt cache's cap (host memory, --cache-ram) is not in size_vram
    assert roomy.spec.parallel == 4 and roomy.size_vram == roomy.size - roomy.cache_ram
    one = plan(tmp_path, model, gpus=(gpu(8 * GiB),), options={"num_ctx": 2048}, num_parallel=1)
    four = roomy
    # room on the GPU for everything with one slot, not with four: one slot, still fully offloaded
    tight = plan(tmp_path, model, gpus=(gpu(GPU_MINIMUM["cuda"] + (one.size_vram + four.size_vram) // 2),),
                 options={"num_ctx": 2048})
    assert tight.spec.parallel == 1
    assert tight.size_vram == tight.size - tight.cache_ram


async def test_slot_waiters_count_against_the_queue_bound(tmp_path: Path, tiny_gguf: Path,
                                                          aiohttp_client: Any) -> None:
    """At defaults four requests run at once; a fifth waits for a slot and fills OLLAMA_MAX_QUEUE=1; a sixth
    is refused with 503."""
    settings = make_settings(tmp_path, max_queue=1)
    assert settings.num_parallel == 0
    create_tiny_model(settings, tiny_gguf)
    scheduler = fake_scheduler(settings, {"FAKE_TOKEN_DELAY": "0.05", "FAKE_TOKENS": "400"})
    client = await aiohttp_client(create_app(settings, scheduler=scheduler))
    body = {"model": "tiny", "prompt": "a long answer"}
    running = []
    for _ in range(4):
        resp = await client.post("/api/generate", json=body)
        assert resp.status == 200
        assert await resp.content.readline()  # streaming: it holds one of the four slots
        running.append(resp)
    waiting = asyncio.create_task(client.post("/api/generate", json={**body, "stream": False,
                                                                     "options": {"num_predict": 1}}))
    for _ in range(400):
        if scheduler.pending == 1:
            break
        await asyncio.sleep(0.01)
    assert scheduler.pending == 1
    refused = await client.post("/api/generate", json={**body, "stream": False})
    assert refused.status == 503
    for resp in running:
        resp.close()  # hang up: their slots free up
    assert (await waiting).status == 200
