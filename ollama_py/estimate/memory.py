"""Memory a model needs before it is loaded, where its layers go, and what llama-server really allocated.

Four parts, all pure except `shape_from_gguf`, which reads a GGUF file's header and tensor table:

- `ModelShape`: the numbers from GGUF metadata that decide memory (layer sizes, heads, vocab, ...).
- `estimate(shape, num_ctx=..., ...) -> Estimate`: weights, KV cache, compute graph and output buffers,
  modelled on what llama.cpp (the llama-cpp-python 0.3.36 vendored tree) allocates; `n_cpu_moe` keeps the
  expert tensors of the first N blocks in host memory however many layers are offloaded (`--n-cpu-moe`).
- `place(estimate, gpus, ...) -> Placement`: `--n-gpu-layers`, the GPUs used and `--tensor-split`,
  following llama.cpp's own layer assignment (the last N layers are offloaded, the output layer counts
  as one, and offloaded layers are cut into contiguous runs by the split fractions).
- `parse_llama_server_buffers(lines)`: the model / KV / compute / output buffer sizes per device from
  llama-server's log (its llama.cpp lines only appear at `-lv 4` or higher).

Compute graph, fitted to llama-server's own numbers for SmolLM2-135M (llama) and Gemma 3 270M (gemma3,
sliding window) on CPU (bench/results/memory.md). With T the physical batch, n_kv the KV cells one
sequence sees (plus the sliding-window cells when the model has SWA layers, which get their own mask)
and q_dim = n_head*head_dim, the buffer is
    mask + 4*T*max(3*n_ff + 3*n_embd + max(n_embd, q_dim),
                   [without flash attention] n_head*n_kv + 3*q_dim + 2*n_embd + k_dim + v_dim)
where mask = n_kv*T*2 bytes with flash attention (f16) and n_kv*T*4 without (f32): the allocator's
peak is the feed-forward block, or, without flash attention, the per-head attention scores. It
matches the measured buffers within 1% across context sizes, batch sizes, parallel slots and flash
attention on/off; with a quantized KV cache llama.cpp needs ~1 MiB less, so the estimate errs high.
The logits are only one row per slot (llama-server reserves n_parallel outputs). GPU compute buffers
are taken to be the same size (not yet measured here).
"""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import gguf

from ollama_py.errors import InvalidOption
from ollama_py.estimate.gpus import GpuInfo
from ollama_py.store.gguf_meta import read_gguf_info

MiB = 1024 * 1024
# What each runner needs on every GPU it uses beyond its buffers, by device kind: the CUDA context and cuBLAS's
# workspace (nvidia-smi per process less llama-server's buffers on an H200: 555, 523 and 448 MiB for models of
# SmolLM2-135M, Llama-3.2-1B and Llama-3-8B shape; Ollama keeps 457 MiB per CUDA/ROCm GPU, under the largest of
# those), Metal's 512 MiB (Ollama's). Vulkan: Ollama keeps none; 256 MiB, not yet measured, and none on Mesa's
# software device (llvmpipe: host memory, no driver context). Reserved per runner: `place` leaves it free on each
# GPU it fills and Placement.reserve says how much, which the scheduler counts as that runner's (a second runner on
# the same GPU needs its own).
GPU_MINIMUM = {"cuda": 560 * MiB, "rocm": 560 * MiB, "vulkan": 256 * MiB, "metal": 512 * MiB}


def runner_reserve(gpu: GpuInfo) -> int:
    """GPU_MINIMUM for this device: what one runner's own context takes there beyond its buffers."""
    if gpu.library == "vulkan" and "llvmpipe" in gpu.name.lower():
        return 0
    return GPU_MINIMUM.get(gpu.library, 0)
# Bytes per element of the KV cache types llama-server accepts (block size / bytes per block for quants).
KV_BYTES = {"f32": 4.0, "f16": 2.0, "bf16": 2.0, "q8_0": 34 / 32, "q4_0": 18 / 32, "q4_1": 20 / 32,
            "iq4_nl": 18 / 32, "q5_0": 22 / 32, "q5_1": 24 / 32}
