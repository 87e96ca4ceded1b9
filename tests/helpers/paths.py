"""Where the tests find things: the repository's root, the fake llama-server, and the files the Makefile names.

    ROOT                 the repository's root
    FAKE_SERVER          tests/fakes/fake_llama_server.py, the llama-server look-alike the fake runners start
    required_path(var)   the existing file an OLLAMA_PY_TEST_* variable names (a real model, a built runner), or
                         the test fails saying how to run the suite
"""

from __future__ import annotations

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
