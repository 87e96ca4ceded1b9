"""Embeddings through a runner started in embedding mode: tokenize, truncate (or refuse), embed, normalize."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ollama_py.errors import BadRequest, RunnerError
from ollama_py.runner.client import LlamaClient, UpstreamLost
from ollama_py.scheduler.scheduler import Scheduler
from ollama_py.server.access_log import current_stats

if TYPE_CHECKING:
    from ollama_py.store.models import Model


# Tokens an input may have beyond one per byte of its text: BOS, EOS, a word-start marker the tokenizer adds.
_SPECIAL_SLACK = 8
_INLINE_FLOATS = 10_000  # vectors normalized on the event loop up to this many floats, in a thread past it
BATCH = 512  # inputs per /v1/embeddings call: a runner's answer stays tens of MB at most
# Inputs in one request: the answer holds a vector each, kept whole in memory (16,384 x 4,096 floats ~ 2 GB of
# Python floats at worst); OpenAI takes 2,048, Ollama sets no limit.
MAX_INPUTS = 16_384


@dataclass(slots=True)
class EmbedResult:
    vectors: list[list[float]]
    prompt_tokens: int
    load_duration: int


def normalize(vec: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vec))
    if not math.isfinite(norm):
        raise RunnerError("embedding contains NaN or Inf values")
    return [x / norm for x in vec] if norm > 0 else vec


async def embed(scheduler: Scheduler, model: Model, opts: dict[str, Any], keep_alive: float | None,
                inputs: list[str], *, truncate: bool, dimensions: int | None) -> EmbedResult:
    if "rerank" in model.capabilities:  # its runner pools by rank: one score per input, not a vector
        raise BadRequest(f'"{model.name.short}" is a reranker and does not support embeddings: use /api/rerank')
    if not inputs:
        if keep_alive != 0:
            await scheduler.load(model, opts, keep_alive, embedding=True)
        return EmbedResult([], 0, 0)
    if len(inputs) > MAX_INPUTS:
        raise BadRequest(f"too many inputs: {len(inputs)}, at most {MAX_INPUTS} in one request")
    async with scheduler.use(model, opts, keep_alive, embedding=True) as loaded:
        load_ns = int(loaded.runner.load_duration * 1e9) if loaded.requests_served == 0 else 0
        ctx = loaded.plan.spec.num_ctx
        vectors: list[list[float]] = []
        runner_tokens = 0
        try:
            prompts, counted = await fit_inputs(loaded.client, inputs, ctx, truncate)
            async with loaded.client.kept() as conn:  # each answer's size bounded, whatever the request's
                for start in range(0, len(prompts), BATCH):
                    data = await conn.post("/v1/embeddings", {"input": prompts[start:start + BATCH],
                                                              "encoding_format": "float"})
                    rows = sorted(data.get("data", []), key=lambda d: d.get("index", 0))
                    if len(rows) * max((len(r.get("embedding") or ()) for r in rows), default=0) > _INLINE_FLOATS:
                        vectors += await asyncio.to_thread(_vectors, rows, dimensions)
                    else:
                        vectors += _vectors(rows, dimensions)
                    runner_tokens += int((data.get("usage") or {}).get("prompt_tokens") or 0)
        except UpstreamLost as e:
            raise RunnerError(str(e)) from None
    prompt_tokens = runner_tokens or counted
    current_stats().prompt_tokens = prompt_tokens
    return EmbedResult(vectors, prompt_tokens, load_ns)


async def fit_inputs(client: LlamaClient, inputs: list[str], ctx: int,
                     truncate: bool) -> tuple[list[str | list[int]], int]:
    """The prompts for one /v1/embeddings call, with the tokens counted here. An input whose bytes (plus the
    few special tokens) fit the context goes as text: a token is at least one byte, so it cannot overflow, and
    llama-server tokenizes it in the same call. Only longer inputs are tokenized first (through the client's few
    connections, not one each), cut to the context (truncate) or refused."""
    long = [i for i, text in enumerate(inputs) if len(text.encode()) + _SPECIAL_SLACK > ctx]
    prompts: list[str | list[int]] = list(inputs)
    counted = 0
    if long:
        token_lists = await client.tokenize_each([inputs[i] for i in long], add_special=True)
        for i, tokens in zip(long, token_lists, strict=True):
            if len(tokens) > ctx:
                if not truncate:
                    raise BadRequest("the input length exceeds the context length")
                tokens = tokens[:ctx]
            prompts[i] = tokens
            counted += len(tokens)
    return prompts, counted


def _vectors(rows: list[dict[str, Any]], dimensions: int | None) -> list[list[float]]:
    vectors = []
    for row in rows:
        vec = row["embedding"]
        if vec and isinstance(vec[0], list):  # pooling none: one vector per token; take the mean
            vec = [sum(col) / len(vec) for col in zip(*vec)]
        vec = normalize([float(x) for x in vec])
        if dimensions is not None and dimensions < len(vec):
            vec = normalize(vec[:dimensions])
        vectors.append(vec)
    return vectors
