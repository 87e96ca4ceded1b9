"""The memory estimate with a model's runner settings ([models."name"] tables and their extra_args): MoE experts kept
on the CPU (n_cpu_moe, --n-cpu-moe, --cpu-moe), pinned devices (device, --device), the K and V cache types
(kv_cache_type, -ctk, -ctv), and the flags ollama-py plans itself, refused when the file is read."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ollama_py import config_file as cf
from ollama_py.api.names import parse_name
from ollama_py.config import Settings
from ollama_py.errors import ConfigError
from ollama_py.estimate import devices
from ollama_py.estimate.gpus import GpuInfo
from ollama_py.estimate.memory import GPU_MINIMUM, KV_BYTES, ModelShape, estimate, place, shape_from_gguf
from ollama_py.scheduler import model_settings as msettings
from ollama_py.scheduler.factory import plan_load
from ollama_py.scheduler.scheduler import LoadPlan
from tests.fakes.gguf_files import write_sized_llama_gguf, write_sized_moe_gguf

BLOCKS = 4


@pytest.fixture(scope="module")
def moe(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[int]]]:
    path = tmp_path_factory.mktemp("moe") / "moe.gguf"
    sizes = write_sized_moe_gguf(path, blocks=BLOCKS)
    return path, {k: v for k, v in sizes.items() if isinstance(v, list)}


def gpu(index: int, free: int, name: str = "Vulkan") -> GpuInfo:
    """A GPU as runner_gpus makes one from --list-devices."""
    return GpuInfo(index, f"{name}{index}", "fake", "vulkan", 2 * free, free, "", "")


# -- the GGUF's experts ---------------------------------------------------------------------------------------------
def test_expert_tensors_are_counted_per_block(moe, tmp_path: Path) -> None:
    path, sizes = moe
    shape = shape_from_gguf(path)
    assert list(shape.layer_expert_bytes) == sizes["experts"]  # the shared expert (ffn_*_shexp) is not one
    assert all(0 < e < n for e, n in zip(shape.layer_expert_bytes, shape.layer_bytes, strict=True))
    write_sized_llama_gguf(tmp_path / "dense.gguf")
    assert shape_from_gguf(tmp_path / "dense.gguf").layer_expert_bytes == ()


# -- n_cpu_moe in the estimate and the placement -------------------------------------------------------------------
@pytest.mark.parametrize(("n_cpu_moe", "kept_blocks"), [
    pytest.param(0, 0, id="none"),
    pytest.param(1, 1, id="first-block"),
    pytest.param(3, 3, id="first-three"),
    pytest.param(msettings.ALL_LAYERS, BLOCKS, id="cpu-moe-all"),
    pytest.param(BLOCKS + 5, BLOCKS, id="more-than-blocks"),
])
def test_experts_of_the_first_blocks_move_from_the_gpu_to_host_memory(moe, n_cpu_moe: int, kept_blocks: int) -> None:
    path, sizes = moe
    shape = shape_from_gguf(path)
    base = estimate(shape, num_ctx=256, flash_attn=True)
    est = estimate(shape, num_ctx=256, flash_attn=True, n_cpu_moe=n_cpu_moe)
    kept = sum(sizes["experts"][:kept_blocks])
    everything = place(base, [gpu(0, 1 << 30)])
    split = place(est, [gpu(0, 1 << 30)])
    assert everything.n_gpu_layers == split.n_gpu_layers == BLOCKS + 1
    assert everything.gpu_bytes[0] - split.gpu_bytes[0] == kept
    if kept:  # the CPU now computes the experts it holds: a partial offload's compute buffer
        assert split.host_bytes - everything.host_bytes == kept + est.graph - est.graph_host
        assert split.size_vram == sum(split.gpu_bytes) < split.size  # reported split, not "100% GPU"
    else:
        assert split == everything
    assert place(est, []).host_bytes == place(base, []).host_bytes  # on the CPU alone nothing moves


def test_cpu_moe_lets_every_layer_fit_where_the_experts_would_not(moe) -> None:
    path, _ = moe
    shape = shape_from_gguf(path)
    est = estimate(shape, num_ctx=256, flash_attn=True, n_cpu_moe=msettings.ALL_LAYERS)
    # all but the experts, the runner's context, and a little
    room = est.graph + sum(est.offloaded_layers) + est.output_layer + GPU_MINIMUM["vulkan"] + 1024
    without = place(estimate(shape, num_ctx=256, flash_attn=True), [gpu(0, room)])
    assert without.n_gpu_layers < BLOCKS + 1
    assert place(est, [gpu(0, room)]).n_gpu_layers == BLOCKS + 1


def test_experts_of_blocks_left_on_the_cpu_are_not_counted_twice(moe) -> None:
    path, _ = moe
    shape = shape_from_gguf(path)
    base, est = (estimate(shape, num_ctx=256, flash_attn=True, n_cpu_moe=n) for n in (0, 2))
    # -ngl 3: the last two blocks and the output layer; blocks 0 and 1, whose experts n_cpu_moe keeps, are on the CPU
    assert place(est, [gpu(0, 1 << 30)], num_gpu=3) == place(base, [gpu(0, 1 << 30)], num_gpu=3)


# -- the K and V cache types --------------------------------------------------------------------------------------
@pytest.mark.parametrize(("kv_type", "kv_type_v", "flash", "k_bytes", "v_bytes"), [
    pytest.param("f16", None, True, 2.0, 2.0, id="f16"),
    pytest.param("q8_0", None, True, KV_BYTES["q8_0"], KV_BYTES["q8_0"], id="q8_0-halves"),
    pytest.param("q4_0", None, True, KV_BYTES["q4_0"], KV_BYTES["q4_0"], id="q4_0-quarters"),
    pytest.param("q8_0", "f16", True, KV_BYTES["q8_0"], 2.0, id="k-q8_0-v-f16"),
    pytest.param("f16", "q4_0", True, 2.0, KV_BYTES["q4_0"], id="k-f16-v-q4_0"),
    pytest.param("q8_0", "q4_0", False, 2.0, 2.0, id="quantized-without-flash-attention-is-f16"),
])
def test_kv_cache_types(moe, kv_type: str, kv_type_v: str | None, flash: bool, k_bytes: float,
                        v_bytes: float) -> None:
    shape = shape_from_gguf(moe[0])
    est = estimate(shape, num_ctx=1024, kv_type=kv_type, kv_type_v=kv_type_v, flash_attn=flash)
    cells = est.n_ctx
    width = shape.head_count_kv[0]
    expected = int(width * (shape.key_length * k_bytes + shape.value_length * v_bytes) * cells)
    assert est.layer_kv == (expected,) * BLOCKS


# -- what a [models."m"] table makes of the flags -----------------------------------------------------------------
def settings_of(body: str) -> cf.ModelSettings:
    return cf.parse_config(f'[models."m"]\n{body}\n').models.for_name(parse_name("m"))


@pytest.mark.parametrize(("body", "expected"), [
    pytest.param("", msettings.RunnerMemory(), id="nothing"),
    pytest.param("n_cpu_moe = 3", msettings.RunnerMemory(n_cpu_moe=3), id="n-cpu-moe-setting"),
    pytest.param('extra_args = ["--n-cpu-moe", "2"]', msettings.RunnerMemory(n_cpu_moe=2), id="n-cpu-moe-flag"),
    pytest.param('extra_args = ["-ncmoe=5"]', msettings.RunnerMemory(n_cpu_moe=5), id="ncmoe-equals"),
    pytest.param('n_cpu_moe = 1\nextra_args = ["-ncmoe", "4"]', msettings.RunnerMemory(n_cpu_moe=4),
                 id="overrides-add-up"),
    pytest.param('extra_args = ["--cpu-moe"]', msettings.RunnerMemory(n_cpu_moe=msettings.ALL_LAYERS), id="cpu-moe"),
    pytest.param('extra_args = ["-cmoe", "--jinja"]', msettings.RunnerMemory(n_cpu_moe=msettings.ALL_LAYERS),
                 id="cmoe"),
    pytest.param('device = ["Vulkan1", "Vulkan0"]', msettings.RunnerMemory(devices=("Vulkan1", "Vulkan0")),
                 id="device-list"),
    pytest.param('device = "none"', msettings.RunnerMemory(devices=()), id="device-none"),
    pytest.param('device = "Vulkan0"\nextra_args = ["-dev", "Vulkan1"]', msettings.RunnerMemory(devices=("Vulkan1",)),
                 id="last-device-wins"),
    pytest.param('extra_args = ["-ctk", "q8_0", "--cache-type-v=q4_0"]',
                 msettings.RunnerMemory(kv_type_k="q8_0", kv_type_v="q4_0"), id="cache-types"),
])
def test_runner_memory_of_a_table(body: str, expected: msettings.RunnerMemory) -> None:
    assert msettings.runner_memory(settings_of(body)) == expected


@pytest.mark.parametrize(("args", "message"), [
    pytest.param('["-c", "8192"]', "-c is planned by ollama-py (with the memory estimate) and cannot be given here: "
                 "set options = { num_ctx = N } (the context of each slot) in this table instead", id="ctx"),
    pytest.param('["--ctx-size=8192"]', "--ctx-size is planned by ollama-py", id="ctx-size-equals"),
    pytest.param('["-ngl", "99"]', "set options = { num_gpu = N } in this table", id="ngl"),
    pytest.param('["--n-gpu-layers", "all"]', "--n-gpu-layers is planned by ollama-py", id="n-gpu-layers"),
    pytest.param('["--gpu-layers", "9"]', "--gpu-layers is planned by ollama-py", id="gpu-layers"),
    pytest.param('["-np", "4"]', "set num_parallel = N in this table", id="parallel"),
    pytest.param('["-ub", "256"]', "set options = { num_batch = N }", id="ubatch"),
    pytest.param('["--n-cpu-moe", "many"]', "--n-cpu-moe many: must be a number of layers", id="n-cpu-moe-value"),
    pytest.param('["--jinja", "--n-cpu-moe"]', "--n-cpu-moe needs a value", id="n-cpu-moe-missing"),
    pytest.param('["-ctk", "q9"]', "-ctk q9: must be one of f32, f16", id="cache-type-k-value"),
    pytest.param('["--cache-type-v=fp8"]', "--cache-type-v fp8: must be one of", id="cache-type-v-value"),
    pytest.param('["--device", "--jinja"]', "--device needs a value", id="device-missing"),
])
def test_flags_that_move_memory_are_refused_or_checked_when_the_file_is_read(args: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        cf.parse_config(f'[models."m"]\nextra_args = {args}\n', "c.toml")
    assert str(info.value).startswith('c.toml:2: models."m".extra_args')
    assert message in str(info.value)


# -- device pinning -----------------------------------------------------------------------------------------------
GPUS = [gpu(0, 8 << 30), gpu(1, 1 << 30)]


@pytest.mark.parametrize(("names", "expected"), [
    pytest.param(None, [("Vulkan0", 0), ("Vulkan1", 1)], id="unpinned"),
    pytest.param((), [], id="none"),
    pytest.param(("Vulkan1",), [("Vulkan1", 0)], id="second-gpu-is-index-0"),
    pytest.param(("vulkan1", "VULKAN0"), [("Vulkan1", 0), ("Vulkan0", 1)], id="list-order-any-case"),
    pytest.param(("CUDA0",), [], id="no-such-device"),
    pytest.param(("Vulkan1", "Vulkan1"), [("Vulkan1", 0)], id="twice"),
])
def test_pinned_gpus(names: tuple[str, ...] | None, expected: list[tuple[str, int]]) -> None:
    assert [(g.uuid, g.index) for g in devices.pinned_gpus(GPUS, names)] == expected


def test_cuda_gpus_are_named_by_their_visible_index() -> None:
    nvml = [GpuInfo(i, f"GPU-{i}", "H100", "cuda", 1 << 34, 1 << 34, "9.0", "550") for i in range(2)]
    assert [g.uuid for g in devices.pinned_gpus(nvml, ("CUDA1",))] == ["GPU-1"]


# -- the plan: the settings reach the estimate ------------------------------------------------------------------
def plan_for(body: str, path: Path, gpus: list[GpuInfo], options: dict[str, object] | None = None) -> LoadPlan:
    settings = Settings.from_env({"OLLAMA_NUM_PARALLEL": "1"})
    model = SimpleNamespace(model_path=path, adapters=(), projectors=(), name=parse_name("m"))
    return msettings.plan_with_settings(
        settings_of(body), settings, {"num_ctx": 256, **(options or {})},
        lambda s, o, r: plan_load(s, gpus, 1 << 40, model, o, False, runner=r))


@pytest.mark.parametrize(("body", "kept_blocks"), [
    pytest.param("n_cpu_moe = 2", 2, id="setting"),
    pytest.param('extra_args = ["--n-cpu-moe", "3"]', 3, id="extra-args"),
    pytest.param('extra_args = ["--cpu-moe"]', BLOCKS, id="cpu-moe"),
])
def test_a_models_n_cpu_moe_takes_its_experts_off_the_gpu(moe, body: str, kept_blocks: int) -> None:
    path, sizes = moe
    base = plan_for("", path, [gpu(0, 1 << 30)])
    plan = plan_for(body, path, [gpu(0, 1 << 30)])
    assert plan.spec.n_gpu_layers == base.spec.n_gpu_layers == BLOCKS + 1
    assert base.size_vram - plan.size_vram > sum(sizes["experts"][:kept_blocks]) - 1  # the experts left the GPU
    assert plan.size - plan.size_vram > sum(sizes["experts"][:kept_blocks])  # ... for host memory


@pytest.mark.parametrize(("body", "gpu_layers", "pinned", "split"), [
    # two devices: an explicit split keeps llama.cpp from spreading layers over both
    pytest.param("", BLOCKS + 1, None, (BLOCKS + 1.0, 0.0), id="unpinned-takes-the-big-gpu"),
    # one device: nothing to split or choose
    pytest.param('device = "Vulkan1"', 0, ("Vulkan1",), (), id="pinned-to-the-full-one"),
    pytest.param('extra_args = ["--device", "Vulkan1"]', 0, ("Vulkan1",), (), id="pinned-by-extra-args"),
    pytest.param('device = "Vulkan0"', BLOCKS + 1, ("Vulkan0",), (), id="pinned-to-the-big-one"),
    pytest.param('device = "none"', 0, (), (), id="none"),
])
def test_only_the_pinned_devices_free_memory_counts(moe, body: str, gpu_layers: int, pinned: tuple[str, ...] | None,
                                                    split: tuple[float, ...]) -> None:
    gpus = [gpu(0, 1 << 30), gpu(1, 64 * 1024)]  # the second has room for no layer at all
    plan = plan_for(body, moe[0], gpus)
    assert plan.spec.n_gpu_layers == gpu_layers
    assert plan.gpus == pinned
    assert plan.spec.tensor_split == split


def test_a_pinned_main_gpu_counts_in_the_device_list(moe) -> None:
    gpus = [gpu(0, 1 << 30), gpu(1, 1 << 30)]
    plan = plan_for('device = ["Vulkan1", "Vulkan0"]', moe[0], gpus, {"main_gpu": 1})
    assert plan.spec.n_gpu_layers == BLOCKS + 1
    assert plan.spec.main_gpu == 1  # Vulkan0 in llama.cpp's terms: the second device of the --device list
    assert plan.gpus == ("Vulkan1", "Vulkan0")


@pytest.mark.parametrize(("body", "k_bytes", "v_bytes"), [
    pytest.param("", 2.0, 2.0, id="f16"),
    pytest.param('kv_cache_type = "q8_0"', KV_BYTES["q8_0"], KV_BYTES["q8_0"], id="kv-cache-type"),
    pytest.param('extra_args = ["-ctk", "q4_0"]', KV_BYTES["q4_0"], 2.0, id="ctk"),
    pytest.param('kv_cache_type = "q8_0"\nextra_args = ["-ctv", "q4_0"]', KV_BYTES["q8_0"], KV_BYTES["q4_0"],
                 id="ctv-over-kv-cache-type"),
])
def test_a_models_cache_types_size_its_kv_cache(moe, body: str, k_bytes: float, v_bytes: float) -> None:
    shape: ModelShape = shape_from_gguf(moe[0])
    base = plan_for("", moe[0], [])
    plan = plan_for(body, moe[0], [])
    per_cell = shape.head_count_kv[0] * shape.key_length * BLOCKS  # K and V have the same width here
    cells = estimate(shape, num_ctx=256).n_ctx
    assert base.size - plan.size == int(per_cell * cells * (4.0 - k_bytes - v_bytes))
