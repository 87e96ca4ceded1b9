"""The model commands: create, show, pull, push, list/ls, ps, cp, rm, stop. Each talks to the server through the
HTTP client, starting a local server first when none answers (see autostart)."""

from __future__ import annotations

import datetime as dt
import os
import sys
from pathlib import Path

import click

from ollama_py.api.names import parse_name
from ollama_py.cli.autostart import ensure_server
from ollama_py.cli.create import create_model, plan_create
from ollama_py.cli.envvars import epilog
from ollama_py.cli.progress import ProgressView
from ollama_py.cli.render import list_table, ps_table, show_info
from ollama_py.cli.session import pull as pull_model
from ollama_py.client import Client
from ollama_py.config import Settings
from ollama_py.errors import InvalidModelName, OllamaError
from ollama_py.modelfile import decode_modelfile, parse_modelfile

HOST_HELP = epilog("OLLAMA_HOST", "OLLAMA_API_KEY")


def client_settings() -> Settings:
    """(Blocking: reads the config file.) The settings a client command runs with, resolved as `serve` resolves
    them: environment variable > config file ([server].host, data_dir, ...) > default. A bad file is an error
    that names its line."""
    from ollama_py import config_file  # noqa: PLC0415 - tomllib and platformdirs only when a command needs them

    return config_file.load(os.environ).settings


def connect() -> Client:
    """A client for the server's host (OLLAMA_HOST, else the config file's [server].host, else 127.0.0.1:11434)
    whose server answers (started in the background when local and down)."""
    settings = client_settings()
    client = Client(settings.host)
    ensure_server(client, settings)
    return client


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def same_model(a: str, b: str) -> bool:
    """Whether two names mean the same model (defaults filled in, case-insensitive)."""
    try:
        return parse_name(a).key() == parse_name(b).key()
    except InvalidModelName:
        return a == b


def is_running(client: Client, model: str) -> bool:
    return any(same_model(m.get("model") or m.get("name", ""), model) for m in client.ps().get("models", []))


@click.command(short_help="Create a model", epilog=HOST_HELP)
@click.argument("model")
@click.option("-f", "--file", "file", metavar="FILE", help='Name of the Modelfile (default "Modelfile")')
@click.option("-q", "--quantize", metavar="TYPE", help="Quantize model to this level (e.g. q4_K_M)")
@click.option("--draft-quantize", metavar="TYPE", help="Quantize draft model to this level")
def create(model: str, file: str | None, quantize: str | None, draft_quantize: str | None) -> None:
    """Create a model from a Modelfile.

    FROM takes a model name, a GGUF file (one shard of a split GGUF brings every shard beside it), a directory of
    GGUF or Hugging Face safetensors files (converted by llama.cpp's converter); DRAFT adds a draft model for
    speculative decoding; ADAPTER a LoRA adapter."""
    try:
        parse_name(model)
    except InvalidModelName:
        raise OllamaError(f"invalid model name: {model}") from None
    if file == "-":
        text, base_dir = sys.stdin.read(), Path.cwd()
    else:
        path = Path(file or "Modelfile").expanduser().absolute()
        if path.is_file():
            text, base_dir = decode_modelfile(path.read_bytes()), path.parent
        elif file:
            raise OllamaError("specified Modelfile wasn't found")
        else:  # like Ollama: no Modelfile here means the model files in this directory
            text, base_dir = "FROM .\n", Path.cwd()
    modelfile = parse_modelfile(text)
    client = connect()
    with ProgressView(status="gathering model components") as view:
        plan = plan_create(modelfile, base_dir, Path.home(), quantize, draft_quantize)
        create_model(client, model, plan, view)


