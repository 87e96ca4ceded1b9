"""Bad input over every endpoint: each gets a 4xx with the API's error envelope, never a 500 or a traceback,
and the model store is left exactly as it was.

The app is the real one; its runners are the fake llama-server (most of these never reach a runner).
Unknown fields are ignored, as Ollama's Go decoder ignores them: here they ride along with a real mistake
(which still gets its 4xx), and test_unknown_fields_are_ignored shows a valid request with extras succeeds.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ollama_py.server.appkeys import SETTINGS

MAX_BODY = 64 * 1024
DIGEST_A = "sha256:" + "a" * 64
SAY = [{"role": "user", "content": "hi"}]

# Endpoints that take a JSON object, with a body that is valid but for the part a case breaks.
JSON_ENDPOINTS = {
    "generate": ("POST", "/api/generate", {"model": "tiny", "prompt": "hi", "stream": False}),
    "chat": ("POST", "/api/chat", {"model": "tiny", "messages": SAY, "stream": False}),
    "embed": ("POST", "/api/embed", {"model": "tiny", "input": "hi"}),
    "embeddings": ("POST", "/api/embeddings", {"model": "tiny", "prompt": "hi"}),
    "show": ("POST", "/api/show", {"model": "tiny"}),
    "create": ("POST", "/api/create", {"model": "new", "from": "tiny", "stream": False}),
    "copy": ("POST", "/api/copy", {"source": "tiny", "destination": "other"}),
    "delete": ("DELETE", "/api/delete", {"model": "tiny"}),
    "pull": ("POST", "/api/pull", {"model": "tiny", "stream": False}),
    "push": ("POST", "/api/push", {"model": "tiny", "stream": False}),
    "oai_chat": ("POST", "/v1/chat/completions", {"model": "tiny", "messages": SAY}),
    "oai_completions": ("POST", "/v1/completions", {"model": "tiny", "prompt": "hi"}),
    "oai_embeddings": ("POST", "/v1/embeddings", {"model": "tiny", "input": "hi"}),
    "anthropic": ("POST", "/v1/messages", {"model": "tiny", "max_tokens": 8, "messages": SAY}),
}


@dataclass(frozen=True)
class Case:
    id: str
    method: str
    path: str
    body: bytes | dict[str, Any] | None
    status: int


def _with(endpoint: str, **changes: Any) -> tuple[str, str, dict[str, Any]]:
    """The endpoint's valid body with fields changed (a value of ... removes the field)."""
    method, path, body = JSON_ENDPOINTS[endpoint]
    out = {**body, **changes}
    return method, path, {k: v for k, v in out.items() if v is not ...}


def _case(case_id: str, endpoint: str, status: int, **changes: Any) -> Case:
    return Case(case_id, *_with(endpoint, **changes), status=status)


def _malformed_cases() -> list[Case]:
    out = []
    for name, (method, path, _) in JSON_ENDPOINTS.items():
        out += [
            Case(f"{name}-truncated-json", method, path, b'{"model": "tiny"', 400),
            Case(f"{name}-not-an-object", method, path, b'["model", "tiny"]', 400),
            Case(f"{name}-empty-body", method, path, b"", 400),
            Case(f"{name}-not-utf8", method, path, b'{"model": "\xff\xfe"}', 400),
            Case(f"{name}-nan-literal", method, path, b'{"model": "tiny", "x": NaN}', 400),
            Case(f"{name}-nested-too-deep", method, path, b'{"model": "tiny", "x": ' + b"[" * 20000 + b"]" * 20000
                 + b"}", 400),
            Case(f"{name}-huge-body", method, path, b'{"model": "tiny", "x": "' + b"x" * (MAX_BODY * 2) + b'"}',
                 413),
        ]
    return out


def _missing_field_cases() -> list[Case]:
    return [
        _case("generate-no-model", "generate", 400, model=...),
        _case("chat-no-model", "chat", 400, model=...),
        _case("embed-no-model", "embed", 400, model=...),
        _case("embeddings-no-model", "embeddings", 400, model=...),
        _case("show-no-model", "show", 400, model=...),
        _case("create-no-model", "create", 400, model=...),
        _case("create-no-source", "create", 400, **{"from": ...}),
        _case("copy-no-source", "copy", 400, source=...),
        _case("copy-no-destination", "copy", 400, destination=...),
        _case("delete-no-model", "delete", 400, model=...),
        _case("pull-no-model", "pull", 400, model=...),
        _case("push-no-model", "push", 400, model=...),
        _case("oai-chat-no-model", "oai_chat", 400, model=...),
        _case("oai-chat-no-messages", "oai_chat", 400, messages=...),
        _case("oai-completions-no-model", "oai_completions", 400, model=...),
        _case("oai-embeddings-no-input", "oai_embeddings", 400, input=...),
        _case("anthropic-no-max-tokens", "anthropic", 400, max_tokens=...),
        _case("anthropic-no-messages", "anthropic", 400, messages=...),
    ]


