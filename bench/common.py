"""Shared helpers for the bench scripts: processes to start and stop, the machine description, statistics.

Everything here is blocking and stdlib (+ requests, psutil) so a bench script can use it from plain code or
from a thread. Processes are started in their own session and stopped by process group (SIGTERM, a grace
period, SIGKILL), so a bench that is interrupted leaves no llama-server behind.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def taskset(cpus: str) -> list[str]:
    """argv prefix that pins a command to `cpus` ("0", "1-3"), or [] where taskset is missing."""
    exe = shutil.which("taskset")
    return [exe, "-c", cpus] if exe else []


# -- processes ----------------------------------------------------------------------------------------------------
@dataclass
class Child:
    """A started process (own session) with its log file and base URL."""

    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log_tail(self, n: int = 2000) -> str:
        with contextlib.suppress(OSError):
            return self.log_path.read_text(errors="replace")[-n:]
        return ""

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the process group, wait `grace` seconds, SIGKILL, reap; then kill any descendant (a serve's
        runners live in their own sessions) that outlived it."""
        import psutil

        descendants: list[psutil.Process] = []
        with contextlib.suppress(psutil.Error):
            descendants = psutil.Process(self.proc.pid).children(recursive=True)
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for p in descendants:
            with contextlib.suppress(psutil.Error):
                p.kill()


def _spawn(argv: Sequence[str], env: dict[str, str], log_path: Path, cwd: Path | None = None
           ) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log:
        return subprocess.Popen(list(argv), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=cwd)


def _wait_http(child: Child, path: str, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.proc.poll() is not None:
            raise RuntimeError(f"{what} exited early ({child.proc.returncode}):\n{child.log_tail()}")
        with contextlib.suppress(requests.RequestException):
            if requests.get(child.url + path, timeout=2).status_code == 200:
                return
        time.sleep(0.1)
    child.stop()
    raise RuntimeError(f"{what} did not answer {path} in {timeout:.0f}s:\n{child.log_tail()}")


def start_serve(tmp: Path, extra_env: dict[str, str] | None = None, *, prefix: Sequence[str] = (),
                runners_dir: Path | None = None, tree: Path | None = None) -> Child:
    """`ollama-py serve` on a free loopback port with its own store in `tmp`; `prefix` wraps the command
    (taskset); `tree`: the source tree to run (put first on PYTHONPATH and the working directory)."""
    port = free_port()
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OLLAMA_HOST": f"127.0.0.1:{port}", "OLLAMA_MODELS": str(tmp / "models"),
           "OLLAMA_PY_DATA_DIR": str(tmp / "data"), "OLLAMA_RUNNERS_DIR": str(runners_dir or ROOT / "runners"),
           "OLLAMA_KEEP_ALIVE": "1h", **(extra_env or {})}
    if "OLLAMA_DEBUG" not in (extra_env or {}):
        env.pop("OLLAMA_DEBUG", None)
    if tree is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(tree), env.get("PYTHONPATH", "")])
    child = Child(_spawn([*prefix, sys.executable, "-m", "ollama_py", "serve"], env, tmp / "serve.log", cwd=tree),
                  f"http://127.0.0.1:{port}", tmp / "serve.log")
    _wait_http(child, "/api/version", "ollama-py serve", 60)
    return child


def start_llama_server(argv: Sequence[str], log_path: Path, *, timeout: float = 120) -> Child:
    """A llama-server (or look-alike) from a full argv that contains `--port N`; waits for /health 200."""
    port = int(argv[list(argv).index("--port") + 1])
    child = Child(_spawn(argv, dict(os.environ), log_path), f"http://127.0.0.1:{port}", log_path)
    _wait_http(child, "/health", "llama-server", timeout)
    return child


def with_port(argv: Sequence[str], port: int) -> list[str]:
    out = list(argv)
    out[out.index("--port") + 1] = str(port)
    return out


