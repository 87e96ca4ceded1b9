"""How a load is planned over llama.cpp RPC workers: layers by the memory each worker reports (issue 12)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ollama_py.runner.argv import build_argv
from ollama_py.scheduler.factory import plan_load
from tests.fakes.gguf_files import write_sized_llama_gguf
from tests.helpers.app import make_settings

A, B = "127.0.0.1:50001", "127.0.0.1:50002"
BLOCKS = 8


@pytest.fixture
def model(tmp_path: Path) -> SimpleNamespace:
    path = tmp_path / "m.gguf"
    write_sized_llama_gguf(path, blocks=BLOCKS, embd=256, ff=512, vocab=256)
    return SimpleNamespace(model_path=path, adapters=(), projectors=())


def plan(tmp_path: Path, model: SimpleNamespace, workers: dict[str, int], **options):
    settings = make_settings(tmp_path, rpc_servers=(A, B))
    return plan_load(settings, [], 1 << 40, model, options, False, lambda servers: workers)


def test_roomy_workers_take_every_layer_split_by_their_free_memory(tmp_path, model):
    p = plan(tmp_path, model, {A: 1 << 30, B: 3 << 30})
    assert p.spec.n_gpu_layers == BLOCKS + 1
    first, second = p.spec.tensor_split
    assert first + second == BLOCKS + 1 and second > first  # the worker with more memory gets more layers
    argv = build_argv(p.spec, "llama-server", 1234)
    assert argv[argv.index("--rpc") + 1] == f"{A},{B}"
    assert argv[argv.index("--tensor-split") + 1] == f"{first:g},{second:g}"
    # what stays on this machine (input embeddings, output buffer) is all the fit decision counts here
    assert 0 < p.size < plan(tmp_path, model, {}, rpc_servers="").size
    assert p.size_vram == 0


def test_workers_that_hold_a_few_layers_get_only_those(tmp_path, model):
    roomy = plan(tmp_path, model, {A: 1 << 30, B: 1 << 30})
    local = plan(tmp_path, model, {}, rpc_servers="")
    # room for the compute buffer and about two blocks on each worker
    layer = (local.size - roomy.size) // (BLOCKS + 1)
    small = plan(tmp_path, model, {A: 2 * layer + (local.size >> 2), B: 2 * layer + (local.size >> 2)})
    assert 0 < small.spec.n_gpu_layers < BLOCKS + 1
    assert roomy.size < small.size < local.size  # the layers the workers cannot hold stay here


def test_unknown_worker_memory_offloads_everything_and_lets_llama_cpp_split(tmp_path, model):
    p = plan(tmp_path, model, {A: 1 << 30})  # B did not answer
    assert p.spec.n_gpu_layers == BLOCKS + 1
    assert p.spec.tensor_split == ()


def test_num_gpu_zero_keeps_the_model_off_the_workers(tmp_path, model):
    p = plan(tmp_path, model, {A: 1 << 30, B: 1 << 30}, num_gpu=0)
    assert p.spec.n_gpu_layers == 0
