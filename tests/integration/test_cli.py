"""Every CLI command against the live server with SmolLM2 (click's CliRunner in-process; the auto-start test runs
the installed `ollama-py` as a process). Answers are kept short with a derived model (num_predict 24)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from click.testing import CliRunner, Result

from ollama_py.cli.main import cli
from tests.helpers.ports import free_port
from tests.helpers.serve import LiveServer
from tests.registry_fixture import registry  # noqa: F401  (fixture)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SHORT = "cli-short:latest"


def ollama(live: LiveServer, *args: str, stdin: str | None = None, **env: str) -> Result:
    return CliRunner().invoke(cli, list(args), env={**live.env, **env}, input=stdin)


@pytest.fixture(scope="module")
def short(live_server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """smollm2 with short, deterministic answers, made with our own `create`."""
    d = tmp_path_factory.mktemp("short")
    (d / "Modelfile").write_text(f"FROM {live_server.model}\nPARAMETER num_predict 24\nPARAMETER temperature 0\n"
                                 "SYSTEM You are a terse assistant.\n")
    result = ollama(live_server, "create", SHORT, "-f", str(d / "Modelfile"))
    assert result.exit_code == 0, result.output
    yield SHORT
    ollama(live_server, "rm", SHORT)


def test_list_shows_the_model(live_server: LiveServer) -> None:
    result = ollama(live_server, "list")
    assert result.exit_code == 0
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "ID", "SIZE", "MODIFIED"]
    row = next(line for line in lines if line.startswith("smollm2:135m "))
    assert re.search(r"smollm2:135m\s+[0-9a-f]{12}\s+\d+ MB\s+\S", row)


def test_show_info_and_sections(live_server: LiveServer, short: str) -> None:
    info = ollama(live_server, "show", live_server.model).stdout
    assert info.startswith("  Model\n    architecture        llama\n")
    assert "    quantization        Q4_1\n" in info and "  Capabilities\n    completion\n" in info
    assert ollama(live_server, "show", short, "--system").stdout == "You are a terse assistant."
    assert "num_predict" in ollama(live_server, "show", short, "--parameters").stdout
    modelfile = ollama(live_server, "show", short, "--modelfile").stdout
    assert "FROM " in modelfile and "PARAMETER num_predict 24" in modelfile
    assert ollama(live_server, "show", live_server.model, "--template").stdout


def test_show_missing_model(live_server: LiveServer) -> None:
    result = ollama(live_server, "show", "no-such-model")
    assert (result.exit_code, result.stderr) == (1, "Error: model 'no-such-model' not found\n")


def test_run_one_shot(live_server: LiveServer, short: str) -> None:
    result = ollama(live_server, "run", short, "What is the capital of France?")
    assert result.exit_code == 0, result.output
    assert result.stdout.endswith("\n\n") and result.stdout.strip()


def test_run_with_piped_stdin_and_verbose(live_server: LiveServer, short: str) -> None:
    result = ollama(live_server, "run", short, "--verbose", "Translate to French:", stdin="Good morning\n")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip()
    labels = [line.split(":")[0] for line in result.stderr.splitlines()]
    for label in ("total duration", "prompt eval count", "prompt eval rate", "eval count", "eval duration",
                  "eval rate"):
        assert label in labels
    assert re.search(r"^eval count:\s+\d+ token\(s\)$", result.stderr, re.M)
    assert re.search(r"^eval rate:\s+\d+\.\d\d tokens/s$", result.stderr, re.M)


def _loaded(live: LiveServer) -> list[str]:
    return [m["name"] for m in live.api("GET", "/api/ps").json()["models"]]


def test_ps_then_stop(live_server: LiveServer, short: str) -> None:
    # A runner already loaded for the same weights would be reused under its first name: start from none.
    for name in _loaded(live_server):
        assert ollama(live_server, "stop", name).exit_code == 0
    deadline = time.monotonic() + 30
    while _loaded(live_server):
        assert time.monotonic() < deadline, _loaded(live_server)
        time.sleep(0.2)
    assert ollama(live_server, "run", short, "Say hi.").exit_code == 0
    lines = ollama(live_server, "ps").stdout.splitlines()
    assert lines[0].split() == ["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"]
    row = next(line for line in lines if line.startswith(SHORT))
    assert re.search(r"100% (CPU|GPU)|\d+%/\d+% CPU/GPU", row) and "from now" in row
    assert ollama(live_server, "stop", short).exit_code == 0
    # Unloading may still be under way for a moment; it must not stay loaded.
    deadline = time.monotonic() + 30
    while (rows := [line for line in ollama(live_server, "ps").stdout.splitlines() if line.startswith(SHORT)]):
        assert time.monotonic() < deadline, rows
        time.sleep(0.2)
    result = ollama(live_server, "stop", short)
    assert (result.exit_code, result.stderr) == (1, f'Error: couldn\'t find model "{short}" to stop\n')


def test_cp_and_rm(live_server: LiveServer) -> None:
    assert ollama(live_server, "cp", live_server.model, "cli-copy").stdout == (
        f"copied '{live_server.model}' to 'cli-copy'\n")
    assert any(line.startswith("cli-copy:latest ") for line in ollama(live_server, "list").stdout.splitlines())
    assert ollama(live_server, "rm", "cli-copy").stdout == "deleted 'cli-copy'\n"
    result = ollama(live_server, "rm", "cli-copy")
    assert (result.exit_code, result.stderr) == (1, "Error: model 'cli-copy' not found\n")


def test_create_uploads_a_gguf_relative_to_the_modelfile(live_server: LiveServer, tiny_gguf: Path,
                                                         tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "tiny.gguf").write_bytes(tiny_gguf.read_bytes())
    (tmp_path / "Modelfile").write_text("FROM ./weights/tiny.gguf\nTEMPLATE {{ .Prompt }}\nLICENSE MIT\n")
    result = ollama(live_server, "create", "cli-tiny", "-f", str(tmp_path / "Modelfile"))
    try:
        assert result.exit_code == 0, result.output
        lines = [line.strip() for line in result.stderr.splitlines()]
        assert lines[0] == "gathering model components"
        assert re.fullmatch(r"copying file [0-9a-f]{12}: 100% \S+ \w+", lines[1])
        assert lines[-1] == "success"
        assert ollama(live_server, "show", "cli-tiny", "--license").stdout == "MIT\n"
    finally:
        ollama(live_server, "rm", "cli-tiny")


def test_create_with_a_bad_modelfile(live_server: LiveServer, tmp_path: Path) -> None:
    (tmp_path / "Modelfile").write_text("FROM smollm2:135m\nPARAMETER temperature hot\n")
    result = ollama(live_server, "create", "cli-bad", "-f", str(tmp_path / "Modelfile"))
    assert (result.exit_code, result.stderr) == (1, "Error: (line 2): invalid float value [hot]\n")


@pytest.mark.registry
def test_push_and_pull_through_a_registry(live_server: LiveServer, registry: Any) -> None:  # noqa: F811
    name = registry.model("cli/smol:1")
    assert ollama(live_server, "cp", live_server.model, name).exit_code == 0
    pushed = ollama(live_server, "push", name, "--insecure")
    assert pushed.exit_code == 0, pushed.output
    assert pushed.stdout == f"\nYou can find your model at:\n\n\t{name}\n"
    assert [line.strip() for line in pushed.stderr.splitlines()][-1] == "success"
    assert ollama(live_server, "rm", name).exit_code == 0
    pulled = ollama(live_server, "pull", name, "--insecure")
    assert pulled.exit_code == 0, pulled.output
    lines = [line.strip() for line in pulled.stderr.splitlines()]
    assert lines[0] == "pulling manifest" and lines[-1] == "success"
    assert any(re.fullmatch(r"pulling [0-9a-f]{12}: 100% .+", line) for line in lines)
    assert ollama(live_server, "rm", name).exit_code == 0


def test_pull_from_a_registry_that_is_not_there(live_server: LiveServer) -> None:
    result = ollama(live_server, "pull", f"127.0.0.1:{free_port()}/nobody/nothing:1", "--insecure")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1].startswith("Error: ")


def test_help_texts(live_server: LiveServer) -> None:
    for command in ("serve", "run", "create", "show", "pull", "push", "list", "ps", "cp", "rm", "stop"):
        result = ollama(live_server, command, "--help")
        assert result.exit_code == 0 and "OLLAMA_HOST" in result.stdout, command


def _listener_pid(port: int) -> int | None:
    for conn in psutil.net_connections(kind="tcp"):
        if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
            return conn.pid
    return None


def test_list_starts_a_local_server_in_the_background(tmp_path: Path) -> None:
    port = free_port()
    env: dict[str, Any] = {**os.environ, "OLLAMA_HOST": f"127.0.0.1:{port}", "OLLAMA_MODELS": str(tmp_path / "models"),
                           "OLLAMA_PY_DATA_DIR": str(tmp_path / "data")}
    exe = ROOT / ".venv" / "bin" / "ollama-py"
    command = [str(exe)] if exe.exists() else [sys.executable, "-m", "ollama_py"]
    pid = None
    try:
        done = subprocess.run([*command, "list"], env=env, capture_output=True, text=True, timeout=120)
        pid = _listener_pid(port)
        assert done.returncode == 0, done.stderr
        assert done.stderr.startswith("Starting ollama-py server in the background "
                                      f"(log: {tmp_path / 'data' / 'server.log'})\n")
        assert done.stdout == "NAME    ID    SIZE    MODIFIED\n"
        assert pid is not None and os.getpgid(pid) == pid  # its own session, so the terminal's Ctrl-C misses it
        again = subprocess.run([*command, "list"], env=env, capture_output=True, text=True, timeout=60)
        assert (again.returncode, again.stderr) == (0, "")  # the running server is used, not started twice
        assert (tmp_path / "data" / "server.log").read_text()
    finally:
        if pid is not None:
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + 20
            while _alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
