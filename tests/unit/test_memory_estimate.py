"""Memory estimate from GGUF metadata, layer placement over fake GPUs, and llama-server's buffer log lines.

The graph/KV tables hold what llama-server (llama-cpp-python 0.3.36's llama.cpp, cpu_avx2 build) printed
for SmolLM2-135M and Gemma 3 270M; bench/results/memory.md has the runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ollama_py.errors import InvalidOption
from ollama_py.estimate.gpus import GpuInfo
from ollama_py.estimate.memory import (
    GPU_MINIMUM,
    Estimate,
    MiB,
    ModelShape,
    estimate,
    parse_llama_server_buffers,
    place,
    shape_from_gguf,
)
from tests.fakes.gguf_files import write_sized_llama_gguf

GiB = 1024 * MiB

# --------------------------------------------------------------------------------------------- GGUF files


def test_shape_from_gguf(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    sizes = write_sized_llama_gguf(path, blocks=3, projector=True)
    shape = shape_from_gguf(path)
    assert (shape.architecture, shape.block_count, shape.embedding_length, shape.head_count) == ("llama", 3, 64, 4)
    assert shape.head_count_kv == (2, 2, 2)
    assert (shape.key_length, shape.value_length) == (16, 16)  # n_embd / n_head when the GGUF has no key_length
    assert (shape.context_length, shape.vocab, shape.feed_forward_length) == (256, 96, 128)
    assert list(shape.layer_bytes) == sizes["layers"]
    assert shape.token_embd_bytes == sizes["token_embd"]
    assert shape.output_bytes == sizes["output"] and not shape.tied_output
    assert shape.output_norm_bytes == sizes["output_norm"]
    assert shape.projector_bytes == sizes["projector"] > 0
    assert shape.file_size == path.stat().st_size


def test_tied_output_counts_token_embd_for_the_output_layer(tmp_path: Path) -> None:
    sizes = write_sized_llama_gguf(tmp_path / "m.gguf", tied=True)
    shape = shape_from_gguf(tmp_path / "m.gguf")
    assert shape.tied_output
    assert shape.output_bytes == shape.token_embd_bytes == sizes["token_embd"]
    est = estimate(shape, num_ctx=256)
    # on the CPU the tied matrix is stored once; a GPU holding the output layer needs its own copy
    assert est.weights == sum(sizes["layers"]) + sizes["token_embd"] + sizes["output_norm"]
    assert est.output_layer == sizes["token_embd"] + sizes["output_norm"]


def test_explicit_key_length_and_per_layer_kv_heads(tmp_path: Path) -> None:
    write_sized_llama_gguf(tmp_path / "m.gguf", blocks=3, heads_kv=[4, 2, 1],
                           extra_kv={"{arch}.attention.key_length": 32, "{arch}.attention.value_length": 24})
    shape = shape_from_gguf(tmp_path / "m.gguf")
    assert shape.head_count_kv == (4, 2, 1)
    assert (shape.key_length, shape.value_length) == (32, 24)
    est = estimate(shape, num_ctx=256)  # 256 cells, f16
    assert est.layer_kv == tuple(h * (32 + 24) * 256 * 2 for h in (4, 2, 1))


def test_sliding_window_layers_get_a_smaller_cache(tmp_path: Path) -> None:
    write_sized_llama_gguf(tmp_path / "m.gguf", arch="gemma3", blocks=7,
                           extra_kv={"{arch}.attention.sliding_window": 512})
    shape = shape_from_gguf(tmp_path / "m.gguf")
    assert shape.swa_layers == (True,) * 5 + (False, True)  # gemma3: every 6th layer is global
    est = estimate(shape, num_ctx=8192, num_batch=512)
    per_cell = 2 * 16 * 2 * 2  # kv heads * (k + v) head dim * f16
    assert est.layer_kv[5] == 8192 * per_cell
    assert est.layer_kv[0] == 1024 * per_cell  # pad256(window + batch)


def test_shape_is_cached_until_the_file_changes(tmp_path: Path) -> None:
    path = tmp_path / "m.gguf"
    write_sized_llama_gguf(path, blocks=2)
    assert shape_from_gguf(path) is shape_from_gguf(path)
    write_sized_llama_gguf(path, blocks=3)
    assert shape_from_gguf(path).block_count == 3


# --------------------------------------------------------------------------------------------- estimate

SMOLLM2 = ModelShape(
    architecture="llama", block_count=30, embedding_length=576, head_count=9, head_count_kv=(3,) * 30,
    key_length=64, value_length=64, context_length=8192, vocab=49152, feed_forward_length=1536,
    layer_bytes=(2_216_448,) * 30, output_bytes=30_081_024, output_norm_bytes=2304, token_embd_bytes=30_081_024,
    other_bytes=0, file_size=98_362_432, tied_output=True,
)
GEMMA3 = ModelShape(
    architecture="gemma3", block_count=18, embedding_length=640, head_count=4, head_count_kv=(1,) * 18,
    key_length=256, value_length=256, context_length=32768, vocab=262144, feed_forward_length=2048,
    layer_bytes=(3_795_968,) * 18, output_bytes=178_257_920, output_norm_bytes=2560, token_embd_bytes=178_257_920,
    other_bytes=0, tied_output=True, sliding_window=512,
    swa_layers=tuple(il % 6 < 5 for il in range(18)), repack_bytes=13_271_040,
)


@pytest.mark.parametrize(
    ("shape", "kw", "kv_mib", "compute_mib"),
    [
        pytest.param(SMOLLM2, dict(num_ctx=4096, flash_attn=True), 90.00, 17.51, id="smollm2-c4096-fa"),
        pytest.param(SMOLLM2, dict(num_ctx=8192, flash_attn=True), 180.00, 21.51, id="smollm2-c8192-fa"),
        pytest.param(SMOLLM2, dict(num_ctx=16384, flash_attn=True), 360.00, 29.51, id="smollm2-c16384-fa"),
        pytest.param(SMOLLM2, dict(num_ctx=300, flash_attn=True), 11.25, 8.21, id="smollm2-c300-padded"),
        pytest.param(SMOLLM2, dict(num_ctx=4096, num_batch=128, flash_attn=True), 90.00, 4.38, id="smollm2-ub128"),
        pytest.param(SMOLLM2, dict(num_ctx=4096, num_batch=1024, flash_attn=True), 90.00, 35.02, id="smollm2-ub1024"),
        pytest.param(SMOLLM2, dict(num_ctx=4096), 90.00, 86.38, id="smollm2-c4096-no-fa"),
        pytest.param(SMOLLM2, dict(num_ctx=8192), 180.00, 166.38, id="smollm2-c8192-no-fa"),
        pytest.param(SMOLLM2, dict(num_ctx=4096, num_batch=256), 90.00, 43.19, id="smollm2-ub256-no-fa"),
        pytest.param(SMOLLM2, dict(num_ctx=4096, num_parallel=2, flash_attn=True), 180.00, 17.51, id="smollm2-np2"),
        pytest.param(SMOLLM2, dict(num_ctx=2048, num_parallel=4, flash_attn=True), 180.00, 15.51, id="smollm2-np4"),
        # -kvu --kv-unified-per-slot (the default slots, issue 25): one stream of all the cells, seen whole
        pytest.param(SMOLLM2, dict(num_ctx=4096, num_parallel=4, flash_attn=True, kv_unified=True), 360.00, 29.51,
                     id="smollm2-np4-unified"),
        pytest.param(SMOLLM2, dict(num_ctx=4096, num_parallel=2, kv_unified=True), 180.00, 166.38,
                     id="smollm2-np2-unified-no-fa"),
        pytest.param(SMOLLM2, dict(num_ctx=4096, kv_type="q8_0", flash_attn=True), 47.81, 16.42, id="smollm2-q8_0"),
        pytest.param(SMOLLM2, dict(num_ctx=4096, kv_type="q4_0", flash_attn=True), 25.31, 16.42, id="smollm2-q4_0"),
        pytest.param(GEMMA3, dict(num_ctx=4096, flash_attn=True), 27.00, 22.77, id="gemma3-c4096-fa"),
        pytest.param(GEMMA3, dict(num_ctx=4096), 27.00, 51.76, id="gemma3-c4096-no-fa"),
        pytest.param(GEMMA3, dict(num_ctx=16384, flash_attn=True), 63.00, 34.77, id="gemma3-c16384-swa"),
        pytest.param(GEMMA3, dict(num_ctx=4096, num_parallel=2, flash_attn=True), 54.00, 22.77, id="gemma3-np2"),
        pytest.param(GEMMA3, dict(num_ctx=4096, num_batch=256, flash_attn=True), 23.25, 11.26, id="gemma3-ub256"),
    ],
)
def test_estimate_matches_what_llama_server_allocated(
    shape: ModelShape, kw: dict, kv_mib: float, compute_mib: float
) -> None:
    est = estimate(shape, **kw)
    assert est.kv / MiB == pytest.approx(kv_mib, abs=0.01)
    # the quantized-KV flash-attention path allocates ~1 MiB less than f16; the estimate stays on the safe side
    tolerance = 0.07 if "kv_type" in kw else 0.01
    assert est.graph / MiB == pytest.approx(compute_mib, rel=tolerance, abs=0.02)
    assert est.graph / MiB >= compute_mib * 0.99


@pytest.mark.parametrize(
    ("kv_type", "flash_attn", "bytes_per_element"),
    [
        pytest.param("f16", True, 2.0, id="f16"),
        pytest.param("q8_0", True, 34 / 32, id="q8_0"),
        pytest.param("q4_0", True, 18 / 32, id="q4_0"),
        pytest.param("q8_0", False, 2.0, id="q8_0-needs-flash-attention"),
    ],
)
def test_kv_cache_types(kv_type: str, flash_attn: bool, bytes_per_element: float) -> None:
    est = estimate(SMOLLM2, num_ctx=4096, kv_type=kv_type, flash_attn=flash_attn)
    assert est.kv == 30 * 4096 * 2 * 192 * bytes_per_element


def test_unknown_kv_type_is_an_invalid_option() -> None:
    with pytest.raises(InvalidOption, match="unsupported KV cache type 'q3_k'"):
        estimate(SMOLLM2, num_ctx=2048, kv_type="q3_k")


def test_repacked_weights_count_twice_on_an_avx2_cpu() -> None:
    plain, repacked = estimate(GEMMA3, num_ctx=4096), estimate(GEMMA3, num_ctx=4096, cpu_repack=True)
    assert repacked.total - plain.total == GEMMA3.repack_bytes
    assert repacked.buffers["model"] / MiB == pytest.approx(235.16 + 12.66, abs=0.1)  # CPU_Mapped + CPU_REPACK


def test_projector_and_totals() -> None:
    est = estimate(SMOLLM2, num_ctx=4096, flash_attn=True, projector_bytes=10 * MiB)
    assert est.projector == 10 * MiB
    assert est.total == est.weights + est.kv + est.graph + est.output_buffer + est.projector
    assert est.total / MiB == pytest.approx(92.10 + 90.00 + 17.51 + 0.19 + 10, abs=0.05)


# --------------------------------------------------------------------------------------------- placement

# Ten 110 MiB blocks (100 weights + 10 KV), a 50 MiB output layer, 40 MiB input kept on the CPU, 20 MiB graph.
EST = Estimate(
    layer_weights=(100 * MiB,) * 10, layer_kv=(10 * MiB,) * 10, output_layer=50 * MiB, output_layer_host=50 * MiB,
    input_weights=40 * MiB, weights=1090 * MiB, kv=100 * MiB, graph=20 * MiB, graph_host=2 * MiB,
    output_buffer=1 * MiB, projector=0, repack=0, n_ctx=4096, n_batch=512,
)
RESERVE = GPU_MINIMUM["cuda"] // MiB  # the runner's CUDA context (560 MiB)
FULL_NEED = (10 * 110 + 50 + 20 + RESERVE) * MiB  # every layer + graph + the runner's CUDA context


def cuda(index: int, free_mib: float) -> GpuInfo:
    return GpuInfo(index, f"GPU-{index}", "NVIDIA Fake", "cuda", 2 * int(free_mib * MiB), int(free_mib * MiB),
                   "8.9", "550")


@pytest.mark.parametrize(
    ("gpus", "kw", "layers", "indices", "split", "main"),
    [
        pytest.param([], {}, 0, [], None, None, id="no-gpu"),
        pytest.param([cuda(0, 8192)], {}, 11, [0], None, 0, id="one-large"),
        # 523 MiB beside the reserve and the graph: output + 4 blocks
        pytest.param([cuda(0, RESERVE + 543)], {}, 5, [0], None, 0, id="one-small-partial"),
        pytest.param([cuda(0, RESERVE + 23)], {}, 0, [], None, None, id="too-small-for-one-layer"),
        pytest.param([cuda(0, RESERVE + 543), cuda(1, 4000)], {}, 11, [1], [0.0, 11.0], 1, id="two-unequal-best-one"),
        pytest.param([cuda(0, RESERVE + 543), cuda(1, RESERVE + 743)], {}, 11, [0, 1], [4.0, 7.0], None,
                     id="two-unequal-split"),
        # 423 MiB each: contiguous runs of 3 blocks, then 3 blocks + output (by free memory would be 4 + 3)
        pytest.param([cuda(0, RESERVE + 443), cuda(1, RESERVE + 443)], {}, 7, [0, 1], [3.0, 4.0], None,
                     id="two-small-partial-split"),
        pytest.param([cuda(0, 4000), cuda(1, 8000)], {"spread": True}, 11, [0, 1], [4.0, 7.0], None, id="spread"),
        pytest.param([cuda(0, 4000), cuda(1, 8000)], {"main_gpu": 0}, 11, [0], [11.0, 0.0], 0, id="main-gpu"),
        pytest.param([cuda(0, 4000), cuda(1, 8000)], {"main_gpu": 0, "spread": True}, 11, [0, 1], [4.0, 7.0], 0,
                     id="main-gpu-spread"),
        pytest.param([cuda(0, 8192)], {"num_gpu": 0}, 0, [], None, None, id="num-gpu-0-cpu"),
        pytest.param([cuda(0, 1000)], {"num_gpu": 8}, 8, [0], None, 0, id="num-gpu-more-than-fits"),
        pytest.param([cuda(0, 8192)], {"num_gpu": 3}, 3, [0], None, 0, id="num-gpu-fewer"),
        pytest.param([cuda(0, 8192)], {"num_gpu": 99}, 11, [0], None, 0, id="num-gpu-capped"),
        pytest.param([cuda(0, RESERVE + 543)], {"overhead": 100 * MiB}, 4, [0], None, 0, id="overhead"),
    ],
)
def test_place(gpus: list[GpuInfo], kw: dict, layers: int, indices: list[int], split: list[float] | None,
               main: int | None) -> None:
    p = place(EST, gpus, system_free=64 * GiB, **kw)
    assert (p.n_gpu_layers, p.gpu_indices, p.tensor_split, p.main_gpu) == (layers, indices, split, main)
    by_index = {g.index: g for g in gpus}
    for index, used in zip(p.gpu_indices, p.gpu_bytes, strict=True):
        if kw.get("num_gpu", -1) < 0:  # chosen by fit: every GPU keeps the runner's context and the overhead free
            assert used <= by_index[index].free - RESERVE * MiB - kw.get("overhead", 0)
    assert p.reserve == RESERVE * MiB * len(p.gpu_indices)
    if split is not None:
        assert sum(split) == layers


@pytest.mark.parametrize(("library", "name", "reserve_mib"), [
    pytest.param("cuda", "NVIDIA H200", 560, id="cuda"),
    pytest.param("rocm", "AMD Instinct", 560, id="rocm"),
    pytest.param("metal", "Apple M3", 512, id="metal"),
    pytest.param("vulkan", "NVIDIA H200", 256, id="vulkan"),
    pytest.param("vulkan", "llvmpipe (LLVM 15.0.6, 256 bits)", 0, id="vulkan-software"),
])
def test_the_plan_holds_each_runners_context_on_its_gpu(library: str, name: str, reserve_mib: int) -> None:
    """Every layer goes to the GPU only when the runner's own context fits beside them (per device kind), and the
    placement says what it reserved, for the scheduler and the log."""
    buffers = (10 * 110 + 50 + 20) * MiB  # every layer + the graph

    def on(free: int):
        return place(EST, [GpuInfo(0, "GPU-0", name, library, 2 * free, free, "", "")], system_free=64 * GiB)

    enough = on(buffers + reserve_mib * MiB)
    assert enough.n_gpu_layers == 11 and enough.reserve == reserve_mib * MiB
    if reserve_mib:
        assert f"the runner's context reserved: {reserve_mib} MiB on GPU 0" in enough.reason
        assert on(buffers + reserve_mib * MiB - 1).n_gpu_layers == 10  # one byte short: a layer stays on the CPU


def test_sizes_for_ps() -> None:
    cpu = place(EST, [], system_free=64 * GiB)
    assert (cpu.size, cpu.size_vram) == (EST.total, 0) == (1211 * MiB, 0)

    partial = place(EST, [cuda(0, RESERVE + 543)], system_free=64 * GiB)  # output + 4 blocks on the GPU
    assert partial.size_vram == (50 + 4 * 110 + 20) * MiB
    assert partial.host_bytes == (40 + 6 * 110 + 20 + 1) * MiB
    assert partial.size == partial.size_vram + partial.host_bytes

    full = place(EST, [cuda(0, 8192)], system_free=64 * GiB)
    assert full.gpu_bytes == ((1150 + 20) * MiB,)
    assert full.host_bytes == (40 + 2 + 1) * MiB
    assert full.size == full.size_vram == (1170 + 43) * MiB  # reported as 100% GPU, like Ollama


def test_fits_says_whether_host_memory_suffices() -> None:
    assert place(EST, [], system_free=2 * GiB).fits
    assert not place(EST, [], system_free=1 * GiB).fits
    assert place(EST, [cuda(0, 8192)], system_free=1 * GiB).fits  # only the input layer stays on the CPU


def test_unknown_main_gpu_is_an_invalid_option() -> None:
    with pytest.raises(InvalidOption, match="main_gpu 3 is not a visible GPU"):
        place(EST, [cuda(0, 8192), cuda(1, 8192)], main_gpu=3, system_free=GiB)


def test_smollm2_fully_offloaded_on_a_small_gpu() -> None:
    est = estimate(SMOLLM2, num_ctx=4096, flash_attn=True)
    p = place(est, [cuda(0, 2048)], system_free=8 * GiB)
    assert p.n_gpu_layers == 31
    assert p.size == p.size_vram


# --------------------------------------------------------------------------------------------- the log

CPU_LOG = """\
0.00.192.577 I load_tensors: offloading 0 repeating layers to GPU
0.00.192.647 I load_tensors: offloaded 0/31 layers to GPU
0.00.192.671 I load_tensors:   CPU_Mapped model buffer size =    92.10 MiB
0.00.194.236 I llama_context:        CPU  output buffer size =     0.19 MiB
0.00.194.353 I llama_kv_cache:        CPU KV buffer size =    90.00 MiB
0.00.267.402 I llama_kv_cache: size =   90.00 MiB (  4096 cells,  30 layers,  1/1 seqs), K (f16):   45.00 MiB
0.00.272.418 I sched_reserve:        CPU compute buffer size =    17.51 MiB
1.00.597.315 I common_memory_breakdown_print: |   - Host               |                  199 =    92 +      90 +      17  |
"""  # noqa: E501 - llama-server's log, verbatim

CUDA_LOG = """\
load_tensors: offloading output layer to GPU
load_tensors: offloading 30 repeating layers to GPU
load_tensors: offloaded 31/31 layers to GPU
load_tensors:        CUDA0 model buffer size =    92.10 MiB
load_tensors:   CPU_Mapped model buffer size =    28.69 MiB
llama_context:  CUDA_Host  output buffer size =     0.19 MiB
llama_kv_cache:      CUDA0 KV buffer size =    60.00 MiB
llama_kv_cache:      CUDA1 KV buffer size =    30.00 MiB
sched_reserve:      CUDA0 compute buffer size =    17.51 MiB
sched_reserve:      CUDA1 compute buffer size =    10.00 MiB
sched_reserve:  CUDA_Host compute buffer size =     9.01 MiB
"""


def mib(x: float) -> int:
    return round(x * MiB)


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        pytest.param(CPU_LOG, {
            "layers": {"offloaded": 0, "total": 31},
            "CPU": {"model": mib(92.10), "kv": mib(90.00), "compute": mib(17.51), "output": mib(0.19)},
        }, id="cpu"),
        pytest.param(CUDA_LOG, {
            "layers": {"offloaded": 31, "total": 31},
            "CUDA0": {"model": mib(92.10), "kv": mib(60.00), "compute": mib(17.51), "output": 0},
            "CUDA1": {"model": 0, "kv": mib(30.00), "compute": mib(10.00), "output": 0},
            "CPU": {"model": mib(28.69), "kv": 0, "compute": mib(9.01), "output": mib(0.19)},
        }, id="cuda-two-gpus"),
        pytest.param("load_tensors:   CPU_Mapped model buffer size =   235.16 MiB\n"
                     "load_tensors:   CPU_REPACK model buffer size =    12.66 MiB\n"
                     "llama_kv_cache:        CPU KV buffer size =    12.00 MiB\n"
                     "llama_kv_cache:        CPU KV buffer size =    15.00 MiB\n", {
            "CPU": {"model": mib(235.16) + mib(12.66), "kv": mib(27.00), "compute": 0, "output": 0},
        }, id="repack-and-swa-caches-add-up"),
        pytest.param("load_tensors: MTL0_Mapped model buffer size =    80.00 MiB\n"
                     "load_tensors: RPC0[10.0.0.2:50052] model buffer size =    40.00 MiB\n"
                     "llama_kv_cache:       MTL0 KV buffer size =    90.00 MiB\n", {
            "MTL0": {"model": mib(80.00), "kv": mib(90.00), "compute": 0, "output": 0},
            "RPC0[10.0.0.2:50052]": {"model": mib(40.00), "kv": 0, "compute": 0, "output": 0},
        }, id="metal-and-rpc"),
        pytest.param("load_tensors:   CPU_Mapped model buffer size =   500.00 MiB\n"
                     "llama_kv_cache:        CPU KV buffer size =   100.00 MiB\n"
                     "load_tensors:   CPU_Mapped model buffer size =    92.10 MiB\n"
                     "llama_kv_cache:        CPU KV buffer size =    90.00 MiB\n", {
            "CPU": {"model": mib(92.10), "kv": mib(90.00), "compute": 0, "output": 0},
        }, id="second-load-replaces-the-first"),
        pytest.param("srv  load_model: loading model 'x.gguf'\n", {}, id="nothing"),
    ],
)
def test_parse_llama_server_buffers(log: str, expected: dict) -> None:
    assert parse_llama_server_buffers(log.splitlines()) == expected