@click.command(short_help="Show information for a model", epilog=HOST_HELP)
@click.argument("model")
@click.option("--license", "license_", is_flag=True, help="Show license of a model")
@click.option("--modelfile", is_flag=True, help="Show Modelfile of a model")
@click.option("--parameters", is_flag=True, help="Show parameters of a model")
@click.option("--template", is_flag=True, help="Show template of a model")
@click.option("--system", is_flag=True, help="Show system message of a model")
@click.option("-v", "--verbose", is_flag=True, help="Show detailed model information")
def show(model: str, license_: bool, modelfile: bool, parameters: bool, template: bool, system: bool,
         verbose: bool) -> None:
    """Show information for a model."""
    chosen = [name for name, on in (("license", license_), ("modelfile", modelfile), ("parameters", parameters),
                                    ("system", system), ("template", template)) if on]
    if len(chosen) > 1:
        raise OllamaError("only one of '--license', '--modelfile', '--parameters', '--system', or '--template' "
                          "can be specified")
    resp = connect().show(model, verbose=verbose)
    if not chosen:
        click.echo(show_info(resp, verbose), nl=False)
    elif chosen[0] in ("system", "template"):
        click.echo(resp.get(chosen[0]) or "", nl=False)
    else:
        click.echo(resp.get(chosen[0]) or "")


@click.command(short_help="Pull a model from a registry", epilog=HOST_HELP)
@click.argument("model")
@click.option("--insecure", is_flag=True, help="Use an insecure registry")
def pull(model: str, insecure: bool) -> None:
    """Pull a model from a registry."""
    pull_model(connect(), model, insecure=insecure)


@click.command(short_help="Push a model to a registry", epilog=HOST_HELP)
@click.argument("model")
@click.option("--insecure", is_flag=True, help="Use an insecure registry")
def push(model: str, insecure: bool) -> None:
    """Push a model to a registry."""
    client = connect()
    try:
        with ProgressView(verb="pushing") as view, client.push(model, insecure=insecure) as stream:
            for resp in stream:
                view.handle(resp)
    except OllamaError as e:
        text = str(e).lower()
        if "access denied" in text or "unauthorized" in text:
            raise OllamaError("you are not authorized to push to this namespace, create the model under a "
                              "namespace you own") from None
        raise
    name = parse_name(model)
    where = str(name)
    if name.host.endswith((".ollama.com", ".ollama.ai")):
        where = "https://ollama.com/" + name.short.removesuffix(":latest")
    click.echo(f"\nYou can find your model at:\n\n\t{where}")


@click.command("list", short_help="List models", epilog=HOST_HELP)
@click.argument("prefix", required=False, default="")
def list_(prefix: str) -> None:
    """List models (those whose name starts with PREFIX, if given)."""
    models = connect().list().get("models", [])
    click.echo(list_table(models, _now(), prefix), nl=False)


@click.command(short_help="List running models", epilog=HOST_HELP)
@click.argument("prefix", required=False, default="")
def ps(prefix: str) -> None:
    """List running models (those whose name starts with PREFIX, if given)."""
    models = connect().ps().get("models", [])
    click.echo(ps_table(models, _now(), prefix), nl=False)


@click.command(short_help="Copy a model", epilog=HOST_HELP)
@click.argument("source")
@click.argument("destination")
def cp(source: str, destination: str) -> None:
    """Copy a model."""
    connect().copy(source, destination)
    click.echo(f"copied '{source}' to '{destination}'")


@click.command(short_help="Remove a model", epilog=HOST_HELP)
@click.argument("models", metavar="MODEL [MODEL...]", nargs=-1, required=True)
def rm(models: tuple[str, ...]) -> None:
    """Remove one or more models (unloading them first if they are running)."""
    client = connect()
    for model in models:
        try:
            if is_running(client, model):
                for _ in client.generate(model, keep_alive=0):
                    pass
        except OllamaError:
            click.echo(f"Warning: unable to stop model '{model}'", err=True)
        client.delete(model)
        click.echo(f"deleted '{model}'")


@click.command(short_help="Stop a running model", epilog=HOST_HELP)
@click.argument("model")
def stop(model: str) -> None:
    """Stop a running model (unload it now)."""
    client = connect()
    if not is_running(client, model):
        raise OllamaError(f'couldn\'t find model "{model}" to stop')
    for _ in client.generate(model, keep_alive=0):
        pass