def _wrong_type_cases() -> list[Case]:
    return [
        _case("generate-model-int", "generate", 400, model=5),
        _case("generate-prompt-object", "generate", 400, prompt={"a": 1}),
        _case("generate-stream-string", "generate", 400, stream="yes"),
        _case("generate-options-list", "generate", 400, options=[1]),
        _case("generate-images-string", "generate", 400, images="abc"),
        _case("generate-context-string", "generate", 400, context="1,2"),
        _case("generate-context-huge-token", "generate", 400, context=[10**30]),
        _case("generate-context-negative-token", "generate", 400, context=[-1]),
        _case("generate-raw-string", "generate", 400, raw="true"),
        _case("generate-system-int", "generate", 400, system=5),
        _case("generate-format-int", "generate", 400, format=5),
        _case("chat-messages-string", "chat", 400, messages="hi"),
        _case("chat-message-not-object", "chat", 400, messages=[5]),
        _case("chat-message-bad-role", "chat", 400, messages=[{"role": "robot", "content": "hi"}]),
        _case("chat-message-content-int", "chat", 400, messages=[{"role": "user", "content": 5}]),
        _case("chat-tools-string", "chat", 400, tools="x"),
        _case("chat-tool-calls-bad", "chat", 400, messages=[{"role": "assistant", "tool_calls": [{"x": 1}]}]),
        _case("embed-input-int", "embed", 400, input=5),
        _case("embed-input-tokens", "embed", 400, input=[1, 2]),
        _case("embed-truncate-string", "embed", 400, truncate="no"),
        _case("embed-dimensions-zero", "embed", 400, dimensions=0),
        _case("embed-dimensions-string", "embed", 400, dimensions="3"),
        _case("embeddings-prompt-int", "embeddings", 400, prompt=5),
        _case("show-verbose-string", "show", 400, verbose="yes"),
        _case("create-files-string", "create", 400, **{"from": ...}, files="x"),
        _case("create-files-digest-int", "create", 400, **{"from": ...}, files={"a.gguf": 5}),
        _case("create-parameters-string", "create", 400, parameters="x"),
        _case("create-parameter-bad-value", "create", 400, parameters={"num_ctx": "many"}),
        _case("create-parameter-unknown", "create", 400, parameters={"bogus": 1}),
        _case("create-messages-string", "create", 400, messages="x"),
        _case("create-quantize-unknown", "create", 400, quantize="q1_bogus"),
        _case("create-from-int", "create", 400, **{"from": 5}),
        _case("copy-source-int", "copy", 400, source=5),
        _case("delete-model-list", "delete", 400, model=["tiny"]),
        _case("pull-insecure-string", "pull", 400, insecure="no"),
        _case("push-model-list", "push", 400, model=[]),
        _case("oai-chat-messages-int", "oai_chat", 400, messages=5),
        _case("oai-chat-temperature-string", "oai_chat", 400, temperature="hot"),
        _case("oai-chat-stream-string", "oai_chat", 400, stream="yes"),
        _case("oai-chat-max-tokens-string", "oai_chat", 400, max_tokens="5"),
        _case("oai-chat-stop-int", "oai_chat", 400, stop=5),
        _case("oai-chat-image-url-int", "oai_chat", 400,
              messages=[{"role": "user", "content": [{"type": "image_url", "image_url": 5}]}]),
        _case("oai-completions-max-tokens-string", "oai_completions", 400, max_tokens="x"),
        _case("oai-embeddings-input-object", "oai_embeddings", 400, input={"a": 1}),
        _case("oai-embeddings-encoding-hex", "oai_embeddings", 400, encoding_format="hex"),
        _case("anthropic-messages-string", "anthropic", 400, messages="x"),
        _case("anthropic-max-tokens-string", "anthropic", 400, max_tokens="8"),
        _case("anthropic-image-source-int", "anthropic", 400,
              messages=[{"role": "user", "content": [{"type": "image", "source": 5}]}]),
    ]


