"""Reranking routes: Ollama's /api/rerank (the shape of Ollama's open PRs for #3368) and /v1/rerank (the Cohere /
Jina shape llama-server speaks). Both score through server/rerank.py.

    POST /api/rerank  {"model", "query", "documents": [str | {"text"}], "top_n"?, "return_documents"? (true),
                       "truncate"? (true), "keep_alive"?, "options"?}
                      -> {"model", "results": [{"index", "relevance_score", "document"?: str}],
                          "total_duration", "load_duration", "prompt_eval_count"}
    POST /v1/rerank   {"model", "query", "documents", "top_n"?, "return_documents"? (false), "truncate"? (true)}
                      -> {"id", "object": "list", "model", "results": [{"index", "relevance_score",
                          "document"?: {"text"}}], "usage": {"prompt_tokens", "total_tokens"}}

Results are best first; relevance_score is the model's own score (a probability for Qwen3 rerankers, a logit for
BERT-style cross-encoders). A document longer than the context is cut from its end unless truncate is false.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from ollama_py.errors import BadRequest
from ollama_py.server import rerank
from ollama_py.server.appkeys import SCHEDULER
from ollama_py.server.bodies import field, keep_alive, read_json, requested_model
from ollama_py.server.model_lookup import find_model, merged_options

routes = web.RouteTableDef()


@dataclass(frozen=True, slots=True)
class RerankParams:
    query: str
    documents: list[str]
    top_n: int | None
    return_documents: bool
    truncate: bool


def parse_rerank(body: dict[str, Any], *, return_documents: bool) -> RerankParams:
    """The fields both shapes share. Documents may be strings or {"text": ...} objects (Cohere v1, Jina)."""
    query = body.get("query")
    if not isinstance(query, str):
        raise BadRequest('"query" must be a string')
    documents = body.get("documents")
    if not isinstance(documents, list) or not documents:
        raise BadRequest('"documents" must be a non-empty array of strings')
    texts = []
    for doc in documents:
        if isinstance(doc, dict):
            doc = doc.get("text")
        if not isinstance(doc, str):
            raise BadRequest('"documents" must be a non-empty array of strings (or objects with a "text" string)')
        texts.append(doc)
    top_n = field(body, "top_n", int)
    if top_n is not None and top_n <= 0:
        raise BadRequest("top_n must be a positive integer")
    return RerankParams(query, texts, top_n, field(body, "return_documents", bool, return_documents),
                        field(body, "truncate", bool, True))


async def _rerank(request: web.Request, body: dict[str, Any], params: RerankParams,
                  raw_options: Any) -> tuple[str, rerank.RerankResult]:
    name, raw_name = requested_model(body)
    ka = keep_alive(body)
    model = await find_model(request, name, raw_name)
    if "rerank" not in model.capabilities:
        raise BadRequest(f'"{raw_name}" does not support rerank')
    opts = merged_options(request, model, raw_options)
    result = await rerank.rerank(request.app[SCHEDULER], model, opts, ka, params.query, params.documents,
                                 top_n=params.top_n, truncate=params.truncate)
    return raw_name, result


@routes.post("/api/rerank")
async def api_rerank(request: web.Request) -> web.Response:
    started = time.perf_counter()
    body = await read_json(request)
    params = parse_rerank(body, return_documents=True)
    raw_name, result = await _rerank(request, body, params, body.get("options"))
    results = []
    for r in result.results:
        item: dict[str, Any] = {"index": r.index, "relevance_score": r.relevance_score}
        if params.return_documents:
            item["document"] = params.documents[r.index]
        results.append(item)
    return web.json_response({"model": raw_name, "results": results,
                              "total_duration": int((time.perf_counter() - started) * 1e9),
                              "load_duration": result.load_duration, "prompt_eval_count": result.prompt_tokens})


@routes.post("/v1/rerank")
async def v1_rerank(request: web.Request) -> web.Response:
    body = await read_json(request)
    params = parse_rerank(body, return_documents=False)
    raw_name, result = await _rerank(request, body, params, None)
    results = []
    for r in result.results:
        item: dict[str, Any] = {"index": r.index, "relevance_score": r.relevance_score}
        if params.return_documents:
            item["document"] = {"text": params.documents[r.index]}
        results.append(item)
    usage = {"prompt_tokens": result.prompt_tokens, "total_tokens": result.prompt_tokens}
    return web.json_response({"id": str(uuid.uuid4()), "object": "list", "model": raw_name, "results": results,
                              "usage": usage})