def _runner(serve: Child, binary_name: str) -> Any:
    """The serve's running llama-server child (a psutil.Process: the first whose argv names `binary_name` and a
    port), or None."""
    import psutil

    with contextlib.suppress(psutil.Error):
        for p in psutil.Process(serve.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                cmd = p.cmdline()
                if any(Path(c).name == binary_name for c in cmd[:3]) and "--port" in cmd:
                    return p
    return None


def runner_argv(serve: Child, binary_name: str = "llama-server") -> list[str] | None:
    """The argv of the serve's running llama-server child (what the gateway really launched), or None."""
    import psutil

    p = _runner(serve, binary_name)
    with contextlib.suppress(psutil.Error):
        return list(p.cmdline()) if p is not None else None
    return None


def runner_key(serve: Child, binary_name: str = "llama-server") -> str:
    """The API key the serve's llama-server child requires (each runner has its own, in its environment)."""
    import psutil

    p = _runner(serve, binary_name)
    with contextlib.suppress(psutil.Error):
        return str(p.environ().get("LLAMA_API_KEY", "")) if p is not None else ""
    return ""


def runner_pid(serve: Child, binary_name: str = "llama-server") -> int | None:
    """The pid of the serve's running llama-server child, or None."""
    p = _runner(serve, binary_name)
    return int(p.pid) if p is not None else None


def upload_blob(url: str, path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    digest = f"sha256:{h.hexdigest()}"
    if requests.head(f"{url}/api/blobs/{digest}", timeout=30).status_code != 200:
        with open(path, "rb") as f:
            r = requests.post(f"{url}/api/blobs/{digest}", data=f, timeout=300)
        r.raise_for_status()
    return digest


def create_model(url: str, name: str, gguf: Path, **req: Any) -> None:
    """POST /api/blobs + /api/create, as `ollama create` does for a GGUF file."""
    digest = upload_blob(url, gguf)
    r = requests.post(f"{url}/api/create", json={"model": name, "files": {gguf.name: digest}, "stream": False, **req},
                      timeout=300)
    if r.status_code != 200:
        raise RuntimeError(f"create {name}: {r.status_code} {r.text}")


def cpu_seconds(pid: int) -> float:
    """CPU time a process (all its threads, not its children) has used, in seconds. Linux's schedstat counts
    nanoseconds; psutil's cpu_times (the fallback) counts clock ticks of 10 ms, too coarse for one request."""
    total = 0
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int((task / "schedstat").read_text().split()[0])
        return total / 1e9
    except OSError:
        import psutil

        t = psutil.Process(pid).cpu_times()
        return t.user + t.system


def wakeups(pid: int) -> int:
    """How often a process (all its threads) has slept and been woken: its voluntary context switches (a thread
    that blocks, in epoll or on a lock, and runs again when woken), from /proc; 0 where unreadable."""
    total = 0
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                for line in (task / "status").read_text().splitlines():
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
    return total


# -- the machine --------------------------------------------------------------------------------------------------
def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def load_average() -> list[float] | None:
    with contextlib.suppress(OSError, AttributeError):
        return [round(x, 2) for x in os.getloadavg()]
    return None


def machine_info(runner: Path | None = None) -> dict[str, Any]:
    """What the numbers were taken on: CPU, cores, memory, OS, Python, llama.cpp build, date."""
    info: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "load_average_at_start": load_average(),
    }
    with contextlib.suppress(ImportError):
        import psutil

        info["memory_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
    if runner is not None:
        with contextlib.suppress(OSError, ValueError):
            build = json.loads((runner.parent / "build-info.json").read_text())
            info["llama_cpp"] = {k: build[k] for k in ("variant", "llama_cpp_version", "source_version")
                                 if build.get(k)}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        rev = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10).stdout.strip()
        if rev:
            info["git"] = rev
    return info


# -- statistics ---------------------------------------------------------------------------------------------------
def summary(values: Sequence[float], digits: int = 3) -> dict[str, Any]:
    """Median, min, max and the samples, rounded for the JSON file."""
    vals = [float(v) for v in values]
    if not vals:
        return {"median": None, "min": None, "max": None, "n": 0, "samples": []}
    return {"median": round(statistics.median(vals), digits), "min": round(min(vals), digits),
            "max": round(max(vals), digits), "n": len(vals), "samples": [round(v, digits) for v in vals]}


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return "\n".join([fmt.format(*headers), fmt.format(*("-" * w for w in widths)), *(fmt.format(*r) for r in rows)])
