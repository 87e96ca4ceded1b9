"""Reranking through a runner started with llama-server's --reranking: fit each document to the context, score
the (query, document) pairs, and return them best first.

A model is a reranker by its GGUF (GGUFInfo.is_reranker) or PARAMETER rerank (Model.is_reranker); its embedding
runner is then a rerank runner (scheduler/factory.plan_load). llama-server builds each pair's prompt itself: the
GGUF's `rerank` template with {query} and {document} filled in, else [BOS] query [EOS][SEP] document [EOS].
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ollama_py.errors import BadRequest, ContextExceeded, RunnerError
from ollama_py.runner.client import LlamaClient, UpstreamLost
from ollama_py.scheduler.scheduler import Scheduler
from ollama_py.server.access_log import current_stats

if TYPE_CHECKING:
    from ollama_py.store.models import Model

# Tokens a pair's prompt may add beyond the query's, the document's and its template's own text (BOS, EOS, SEP,
# and a BPE merge or two that joining the pieces can change).
_PAIR_SLACK = 8
_TOO_LONG = "the input length exceeds the context length"


@dataclass(frozen=True, slots=True)
class Ranked:
    index: int  # the document's position in the request
    relevance_score: float


@dataclass(frozen=True, slots=True)
class RerankResult:
    results: list[Ranked]  # best first, at most top_n
    prompt_tokens: int
    load_duration: int  # ns; 0 unless this request loaded the runner
    truncated: int  # documents cut to fit the context


def template_text(model: Model) -> str:
    """The GGUF's rerank prompt without its two slots: what every pair's prompt adds."""
    info = getattr(model, "info", None)
    template = info.kv.get("tokenizer.chat_template.rerank") if info is not None else None
    return template.replace("{query}", "").replace("{document}", "") if isinstance(template, str) else ""


async def fit_documents(client: LlamaClient, query: str, documents: list[str], n_ctx: int, template: str,
                        truncate: bool) -> tuple[list[str], int]:
    """Each document cut (by tokens, from its end) so that its pair's prompt fits n_ctx, with how many were cut.

    A document is tokenized only when its bytes could overflow (a token is at least one byte, give or take the
    few tokens a tokenizer adds), so short documents cost nothing extra. truncate=False refuses instead."""
    budget = n_ctx - _PAIR_SLACK
    fixed_bytes = len(query.encode()) + len(template.encode())
    long = [i for i, doc in enumerate(documents) if fixed_bytes + len(doc.encode()) > budget]
    if not long:
        return documents, 0
    if not truncate:
        raise BadRequest(_TOO_LONG)
    # One batch through the client's few kept-alive connections: the query, the template, then each long document.
    query_tokens, template_tokens, *token_lists = await client.tokenize_each(
        [query, template, *(documents[i] for i in long)])
    fixed = len(query_tokens) + len(template_tokens)
    room = budget - fixed
    over = [(i, tokens) for i, tokens in zip(long, token_lists, strict=True) if len(tokens) > room]
    if over and room <= 0:
        raise BadRequest(f"{_TOO_LONG}: the query alone takes {fixed} of the context's {n_ctx} tokens")
    texts = await client.post_each("/detokenize", [{"tokens": tokens[:room]} for _, tokens in over])
    out = list(documents)
    for (i, _), answer in zip(over, texts, strict=True):
        out[i] = answer.get("content", "")
    return out, len(over)


async def rerank(scheduler: Scheduler, model: Model, opts: dict[str, Any], keep_alive: float | None, query: str,
                 documents: list[str], *, top_n: int | None, truncate: bool) -> RerankResult:
    """Score every document against the query in the model's rerank runner; the best top_n, best first."""
    started = time.perf_counter()
    async with scheduler.use(model, opts, keep_alive, embedding=True) as loaded:
        load_ns = 0
        if loaded.requests_served == 0 and loaded.runner.load_duration:
            load_ns = int(min(loaded.runner.load_duration, time.perf_counter() - started) * 1e9)
        try:
            docs, cut = await fit_documents(loaded.client, query, documents, loaded.plan.spec.num_ctx,
                                            template_text(model), truncate)
            data = await loaded.client.post("/rerank", {"query": query, "documents": docs,
                                                        "top_n": len(docs) if top_n is None else top_n})
        except ContextExceeded as e:
            raise BadRequest(_TOO_LONG if not truncate else str(e)) from None
        except UpstreamLost as e:
            raise RunnerError(str(e)) from None
    ranked = [Ranked(int(r["index"]), float(r["relevance_score"])) for r in data.get("results", [])]
    ranked.sort(key=lambda r: (-r.relevance_score, r.index))
    if top_n is not None:
        ranked = ranked[:top_n]
    prompt_tokens = int((data.get("usage") or {}).get("prompt_tokens") or 0)
    current_stats().prompt_tokens = prompt_tokens
    return RerankResult(ranked, prompt_tokens, load_ns, cut)
