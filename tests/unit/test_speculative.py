"""Speculative decoding (issue 26): a Modelfile DRAFT stored as its own layer (Ollama's draft media type), shown
back by `show --modelfile`, and passed to llama-server with its settings; prompt-lookup (n-gram) speculation as
the `draft_ngram` option. Over the fake runner, which records its argv in /props' model path only, so the argv
itself is checked through build_argv (pure) and the plan."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from ollama_py.api.names import parse_name
from ollama_py.runner.argv import LaunchSpec, build_argv
from ollama_py.scheduler.factory import plan_load
from ollama_py.server.app import create_app
from ollama_py.store.manifests import MEDIA_DRAFT
from ollama_py.store.models import ModelStore
from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings

MODEL = Path("/m/model.gguf")
DRAFT = Path("/m/draft.gguf")


def _pairs(argv: list[str]) -> list[tuple[str, str]]:
    return list(itertools.pairwise(argv))


@pytest.mark.parametrize(("spec", "present", "absent"), [
    pytest.param(LaunchSpec(model=MODEL), [], ["--spec-type", "--spec-draft-model"], id="none"),
    pytest.param(LaunchSpec(model=MODEL, draft_model=DRAFT, draft_max=6, n_gpu_layers=0),
                 [("--spec-type", "draft-simple"), ("--spec-draft-model", str(DRAFT)), ("--spec-draft-n-max", "6"),
                  ("--spec-draft-ngl", "0")], [], id="draft-cpu"),
    pytest.param(LaunchSpec(model=MODEL, draft_model=DRAFT, n_gpu_layers=None), [("--spec-type", "draft-simple")],
                 ["--spec-draft-ngl", "--spec-draft-n-max"], id="draft-auto-placement"),
    pytest.param(LaunchSpec(model=MODEL, draft_ngram=True), [("--spec-type", "ngram-simple")],
                 ["--spec-draft-model"], id="ngram"),
    pytest.param(LaunchSpec(model=MODEL, draft_model=DRAFT, draft_ngram=True, draft_max=8),
                 [("--spec-type", "draft-simple,ngram-simple"), ("--spec-ngram-simple-size-m", "8")], [],
                 id="both"),
])
def test_speculation_argv(spec, present, absent):
    argv = build_argv(spec, "/bin/llama-server", 1)
    for pair in present:
        assert pair in _pairs(argv)
    for flag in absent:
        assert flag not in argv


@pytest.fixture
def store_with_draft(tmp_path: Path, tiny_gguf: Path):
    settings = make_settings(tmp_path)
    draft = write_tiny_gguf(tmp_path / "draft.gguf", blocks=1)
    store = ModelStore(settings.models)
    digest, _ = store.blobs.write_file(draft)
    create_tiny_model(settings, tiny_gguf, "withdraft", draft_files={"draft.gguf": digest},
                      parameters={"draft_num_predict": 5})
    return settings, store, digest


def test_draft_is_stored_as_its_own_layer(store_with_draft):
    _, store, digest = store_with_draft
    model = store.load(parse_name("withdraft"))
    layers = model.manifest.layers_of(MEDIA_DRAFT)
    assert MEDIA_DRAFT == "application/vnd.ollama.image.draft"
    assert [layer.digest for layer in layers] == [digest]
    assert model.draft_path == store.blobs.path(digest)


def test_a_model_with_a_draft_loads_with_it(store_with_draft):
    settings, store, _ = store_with_draft
    model = store.load(parse_name("withdraft"))
    plan = plan_load(settings, [], 1 << 40, model, {"num_ctx": 512, **model.params}, False)
    assert plan.spec.draft_model == model.draft_path and plan.spec.draft_max == 5
    assert "draft=" in plan.key  # never shares a runner with the same weights loaded without the draft
    embedding = plan_load(settings, [], 1 << 40, model, {"num_ctx": 512}, True)  # embeddings: no speculation
    assert embedding.spec.draft_model is None


def test_the_drafts_weights_count_in_the_estimate(store_with_draft, tiny_gguf: Path):
    settings, store, _ = store_with_draft
    create_tiny_model(settings, tiny_gguf, "plain")
    model, plain = store.load(parse_name("withdraft")), store.load(parse_name("plain"))
    with_draft = plan_load(settings, [], 1 << 40, model, {"num_ctx": 512}, False)
    without = plan_load(settings, [], 1 << 40, plain, {"num_ctx": 512}, False)
    assert with_draft.size == without.size + model.draft_path.stat().st_size


def test_draft_named_as_a_stored_model(tmp_path: Path, tiny_gguf: Path):
    settings = make_settings(tmp_path)
    create_tiny_model(settings, tiny_gguf, "small")
    create_tiny_model(settings, tiny_gguf, "big", draft="small")
    store = ModelStore(settings.models)
    small, big = store.load(parse_name("small")), store.load(parse_name("big"))
    assert big.draft_path == small.model_path


async def test_show_prints_the_draft_and_generation_works(store_with_draft, aiohttp_client):
    settings, store, digest = store_with_draft
    client = await aiohttp_client(create_app(settings, scheduler=fake_scheduler(settings)))
    r = await client.post("/api/show", json={"model": "withdraft"})
    assert r.status == 200, await r.text()
    modelfile = (await r.json())["modelfile"]
    assert f"DRAFT {store.blobs.path(digest)}" in modelfile
    assert "PARAMETER draft_num_predict 5" in modelfile
    r = await client.post("/api/generate", json={"model": "withdraft", "prompt": "hi", "stream": False,
                                                 "options": {"draft_ngram": True}})
    assert r.status == 200, await r.text()
    assert (await r.json())["response"]


async def test_draft_ngram_must_be_a_boolean(store_with_draft, aiohttp_client):
    settings, _, _ = store_with_draft
    client = await aiohttp_client(create_app(settings, scheduler=fake_scheduler(settings)))
    r = await client.post("/api/generate", json={"model": "withdraft", "prompt": "hi",
                                                 "options": {"draft_ngram": "yes"}})
    assert r.status == 400
    assert "draft_ngram" in json.dumps(await r.json())
