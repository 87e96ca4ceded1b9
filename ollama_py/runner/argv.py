"""The launch spec of one llama-server child and the pure function that turns it into argv."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True, slots=True)
class LaunchSpec:
    """Everything that decides how a llama-server child is started. Two requests that produce the same
    spec can share a runner; a different spec means a reload."""

    model: Path
    shards: tuple[Path, ...] = ()  # a split GGUF's files in order; started from links named as llama.cpp wants
    num_ctx: int = 4096
    parallel: int = 1
    num_batch: int | None = None
    n_gpu_layers: int | None = 0
    num_thread: int | None = None
    flash_attention: str | None = None  # "on" | "off" | None = llama-server's auto
    kv_cache_type: str = ""
    adapters: tuple[Path, ...] = ()
    projectors: tuple[Path, ...] = ()
    embedding: bool = False
    rerank: bool = False  # with embedding: a reranker, started with --reranking (pooling rank) for /rerank
    use_mmap: bool | None = None
    main_gpu: int | None = None
    tensor_split: tuple[float, ...] = ()
    rpc_servers: tuple[str, ...] = ()
    num_keep: int | None = None
    context_shift: bool = True  # an answer that reaches the end of the context shifts it and goes on (Ollama's)
    metrics: bool = True
    draft_model: Path | None = None  # speculative decoding with this draft model (a DRAFT layer)
    draft_ngram: bool = False  # prompt-lookup speculation: drafts from n-grams already in the context
    draft_max: int | None = None  # tokens drafted per step (Ollama's draft_num_predict)
    cache_ram_mib: int | None = None  # --cache-ram: the host prompt cache's cap (0: off); None: llama-server's 8 GiB
    slot_save_path: Path | None = None  # --slot-save-path: where slots are saved at unload (runner/slot_cache.py)
    kv_overrides: tuple[str, ...] = ()  # --override-kv KEY=TYPE:VALUE: an Ollama-published GGUF read as meant
    text_only_copy: Path | None = None  # where model's text-only copy is read from (runner/gguf_compat.py)
    extra: tuple[str, ...] = field(default=())


# Where an image goes in a prompt. llama-server picks a random marker per process unless LLAMA_MEDIA_MARKER
# pins one; runners are started with this one so prompts can be built before a runner answers.
MEDIA_MARKER = "<__media__>"


def build_argv(spec: LaunchSpec, binary: Path | str, port: int) -> list[str]:
    """argv for llama-server: always loopback, no web UI, offline.

    Several slots share one unified KV cache of num_ctx * parallel cells (as llama-server's own default,
    `-np auto`, does), each slot capped at num_ctx (`--kv-unified-per-slot`): a request's num_ctx means what
    it means with one slot, and the slots together can never overrun the pool (a full unified cache fails every
    running request at once in llama-server)."""
    argv = [
        str(binary),
        "--model", str(spec.text_only_copy or spec.model),
        "--host", "127.0.0.1",
        "--port", str(port),
        "-c", str(spec.num_ctx * spec.parallel),
        "-np", str(spec.parallel),
        "--no-webui",
        "--offline",
        # verbosity 4 makes llama-server print its buffer sizes per device, which the scheduler reads back
        # to report real memory use (estimate/memory.parse_llama_server_buffers)
        "-lv", "4",
        # llama-server's HTTP threads (its default: max(slots + 4, cores - 1)), one a connection: the gateway's
        # streams (one a slot), as many requests in llama-server's own queue (scheduler/policy.runner_queue),
        # as many spare connections (runner/sse.Spare, held up to 3 s) and room beside them, so a tokenize or a
        # /metrics call never queues behind them.
        "--threads-http", str(max(3 * spec.parallel + 4, (os.cpu_count() or 1) - 1)),
    ]
    if spec.parallel > 1:
        argv += ["--kv-unified", "--kv-unified-per-slot", str(spec.num_ctx)]
    if spec.num_batch:
        argv += ["-b", str(spec.num_batch), "-ub", str(spec.num_batch)]
    if spec.n_gpu_layers is not None:
        # the layers are placed by our estimate; llama-server's own fitting pass would only repeat that work
        # (measured: 1.8 s of a 3.9 s Gemma 3 270M load on 2 cores)
        argv += ["-ngl", str(spec.n_gpu_layers), "--fit", "off"]
    if spec.n_gpu_layers == 0:
        # no layer offloaded means no GPU at all: without this llama-server still puts its compute buffers on
        # the first GPU and runs large batches there (op offload), holding device memory a user kept free
        argv += ["--device", "none"]
    if spec.num_thread:
        argv += ["-t", str(spec.num_thread)]
    if spec.flash_attention:
        argv += ["--flash-attn", spec.flash_attention]
    if spec.kv_cache_type:
        argv += ["--cache-type-k", spec.kv_cache_type, "--cache-type-v", spec.kv_cache_type]
    for adapter in spec.adapters:
        argv += ["--lora", str(adapter)]
    for projector in spec.projectors:
        argv += ["--mmproj", str(projector)]
    if spec.rerank:
        argv += ["--reranking"]  # embeddings on, pooling rank: the model's classification head scores each pair
    elif spec.embedding:
        argv += ["--embedding", "--pooling", "mean"]
    if spec.use_mmap is False:
        argv += ["--load-mode", "none"]  # this llama-server refuses the older --no-mmap
    if spec.main_gpu is not None:
        argv += ["--main-gpu", str(spec.main_gpu)]
        if not spec.tensor_split:
            argv += ["--split-mode", "none"]
    if spec.tensor_split:
        argv += ["--tensor-split", ",".join(f"{x:g}" for x in spec.tensor_split)]
    if spec.rpc_servers:
        argv += ["--rpc", ",".join(spec.rpc_servers)]
    if spec.context_shift:
        # off by default in llama-server: an answer would stop at the end of the context. Ollama starts its
        # runners with it (a request's shift: false stops there instead: server/completion.py); llama-server turns
        # it off itself where the model's memory cannot shift (a projector, recurrent state)
        argv += ["--context-shift"]
    if spec.num_keep is not None and spec.num_keep >= 0:
        argv += ["--keep", str(spec.num_keep)]
    if spec.metrics:
        argv += ["--metrics"]
    if spec.cache_ram_mib is not None:
        argv += ["--cache-ram", str(spec.cache_ram_mib)]
    if spec.slot_save_path is not None:
        argv += ["--slot-save-path", str(spec.slot_save_path)]
    for override in spec.kv_overrides:  # (runner/gguf_compat.py)
        argv += ["--override-kv", override]
    argv += speculation_args(spec)
    argv += list(spec.extra)
    return argv


def speculation_args(spec: LaunchSpec) -> list[str]:
    """llama-server's speculative decoding: a draft model (`--spec-draft-model`, its layers placed like the main
    model's: all on the GPU when the main model is, none on CPU-only loads) and/or n-gram prompt lookup."""
    types = []
    out: list[str] = []
    if spec.draft_model is not None:
        types.append("draft-simple")
        out += ["--spec-draft-model", str(spec.draft_model)]
        if spec.n_gpu_layers is not None:
            out += ["--spec-draft-ngl", "0" if spec.n_gpu_layers == 0 else "999"]
        if spec.draft_max:
            out += ["--spec-draft-n-max", str(spec.draft_max)]
    if spec.draft_ngram:
        types.append("ngram-simple")
        if spec.draft_max:
            out += ["--spec-ngram-simple-size-m", str(spec.draft_max)]
    return ["--spec-type", ",".join(types), *out] if types else []
