"""The npm packages the integration tests drive (the coding agents, ollama-js), installed by
scripts/fetch_agents.sh into the cache, once."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT


def node_modules() -> Path:
    """$OLLAMA_PY_CACHE/agents/node_modules, installed (or found) by scripts/fetch_agents.sh; the calling test
    skips where npm or its registry is not reachable (the script exits 2 then)."""
    done = subprocess.run([str(ROOT / "scripts" / "fetch_agents.sh")], capture_output=True, text=True, timeout=900)
    if done.returncode == 2:
        pytest.skip(done.stderr.strip().splitlines()[-1])
    assert done.returncode == 0, done.stderr
    cache = Path(os.environ.get("OLLAMA_PY_CACHE") or Path.home() / ".cache" / "ollama-py")
    return cache / "agents" / "node_modules"


def copilot_binary(modules: Path) -> Path:
    """GitHub's Copilot CLI itself (a native binary in its platform package): its npm launcher, node_modules/.bin/
    copilot, needs node >= 20 (import.meta.resolve), where Debian 12 ships 18."""
    found = sorted((modules / "@github").glob("copilot-linux*-*/copilot"))
    assert found, f"no Copilot CLI binary under {modules / '@github'}"
    return found[0]