# Sliding-window layer patterns llama.cpp hard-codes per architecture when the GGUF does not say
# (n, dense_first): a layer is SWA unless it is the last (first) of every n.
SWA_PATTERNS = {"gemma2": (2, False), "gemma3": (6, False), "gemma3n": (5, False), "gemma-embedding": (6, False),
                "cohere2": (4, False), "gpt-oss": (2, False), "olmo2": (4, False), "exaone4": (4, False),
                "llama4": (4, False)}
_PROJECTOR_PREFIXES = ("v.", "mm.", "a.", "mm_")
# Weight types the AVX2 CPU backend copies into an interleaved CPU_REPACK buffer (when rows % 8 == 0);
# the mapped file stays mapped, so these weights cost their size twice in host memory.
REPACKED_TYPES = frozenset({"Q4_0", "Q4_K", "IQ4_NL"})
_PAD = 256  # llama.cpp pads context sizes to 256 cells
# MoE expert tensors, as llama.cpp's LLM_FFN_EXPS_REGEX (common.h) finds them for --cpu-moe / --n-cpu-moe
_EXPERTS_RE = re.compile(r"\.ffn_(up|down|gate|gate_up)_(ch|)exps")


def _pad(n: int, to: int = _PAD) -> int:
    return -(-n // to) * to


@dataclass(frozen=True, slots=True)
class ModelShape:
    architecture: str
    block_count: int
    embedding_length: int
    head_count: int
    head_count_kv: tuple[int, ...]  # per layer (GGUF allows one value or an array)
    key_length: int
    value_length: int
    context_length: int
    vocab: int
    feed_forward_length: int
    layer_bytes: tuple[int, ...]  # weights of blk.N.*
    output_bytes: int  # output.weight, or token_embd when the output is tied to it
    output_norm_bytes: int
    token_embd_bytes: int
    other_bytes: int  # tensors outside blocks/input/output that stay with the input on the CPU
    projector_bytes: int = 0  # vision/audio tensors inside the model file
    file_size: int = 0
    tied_output: bool = False
    expert_count: int = 0
    expert_used_count: int = 0
    expert_feed_forward_length: int = 0
    sliding_window: int = 0
    swa_layers: tuple[bool, ...] = ()
    repack_bytes: int = 0  # block weights of REPACKED_TYPES
    layer_expert_bytes: tuple[int, ...] = ()  # MoE expert tensors of blk.N (part of layer_bytes); () when dense


class TensorEntry(NamedTuple):
    """One row of a GGUF tensor table."""

    name: str
    n_bytes: int
    type: str = ""  # GGMLQuantizationType name: "Q4_K", "F32", ...
    rows: int = 0  # ne[1]


@dataclass(frozen=True, slots=True)
class Estimate:
    layer_weights: tuple[int, ...]
    layer_kv: tuple[int, ...]
    output_layer: int  # on a GPU: output matrix (a copy when tied) + output norm
    output_layer_host: int  # on the CPU: tied outputs share token_embd, only the norm is extra
    input_weights: int  # token_embd and others: llama.cpp always keeps the input layer on the CPU
    weights: int  # every weight once, as it sits in host memory
    kv: int
    graph: int  # compute buffer of each device that runs layers
    graph_host: int  # host compute buffer left when every layer is on GPUs
    output_buffer: int  # logits for the sequences' outputs, always in host memory
    projector: int
    repack: int  # CPU_REPACK copies of block weights, when the CPU backend repacks
    n_ctx: int  # KV cells in all, after llama.cpp's padding
    n_batch: int  # the physical batch the graph is sized for
    # weights of each block that stay in host memory even when the block is offloaded (--n-cpu-moe's experts)
    layer_host: tuple[int, ...] = ()

    @property
    def layers(self) -> tuple[int, ...]:
        """What each block costs where it runs: its weights plus its KV cache."""
        return tuple(w + k for w, k in zip(self.layer_weights, self.layer_kv, strict=True))

    @property
    def offloaded_layers(self) -> tuple[int, ...]:
        """What offloading each block costs on its GPU: `layers` less what stays in host memory."""
        if not self.layer_host:
            return self.layers
        return tuple(n - h for n, h in zip(self.layers, self.layer_host, strict=True))

    @property
    def total(self) -> int:
        """Everything on the CPU."""
        return self.weights + self.repack + self.kv + self.graph + self.output_buffer + self.projector

    @property
    def buffers(self) -> dict[str, int]:
        """Same keys as one device of `parse_llama_server_buffers`, for a CPU-only load."""
        return {"model": self.weights + self.repack, "kv": self.kv, "compute": self.graph, "output": self.output_buffer}


@dataclass(frozen=True, slots=True)
class Placement:
    n_gpu_layers: int
    gpu_indices: list[int]  # GpuInfo.index of the GPUs that get layers, in device order
    tensor_split: list[float] | None  # layers per visible GPU by index (0 = unused); None with <= 1 GPU
    size: int  # what /api/ps reports as size
    size_vram: int  # ... and size_vram (== size when every layer is offloaded, as Ollama reports it)
    main_gpu: int | None
    gpu_bytes: tuple[int, ...] = ()  # real VRAM use per entry of gpu_indices
    host_bytes: int = 0  # real host memory use
    fits: bool = True  # host_bytes within the free system memory given to place()
    reason: str = ""  # one line on why this placement, for the log
    reserve: int = 0  # GPU_MINIMUM of each GPU it uses: the runner's own context there, beyond size_vram


# ---------------------------------------------------------------------------------------------- prompt cache
AUTO_CACHE_RAM_MAX = 1024 * MiB


def prompt_cache_bytes(setting_mib: int | None, kv_bytes: int, *, embedding: bool = False) -> int:
    """Host RAM a runner's prompt cache may hold (llama-server's `--cache-ram`), in bytes, whole MiB.

    llama-server keeps the KV state of the prompts its slots let go in host memory, up to this much (its own
    default is 8 GiB per runner). `setting_mib`: OLLAMA_CACHE_RAM or the model's cache_ram, 0 turning it off;
    None: as much as the runner's own KV cache, at most AUTO_CACHE_RAM_MAX (three loaded models: at most 3 GiB
    more, all of it in their plans). Embedding runners get none: llama-server caches completion prompts only."""
    if embedding:
        return 0
    mib = -(-min(kv_bytes, AUTO_CACHE_RAM_MAX) // MiB) if setting_mib is None else setting_mib  # MiB, rounded up
    return max(mib, 0) * MiB


# ---------------------------------------------------------------------------------------------- GGUF


def _int(kv: Mapping[str, object], key: str, default: int = 0) -> int:
    value = kv.get(key)
    if isinstance(value, list):  # a per-layer array where one value was expected: the largest bounds memory
        value = max((v for v in value if isinstance(v, int)), default=default)
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _per_layer(kv: Mapping[str, object], key: str, n: int, default: int) -> tuple[int, ...]:
    value = kv.get(key)
    if isinstance(value, list) and value:
        values = [v if isinstance(v, int) and not isinstance(v, bool) else default for v in value[:n]]
        return tuple(values + [values[-1]] * (n - len(values))) if values else ()
    return (value if isinstance(value, int) and not isinstance(value, bool) else default,) * n


def _swa_layers(kv: Mapping[str, object], arch: str, n: int, window: int) -> tuple[bool, ...]:
    """Which layers use the sliding window, as llama.cpp decides it (see SWA_PATTERNS)."""
    if not window:
        return ()
    value = kv.get(f"{arch}.attention.sliding_window_pattern")
    if isinstance(value, list):
        return tuple(bool(v) for v in value[:n])
    if isinstance(value, int) and not isinstance(value, bool):
        every, dense_first = value, False
    elif arch in SWA_PATTERNS:
        every, dense_first = SWA_PATTERNS[arch]
    else:
        return ()
    # As llama.cpp's set_swa_pattern: 0 means every layer slides, 1 means none does.
    if dense_first:
        return tuple(every == 0 or il % every != 0 for il in range(n))
    return tuple(every == 0 or il % every < every - 1 for il in range(n))


def tensor_entry(name: str, type_name: str, shape: Sequence[int]) -> TensorEntry:
    """A tensor-table row with its size in bytes, from its GGML type name and GGUF shape."""
    elements = math.prod(shape)
    try:
        block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[type_name]]
    except KeyError:  # a type newer than our gguf package: count 4 bytes per element, an upper bound
        block, type_size = 1, 4
    return TensorEntry(name, elements // block * type_size, type_name, shape[1] if len(shape) > 1 else 1)


_BLOCK_RE = re.compile(r"^blk\.(\d+)\.")


def shape_from_metadata(kv: Mapping[str, object], tensors: Iterable[TensorEntry], file_size: int = 0) -> ModelShape:
    """A ModelShape from GGUF key/values and the tensor table. Pure."""
    arch = str(kv.get("general.architecture") or "llama")
    n_layer = _int(kv, f"{arch}.block_count")
    n_embd = _int(kv, f"{arch}.embedding_length")
    n_head = max(_per_layer(kv, f"{arch}.attention.head_count", n_layer, 0), default=0)
    heads_kv = _per_layer(kv, f"{arch}.attention.head_count_kv", n_layer, n_head)
    head_dim = n_embd // n_head if n_head else 0
    tokens = kv.get("tokenizer.ggml.tokens")
    vocab = _int(kv, f"{arch}.vocab_size") or (len(tokens) if isinstance(tokens, list) else 0)
    window = _int(kv, f"{arch}.attention.sliding_window")

    layer_bytes = [0] * n_layer
    expert_bytes = [0] * n_layer
    output = output_norm = token_embd = other = projector = repack = 0
    has_output = False
    for name, n_bytes, type_name, rows in tensors:
        if m := _BLOCK_RE.match(name):
            il = int(m.group(1))
            if il < n_layer:
                layer_bytes[il] += n_bytes
                if _EXPERTS_RE.search(name):
                    expert_bytes[il] += n_bytes
                if type_name in REPACKED_TYPES and rows % 8 == 0:
                    repack += n_bytes
            else:  # e.g. next-token-prediction blocks past block_count: loaded with the output layer
                output += n_bytes
        elif name.startswith("output_norm"):
            output_norm += n_bytes
        elif name.startswith("output."):
            output += n_bytes
            has_output = True
        elif name.startswith("token_embd."):
            token_embd += n_bytes
        elif name.startswith(_PROJECTOR_PREFIXES):
            projector += n_bytes
        else:
            other += n_bytes
    return ModelShape(
        architecture=arch,
        block_count=n_layer,
        embedding_length=n_embd,
        head_count=n_head,
        head_count_kv=heads_kv,
        key_length=_int(kv, f"{arch}.attention.key_length") or head_dim,
        value_length=_int(kv, f"{arch}.attention.value_length") or head_dim,
        context_length=_int(kv, f"{arch}.context_length"),
        vocab=vocab,
        feed_forward_length=max(_per_layer(kv, f"{arch}.feed_forward_length", n_layer, 0), default=0),
        layer_bytes=tuple(layer_bytes),
        output_bytes=output if has_output else output + token_embd,
        output_norm_bytes=output_norm,
        token_embd_bytes=token_embd,
        other_bytes=other,
        projector_bytes=projector,
        file_size=file_size,
        tied_output=not has_output,
        expert_count=_int(kv, f"{arch}.expert_count"),
        expert_used_count=_int(kv, f"{arch}.expert_used_count"),
        expert_feed_forward_length=_int(kv, f"{arch}.expert_feed_forward_length"),
        sliding_window=window,
        swa_layers=_swa_layers(kv, arch, n_layer, window),
        repack_bytes=repack,
        layer_expert_bytes=tuple(expert_bytes) if any(expert_bytes) else (),
    )


@functools.lru_cache(maxsize=32)
def _shape_cached(path: str, size: int, mtime_ns: int, *more: tuple[str, int, int]) -> ModelShape:
    info = read_gguf_info(Path(path))
    if more:  # a split GGUF: the first shard's key/values, every shard's tensors and bytes
        info = info.with_shards([read_gguf_info(Path(p)) for p, _size, _mtime in more])
        size += sum(s for _p, s, _mtime in more)
    return shape_from_metadata(info.kv, (tensor_entry(*row) for row in info.tensor_table), size)


def shape_from_gguf(path: str | os.PathLike[str]) -> ModelShape:
    """Read a GGUF file's key/values and tensor table (never its tensor data), cached per (path, size, mtime).

    It uses the store's header reader rather than gguf.GGUFReader: the latter builds numpy views of every
    vocabulary entry and takes 45 s for Gemma 3's 262k tokens here, against 1.4 s.
    """
    st = os.stat(path)
    return _shape_cached(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


def shape_from_shards(paths: Sequence[str | os.PathLike[str]]) -> ModelShape:
    """shape_from_gguf of a model split over several GGUF files (in shard order): one shape of them all."""
    keys = []
    for path in paths:
        st = os.stat(path)
        keys.append((str(Path(path).resolve()), st.st_size, st.st_mtime_ns))
    return _shape_cached(*keys[0], *keys[1:])


# ---------------------------------------------------------------------------------------------- estimate


def estimate(
    shape: ModelShape,
    *,
    num_ctx: int,
    num_parallel: int = 1,
    num_batch: int = 512,
    kv_type: str = "f16",
    flash_attn: bool = False,
    projector_bytes: int = 0,
    cpu_repack: bool = False,
    kv_unified: bool = False,
    kv_type_v: str | None = None,
    n_cpu_moe: int = 0,
) -> Estimate:
    """What llama-server allocates for `-c num_ctx*num_parallel -np num_parallel -ub num_batch`.

    `kv_unified` (`--kv-unified`): one cache of num_ctx*num_parallel cells that every sequence sees whole,
    instead of a stream of num_ctx cells per sequence; the KV bytes barely change, the mask grows with the pool.

    Quantized KV types need flash attention in llama.cpp; without it the cache is f16 (Ollama does the same),
    so pass the kv_type you will actually give llama-server together with the flash_attn you give it.
    `kv_type` is the K cache's type and, unless `kv_type_v` says otherwise (`-ctv`), the V cache's.
    `cpu_repack`: the runner is an x86 AVX2 CPU build, which keeps a repacked copy of some weights.
    `n_cpu_moe` (`--n-cpu-moe`; the block count or more for `--cpu-moe`): the MoE expert tensors of the first
    n_cpu_moe blocks stay in host memory when their block is offloaded (Estimate.layer_host).
    """
    kv_types = [kv_type, kv_type if kv_type_v is None else kv_type_v]
    for i, name in enumerate(kv_types):
        if name not in KV_BYTES:
            raise InvalidOption(f"unsupported KV cache type {name!r} (use one of {', '.join(KV_BYTES)})")
        if not flash_attn and name not in ("f16", "f32", "bf16"):
            kv_types[i] = "f16"
    parallel = max(num_parallel, 1)
    requested = max(num_ctx, 1) * parallel
    # llama.cpp: n_ctx padded to 256; each sequence gets its own stream of pad(n_ctx/n_seq) cells, or with a
    # unified cache one stream of all of them.
    n_ctx_seq = _pad(requested) if kv_unified else _pad(_pad(requested) // parallel)
    cells = n_ctx_seq if kv_unified else n_ctx_seq * parallel
    streams = 1 if kv_unified else parallel
    n_batch = min(num_batch, requested)  # n_ubatch = min(n_batch, n_ctx as requested)
    per_k, per_v = KV_BYTES[kv_types[0]], KV_BYTES[kv_types[1]]

    layer_kv = []
    if not shape.sliding_window:
        swa_cells = cells
    elif kv_unified:  # llama_kv_cache_iswa: n_swa * n_seq + n_ubatch cells in the one stream
        swa_cells = _pad(min(cells, shape.sliding_window * parallel + n_batch))
    else:
        swa_cells = _pad(min(n_ctx_seq, shape.sliding_window + n_batch)) * parallel
    for il in range(shape.block_count):
        n_kv_heads = shape.head_count_kv[il] if il < len(shape.head_count_kv) else 0
        width = n_kv_heads * (shape.key_length * per_k + shape.value_length * per_v)
        n = swa_cells if il < len(shape.swa_layers) and shape.swa_layers[il] else cells
        layer_kv.append(int(width * n))

    # Compute graph: see the module docstring for where these terms come from.
    n_embd, n_kv = shape.embedding_length, n_ctx_seq
    kv_heads = max(shape.head_count_kv, default=0)
    q_dim = shape.head_count * shape.key_length
    k_dim, v_dim = kv_heads * shape.key_length, kv_heads * shape.value_length
    if shape.expert_count and shape.expert_used_count:
        ffn = 3 * shape.expert_used_count * (shape.expert_feed_forward_length or shape.feed_forward_length)
        ffn += shape.expert_count  # router logits
    else:
        ffn = 3 * shape.feed_forward_length
    per_token = [ffn + 3 * n_embd + max(n_embd, q_dim)]
    mask_cells = n_kv + (swa_cells // streams if any(shape.swa_layers) else 0)  # one mask per cache
    if flash_attn:
        mask = mask_cells * n_batch * 2  # f16
    else:
        mask = mask_cells * n_batch * 4  # f32, and the attention scores are materialized per head
        per_token.append(shape.head_count * n_kv + 3 * q_dim + 2 * n_embd + k_dim + v_dim)
    graph = mask + 4 * n_batch * max(per_token)
    outputs = parallel  # llama-server reserves one output row per slot (no speculative drafts)
    graph = max(graph, 4 * (outputs * shape.vocab + 2 * n_batch * n_embd))

    weights = sum(shape.layer_bytes) + shape.token_embd_bytes + shape.other_bytes + shape.output_norm_bytes
    if not shape.tied_output:
        weights += shape.output_bytes
    layer_host = tuple(e if il < n_cpu_moe else 0 for il, e in enumerate(shape.layer_expert_bytes))
    return Estimate(
        layer_weights=shape.layer_bytes,
        layer_kv=tuple(layer_kv),
        output_layer=shape.output_bytes + shape.output_norm_bytes,
        output_layer_host=shape.output_norm_bytes + (0 if shape.tied_output else shape.output_bytes),
        input_weights=shape.token_embd_bytes + shape.other_bytes,
        weights=weights,
        kv=sum(layer_kv),
        graph=graph,
        graph_host=4 * n_batch * n_embd * 2,
        output_buffer=4 * outputs * shape.vocab,
        projector=projector_bytes + shape.projector_bytes,
        repack=shape.repack_bytes if cpu_repack else 0,
        n_ctx=cells,
        n_batch=n_batch,
        layer_host=layer_host if any(layer_host) else (),
    )


# ---------------------------------------------------------------------------------------------- placement


def _offloaded(est: Estimate, k: int) -> list[int]:
    """Sizes of the layers `-ngl k` puts on GPUs, in llama.cpp's order: the last k-1 blocks, then output."""
    if k <= 0:
        return []
    blocks = est.offloaded_layers
    return list(blocks[len(blocks) - (k - 1) :]) + [est.output_layer] if k > 1 else [est.output_layer]


def _greedy(sizes: Sequence[int], budgets: Sequence[int]) -> list[int] | None:
    """Contiguous runs filling each GPU in order; None when they do not all fit (greedy is optimal here)."""
    counts, i = [], 0
    for budget in budgets:
        used, n = 0, 0
        while i < len(sizes) and used + sizes[i] <= budget:
            used += sizes[i]
            n += 1
            i += 1
        counts.append(n)
    return counts if i == len(sizes) else None


def _proportional(n: int, weights: Sequence[int]) -> list[int]:
    """n layers split by weight with largest remainders, like llama.cpp's split by free memory."""
    total = sum(weights)
    exact = [n * w / total for w in weights]
    counts = [int(x) for x in exact]
    for i in sorted(range(len(weights)), key=lambda i: exact[i] - counts[i], reverse=True)[: n - sum(counts)]:
        counts[i] += 1
    return counts


def _runs_fit(sizes: Sequence[int], counts: Sequence[int], budgets: Sequence[int]) -> bool:
    start = 0
    for n, budget in zip(counts, budgets, strict=True):
        if sum(sizes[start : start + n]) > budget:
            return False
        start += n
    return True


def place(
    est: Estimate,
    gpus: Sequence[GpuInfo],
    *,
    num_gpu: int = -1,
    main_gpu: int | None = None,
    spread: bool = False,
    overhead: int = 0,
    system_free: int | None = None,
) -> Placement:
    """Decide `--n-gpu-layers`, the GPUs and `--tensor-split` for one model. Pure; never logs.

    - num_gpu 0 or no GPU: CPU. num_gpu > 0 asks for that many layers whether or not they fit.
    - Otherwise all block_count+1 layers when they fit in free VRAM minus `overhead`, the runner's context
      (GPU_MINIMUM, per GPU it uses; Placement.reserve) and a compute buffer per GPU; else as many as fit, taken
      from the last block down.
    - Several GPUs: the single GPU with the most free memory that holds everything (main_gpu first when
      given), unless `spread`; else contiguous runs over the GPUs split by free memory.
    """
    max_layers = len(est.layer_weights) + 1
    by_index = {g.index: g for g in gpus}
    if main_gpu is not None and gpus and main_gpu not in by_index:
        raise InvalidOption(f"main_gpu {main_gpu} is not a visible GPU (visible: {sorted(by_index)})")
    if num_gpu == 0 or not gpus:
        return _cpu(est, system_free, "num_gpu is 0" if gpus else "no GPU")

    want = min(num_gpu, max_layers) if num_gpu > 0 else max_layers

    def budget(g: GpuInfo, first: bool) -> int:
        return g.free - overhead - runner_reserve(g) - est.graph - (est.projector if first else 0)

    if not spread or len(gpus) == 1:
        order = sorted(gpus, key=lambda g: (g.index != main_gpu, -g.free, g.index))
        need = sum(_offloaded(est, want))
        for g in order:
            if need <= budget(g, True):
                why = f"num_gpu={num_gpu} on GPU {g.index}" if num_gpu > 0 else f"fits on GPU {g.index}"
                return _result(est, gpus, {g.index: want}, want, system_free, main_gpu=g.index, why=why)

    usable = [g for g in sorted(gpus, key=lambda g: g.index) if budget(g, False) > 0]
    if not usable:
        return _cpu(est, system_free, "no GPU has room for the compute buffer")
    budgets = [budget(g, i == 0) for i, g in enumerate(usable)]
    frees = [g.free for g in usable]
    if num_gpu > 0:
        k, why = want, f"num_gpu={num_gpu}"
        sizes = _offloaded(est, k)
        counts = _proportional(len(sizes), frees)
        greedy = _greedy(sizes, budgets)
        if not _runs_fit(sizes, counts, budgets) and greedy is not None:
            counts = greedy
    else:
        k = want
        while k > 0 and _greedy(_offloaded(est, k), budgets) is None:
            k -= 1
        if k == 0:
            return _cpu(est, system_free, "not one layer fits in free VRAM")
        sizes = _offloaded(est, k)
        counts = _proportional(len(sizes), frees)
        if not _runs_fit(sizes, counts, budgets):
            counts = _greedy(sizes, budgets) or counts
        why = "all layers fit" if k == max_layers else f"{k}/{max_layers} layers fit"
    used = {g.index: n for g, n in zip(usable, counts, strict=True) if n > 0}
    split_main = main_gpu if main_gpu is not None else (next(iter(used)) if len(used) == 1 else None)
    return _result(est, gpus, used, k, system_free, main_gpu=split_main, why=why)


def _cpu(est: Estimate, system_free: int | None, why: str) -> Placement:
    host = est.total
    return Placement(0, [], None, host, 0, None, (), host, system_free is None or host <= system_free, why)


def _result(
    est: Estimate, gpus: Sequence[GpuInfo], counts: dict[int, int], k: int, system_free: int | None, *,
    main_gpu: int | None, why: str,
) -> Placement:
    """The placement for `counts` (GPU index -> layers, in device order) of the k offloaded layers."""
    sizes = _offloaded(est, k)
    gpu_bytes, start = [], 0
    for i, n in enumerate(counts.values()):
        gpu_bytes.append(sum(sizes[start : start + n]) + est.graph + (est.projector if i == 0 else 0))
        start += n
    n_blocks = len(est.layer_weights)
    on_cpu = n_blocks - max(k - 1, 0)
    full = k >= n_blocks + 1
    kept = sum(est.layer_host[on_cpu:])  # offloaded blocks' experts that stay in host memory (--n-cpu-moe)
    host = (
        est.input_weights
        + sum(est.layers[:on_cpu])
        + kept
        + (est.repack * on_cpu // n_blocks if n_blocks else 0)
        + (0 if k >= 1 else est.output_layer_host)
        # the CPU computes what it holds: with experts kept there, its compute buffer is a partial offload's
        + (est.graph_host if full and not kept else est.graph)
        + est.output_buffer
    )
    vram = sum(gpu_bytes)
    # Ollama reports a fully offloaded model as all VRAM (its CLI then prints "100% GPU"), although
    # llama.cpp keeps the input embeddings in host memory; host_bytes/gpu_bytes keep the real split. Experts
    # kept in host memory are no such detail: that model is reported split.
    size, size_vram = (vram + host, vram + host) if full and not kept else (vram + host, vram)
    # With several GPUs visible, an explicit split (zeros for unused GPUs) keeps llama.cpp from spreading
    # the layers over every device by free memory, its default.
    split = [float(counts.get(g.index, 0)) for g in sorted(gpus, key=lambda g: g.index)] if len(gpus) > 1 else None
    by_index = {g.index: g for g in gpus}
    reserve = sum(runner_reserve(by_index[i]) for i in counts if i in by_index)
    context = ", ".join(f"{runner_reserve(by_index[i]) // MiB} MiB on GPU {i}" for i in counts if i in by_index)
    return Placement(
        n_gpu_layers=k,
        gpu_indices=list(counts),
        tensor_split=split,
        size=size,
        size_vram=size_vram,
        main_gpu=main_gpu,
        gpu_bytes=tuple(gpu_bytes),
        host_bytes=host,
        fits=system_free is None or host <= system_free,
        reason=f"{why}; the runner's context reserved: {context}" if reserve else why,
        reserve=reserve,
    )


# ---------------------------------------------------------------------------------------------- the log

# llama.cpp prints "<func>: <buffer name> <kind> buffer size = <x> MiB"; kinds: model (load_tensors),
# KV / RS (llama_kv_cache, llama_memory_recurrent), compute (sched_reserve), output (llama_context).
_BUFFER_RE = re.compile(
    r"(?P<name>[\w.\-\[\]:]+)\s+(?P<kind>model|KV|RS|compute|output) buffer size =\s*(?P<mib>[\d.]+) MiB")
_KIND = {"model": "model", "KV": "kv", "RS": "kv", "compute": "compute", "output": "output"}
_OFFLOADED_RE = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")


def buffer_device(name: str) -> str:
    """The device a llama.cpp buffer lives on: CPU_Mapped, CPU_REPACK, CUDA_Host -> CPU; CUDA0 -> CUDA0."""
    if name.startswith("CPU") or name.endswith("_Host") or name == "Host":
        return "CPU"
    for suffix in ("_Mapped", "_Private", "_Split", "_REPACK"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def parse_llama_server_buffers(log_lines: Iterable[str]) -> dict[str, dict[str, int]]:
    """Bytes per device and buffer kind ("model", "kv", "compute", "output") from llama-server's log.

    A model buffer line after KV or compute lines means the model was loaded again (a fit probe logged
    verbosely, or a reload); only the last load counts. `offloaded N/M layers` is returned under the
    pseudo-device "layers" as {"offloaded": N, "total": M}.
    """
    result: dict[str, dict[str, int]] = {}
    seen_context = False
    for line in log_lines:
        if m := _OFFLOADED_RE.search(line):
            result.setdefault("layers", {})
            result["layers"] = {"offloaded": int(m.group(1)), "total": int(m.group(2))}
            continue
        m = _BUFFER_RE.search(line)
        if not m:
            continue
        kind = _KIND[m.group("kind")]
        if kind == "model" and seen_context:
            result = {k: v for k, v in result.items() if k == "layers"}
            seen_context = False
        elif kind != "model":
            seen_context = True
        device = result.setdefault(buffer_device(m.group("name")), {"model": 0, "kv": 0, "compute": 0, "output": 0})
        device[kind] += round(float(m.group("mib")) * MiB)
    return result
