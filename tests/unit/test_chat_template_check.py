"""A GGUF whose chat template loops or explodes is refused by /api/create (issue 34 item 4): llama-server applies the
template at load, and `{% for i in range(100000000) %}` drove it to 23.7 GB in 40 s. Our sandbox renders it first,
bounded, and the create is a 400 naming the chat template; nothing is stored and no runner starts."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

import pytest

from ollama_py.server.app import create_app
from tests.fakes.fake_llama_server import CHATML_TEMPLATE
from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import fake_scheduler, make_settings


@pytest.fixture
async def client(tmp_path: Path, aiohttp_client):
    settings = make_settings(tmp_path)
    return await aiohttp_client(create_app(settings, scheduler=fake_scheduler(settings)))


async def _create(client, tmp_path: Path, name: str, chat_template: str) -> tuple[int, str]:
    data = write_tiny_gguf(tmp_path / f"{name}.gguf", chat_template=chat_template).read_bytes()
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    r = await client.post(f"/api/blobs/{digest}", data=data)
    assert r.status == 201, await r.text()
    r = await client.post("/api/create", json={"model": name, "files": {"model.gguf": digest}, "stream": False})
    return r.status, await r.text()


@pytest.mark.parametrize("template", [
    pytest.param("{% for i in range(100000000) %}x{% endfor %}", id="loop"),
    pytest.param("{% for m in messages %}{{ m.content * 1000000000 }}{% endfor %}", id="explodes"),
    pytest.param("{% set ns = namespace(s=bos_token ~ 'x') %}{% for i in range(80) %}{% set ns.s = ns.s ~ ns.s %}"
                 "{% endfor %}{{ ns.s }}", id="doubling"),
])
async def test_a_chat_template_that_loops_or_explodes_is_refused_at_create(client, tmp_path, template):
    t0 = time.monotonic()
    status, text = await _create(client, tmp_path, "bomb", template)
    assert status == 400, text
    assert "chat template" in text and "tokenizer.chat_template" in text
    assert time.monotonic() - t0 < 30  # bounded (the runner would have taken minutes and gigabytes)
    tags = await (await client.get("/api/tags")).json()
    assert tags["models"] == []


async def test_ordinary_and_unjudgeable_templates_are_created(client, tmp_path):
    # one jinja2 cannot parse (llama.cpp's engine may) is not ours to refuse
    for name, template in (("chatml", CHATML_TEMPLATE), ("odd", "{% frobnicate %}{{ messages }}")):
        status, text = await _create(client, tmp_path, name, template)
        assert status == 200, text


async def test_a_stored_model_with_a_runaway_template_never_reaches_a_runner(tmp_path: Path, aiohttp_client):
    """A model that did not come through /api/create's check (pulled from a registry, or stored before it) is
    refused at load with the same 400: the check runs before the runner would apply the template."""
    from ollama_py.api.names import parse_name
    from ollama_py.scheduler.factory import plan_load
    from ollama_py.scheduler.scheduler import Scheduler
    from ollama_py.store.manifests import MEDIA_MODEL, Layer, Manifest
    from ollama_py.store.models import ModelStore
    from tests.helpers.app import create_tiny_model, fake_runner_factory

    settings = make_settings(tmp_path)
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "good.gguf", chat_template=CHATML_TEMPLATE), "good")
    store = ModelStore(settings.models)
    bomb = write_tiny_gguf(tmp_path / "bomb.gguf", chat_template="{% for i in range(100000000) %}x{% endfor %}")
    digest, size = store.blobs.write_file(bomb)
    good = store.manifests.get(parse_name("good"))
    layers = [Layer(MEDIA_MODEL, digest, size) if layer.media_type == MEDIA_MODEL else layer for layer in good.layers]
    store.manifests.put(parse_name("pulled"), Manifest.build(good.config, layers))  # as a pull would write it
    runners_started: list[str] = []
    fake = fake_runner_factory(settings)

    def counting_factory(plan, name, on_exit):  # the scheduler's runner seam, counting the runners it starts
        runners_started.append(name)
        return fake(plan, name, on_exit)

    scheduler = Scheduler(settings, plan=lambda m, o, e: plan_load(settings, [], 1 << 40, m, o, e),
                          runner_factory=counting_factory)
    client = await aiohttp_client(create_app(settings, scheduler=scheduler))
    for path, body in (("/api/generate", {"model": "pulled", "prompt": "hi"}),
                       ("/api/chat", {"model": "pulled", "messages": [{"role": "user", "content": "hi"}]})):
        r = await client.post(path, json={**body, "stream": False})
        assert r.status == 400, await r.text()
        assert "chat template" in (await r.json())["error"]
    assert runners_started == []
    r = await client.post("/api/generate", json={"model": "good", "prompt": "hi", "stream": False,
                                                 "options": {"num_predict": 1}})
    assert r.status == 200 and len(runners_started) == 1
