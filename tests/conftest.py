"""Shared fixtures (the plain functions they use live in tests/helpers and tests/fakes, which tests import).

- `tiny_gguf` (session): a small llama-architecture GGUF (tests/fakes/gguf_files.write_tiny_gguf) for fast tests
  with the fake runner.
- `fake_app`: (settings, app) for the real app and scheduler, whose runners are the fake llama-server
  (tests/fakes/fake_llama_server.py; tests/helpers/app.py) — fast and deterministic.
- `live_server` (session): `ollama-py serve` as a subprocess with the real llama-server runner and the real SmolLM2
  model created as smollm2:135m (tests/helpers/serve.py). Paths come from the Makefile (OLLAMA_PY_TEST_*), so
  `make test` is the way in.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings
from tests.helpers.paths import ROOT, required_path
from tests.helpers.serve import LiveServer, create_from_file, start_serve, stop_serve

_UNIT_DIRS = (ROOT / "tests" / "unit", ROOT / "tests" / "fakes")  # what they hold needs nothing built


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark `unit` what needs no built runner, model or browser: tests/unit and tests/fakes, less `integration`.
    `make test` runs these first (`-m unit`), before it builds anything, and the rest after (`-m "not unit"`)."""
    for item in items:
        if any(item.path.is_relative_to(d) for d in _UNIT_DIRS) and item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.unit)


@pytest.fixture(scope="session")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tests.fakes.gguf_files import write_tiny_gguf  # gguf and numpy: imported by the tests that write one

    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf")


@pytest.fixture
def fake_app(tmp_path: Path, tiny_gguf: Path):
    """Build (settings, app) for the fake runner; call with overrides for Settings and env for the fake."""
    from ollama_py.server.app import create_app

    def build(fake_env: dict[str, str] | None = None, **overrides: Any):
        settings = make_settings(tmp_path, **overrides)
        create_tiny_model(settings, tiny_gguf)
        return settings, create_app(settings, scheduler=fake_scheduler(settings, fake_env))

    return build


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory):
    model_file = required_path("OLLAMA_PY_TEST_MODEL")
    tmp = tmp_path_factory.mktemp("live")
    proc, url, env = start_serve(tmp)
    try:
        create_from_file(url, "smollm2:135m", model_file)
        yield LiveServer(url=url, env={k: v for k, v in env.items()}, models_dir=tmp / "models", proc=proc,
                         log_path=tmp / "serve.log")
    finally:
        stop_serve(proc)
