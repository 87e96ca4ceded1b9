"""`ollama-py run` in a pseudo-terminal while a slow model loads (serve over the fake llama-server, whose load
takes 3 s and reports its progress as llama-server does): the spinner says what is happening, then the prompt."""

from __future__ import annotations

import sys
from pathlib import Path

import pexpect
import pytest

from tests.helpers.processes import start_fake_serve
from tests.helpers.serve import stop_serve

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_run_shows_the_load_progress_before_the_prompt(tmp_path: Path, tiny_gguf: Path) -> None:
    proc, url = start_fake_serve(tmp_path, tiny_gguf, {"FAKE_LOAD_SECONDS": "3", "FAKE_LOAD_STEPS": "10",
                                                       "FAKE_WARMUP_SECONDS": "1"})
    try:
        exe = ROOT / ".venv" / "bin" / "ollama-py"
        command, args = (str(exe), []) if exe.exists() else (sys.executable, ["-m", "ollama_py"])
        env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "TERM": "xterm-256color",
               "OLLAMA_HOST": url.removeprefix("http://"), "OLLAMA_PY_DATA_DIR": str(tmp_path / "cli")}
        child = pexpect.spawn(command, [*args, "run", "tiny"], env=env, encoding="utf-8", dimensions=(40, 200),
                              timeout=60)
        percents, warming = [], False
        while True:
            i = child.expect([r"loading tiny (\d+) %", r"warming up tiny", ">>> "])
            if i == 0:
                percents.append(int(child.match.group(1)))
            warming = warming or i == 1
            if i == 2:
                break
        assert percents == sorted(percents) and 0 < max(percents) < 100  # shares of the weights read, rising
        assert warming  # the stage after the weights
        child.sendline("/bye")
        child.expect(pexpect.EOF)
    finally:
        stop_serve(proc)
