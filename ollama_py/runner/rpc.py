"""llama.cpp's RPC backend: worker command lines and reachability of the workers a model is spread over.

The RPC protocol has no authentication or encryption: workers bind 127.0.0.1 unless told otherwise, and
anything else gets a warning (README: run them behind an SSH tunnel or WireGuard).
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import socket
import subprocess
from collections.abc import Iterable
from pathlib import Path

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


def worker_memory(llama_server: Path, endpoints: tuple[str, ...], timeout: float = 20.0) -> dict[str, tuple[int, int]]:
    """Each reachable worker's memory, as llama.cpp sees it (it asks the workers over RPC)."""
    if not endpoints:
        return {}
    try:
        out = subprocess.run([str(llama_server), "--rpc", ",".join(endpoints), "--list-devices"],
                             capture_output=True, text=True, timeout=timeout,
                             env={**os.environ, "GGML_NO_BACKTRACE": "1"})
    except (OSError, subprocess.TimeoutExpired) as e:
        log.warning("could not ask RPC workers for their memory: %s", e)
        return {}
    return parse_list_devices(out.stdout + out.stderr)
