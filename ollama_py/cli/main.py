"""The ollama-py command line (click). Only this package imports click and rich."""

from __future__ import annotations

import click

from ollama_py import __version__
from ollama_py.config import Settings


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-v", "--version", prog_name="ollama-py", message="ollama-py version is %(version)s")
def cli() -> None:
    """Large language model runner: Ollama's API over llama.cpp, in Python."""


@cli.command()
def serve() -> None:
    """Start the server (configured with OLLAMA_* environment variables)."""
    from ollama_py.server.serve import run_server

    run_server(Settings.from_env())


def main() -> None:
    cli()
