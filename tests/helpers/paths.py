"""Where the tests find things: the repository's root, the fake llama-server, and the files the Makefile names.

    ROOT                 the repository's root
    FAKE_SERVER          tests/fakes/fake_llama_server.py, the llama-server look-alike the fake runners start
    required_path(var)   the existing file an OLLAMA_PY_TEST_* variable names (a real model, a built runner), or
                         the test fails saying how to run the suite
    llama_cpp_templates_dir()   models/templates of the llama.cpp source the test runner was built from
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FAKE_SERVER = ROOT / "tests" / "fakes" / "fake_llama_server.py"


def required_path(var: str) -> Path:
    value = os.environ.get(var)
    if not value or not Path(value).exists():
        pytest.fail(f"{var} must point at an existing file (run the suite with `make test`, which sets it); "
                    f"got {value!r}")
    return Path(value)


def llama_cpp_templates_dir() -> Path:
    """models/templates of the llama.cpp source the test runner was built from (scripts/build_runners.sh keeps it
    in the cache, as the build-info next to the binary says): the chat templates llama.cpp tests its engine with."""
    runner = required_path("OLLAMA_PY_TEST_RUNNER")
    info = json.loads((runner.parent / "build-info.json").read_text())
    cache = Path(os.environ.get("CACHE") or Path.home() / ".cache" / "ollama-py")
    version = info["source_version"].removeprefix("llama-cpp-python-")
    path = cache / "src" / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp" / "models" / "templates"
    assert path.is_dir(), f"no llama.cpp templates at {path} (make test builds the runner from that source)"
    return path