def _name_cases() -> list[Case]:
    return [
        _case("generate-name-escapes", "generate", 400, model="../../etc/passwd"),
        _case("generate-name-too-many-parts", "generate", 400, model="a/b/c/d"),
        _case("generate-name-nul", "generate", 400, model="tiny\u0000"),
        _case("generate-name-too-long", "generate", 400, model="m" * 500),
        _case("generate-name-empty-model-part", "generate", 400, model=":latest"),
        _case("generate-name-unknown", "generate", 404, model="nope"),
        _case("chat-name-dotdot-tag", "chat", 400, model="tiny:..%2F.."),
        _case("show-name-escapes", "show", 400, model="../tiny"),
        _case("delete-name-escapes", "delete", 400, model="../../tiny"),
        _case("delete-unknown", "delete", 404, model="nope"),
        _case("copy-destination-escapes", "copy", 400, destination="../evil"),
        _case("copy-source-escapes", "copy", 400, source="../../etc/passwd"),
        _case("copy-unknown-source", "copy", 404, source="nope"),
        _case("create-name-escapes", "create", 400, model="../evil"),
        _case("create-file-name-escapes", "create", 400, **{"from": ...}, files={"../x.gguf": DIGEST_A}),
        _case("create-file-name-absolute", "create", 400, **{"from": ...}, files={"/etc/x.gguf": DIGEST_A}),
        _case("create-digest-escapes", "create", 400, **{"from": ...}, files={"a.gguf": "sha256:../../etc/passwd"}),
        _case("create-digest-wrong-algorithm", "create", 400, **{"from": ...}, files={"a.gguf": "md5:abc"}),
        _case("create-digest-unknown-blob", "create", 404, **{"from": ...}, files={"a.gguf": DIGEST_A}),
        _case("create-adapter-unknown-blob", "create", 404, adapters={"a.gguf": DIGEST_A}),
        _case("create-from-escapes", "create", 400, **{"from": "../../etc/passwd"}),
        _case("create-from-unknown-model", "create", 404, **{"from": "nope"}),
        _case("pull-name-escapes", "pull", 400, model="../x"),
        _case("oai-chat-name-escapes", "oai_chat", 400, model="../../x"),
        _case("anthropic-name-unknown", "anthropic", 404, model="nope"),
        Case("blob-head-escapes", "HEAD", "/api/blobs/sha256-..%2F..%2Fetc%2Fpasswd", None, 400),
        Case("blob-head-not-a-digest", "HEAD", "/api/blobs/notadigest", None, 400),
        Case("blob-head-short-hex", "HEAD", "/api/blobs/sha256:abc", None, 400),
        Case("blob-head-unknown", "HEAD", f"/api/blobs/{DIGEST_A}", None, 404),
        Case("blob-upload-escapes", "POST", "/api/blobs/..%2F..%2Fetc%2Fpasswd", b"x", 400),
        Case("blob-upload-not-a-digest", "POST", "/api/blobs/sha256:xyz", b"x", 400),
        Case("blob-upload-digest-mismatch", "POST", f"/api/blobs/{DIGEST_A}", b"not the content", 400),
        Case("oai-model-escapes", "GET", "/v1/models/..%2F..%2Fetc%2Fpasswd", None, 400),
        Case("oai-model-unknown", "GET", "/v1/models/nope", None, 404),
    ]


def _option_cases() -> list[Case]:
    return [
        _case("option-num-predict-negative", "generate", 400, options={"num_predict": -5}),
        _case("option-num-ctx-negative", "generate", 400, options={"num_ctx": -1}),
        _case("option-num-ctx-absurd", "generate", 400, options={"num_ctx": 10**12}),
        _case("option-num-batch-absurd", "chat", 400, options={"num_batch": 10**9}),
        _case("option-temperature-string", "generate", 400, options={"temperature": "hot"}),
        _case("option-temperature-overflow", "generate", 400, options={"temperature": 1e39}),
        _case("option-top-k-fraction", "chat", 400, options={"top_k": 1.5}),
        _case("option-seed-absurd", "generate", 400, options={"seed": 10**30}),
        _case("option-stop-int", "generate", 400, options={"stop": 5}),
        _case("option-stop-list-of-ints", "chat", 400, options={"stop": [1]}),
        _case("option-use-mmap-string", "generate", 400, options={"use_mmap": "yes"}),
        _case("option-embed-num-ctx-negative", "embed", 400, options={"num_ctx": -1}),
        _case("keep-alive-word", "generate", 400, keep_alive="forever"),
        _case("keep-alive-bad-unit", "chat", 400, keep_alive="5x"),
        _case("keep-alive-list", "embed", 400, keep_alive=[]),
        _case("keep-alive-bool", "generate", 400, keep_alive=True),
        _case("keep-alive-trailing-sign", "oai_chat", 400, keep_alive="1h-"),
        _case("oai-max-tokens-negative", "oai_chat", 400, max_tokens=-5),
        _case("oai-top-logprobs-absurd", "oai_chat", 400, logprobs=True, top_logprobs=1000),
        _case("oai-logprobs-absurd", "oai_completions", 400, logprobs=10**6),
        _case("oai-dimensions-negative", "oai_embeddings", 400, dimensions=-1),
        _case("anthropic-max-tokens-zero", "anthropic", 400, max_tokens=0),
        _case("anthropic-temperature-string", "anthropic", 400, temperature="x"),
        # numbers past float64 (Go: "cannot unmarshal number ... of type float64"); they were a 500 (OverflowError)
        _case("keep-alive-past-float64", "generate", 400, keep_alive=10**400),
        _case("option-temperature-past-float64", "generate", 400, options={"temperature": 10**400}),
        _case("oai-temperature-past-float64", "oai_chat", 400, temperature=10**400),
        _case("oai-top-p-past-float64", "oai_chat", 400, top_p=-(10**309)),
        _case("anthropic-temperature-past-float64", "anthropic", 400, temperature=10**400),
        Case("embed-keep-alive-exponent-past-float64", "POST", "/api/embed",
             b'{"model": "tiny", "input": "hi", "keep_alive": 1e400}', 400),
    ]


