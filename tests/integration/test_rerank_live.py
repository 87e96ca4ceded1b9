"""Reranking against the real llama-server (issue 26). No real reranker GGUF is reachable from here, so the model
is a synthetic one-block Qwen3 reranker with random weights (tests/fakes/gguf_files.write_qwen3_reranker_gguf),
laid out as llama.cpp's converter writes Qwen3-Reranker: llama-server loads it with --reranking and scores each
(query, document) pair as softmax(head)[yes]. Its scores mean nothing, so these tests check what does: the shapes,
the order, that a score depends only on its pair, and truncation."""

from __future__ import annotations

import pytest

from tests.fakes.gguf_files import write_qwen3_reranker_gguf
from tests.helpers.serve import create_from_file

pytestmark = pytest.mark.integration

QUERY = "what do giant pandas eat"
DOCS = ["Giant pandas eat bamboo.", "The llama is a camelid.", "Paris is in France.", "Giant pandas eat bamboo."]


@pytest.fixture(scope="module")
def rerankers(live_server, tmp_path_factory) -> tuple[str, str]:
    tmp = tmp_path_factory.mktemp("rerank")
    create_from_file(live_server.url, "tiny-reranker", write_qwen3_reranker_gguf(tmp / "qwen3-reranker.gguf"))
    create_from_file(live_server.url, "tiny-head-only",
                     write_qwen3_reranker_gguf(tmp / "head-only.gguf", metadata=False))
    return "tiny-reranker", "tiny-head-only"


def _rerank(live_server, path: str, **body) -> dict:
    r = live_server.api("POST", path, json=body)
    assert r.status_code == 200, r.text
    return r.json()


def test_the_runner_scores_every_document_best_first(live_server, rerankers):
    out = _rerank(live_server, "/api/rerank", model=rerankers[0], query=QUERY, documents=DOCS)
    results = out["results"]
    assert sorted(x["index"] for x in results) == [0, 1, 2, 3]
    scores = [x["relevance_score"] for x in results]
    assert scores == sorted(scores, reverse=True)
    assert all(0 < s < 1 for s in scores)  # a probability: the head's softmax
    by_index = {x["index"]: x["relevance_score"] for x in results}
    assert by_index[0] == pytest.approx(by_index[3], abs=1e-6)  # the same pair, the same score
    assert all(x["document"] == DOCS[x["index"]] for x in results)
    assert out["prompt_eval_count"] > 4 * len(QUERY.split())
    show = live_server.api("POST", "/api/show", json={"model": rerankers[0]}).json()
    assert show["capabilities"] == ["rerank"]


def test_a_score_depends_only_on_its_pair(live_server, rerankers):
    alone = _rerank(live_server, "/api/rerank", model=rerankers[0], query=QUERY, documents=[DOCS[2]])
    together = _rerank(live_server, "/api/rerank", model=rerankers[0], query=QUERY, documents=DOCS)
    score = {x["index"]: x["relevance_score"] for x in together["results"]}[2]
    assert alone["results"][0]["relevance_score"] == pytest.approx(score, abs=1e-5)


def test_v1_rerank_in_cohere_shape(live_server, rerankers):
    out = _rerank(live_server, "/v1/rerank", model=rerankers[0], query=QUERY, documents=[{"text": d} for d in DOCS],
                  top_n=2, return_documents=True)
    assert len(out["results"]) == 2
    best = _rerank(live_server, "/api/rerank", model=rerankers[0], query=QUERY, documents=DOCS)["results"][:2]
    assert [x["index"] for x in out["results"]] == [x["index"] for x in best]
    assert all(x["document"] == {"text": DOCS[x["index"]]} for x in out["results"])
    assert out["usage"]["prompt_tokens"] > 0


def test_a_reranker_known_only_by_its_head_runs_too(live_server, rerankers):
    """No pooling type and no rerank template (as bge-reranker GGUFs): --reranking still makes it score, with
    llama-server's own [BOS] query [EOS] document [EOS] prompt."""
    out = _rerank(live_server, "/api/rerank", model=rerankers[1], query=QUERY, documents=DOCS[:3])
    assert sorted(x["index"] for x in out["results"]) == [0, 1, 2]
    assert all(0 < x["relevance_score"] < 1 for x in out["results"])


def test_a_document_longer_than_the_context_is_cut(live_server, rerankers):
    long = "bamboo " * 400
    body = {"model": rerankers[0], "query": QUERY, "documents": [long, DOCS[1]], "options": {"num_ctx": 256}}
    out = _rerank(live_server, "/api/rerank", **body)
    assert sorted(x["index"] for x in out["results"]) == [0, 1]
    r = live_server.api("POST", "/api/rerank", json={**body, "truncate": False})
    assert r.status_code == 400
    assert r.json()["error"] == "the input length exceeds the context length"
