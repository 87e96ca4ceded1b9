"""Fixtures the unit tests share.

- `fake`: a canned Ollama server (tests/helpers/fake_ollama.py) for the CLI and client tests.
- `tools_gguf` (module) / `tools_server`: the real app over the fake llama-server with tool-capable models
  (tests/helpers/tool_calls.py), for the tool streaming and langchain-ollama tests.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings
from tests.helpers.fake_ollama import FakeOllama
from tests.helpers.tool_calls import GGUF_TEMPLATE, THINKING_TEMPLATE


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    """A canned Ollama server on a loopback port (the CLI and client tests)."""
    server = FakeOllama().start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tools_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tools.gguf", chat_template=GGUF_TEMPLATE)


@pytest.fixture
def tools_server(tmp_path: Path, tools_gguf: Path, aiohttp_server: Any) -> Callable[..., Any]:
    """Start the app over the fake runner with these FAKE_* settings; gives its URL. Models: "tiny" (GGUF
    template, no TEMPLATE) and "thinker" (THINKING_TEMPLATE)."""
    from ollama_py.server.app import create_app

    async def start(**fake_env: str) -> str:
        settings = make_settings(tmp_path)
        create_tiny_model(settings, tools_gguf, "tiny")
        create_tiny_model(settings, tools_gguf, "thinker", template=THINKING_TEMPLATE)
        server = await aiohttp_server(create_app(settings, scheduler=fake_scheduler(settings, fake_env)))
        return str(server.make_url("")).rstrip("/")

    return start


@pytest.fixture(params=["closures", "generated"])
def both_engines(request: pytest.FixtureRequest) -> Iterator[str]:
    """A template test run twice: by exec.py's closures, and by the function codegen.py generates for the tree
    (what the server runs); both must give the same output and the same errors."""
    from ollama_py.template import exec as template_exec

    template_exec.generate_code(request.param == "generated")
    try:
        yield request.param
    finally:
        template_exec.generate_code(None)
