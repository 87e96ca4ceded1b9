"""Reranking (issue 26): /api/rerank and /v1/rerank over the fake runner, whose "reranker" scores a document by the
share of the query's words it contains; which models are rerankers (GGUF metadata, PARAMETER rerank) and the
runner they get. The real llama-server with a synthetic Qwen3 reranker: tests/integration/test_rerank_live.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from ollama_py.runner.argv import LaunchSpec, build_argv
from ollama_py.server.app import create_app
from ollama_py.store.gguf_meta import read_gguf_info
from tests.fakes.gguf_files import write_qwen3_reranker_gguf
from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings

QUERY = "what do giant pandas eat"
DOCS = [
    "The llama is a domesticated South American camelid.",
    "Giant pandas eat bamboo: what else would they eat?",
    "Pandas are bears.",
]


@pytest.fixture
async def client(tmp_path: Path, tiny_gguf: Path, aiohttp_client):
    settings = make_settings(tmp_path)
    create_tiny_model(settings, tiny_gguf, "ranker", parameters={"rerank": True})
    create_tiny_model(settings, tiny_gguf, "tiny")
    create_tiny_model(settings, write_qwen3_reranker_gguf(tmp_path / "q3r.gguf"), "qwen3-reranker")
    create_tiny_model(settings, write_qwen3_reranker_gguf(tmp_path / "bare.gguf", metadata=False), "head-only")
    create_tiny_model(settings, tmp_path / "q3r.gguf", "not-a-ranker", parameters={"rerank": False})
    return await aiohttp_client(create_app(settings, scheduler=fake_scheduler(settings)))


async def test_api_rerank_puts_the_most_relevant_document_first(client):
    r = await client.post("/api/rerank", json={"model": "ranker", "query": QUERY, "documents": DOCS})
    assert r.status == 200, await r.text()
    out = await r.json()
    assert out["model"] == "ranker"
    assert [x["index"] for x in out["results"]] == [1, 2, 0]
    assert [x["document"] for x in out["results"]] == [DOCS[1], DOCS[2], DOCS[0]]
    scores = [x["relevance_score"] for x in out["results"]]
    assert scores == sorted(scores, reverse=True) and scores[-1] == 0
    assert out["prompt_eval_count"] > 0 and out["total_duration"] > 0


async def test_v1_rerank_answers_cohere_shape(client):
    """Cohere's body: query, documents, top_n, return_documents; results[index, relevance_score, document.text]."""
    body = {"model": "ranker", "query": QUERY, "documents": DOCS, "top_n": 2, "return_documents": True}
    r = await client.post("/v1/rerank", json=body)
    assert r.status == 200, await r.text()
    out = await r.json()
    assert out["model"] == "ranker" and out["id"]
    assert [(x["index"], x["document"]) for x in out["results"]] == [(1, {"text": DOCS[1]}), (2, {"text": DOCS[2]})]
    assert out["usage"]["prompt_tokens"] == out["usage"]["total_tokens"] > 0


async def test_v1_rerank_leaves_documents_out_unless_asked(client):
    r = await client.post("/v1/rerank", json={"model": "ranker", "query": QUERY, "documents": DOCS})
    results = (await r.json())["results"]
    assert len(results) == 3 and all(set(x) == {"index", "relevance_score"} for x in results)


async def test_documents_may_be_objects_with_text(client):
    """Cohere v1 and Jina take documents as {"text": ...} objects too."""
    docs = [{"text": d} for d in DOCS]
    r = await client.post("/v1/rerank", json={"model": "ranker", "query": QUERY, "documents": docs, "top_n": 1,
                                              "return_documents": True})
    assert (await r.json())["results"][0]["document"] == {"text": DOCS[1]}


async def test_api_rerank_without_documents_in_results_when_told(client):
    r = await client.post("/api/rerank", json={"model": "ranker", "query": QUERY, "documents": DOCS,
                                               "return_documents": False, "top_n": 1})
    results = (await r.json())["results"]
    assert len(results) == 1 and set(results[0]) == {"index", "relevance_score"} and results[0]["index"] == 1


@pytest.mark.parametrize(("body", "message"), [
    ({"documents": DOCS}, '"query" must be a string'),
    ({"query": QUERY}, '"documents" must be a non-empty array'),
    ({"query": QUERY, "documents": []}, '"documents" must be a non-empty array'),
    ({"query": QUERY, "documents": [1]}, '"documents" must be a non-empty array'),
    ({"query": QUERY, "documents": DOCS, "top_n": 0}, "top_n must be a positive integer"),
    ({"query": QUERY, "documents": DOCS, "options": {"rerank": True}}, 'option "rerank" cannot be set per request'),
], ids=["no-query", "no-documents", "empty-documents", "number-document", "top-n-0", "rerank-option"])
async def test_rerank_refuses_a_malformed_request(client, body, message):
    r = await client.post("/api/rerank", json={"model": "ranker", **body})
    assert r.status == 400
    assert message in (await r.json())["error"]