def _unknown_field_cases() -> list[Case]:
    return [
        _case("unknown-fields-generate-no-model", "generate", 400, model=..., bogus=1, nested={"x": [1]}),
        _case("unknown-fields-show-unknown-model", "show", 404, model="nope", bogus=True),
        _case("unknown-fields-oai-bad-messages", "oai_chat", 400, messages=5, logit_bias={"1": 2}, n=3),
    ]


CASES = [*_malformed_cases(), *_missing_field_cases(), *_wrong_type_cases(), *_name_cases(), *_option_cases(),
         *_unknown_field_cases()]  # methods and unknown paths: test_protocol_edges (Ollama's plain-text 404)


def store_snapshot(models: Path) -> list[tuple[str, int]]:
    """Every file under the store with its size."""
    if not models.exists():
        return []
    return sorted((str(p.relative_to(models)), p.stat().st_size) for p in models.rglob("*") if p.is_file())


def error_message(path: str, data: Any) -> str:
    """The message from the error envelope the path's API uses."""
    if path.startswith("/v1/messages"):
        assert data["type"] == "error"
        return data["error"]["message"]
    if path.startswith("/v1/"):
        return data["error"]["message"]
    return data["error"]


@pytest.fixture
async def bad_input_client(fake_app: Any, aiohttp_client: Any) -> Any:
    _, app = fake_app(max_body_bytes=MAX_BODY)
    return await aiohttp_client(app)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_bad_input_is_refused_with_4xx_and_store_unchanged(case: Case, bad_input_client: Any) -> None:
    models = bad_input_client.app[SETTINGS].models
    before = store_snapshot(models)
    data = json.dumps(case.body).encode() if isinstance(case.body, dict) else case.body
    resp = await bad_input_client.request(case.method, case.path, data=data,
                                          headers={"Content-Type": "application/json"})
    text = await resp.text()
    assert resp.status == case.status, text
    assert "Traceback" not in text
    if case.method != "HEAD":
        assert resp.content_type == "application/json"
        message = error_message(case.path, json.loads(text))
        assert isinstance(message, str) and message
    assert store_snapshot(models) == before


async def test_unknown_fields_are_ignored(bad_input_client: Any) -> None:
    resp = await bad_input_client.post("/api/generate", json={
        "model": "tiny", "prompt": "hi", "stream": False, "bogus": 1, "options": {"not_an_option": 2}})
    assert resp.status == 200
    assert (await resp.json())["done"] is True


async def test_blob_upload_is_streamed_past_the_body_limit(bad_input_client: Any) -> None:
    """The body limit is for JSON; a blob larger than it uploads (and lands under its digest)."""
    blob = b"\x00GGUF-ish" * (MAX_BODY // 4)
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    resp = await bad_input_client.post(f"/api/blobs/{digest}", data=blob)
    assert resp.status == 201, await resp.text()
    assert (await bad_input_client.head(f"/api/blobs/{digest}")).status == 200


async def test_lone_surrogate_deep_in_a_body_is_not_a_500(bad_input_client: Any) -> None:
    """Found by test_request_fuzz: the surrogate repair walked the body recursively, so a lone surrogate under a
    few hundred levels the decoder accepts was a 500 (RecursionError)."""
    for depth in (200, 600):  # under MAX_DEPTH the repair answers; past it, the body is refused, never a 500
        deep = b'{"a": ' * depth + b'"\\ud800"' + b"}" * depth
        raw = b'{"model": "tiny", "prompt": "hi", "stream": false, "x": ' + deep + b"}"
        resp = await bad_input_client.post("/api/generate", data=raw)
        if depth < 256:
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["done"] is True
        else:
            assert resp.status == 400
            assert (await resp.json()) == {"error": "invalid request body: JSON nested deeper than 256 levels"}


async def test_lone_surrogate_in_prompt_is_replaced_not_a_500(bad_input_client: Any) -> None:
    """JSON may escape half a UTF-16 pair; like Go, we read it as U+FFFD rather than fail on it later."""
    raw = b'{"model": "tiny", "prompt": "hi \\ud800 there", "stream": false}'
    resp = await bad_input_client.post("/api/generate", data=raw)
    assert resp.status == 200, await resp.text()
    assert (await resp.json())["done"] is True
