"""The app in process over the fake runner: settings in a temporary directory, a stored tiny model, and a
scheduler whose runners are the fake llama-server started with the real argv.

    make_settings(tmp, **overrides)             Settings with the store and data under `tmp`, a free port
    create_tiny_model(settings, gguf, name)     a model created from a GGUF file, as /api/create would
    fake_runner_factory(settings, fake_env)     a Scheduler runner factory that starts the fake llama-server
    fake_scheduler(settings, fake_env)          a Scheduler over that factory (every plan fits)
    as_serve()                                  aiohttp_server's keywords for serve's way of taking requests

The `fake_app` fixture (tests/conftest.py) puts them together with create_app.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from tests.helpers.paths import FAKE_SERVER
from tests.helpers.ports import free_port


def fake_runner_factory(settings: Any, fake_env: dict[str, str] | None = None):
    """A Scheduler runner factory that starts the fake llama-server with the real argv."""
    from ollama_py.runner.argv import build_argv
    from ollama_py.runner.process import RunnerProcess
    from ollama_py.scheduler.factory import ensure_model_copy

    env = {**os.environ, **(fake_env or {})}

    def factory(plan, name, on_exit):
        if plan.spec.text_only_copy is not None:  # written before the start, as the real runners write it
            ensure_model_copy(plan.spec.model, plan.spec.text_only_copy, name)
        return RunnerProcess(lambda port: [sys.executable, str(FAKE_SERVER), *build_argv(plan.spec, "x", port)[1:]],
                             name=name, env=env, load_timeout=settings.load_timeout, on_exit=on_exit)

    return factory


def fake_scheduler(settings: Any, fake_env: dict[str, str] | None = None):
    from ollama_py.scheduler.factory import plan_load
    from ollama_py.scheduler.scheduler import Scheduler

    return Scheduler(settings, plan=lambda m, o, e: plan_load(settings, [], 1 << 40, m, o, e),
                     runner_factory=fake_runner_factory(settings, fake_env))


def as_serve() -> dict[str, Any]:
    """serve's aiohttp settings (server/serve.py PROTOCOL) as aiohttp_server(app, **as_serve()) takes them: its
    test server cancels a hung-up client's handler already (and aiohttp_client's server_kwargs are not used)."""
    from ollama_py.server.serve import PROTOCOL

    return {k: v for k, v in PROTOCOL.items() if k != "handler_cancellation"}


def make_settings(tmp: Path, **overrides: Any):
    from ollama_py.config import Settings

    env = {"OLLAMA_MODELS": str(tmp / "models"), "OLLAMA_PY_DATA_DIR": str(tmp / "data"),
           "OLLAMA_HOST": f"127.0.0.1:{free_port()}"}
    return Settings.from_env(env, **overrides)


def create_tiny_model(settings: Any, gguf_path: Path, name: str = "tiny", **req: Any) -> None:
    from ollama_py.api.names import parse_name
    from ollama_py.store.create import create_model
    from ollama_py.store.models import ModelStore

    store = ModelStore(settings.models)
    digest, _ = store.blobs.write_file(gguf_path)
    for _ in create_model(store, parse_name(name), {"files": {"model.gguf": digest}, **req}):
        pass
