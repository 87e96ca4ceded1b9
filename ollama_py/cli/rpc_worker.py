"""`ollama-py rpc-worker`: run llama.cpp's RPC server so another machine's ollama-py can spread a model onto
this one (OLLAMA_RPC_SERVERS=host:port,... on the serving side)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import click

from ollama_py.config import Settings
from ollama_py.runner import process, rpc, rpc_cap, variants

WARNING = ("Warning: the RPC protocol has no authentication or encryption; anyone who can reach {addr} can use "
           "this machine's memory and run graphs on it. Bind to 127.0.0.1 and use an SSH tunnel or WireGuard.")


@click.command("rpc-worker", short_help="Serve this machine's CPU/GPU to other ollama-py servers over RPC")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback unless you mean it).")
@click.option("--port", default=50052, show_default=True, type=click.IntRange(1, 65535), help="TCP port.")
@click.option("--threads", type=click.IntRange(1, 1024), help="CPU threads for the worker's CPU device.")
@click.option("--mem", type=click.IntRange(1), metavar="MB",
              help="Memory cap in MiB: the worker reports at most this much and refuses allocations beyond it.")
@click.option("--cache", is_flag=True, help="Keep a local cache of received tensors (llama.cpp's -c).")
def rpc_worker(host: str, port: int, threads: int | None, mem: int | None, cache: bool) -> None:
    """Start llama.cpp's RPC server (built beside llama-server by scripts/build_runners.sh) with the same runner
    variant selection as model runners, in the foreground. Stop it with Ctrl-C.

    With --mem, the RPC server listens on a private loopback port behind a relay that holds it to MB MiB, so
    the serving machine puts fewer layers here.

    On the serving machine: OLLAMA_RPC_SERVERS=THIS_HOST:PORT ollama-py serve
    """
    settings = Settings.from_env()
    built = variants.built_variants(settings.runners_dir)
    bad = variants.BadVariants(settings.data_dir / "bad-variants.json", settings.runners_dir).load()
    order = variants.candidate_order(variants.probe_host(), built, forced=settings.llm_library, bad=bad)
    binary = None
    for variant in order:
        binary = rpc.find_rpc_binary(settings.runners_dir / variant)
        if binary:
            break
    if binary is None:
        raise click.ClickException(f"no RPC server binary in {settings.runners_dir}; run scripts/build_runners.sh")
    if not rpc.is_loopback(host):
        click.echo(WARNING.format(addr=f"{host}:{port}"), err=True)
    if mem is None:
        argv = rpc.worker_argv(binary, host=host, port=port, threads=threads, cache=cache)
        sys.stdout.flush()
        os.execve(argv[0], argv, variants.runner_env(binary, os.environ))  # a cuda build's libraries too
    _serve_capped(binary, host, port, threads, cache, mem)


def _serve_capped(binary: Path, host: str, port: int, threads: int | None, cache: bool, mem: int) -> None:
    try:
        listener = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as e:
        raise click.ClickException(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    inner = process.free_port()
    argv = rpc.worker_argv(binary, host="127.0.0.1", port=inner, threads=threads, cache=cache)
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, preexec_fn=process.pdeathsig_preexec,
                             env=variants.runner_env(binary, os.environ))
    stopped = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.append(True))
    try:
        _wait_listening(child, inner)
        click.echo(f"rpc-worker: serving {host}:{port} with a memory cap of {mem} MiB", err=True)
        with listener:
            rpc_cap.serve(listener, ("127.0.0.1", inner), mem << 20,
                          running=lambda: not stopped and child.poll() is None)
        if child.poll() is not None and not stopped:
            raise click.ClickException(f"the RPC server exited with status {child.returncode}")
    finally:
        if child.poll() is None:
            child.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(5)
            child.kill()
        child.wait()


def _wait_listening(child: subprocess.Popen, port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            raise click.ClickException(f"the RPC server exited with status {child.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise click.ClickException(f"the RPC server did not listen on 127.0.0.1:{port} within {timeout:.0f} s")
