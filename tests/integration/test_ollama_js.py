"""ollama-js (the `ollama` npm package, pinned in scripts/fetch_agents.sh), unchanged, against `serve` over the fake
runner: what a JavaScript app does with it -- version, list, show, generate and chat whole and streamed token by
token, a tool call, a stream aborted mid-way and the next request answered, embed, create from a model, copy,
ps, delete, a missing model's 404 as its ResponseError. tests/helpers/ollama_js_session.cjs runs the steps and
prints each outcome as a JSON line; this judges them.

Skipped only where npm or its registry is not reachable (fetch_agents.sh exits 2 then).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.npm import node_modules
from tests.helpers.paths import ROOT
from tests.helpers.processes import start_fake_serve
from tests.helpers.serve import stop_serve
from tests.helpers.tool_calls import CALL, GGUF_TEMPLATE, WORDS

SESSION = ROOT / "tests" / "helpers" / "ollama_js_session.cjs"


@pytest.fixture(scope="module")
def modules() -> Path:
    if shutil.which("node") is None:
        pytest.skip("node is not installed (scripts/setup_system.sh test installs it)")
    return node_modules()


def session(modules: Path, tmp: Path, fake_env: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Run the JavaScript session against a fresh serve; each step's outcome by name."""
    proc, url = start_fake_serve(tmp, write_tiny_gguf(tmp / "tiny.gguf", chat_template=GGUF_TEMPLATE), fake_env)
    try:
        done = subprocess.run(["node", str(SESSION), url, "tiny"], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "NODE_PATH": str(modules)})
    finally:
        stop_serve(proc)
    assert done.returncode == 0, done.stderr
    steps = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return {s["step"]: s for s in steps}


@pytest.fixture(scope="module")
def steps(modules: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    yield session(modules, tmp_path_factory.mktemp("js"), {})


def value(steps: dict[str, dict[str, Any]], name: str) -> Any:
    step = steps[name]
    assert step["ok"], step
    return step["value"]


def test_version_list_show(steps: dict[str, dict[str, Any]]) -> None:
    assert value(steps, "version")
    assert value(steps, "list") == ["tiny:latest"]
    shown = value(steps, "show")
    assert shown["capabilities"] == ["completion", "tools"] and shown["has_template"]


def test_generate_whole_and_streamed(steps: dict[str, dict[str, Any]]) -> None:
    whole = value(steps, "generate")
    assert whole == {"response": "".join(WORDS[:3]), "done": True, "done_reason": "length", "eval_count": 3}
    streamed = value(steps, "generate_stream")
    assert streamed["texts"] == WORDS and streamed["last_done"] is True


def test_chat_whole_and_streamed(steps: dict[str, dict[str, Any]]) -> None:
    whole = value(steps, "chat")
    assert whole["role"] == "assistant" and whole["content"] == "".join(WORDS) and whole["tool_calls"] is None
    streamed = value(steps, "chat_stream")
    assert streamed["texts"] == WORDS and streamed["last_done"] is True


def test_an_aborted_stream_leaves_the_server_answering(steps: dict[str, dict[str, Any]]) -> None:
    assert value(steps, "abort") == {"parts": 2, "after": "".join(WORDS[:2])}


def test_embed(steps: dict[str, dict[str, Any]]) -> None:
    embedded = value(steps, "embed")
    assert embedded["count"] == 2 and embedded["dims"][0] == embedded["dims"][1] > 0


def test_create_copy_ps_delete(steps: dict[str, dict[str, Any]]) -> None:
    statuses = value(steps, "create")
    assert statuses[-1] == "success" and "writing manifest" in statuses
    assert value(steps, "copy") == "success"
    assert "tiny:latest" in value(steps, "ps")
    assert value(steps, "delete") == ["tiny:latest"]


def test_a_missing_model_is_a_404_response_error(steps: dict[str, dict[str, Any]]) -> None:
    missing = steps["missing_model"]
    assert not missing["ok"]
    assert (missing["status"], missing["error"]) == (404, "model 'nope' not found")


def test_a_tool_call(modules: Path, tmp_path: Path) -> None:
    called = value(session(modules, tmp_path, {"FAKE_REPLY": CALL}), "chat_tools")
    assert called == {"content": "",
                      "tool_calls": [{"index": 0, "name": "get_weather", "arguments": {"city": "Paris"}}]}
