"""`run MODEL [PROMPT]`: pull the model if it is missing, then answer once (a prompt, or text piped on stdin) or
start the interactive prompt when both ends are a terminal."""

from __future__ import annotations

import json
import signal
import sys
from typing import Any

import click

from ollama_py.cli.commands import client_settings, connect
from ollama_py.cli.display import WordWrapper, terminal_width
from ollama_py.cli.envvars import epilog
from ollama_py.cli.images import added, extract_images, multimodal
from ollama_py.cli.progress import is_tty
from ollama_py.cli.repl import ReadlineReader, Repl
from ollama_py.cli.session import RunOptions, generate, load_model, show_or_pull
from ollama_py.config import parse_duration
from ollama_py.errors import OllamaError

THINK_VALUES = ("true", "false", "high", "medium", "low", "max")


class RunCommand(click.Command):
    """`--think` and `--truncate` take a value only as `--think=VALUE` (cobra's NoOptDefVal, and a Go bool flag): a
    bare `--think` or `--truncate` means true and the next word stays part of the prompt."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        rewritten: list[str] = []
        for i, arg in enumerate(args):
            if arg == "--":
                rewritten += args[i:]
                break
            rewritten.append(f"{arg}=true" if arg in ("--think", "--truncate") else arg)
        return super().parse_args(ctx, rewritten)


def parse_think(value: str | None) -> bool | str | None:
    if value is None:
        return None
    if value not in THINK_VALUES:
        raise OllamaError(f'invalid value for --think: "{value}" (must be true, false, high, medium, low, or max)')
    return {"true": True, "false": False}.get(value, value)


def _read_stdin() -> str | None:
    if is_tty(sys.stdin):
        return None
    return sys.stdin.read()


def _replay(messages: list[dict[str, Any]], wordwrap: bool) -> None:
    """The Modelfile's MESSAGEs, shown as if typed (Ollama does this when the REPL starts)."""
    for m in messages:
        if m.get("role") == "user":
            click.echo(f">>> {m.get('content', '')}")
        elif m.get("role") == "assistant":
            WordWrapper(sys.stdout, terminal_width(sys.stdout), wordwrap).write(str(m.get("content", "")))
            click.echo("\n")


@click.command(cls=RunCommand, short_help="Run a model", epilog=epilog("OLLAMA_HOST", "OLLAMA_API_KEY",
                                                                                          "OLLAMA_NOHISTORY"))
@click.argument("model")
@click.argument("prompt", nargs=-1)
@click.option("--keepalive", metavar="DURATION", help="Duration to keep a model loaded (e.g. 5m)")
@click.option("--verbose", is_flag=True, help="Show timings for response")
@click.option("--insecure", is_flag=True, help="Use an insecure registry")
@click.option("--nowordwrap", is_flag=True, help="Don't wrap words to the next line automatically")
@click.option("--format", "format_", metavar="FORMAT", help="Response format (e.g. json)")
@click.option("--think", metavar="[=VALUE]",
              help="Enable thinking mode: --think or --think=true|false|high|medium|low|max")
@click.option("--hidethinking", is_flag=True, help="Hide thinking output (if provided)")
@click.option("--truncate", metavar="[=BOOL]", type=click.Choice(["true", "false"]), show_choices=False,
              help="For embedding models: truncate inputs exceeding context length (default: true). Set "
                   "--truncate=false to error instead")
@click.option("--dimensions", type=click.IntRange(min=0), default=0, metavar="N",
              help="Truncate output embeddings to specified dimension (embedding models only)", show_default=False)
def run(model: str, prompt: tuple[str, ...], keepalive: str | None, verbose: bool, insecure: bool,
        nowordwrap: bool, format_: str | None, think: str | None, hidethinking: bool, truncate: str | None,
        dimensions: int) -> None:
    """Run a model: answer PROMPT (and/or text piped on stdin), or chat interactively."""
    if keepalive is not None:
        try:
            parse_duration(keepalive)
        except ValueError as e:
            raise OllamaError(str(e)) from None
    opts = RunOptions(model=model, format=format_ or "", keep_alive=keepalive, think=parse_think(think),
                      hide_thinking=hidethinking, wordwrap=not nowordwrap, verbose=verbose, insecure=insecure)
    think_explicit = think is not None
    prompts = list(prompt)
    interactive = True
    stdin_text = _read_stdin()
    if stdin_text is not None:
        if stdin_text:
            prompts.insert(0, stdin_text)
        interactive = False
    opts.prompt = " ".join(prompts)
    if prompts or not is_tty(sys.stdout):
        interactive = False

    client = connect()
    info = show_or_pull(client, model, insecure=insecure)
    capabilities = info.get("capabilities") or []
    if not think_explicit and "thinking" in capabilities:
        opts.think = True
    if "embedding" in capabilities and "completion" not in capabilities:
        if not opts.prompt:
            raise OllamaError(f'embedding models require input text. Usage: ollama-py run {model} "your text here"')
        resp = client.embed(model, opts.prompt, keep_alive=opts.keep_alive,
                            truncate=None if truncate is None else truncate == "true", dimensions=dimensions or None)
        embeddings = resp.get("embeddings") or []
        if not embeddings:
            raise OllamaError("no embeddings returned")
        click.echo(json.dumps(embeddings[0], separators=(",", ":")))
        return

    if not interactive:
        if multimodal(capabilities):
            opts.prompt, opts.images, paths = extract_images(opts.prompt)
            for path in paths:
                click.echo(added(path), err=True)
        if is_tty(sys.stderr):  # where the spinner shows, it says how the load goes before the answer starts
            load_model(client, opts)
        generate(client, opts)
        return
    load_model(client, opts)
    _replay(info.get("messages") or [], opts.wordwrap)
    settings = client_settings()
    reader = ReadlineReader(settings.data_dir / "history", enabled=not settings.nohistory)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Started with Ctrl-C ignored (what a shell gives a background job, `cmd &`, and keeps through exec): the
        # session needs it to stop an answer and to hint at /bye, as Ollama's (Go's signal.Notify) takes it back.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    Repl(client, opts, reader, multimodal=multimodal(capabilities)).run()
