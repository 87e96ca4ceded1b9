"""GET /openapi.json: it lists every route the app serves, it is a well-formed OpenAPI 3.1 document, and bodies
generated from its schemas (and deliberately mistyped ones) never get a 5xx from a running server.

No OpenAPI validator is installed (and none is added), so the structure is checked here: version, unique
operation ids, path parameters declared, every $ref resolving, request bodies with schemas. The fuzzing is
hypothesis with a small JSON-Schema-to-strategy converter, against `serve` over the fake llama-server.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ollama_py.server.openapi import OPERATIONS, SCHEMAS, openapi_document
from tests.helpers.processes import start_fake_serve
from tests.helpers.serve import stop_serve

HTTP_METHODS = {"get", "put", "post", "delete", "options", "head", "patch", "trace"}


def _template(canonical: str) -> str:
    """aiohttp's /v1/models/{model:.+} as OpenAPI's /v1/models/{model}."""
    return re.sub(r"\{(\w+):[^}]*\}", r"{\1}", canonical)


async def test_openapi_lists_every_route_of_the_app(fake_app: Any, aiohttp_client: Any) -> None:
    _, app = fake_app()
    client = await aiohttp_client(app)
    resp = await client.get("/openapi.json")
    assert resp.status == 200
    doc = await resp.json()
    documented = {(method.upper(), path) for path, item in doc["paths"].items() for method in item
                  if method in HTTP_METHODS}
    # /ui is the web console: its page, files and the page's own endpoints are not part of the API
    served = {(route.method, _template(route.resource.canonical)) for route in app.router.routes()
              if route.resource is not None and not route.resource.canonical.startswith("/ui")}
    assert documented == served


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref":
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _refs(item)


def _check_schema(schema: Any, where: str) -> None:
    """The JSON Schema keywords we use, used well."""
    assert isinstance(schema, dict), where
    if "type" in schema:
        assert schema["type"] in {"object", "array", "string", "integer", "number", "boolean", "null"}, where
    if "properties" in schema:
        assert schema.get("type") == "object", where
        for name, sub in schema["properties"].items():
            _check_schema(sub, f"{where}.{name}")
        assert set(schema.get("required", [])) <= set(schema["properties"]), where
    if "items" in schema:
        _check_schema(schema["items"], f"{where}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        _check_schema(schema["additionalProperties"], f"{where}{{}}")
    for i, sub in enumerate(schema.get("oneOf", [])):
        _check_schema(sub, f"{where}|{i}")
    if "enum" in schema:
        assert isinstance(schema["enum"], list) and schema["enum"], where
    if "pattern" in schema:
        re.compile(schema["pattern"])


def test_openapi_document_is_well_formed() -> None:
    doc = json.loads(json.dumps(openapi_document()))  # what the client gets: plain JSON
    assert doc["openapi"] == "3.1.0"
    assert doc["info"]["title"] and doc["info"]["version"]
    schemas = doc["components"]["schemas"]
    for name, schema in schemas.items():
        _check_schema(schema, name)
    assert {ref.removeprefix("#/components/schemas/") for ref in _refs(doc)} <= set(schemas)
    assert all(ref.startswith("#/components/schemas/") for ref in _refs(doc))
    ids = []
    for path, item in doc["paths"].items():
        assert path.startswith("/")
        params = set(re.findall(r"\{(\w+)\}", path))
        for method, op in item.items():
            assert method in HTTP_METHODS, (path, method)
            ids.append(op["operationId"])
            assert op["responses"] and all(re.fullmatch(r"[1-5](\d\d|XX)", code) for code in op["responses"])
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == params, (path, method)
            assert all(p["required"] is True for p in op.get("parameters", []) if p["in"] == "path")
            for media in op.get("requestBody", {}).get("content", {}).values():
                assert "schema" in media, (path, method)
    assert len(ids) == len(set(ids)), "operationId must be unique"


# -- fuzzing a running server with generated bodies ------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
# Options that reload the runner, and keep-alives that unload it, would make each example start a runner:
# the conforming bodies use the sampling options and a positive keep-alive (the sweep in test_bad_input.py
# and the mistyped bodies below cover the rest).
SAMPLING_OPTIONS = st.fixed_dictionaries({}, optional={
    "num_predict": st.integers(-2, 16), "temperature": st.floats(0, 2), "top_k": st.integers(0, 100),
    "top_p": st.floats(0, 1), "seed": st.integers(0, 2**31 - 1), "stop": st.lists(st.text(max_size=5), max_size=2),
    "repeat_penalty": st.floats(0, 2), "min_p": st.floats(0, 1),
})
# Mostly names that exist, so bodies get past the name check to the interesting parts.
NAMES = st.one_of(st.just("tiny"), st.just("tiny"), st.just("tiny:latest"), st.sampled_from(["nope", "a/b:c"]),
                  st.text(max_size=30))
OVERRIDES: dict[tuple[str, ...], st.SearchStrategy[Any]] = {
    ("model",): NAMES,
    ("from",): NAMES,
    ("source",): NAMES,
    ("destination",): st.one_of(st.just("copy"), st.from_regex(r"[a-z][a-z0-9_.-]{0,20}(:[a-z0-9]{1,8})?",
                                                                 fullmatch=True), st.text(max_size=20)),
    ("options",): SAMPLING_OPTIONS,
    ("keep_alive",): st.sampled_from(["5m", "1h", 300, -1, "30s"]),
    ("max_tokens",): st.one_of(st.integers(1, 16), st.integers(1, 16), st.integers(-5, 0)),
}


def from_schema(schema: dict[str, Any], path: tuple[str, ...] = ()) -> st.SearchStrategy[Any]:
    """Values of a JSON Schema (the subset SCHEMAS uses); OVERRIDES replace the strategy at a property path."""
    if path in OVERRIDES:
        return OVERRIDES[path]
    if "$ref" in schema:
        return from_schema(SCHEMAS[schema["$ref"].rsplit("/", 1)[-1]], path)
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "oneOf" in schema:
        return st.one_of(*(from_schema(s, path) for s in schema["oneOf"]))
    kind = schema.get("type")
    if kind == "string":
        return st.from_regex(schema["pattern"], fullmatch=True) if "pattern" in schema else st.text(max_size=30)
    if kind == "integer":
        return st.integers(schema.get("minimum"), schema.get("maximum"))
    if kind == "number":
        return st.floats(allow_nan=False, allow_infinity=False)
    if kind == "boolean":
        return st.booleans()
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {}), (*path, "[]")), max_size=3)
    if kind == "object" and "properties" in schema:
        required = set(schema.get("required", []))
        props = {name: from_schema(sub, (*path, name)) for name, sub in schema["properties"].items()}
        return st.fixed_dictionaries({k: v for k, v in props.items() if k in required},
                                     optional={k: v for k, v in props.items() if k not in required})
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return st.dictionaries(st.text(max_size=10), from_schema(schema["additionalProperties"], path), max_size=3)
    if kind == "object":
        return st.dictionaries(st.text(max_size=8), JSON_VALUES, max_size=3)
    return JSON_VALUES


def mistyped(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """The schema's field names with any JSON values at all (a usable model name half the time)."""
    props = schema.get("properties", {})
    return st.fixed_dictionaries({}, optional={name: JSON_VALUES for name in props}).flatmap(
        lambda body: st.sampled_from([body, {**body, "model": "tiny"}]))


