"""llama.cpp's converter as an isolated child process: what it may use, for how long, and how it is stopped.

    limits_for(input_bytes, timeout, ram=..., cores=...) -> Limits       pure: the child's resource limits
    child_env(workspace, parent_env) -> dict                            pure: the child's whole environment
    run_isolated(script_argv, python=..., scripts_dir=..., workspace=..., limits=..., timeout=..., cancel=...)
        -> Generator[str, None, int]     the child's output lines as they come; returns its exit status

The child is `python -E -P -u -B convert_bootstrap.py ... -- SCRIPT ARGS`: the bootstrap (convert_bootstrap.py)
sets the limits on itself, leaves the network (a namespace of its own where the kernel allows, guarded sockets in
any case), turns transformers' remote code off and fences imports out of the workspace and temp directories before
it runs the script. From here it gets:

- its own workspace (a temp directory holding the staged model) as cwd, HOME and TMPDIR, and an environment of
  only PATH, the locale and the offline switches (no credentials, proxies or tokens of the server's);
- a process group of its own that dies with the server (PR_SET_PDEATHSIG) and is killed whole on every way out:
  success, failure, OLLAMA_PY_CONVERT_TIMEOUT passed, `cancel` set (the client hung up), or the generator closed.

The limits are generous for a model that behaves (the converter maps every input file and writes one output):
address space = inputs + RAM + 4 GiB, file size = 4 x inputs + 1 GiB (a 4-bit input written as 16-bit), CPU time =
the timeout on every core, 4096 open files, no core dumps.
"""

from __future__ import annotations

import logging
import math
import os
import re
import selectors
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from pathlib import Path

from ollama_py.errors import OllamaError, RequestCanceled
from ollama_py.runner.process import pdeathsig_preexec

log = logging.getLogger(__name__)

BOOTSTRAP = Path(__file__).with_name("convert_bootstrap.py")
DEFAULT_TIMEOUT = 3600.0  # OLLAMA_PY_CONVERT_TIMEOUT
GiB = 1 << 30
_POLL = 0.25  # seconds between looks at `cancel` while the child is quiet
_MAX_LINE = 1 << 16  # a longer line (no newline in sight) keeps only its end
_KEPT_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "LD_LIBRARY_PATH")
_TEMP_ROOTS = ("/tmp", "/var/tmp", "/dev/shm")


@dataclass(frozen=True, slots=True)
class Limits:
    address_space: int
    file_size: int
    cpu_seconds: int | None  # None: no timeout, no CPU limit either
    open_files: int = 4096

    def argv(self) -> list[str]:
        argv = ["--limit", f"as={self.address_space}", "--limit", f"fsize={self.file_size}",
                "--limit", f"nofile={self.open_files}"]
        return argv if self.cpu_seconds is None else [*argv, "--limit", f"cpu={self.cpu_seconds}"]


def limits_for(input_bytes: int, timeout: float, *, ram: int, cores: int) -> Limits:
    """The child's limits for `input_bytes` of staged files (see the module doc)."""
    return Limits(address_space=input_bytes + max(ram, 4 * GiB) + 4 * GiB, file_size=4 * input_bytes + GiB,
                  cpu_seconds=int(timeout * max(cores, 1)) + 60 if math.isfinite(timeout) else None)


def host_limits(input_bytes: int, timeout: float) -> Limits:
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        ram = 16 * GiB
    return limits_for(input_bytes, timeout, ram=ram, cores=os.cpu_count() or 1)


def child_env(workspace: Path, parent: Mapping[str, str]) -> dict[str, str]:
    """The converter's whole environment: PATH and the locale of ours, its workspace as home, and offline."""
    home, tmp = workspace / "home", workspace / "tmp"
    env = {key: parent[key] for key in _KEPT_ENV if key in parent}
    env.setdefault("PATH", os.defpath)
    env.update({
        "HOME": str(home), "TMPDIR": str(tmp), "XDG_CACHE_HOME": str(home / ".cache"),
        "HF_HOME": str(home / ".cache" / "huggingface"),
        "HF_MODULES_CACHE": str(home / ".cache" / "huggingface" / "modules"),
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1", "TOKENIZERS_PARALLELISM": "false", "NO_PROXY": "*", "no_proxy": "*",
    })
    return env


def _deny(workspace: Path) -> list[str]:
    return [str(workspace), tempfile.gettempdir(), *_TEMP_ROOTS]


def run_isolated(script_argv: list[str], *, python: str, scripts_dir: Path, workspace: Path, limits: Limits,
                 timeout: float, cancel: threading.Event | None = None) -> Generator[str, None, int]:
    """Run `script_argv` (a converter script and its arguments) fenced in; yield its output lines (stdout and
    stderr together, `\\r` ends a line too); return its exit status. OllamaError past `timeout` seconds,
    RequestCanceled once `cancel` is set; the child's whole process group is killed on every way out."""
    for sub in ("home", "tmp"):
        (workspace / sub).mkdir(parents=True, exist_ok=True)
    argv = [python, "-E", "-P", "-u", "-B", str(BOOTSTRAP), "--workspace", str(workspace),
            "--scripts", str(scripts_dir)]
    for path in _deny(workspace):
        argv += ["--deny", path]
    argv += [*limits.argv(), "--", *script_argv]
    log.info("converting: %s", script_argv)
    # Its own process group (killed whole below) that dies with us, as a runner does: a converter left behind by
    # a killed server would go on writing into the blobs directory.
    proc = subprocess.Popen(argv, cwd=workspace / "home", env=child_env(workspace, os.environ),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True,
                            preexec_fn=pdeathsig_preexec)  # noqa: PLW1509 - a prctl call, async-signal-safe
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    deadline = time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            buf = b""
            while True:
                if cancel is not None and cancel.is_set():
                    raise RequestCanceled()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise OllamaError(f"converting model took longer than {timeout:g} s and was stopped "
                                      "(OLLAMA_PY_CONVERT_TIMEOUT)")
                if not sel.select(min(left, _POLL)):
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    break
                *lines, buf = re.split(rb"[\r\n]", buf + chunk)
                buf = buf[-_MAX_LINE:]
                for raw in lines:
                    if line := raw[-_MAX_LINE:].decode(errors="replace").strip():
                        yield line
            if line := buf.decode(errors="replace").strip():
                yield line
        return proc.wait()
    finally:
        if proc.poll() is None:  # timed out, cancelled, closed or failed here: stop the whole group
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        proc.stdout.close()


__all__ = ["DEFAULT_TIMEOUT", "Limits", "child_env", "host_limits", "limits_for", "run_isolated"]
