"""llama.cpp's RPC backend: worker command lines and reachability of the workers a model is spread over.

The RPC protocol has no authentication or encryption: workers bind 127.0.0.1 unless told otherwise, and
anything else gets a warning (README: run them behind an SSH tunnel or WireGuard). For the same reason the
workers are the operator's choice (OLLAMA_RPC_SERVERS): a request never names one, and a Modelfile only picks
among them (`workers_for`). Probes run off the event loop and their child dies with us.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ipaddress
import logging
import os
import re
import signal
import socket
from collections.abc import Callable, Iterable
from pathlib import Path

from ollama_py.errors import InvalidOption
from ollama_py.runner.process import pdeathsig_preexec

log = logging.getLogger(__name__)

RPC_BINARIES = ("ggml-rpc-server", "rpc-server")  # renamed upstream; older builds have rpc-server


def worker_argv(binary: Path | str, *, host: str = "127.0.0.1", port: int = 50052, threads: int | None = None,
                cache: bool = False) -> list[str]:
    argv = [str(binary), "-H", host, "-p", str(port)]
    if threads:
        argv += ["-t", str(threads)]
    if cache:
        argv += ["-c"]
    return argv


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def split_endpoint(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"invalid RPC server {endpoint!r}: expected host:port")
    return host.strip("[]"), int(port)


def reachable(endpoints: Iterable[str], timeout: float = 1.0) -> tuple[list[str], list[str]]:
    """(reachable, unreachable) endpoints, by trying a TCP connection to each."""
    up, down = [], []
    for endpoint in endpoints:
        try:
            host, port = split_endpoint(endpoint)
            with socket.create_connection((host, port), timeout=timeout):
                up.append(endpoint)
        except (OSError, ValueError):
            down.append(endpoint)
    return up, down


def workers_for(parameter: str | None, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """The RPC workers a model loads on: the operator's OLLAMA_RPC_SERVERS (`allowed`), or the model's
    PARAMETER rpc_servers ("" = none) when every worker it names is one of them. Anyone who can create a model
    can write its Modelfile, so a PARAMETER only picks among the operator's workers; it never adds one."""
    if parameter is None:
        return allowed
    named = tuple(dict.fromkeys(s.strip() for s in parameter.split(",") if s.strip()))
    outside = [endpoint for endpoint in named if endpoint not in allowed]
    if outside:
        raise InvalidOption(f"rpc_servers names RPC workers that are not in the server's OLLAMA_RPC_SERVERS: "
                            f"{', '.join(outside)}")
    return named


def find_rpc_binary(variant_dir: Path) -> Path | None:
    for name in RPC_BINARIES:
        candidate = variant_dir / name
        if candidate.exists():
            return candidate
    return None


_DEVICE_LINE = re.compile(r"^\s*RPC\d+:\s*(\S+)\s*\((\d+) MiB, (\d+) MiB free\)")


def parse_list_devices(text: str) -> dict[str, tuple[int, int]]:
    """`llama-server --rpc ... --list-devices` output -> {endpoint: (total bytes, free bytes)} for RPC devices."""
    out: dict[str, tuple[int, int]] = {}
    for line in text.splitlines():
        m = _DEVICE_LINE.match(line)
        if m:
            out[m.group(1)] = (int(m.group(2)) << 20, int(m.group(3)) << 20)
    return out


async def reachable_async(endpoints: Iterable[str], timeout: float = 1.0) -> tuple[list[str], list[str]]:
    """(reachable, unreachable) endpoints, by trying a TCP connection to each, all at once and off the loop."""

    async def answers(endpoint: str) -> bool:
        try:
            host, port = split_endpoint(endpoint)
            async with asyncio.timeout(timeout):
                _, writer = await asyncio.open_connection(host, port)
        except (OSError, ValueError, TimeoutError):
            return False
        writer.close()
        return True

    endpoints = list(endpoints)
    up = await asyncio.gather(*(answers(endpoint) for endpoint in endpoints))
    return [e for e, ok in zip(endpoints, up, strict=True) if ok], [e for e, ok in zip(endpoints, up, strict=True)
                                                                    if not ok]


async def worker_memory(llama_server: Path, endpoints: tuple[str, ...],
                        timeout: float = 20.0) -> dict[str, tuple[int, int]]:
    """Each reachable worker's memory, as llama.cpp sees it (it asks the workers over RPC).

    `llama-server --list-devices` never exits against a worker that accepts and stays silent, so it gets
    `timeout` seconds and is then killed; like a runner it dies with us (PR_SET_PDEATHSIG, own process group)."""
    if not endpoints:
        return {}
    try:
        proc = await asyncio.create_subprocess_exec(
            str(llama_server), "--rpc", ",".join(endpoints), "--list-devices",
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, "GGML_NO_BACKTRACE": "1"}, start_new_session=True, preexec_fn=pdeathsig_preexec)
    except OSError as e:
        log.warning("could not ask RPC workers for their memory: %s", e)
        return {}
    try:
        async with asyncio.timeout(timeout):
            out, _ = await proc.communicate()
    except TimeoutError:
        log.warning("RPC workers %s did not report their memory within %gs", ", ".join(endpoints), timeout)
        return {}
    finally:
        if proc.returncode is None:  # timed out, or the caller was cancelled
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await asyncio.shield(proc.wait())
    return parse_list_devices(out.decode("utf-8", "replace"))


class WorkerProbe:
    """The free memory of sets of RPC workers, asked once per set and kept for the `size` latest sets.

    A worker serves one client at a time, so it cannot be asked again while a runner holds it (plans are made
    on every request): the first answer is kept. Probes run one at a time, off the event loop."""

    def __init__(self, binary: Callable[[], Path | None], *, size: int = 16, timeout: float = 5.0) -> None:
        self._binary = binary
        self._size = size
        self._timeout = timeout
        self._known: collections.OrderedDict[tuple[str, ...], dict[str, int]] = collections.OrderedDict()
        self._lock = asyncio.Lock()

    async def free(self, servers: tuple[str, ...]) -> dict[str, int]:
        """{endpoint: free bytes} for those of `servers` that answered."""
        if not servers:
            return {}
        async with self._lock:
            if servers in self._known:
                self._known.move_to_end(servers)
                return self._known[servers]
            up, _ = await reachable_async(servers, 0.5)
            binary = await asyncio.to_thread(self._binary) if up else None
            memory = await worker_memory(binary, tuple(up), timeout=self._timeout) if binary else {}
            self._known[servers] = {endpoint: free for endpoint, (_, free) in memory.items()}
            while len(self._known) > self._size:
                self._known.popitem(last=False)
            return self._known[servers]
