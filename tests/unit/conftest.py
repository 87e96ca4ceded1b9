"""Fixtures the unit tests share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.fake_ollama import FakeOllama


@pytest.fixture
def fake() -> Iterator[FakeOllama]:
    """A canned Ollama server on a loopback port (the CLI and client tests)."""
    server = FakeOllama().start()
    yield server
    server.stop()
