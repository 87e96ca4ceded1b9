"""Finding a server for the CLI: use the one at OLLAMA_HOST, or start `ollama-py serve` in the background.

Ollama's CLI checks the server's heartbeat before each command and starts the app when nothing answers. We do
the same for a local host: `serve` is started detached (new session, so a Ctrl-C in the terminal or the CLI
exiting does not stop it), with its output appended to `<data dir>/server.log`, and the CLI waits — with a
spinner — until it answers. For a remote host there is nothing we can start: the caller gets the error.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from ollama_py.cli.progress import Spinner
from ollama_py.client import Client, ServerUnreachable
from ollama_py.config import Settings
from ollama_py.errors import OllamaError

log = logging.getLogger(__name__)

START_TIMEOUT = 60.0  # a cold start imports aiohttp and probes GPUs; seconds


def is_local(host: str) -> bool:
    """Loopback or unspecified (0.0.0.0 / ::): a server for it would run on this machine."""
    if host == "localhost":
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified


def server_command() -> list[str]:
    """How to run `ollama-py serve` with the interpreter that runs this CLI."""
    return [sys.executable, "-m", "ollama_py", "serve"]


def start_server(settings: Settings, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Path]:
    """Start `ollama-py serve` detached, logging to <data dir>/server.log; returns the process and the log path."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    log_path = settings.data_dir / "server.log"
    with open(log_path, "ab") as log_file:
        proc = subprocess.Popen(
            server_command(), stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
            env=dict(os.environ if env is None else env), start_new_session=True, close_fds=True,
        )
    return proc, log_path


def ensure_server(client: Client, settings: Settings, timeout: float = START_TIMEOUT) -> None:
    """Return when the client's server answers; start one for a local host if nothing does.

    Raises ServerUnreachable for a remote host, OllamaError when a started server exits or does not answer in time.
    """
    try:
        client.heartbeat()
        return
    except ServerUnreachable:
        if not is_local(client.host.host):
            raise
    proc, log_path = start_server(settings)
    print(f"Starting ollama-py server in the background (log: {log_path})", file=sys.stderr, flush=True)
    deadline = time.monotonic() + timeout
    with Spinner():
        while True:
            try:
                client.heartbeat(timeout=2.0)
                # The server is meant to outlive this process: mark the Popen settled so its destructor neither
                # warns about a running child nor queues it for reaping.
                proc.returncode = 0
                return
            except ServerUnreachable:
                pass
            code = proc.poll()
            if code is not None:
                raise OllamaError(f"ollama-py server exited with status {code}; see {log_path}")
            if time.monotonic() > deadline:
                raise OllamaError(f"timed out waiting for ollama-py server to start; see {log_path}")
            time.sleep(0.1)