# /api/pull and /api/push talk to registries: a 5xx for an unreachable one is the right answer there, so they are
# left out; their input checks are in test_bad_input.py. Deleting "tiny" would leave little to fuzz.
FUZZED = [op for op in OPERATIONS if op.request and op.path not in ("/api/pull", "/api/push")]
EXAMPLES = 40


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory, tiny_gguf: Path) -> Iterator[str]:
    proc, url = start_fake_serve(tmp_path_factory.mktemp("fuzz"), tiny_gguf, {"FAKE_TOKENS": "4"})
    try:
        yield url
        assert proc.poll() is None, "serve died during fuzzing"
    finally:
        stop_serve(proc)


def _send(url: str, method: str, path: str, body: Any) -> None:
    if path == "/api/delete" and isinstance(body, dict) and str(body.get("model", "")).startswith("tiny"):
        body = {**body, "model": "other"}
    resp = requests.request(method.upper(), url + path, json=body, timeout=120)
    text = resp.text  # the whole answer, streams included
    assert resp.status_code < 500, (path, body, resp.status_code, text[:500])
    assert "Traceback" not in text


@pytest.mark.parametrize("op", FUZZED, ids=[op.path for op in FUZZED])
def test_bodies_from_the_schema_never_get_a_5xx(op: Any, fuzz_server: str) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
    @given(body=from_schema(SCHEMAS[op.request]))
    def run(body: Any) -> None:
        _send(fuzz_server, op.method, op.path, body)

    run()


@pytest.mark.parametrize("op", FUZZED, ids=[op.path for op in FUZZED])
def test_mistyped_bodies_never_get_a_5xx(op: Any, fuzz_server: str) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(body=mistyped(SCHEMAS[op.request]) | JSON_VALUES)
    def run(body: Any) -> None:
        _send(fuzz_server, op.method, op.path, body)

    run()


# Checks left out, and why: negative_data_rejection wants the schema to be the exact grammar of every field (a
# template that parses, a Modelfile's parameters), which it only approximates. (unsupported_method runs: a method a
# path does not take is a 405 with an Allow header, as Ollama's router answers it.) /api/pull and /api/push reach out
# to a registry on the network. positive_data_acceptance runs: what the schema admits, the server takes (or answers
# 404 for a model or blob that is not there), except a blob upload whose body does not hash to its digest, which no
# schema can say: that is Ollama's 400 "digest mismatch". Ollama's web tools are left out too: Ollama sends them to
# ollama.com, and here (cloud features disabled) every well-formed request is a 403 (test_agent_protocols.py).
SCHEMATHESIS_EXCLUDED = "negative_data_rejection"
SCHEMATHESIS_CONFIG = """
[[operations]]
include-path = "/api/blobs/{digest}"
include-method = "POST"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "404"]
"""


def test_schemathesis_finds_no_failures(tmp_path: Path, tiny_gguf: Path) -> None:
    """`schemathesis run .../openapi.json --checks all` (bounded examples) against `serve` over the fake runner:
    no 5xx, every status, content type, header and body as the document says."""
    import shutil
    import subprocess
    import sys

    cli = shutil.which("schemathesis", path=str(Path(sys.executable).parent))
    assert cli is not None, "schemathesis is in the test extra: pip install -e '.[test]'"
    (tmp_path / "schemathesis.toml").write_text(SCHEMATHESIS_CONFIG)  # read from the working directory
    proc, url = start_fake_serve(tmp_path, tiny_gguf, {"OLLAMA_NOUI": "1"})
    try:
        run = subprocess.run(
            [cli, "run", f"{url}/openapi.json", "--url", url, "--checks", "all",
             "--exclude-checks", SCHEMATHESIS_EXCLUDED, "--exclude-path", "/api/pull", "--exclude-path", "/api/push",
             "--exclude-path", "/api/experimental/web_search", "--exclude-path", "/api/experimental/web_fetch",
             "--max-examples", "10", "--seed", "1", "--workers", "1"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False)
    finally:
        stop_serve(proc)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
