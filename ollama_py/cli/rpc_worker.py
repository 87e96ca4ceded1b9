"""`ollama-py rpc-worker`: run llama.cpp's RPC server so another machine's ollama-py can spread a model onto
this one (OLLAMA_RPC_SERVERS=host:port,... on the serving side)."""

from __future__ import annotations

import os
import sys

import click

from ollama_py.config import Settings
from ollama_py.runner import rpc, variants

WARNING = ("Warning: the RPC protocol has no authentication or encryption; anyone who can reach {addr} can use "
           "this machine's memory and run graphs on it. Bind to 127.0.0.1 and use an SSH tunnel or WireGuard.")


@click.command("rpc-worker", short_help="Serve this machine's CPU/GPU to other ollama-py servers over RPC")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback unless you mean it).")
@click.option("--port", default=50052, show_default=True, type=click.IntRange(1, 65535), help="TCP port.")
@click.option("--threads", type=click.IntRange(1, 1024), help="CPU threads for the worker's CPU device.")
@click.option("--cache", is_flag=True, help="Keep a local cache of received tensors (llama.cpp's -c).")
def rpc_worker(host: str, port: int, threads: int | None, cache: bool) -> None:
    """Start llama.cpp's RPC server (built beside llama-server by scripts/build_runners.sh) with the same runner
    variant selection as model runners, in the foreground. Stop it with Ctrl-C.

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
    argv = rpc.worker_argv(binary, host=host, port=port, threads=threads, cache=cache)
    sys.stdout.flush()
    os.execv(argv[0], argv)
