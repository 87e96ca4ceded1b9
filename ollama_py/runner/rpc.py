"""llama.cpp's RPC backend: worker command lines and reachability of the workers a model is spread over.

The RPC protocol has no authentication or encryption: workers bind 127.0.0.1 unless told otherwise, and
anything else gets a warning (README: run them behind an SSH tunnel or WireGuard).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
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
