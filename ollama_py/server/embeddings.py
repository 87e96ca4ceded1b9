"""Embeddings through a runner started in embedding mode: tokenize, truncate (or refuse), embed, normalize."""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ollama_py.errors import BadRequest, RunnerError
from ollama_py.runner.client import UpstreamLost
from ollama_py.scheduler.scheduler import Scheduler
from ollama_py.server.access_log import current_stats

if TYPE_CHECKING:
    from ollama_py.store.models import Model


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
    async with scheduler.use(model, opts, keep_alive, embedding=True) as loaded:
        load_ns = int(loaded.runner.load_duration * 1e9) if loaded.requests_served == 0 else 0
        ctx = loaded.plan.spec.num_ctx
        try:
            token_lists = await asyncio.gather(*(loaded.client.tokenize(text, add_special=True) for text in inputs))
            cut = []
            for tokens in token_lists:
                if len(tokens) > ctx:
                    if not truncate:
                        raise BadRequest("the input length exceeds the context length")
                    tokens = tokens[:ctx]
                cut.append(tokens)
            data = await loaded.client.post("/v1/embeddings", {"input": cut, "encoding_format": "float"})
        except UpstreamLost as e:
            raise RunnerError(str(e)) from None
    rows = sorted(data.get("data", []), key=lambda d: d.get("index", 0))
    vectors = []
    for row in rows:
        vec = row["embedding"]
        if vec and isinstance(vec[0], list):  # pooling none: one vector per token; take the mean
            vec = [sum(col) / len(vec) for col in zip(*vec)]
        vec = normalize([float(x) for x in vec])
        if dimensions is not None and dimensions < len(vec):
            vec = normalize(vec[:dimensions])
        vectors.append(vec)
    prompt_tokens = sum(len(t) for t in cut)
    current_stats().prompt_tokens = prompt_tokens
    return EmbedResult(vectors, prompt_tokens, load_ns)
