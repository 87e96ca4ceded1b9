"""A split GGUF end to end with the real llama-server (issue 26): SmolLM2 cut into three shards, created through
the CLI from a Modelfile naming the first, answers exactly as the whole file does; pushed to a real registry and
pulled into an empty store, every shard travels and the model still answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import requests

from ollama_py.api.names import parse_name
from ollama_py.store.manifests import MEDIA_MODEL
from ollama_py.store.models import ModelStore
from tests.fakes.gguf_split import split_gguf
from tests.helpers.serve import start_serve, stop_serve
from tests.registry_fixture import registry

__all__ = ["registry"]  # a fixture, imported for pytest

pytestmark = pytest.mark.integration

ASK = {"prompt": "The capital of France is", "stream": False, "options": {"temperature": 0, "num_predict": 16}}


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    src = Path(os.environ["OLLAMA_PY_TEST_MODEL"])
    return split_gguf(src, tmp_path_factory.mktemp("smol-split"), "smollm2", max_tensors=100)


@pytest.fixture(scope="module")
def split_model(live_server: Any, shards: list[Path]) -> str:
    (shards[0].parent / "Modelfile").write_text(f"FROM ./{shards[0].name}\n")
    done = subprocess.run([sys.executable, "-m", "ollama_py", "create", "smollm2-split", "-f",
                           str(shards[0].parent / "Modelfile")], env=live_server.env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    return "smollm2-split"


def generate(url: str, model: str) -> str:
    r = requests.post(url + "/api/generate", json={"model": model, **ASK}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()["response"]


def fresh(live_server: Any, model: str) -> str:
    """The answer of a runner loaded for it, with nothing in its prompt cache: a prompt evaluated partly from a cache
    is split into other batches, which can change a near tie at temperature 0."""
    live_server.unload(model)
    return generate(live_server.url, model)


def test_the_split_model_answers_as_the_whole_file(live_server: Any, shards: list[Path], split_model: str) -> None:
    assert len(shards) >= 3
    manifest = ModelStore(live_server.models_dir).manifests.get(parse_name(split_model))
    assert len(manifest.layers_of(MEDIA_MODEL)) == len(shards)
    whole = fresh(live_server, live_server.model)
    assert whole and fresh(live_server, f"{split_model}:latest") == whole
    show = live_server.api("POST", "/api/show", json={"model": split_model}).json()
    original = live_server.api("POST", "/api/show", json={"model": live_server.model}).json()
    assert show["details"]["parameter_size"] == original["details"]["parameter_size"]
    assert show["modelfile"].count("\nFROM ") == len(shards)  # every shard, so the Modelfile creates it again


def test_push_and_pull_carry_every_shard(live_server: Any, split_model: str, registry: Any, tmp_path: Path) -> None:
    remote = registry.model("test/smollm2-split:latest")
    assert live_server.api("POST", "/api/copy", json={"source": split_model, "destination": remote}).ok
    pushed = live_server.api("POST", "/api/push", json={"model": remote, "insecure": True, "stream": False})
    assert pushed.status_code == 200 and pushed.json() == {"status": "success"}, pushed.text
    proc, url, _ = start_serve(tmp_path)
    try:
        r = requests.post(url + "/api/pull", json={"model": remote, "insecure": True}, timeout=300)
        lines = [json.loads(line) for line in r.text.splitlines() if line.strip()]
        assert lines[-1] == {"status": "success"}, lines[-3:]
        here = ModelStore(live_server.models_dir).manifests.get(parse_name(remote))
        there = ModelStore(tmp_path / "models").manifests.get(parse_name(remote))
        assert there.digest == here.digest and len(there.layers_of(MEDIA_MODEL)) >= 3
        assert generate(url, remote) == fresh(live_server, f"{split_model}:latest")  # both from a fresh runner
    finally:
        stop_serve(proc)