async def test_v1_rerank_errors_in_openai_envelope(client):
    r = await client.post("/v1/rerank", json={"model": "ranker", "documents": DOCS})
    assert r.status == 400
    assert '"query" must be a string' in (await r.json())["error"]["message"]


async def test_a_model_that_is_not_a_reranker_says_so(client):
    r = await client.post("/api/rerank", json={"model": "tiny", "query": QUERY, "documents": DOCS})
    assert r.status == 400
    assert (await r.json())["error"] == '"tiny" does not support rerank'


@pytest.mark.parametrize(("path", "body"), [
    ("/api/generate", {"prompt": "hi"}),
    ("/api/chat", {"messages": [{"role": "user", "content": "hi"}]}),
    ("/api/embed", {"input": "hi"}),
    ("/v1/embeddings", {"input": "hi"}),
], ids=["generate", "chat", "embed", "openai-embeddings"])
async def test_a_reranker_refuses_generation_and_embeddings(client, path, body):
    r = await client.post(path, json={"model": "ranker", **body})
    assert r.status == 400
    text = await r.text()
    assert "does not support" in text


@pytest.mark.parametrize(("model", "capabilities"), [
    ("ranker", ["rerank"]),  # PARAMETER rerank true on an ordinary GGUF
    ("qwen3-reranker", ["rerank"]),  # pooling type RANK and a rerank template
    ("head-only", ["rerank"]),  # only a classification head (cls.output.weight), as bge-reranker GGUFs
    ("not-a-ranker", ["embedding"]),  # PARAMETER rerank false: its pooling type makes it an embedding model
    ("tiny", ["completion"]),
])
async def test_show_lists_rerank_as_the_capability(client, model, capabilities):
    r = await client.post("/api/show", json={"model": model})
    assert (await r.json())["capabilities"] == capabilities


async def test_a_document_longer_than_the_context_is_cut_unless_truncate_false(client):
    long = "pandas " + "filler " * 300 + "bamboo"
    body = {"model": "ranker", "query": QUERY, "documents": [long, DOCS[1]], "options": {"num_ctx": 128}}
    r = await client.post("/api/rerank", json=body)
    assert r.status == 200, await r.text()
    out = await r.json()
    assert [x["index"] for x in out["results"]] == [1, 0]
    assert out["results"][1]["document"] == long  # the caller's text, not the cut one
    assert out["prompt_eval_count"] <= 2 * 128
    r = await client.post("/api/rerank", json={**body, "truncate": False})
    assert r.status == 400
    assert (await r.json())["error"] == "the input length exceeds the context length"


async def test_many_long_documents_are_fitted_over_a_few_runner_connections(client):
    """Issue 34: each long document was tokenized (and cut) on a connection of its own, all at once."""
    import aiohttp

    from ollama_py.server.appkeys import SCHEDULER

    docs = [f"doc{i} pandas " + "filler " * 100 + "bamboo" for i in range(200)]
    body = {"model": "ranker", "query": QUERY, "documents": docs, "options": {"num_ctx": 128}, "top_n": 200}
    r = await client.post("/api/rerank", json=body)
    assert r.status == 200, await r.text()
    out = await r.json()
    assert sorted(x["index"] for x in out["results"]) == list(range(200))
    (loaded,) = client.app[SCHEDULER].loaded.values()
    async with aiohttp.ClientSession(headers=loaded.runner.auth_headers) as session, \
            session.get(loaded.client.base_url + "/fake/connections") as resp:
        seen = await resp.json()
    assert seen["open_peak"] <= 6 and seen["accepted"] <= 12, seen  # was 400: a tokenize and a detokenize each


async def test_a_query_longer_than_the_context_is_refused(client):
    body = {"model": "ranker", "query": "why " * 200, "documents": ["x " * 200], "options": {"num_ctx": 64}}
    r = await client.post("/api/rerank", json=body)
    assert r.status == 400
    assert "the query alone takes" in (await r.json())["error"]


def test_a_rerank_runner_is_started_with_reranking_instead_of_mean_pooling():
    argv = build_argv(LaunchSpec(model=Path("m.gguf"), embedding=True, rerank=True), "llama-server", 1)
    assert "--reranking" in argv and "--pooling" not in argv and "--embedding" not in argv
    argv = build_argv(LaunchSpec(model=Path("m.gguf"), embedding=True), "llama-server", 1)
    assert "--reranking" not in argv and argv[argv.index("--pooling") + 1] == "mean"


def test_reranker_metadata_is_read_from_the_gguf(tmp_path, tiny_gguf):
    assert read_gguf_info(write_qwen3_reranker_gguf(tmp_path / "a.gguf")).is_reranker
    assert read_gguf_info(write_qwen3_reranker_gguf(tmp_path / "b.gguf", metadata=False)).is_reranker
    assert not read_gguf_info(tiny_gguf).is_reranker
