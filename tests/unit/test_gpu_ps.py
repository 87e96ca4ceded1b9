"""What `ps` says about a model on a GPU (issue 35): every layer offloaded is "100% GPU" with size_vram == size, as
Ollama shows it, although llama.cpp keeps the token embeddings (CPU_Mapped) and staging buffers (CUDA_Host) in host
memory; /api/ps `devices` keeps that real split. The runner is the fake llama-server reporting a CUDA0 load in
llama.cpp's words."""

from __future__ import annotations

import datetime as dt

import pytest

from ollama_py.cli.render import ps_table
from ollama_py.estimate.gpus import GpuInfo
from ollama_py.estimate.memory import shape_from_gguf
from ollama_py.scheduler.factory import plan_load, record_actual_memory
from ollama_py.scheduler.scheduler import Scheduler
from ollama_py.server.app import create_app
from tests.helpers.app import create_tiny_model, fake_runner_factory, make_settings

H200 = GpuInfo(index=0, uuid="GPU-0", name="NVIDIA H200", library="cuda", total=140 << 30, free=140 << 30,
               compute="9.0", driver="580.95.05")


@pytest.fixture
async def gpu_client(tmp_path, tiny_gguf, aiohttp_client):
    settings = make_settings(tmp_path)
    create_tiny_model(settings, tiny_gguf)
    layers = shape_from_gguf(tiny_gguf).block_count + 1  # what "offloaded N/M layers" counts
    scheduler = Scheduler(settings, plan=lambda m, o, e: plan_load(settings, [H200], 1 << 40, m, o, e),
                          runner_factory=fake_runner_factory(settings, {"FAKE_DEVICE": "CUDA0",
                                                                        "FAKE_N_LAYERS": str(layers)}))
    scheduler.listeners.append(record_actual_memory)
    return await aiohttp_client(create_app(settings, scheduler=scheduler))


async def loaded_entry(client, **options) -> dict:
    r = await client.post("/api/generate", json={"model": "tiny", "options": options})
    assert r.status == 200, await r.text()
    [entry] = (await (await client.get("/api/ps")).json())["models"]
    return entry


async def test_a_fully_offloaded_model_is_100_percent_gpu(gpu_client):
    entry = await loaded_entry(gpu_client)

    assert entry["size_vram"] == entry["size"] > 0
    assert "100% GPU" in ps_table([entry], dt.datetime.now(dt.UTC))
    # the real split stays in devices: the CPU_Mapped embeddings and CUDA_Host buffers, and what is on the card
    devices = entry["devices"]
    assert set(devices) == {"CPU", "CUDA0"} and 0 < devices["CPU"] < devices["CUDA0"]


async def test_a_partly_offloaded_model_shows_its_split(gpu_client):
    entry = await loaded_entry(gpu_client, num_gpu=1)  # the fake says "offloaded 1/N layers to GPU"

    assert 0 < entry["size_vram"] < entry["size"]
    assert "% CPU/GPU" in ps_table([entry], dt.datetime.now(dt.UTC))
