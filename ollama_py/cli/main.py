"""The ollama-py command line (click). Only this package imports click and rich.

Commands mirror Ollama's (`serve`, `run`, `create`, `show`, `pull`, `push`, `list`/`ls`, `ps`, `cp`, `rm`,
`stop`, `--version`). Any failure ends as one `Error: ...` line on stderr and exit status 1, never a traceback.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from typing import Any

import click

from ollama_py import __version__
from ollama_py.cli import commands
from ollama_py.cli.envvars import SERVE_VARS, epilog
from ollama_py.cli.launch import launch
from ollama_py.cli.rpc_worker import rpc_worker
from ollama_py.cli.run import run
from ollama_py.client import Client
from ollama_py.config import Settings
from ollama_py.errors import OllamaError

log = logging.getLogger(__name__)


def _fail(message: str, code: int = 1) -> None:
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


class OllamaGroup(click.Group):
    """Turns every error into Ollama's one-line `Error: ...` and exit status 1; lists commands in Ollama's order."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as e:
            click.echo(e.ctx.get_help())
            sys.exit(0)
        except click.ClickException as e:
            _fail(e.format_message())
        except click.exceptions.Abort:
            click.echo("", err=True)
            sys.exit(130)
        except KeyboardInterrupt:
            click.echo("", err=True)
            sys.exit(130)
        except OllamaError as e:
            _fail(str(e) or type(e).__name__)
        except OSError as e:
            _fail(f"{e.strerror or e}: {e.filename}" if e.filename else str(e))
        except Exception as e:  # never a traceback for a user, unless they ask with OLLAMA_DEBUG
            if Settings.from_env().debug:
                traceback.print_exc()
            _fail(str(e) or type(e).__name__)
        sys.exit(rv if isinstance(rv, int) else 0)


def _version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """Like `ollama -v`: the server's version, and the client's when they differ or no server answers."""
    if not value or ctx.resilient_parsing:
        return
    server = ""
    host = commands.client_settings().host  # a bad config file is an error of its own, not "could not connect"
    try:
        server = Client(host).version(timeout=3.0)
    except OllamaError:
        click.echo("Warning: could not connect to a running ollama-py instance")
    if server:
        click.echo(f"ollama-py version is {server}")
    if server != __version__:
        click.echo(f"Warning: client version is {__version__}")
    ctx.exit(0)


@click.group(cls=OllamaGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--version", is_flag=True, expose_value=False, is_eager=True, callback=_version,
              help="Show version information")
def cli() -> None:
    """Large language model runner: Ollama's API over llama.cpp, in Python."""


_CONFIG_OPTIONS = [
    click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                 help="Config file (default: $OLLAMA_PY_CONFIG, else config.toml in the user config dir)"),
    click.option("--set", "assignments", multiple=True, metavar="NAME=VALUE",
                 help="A [server] setting, over the environment and the file (e.g. --set keep_alive=10m)"),
]


def _config_options(f: Any) -> Any:
    for option in reversed(_CONFIG_OPTIONS):
        f = option(f)
    return f


def _resolve_config(config_path: str | None, assignments: tuple[str, ...]) -> Any:
    from ollama_py import config_file
    from ollama_py.scheduler.model_settings import runner_flags

    flags = dict(config_file.parse_flag(a) for a in assignments)
    resolved = config_file.load(os.environ, config_path, flags)
    known = runner_flags(resolved.settings.runners_dir)  # None when no runner is built: loads will say so
    if known is not None:
        config_file.check_extra_args(resolved.config, known)
    return resolved


@cli.command(short_help="Start ollama-py", epilog=epilog(*SERVE_VARS))
@_config_options
@click.option("--print-config", is_flag=True, help="Print the effective settings and where each came from, and exit")
def serve(config_path: str | None, assignments: tuple[str, ...], print_config: bool) -> None:
    """Start the server (configured by flags, the OLLAMA_* environment variables below, and the config file)."""
    from ollama_py import config_file

    resolved = _resolve_config(config_path, assignments)
    if print_config:
        click.echo(config_file.show(resolved), nl=False)
        return
    from ollama_py.server.serve import run_server

    run_server(resolved.settings)


@click.group(short_help="Show the effective settings")
def config() -> None:
    """The config file (TOML; see the README's Configuration section)."""


@config.command("show")
@_config_options
def config_show(config_path: str | None, assignments: tuple[str, ...]) -> None:
    """Print the effective settings and where each came from (flag, environment, file or default)."""
    from ollama_py import config_file

    click.echo(config_file.show(_resolve_config(config_path, assignments)), nl=False)


cli.add_command(commands.create)  # after serve, which the decorator registered first
cli.add_command(commands.show)
cli.add_command(run)
cli.add_command(commands.stop)
cli.add_command(commands.pull)
cli.add_command(commands.push)
cli.add_command(commands.list_, "list")
cli.add_command(commands.ps)
cli.add_command(commands.cp)
cli.add_command(commands.rm)
cli.add_command(launch)
cli.add_command(rpc_worker)
cli.add_command(config)


def _alias(command: click.Command, name: str) -> click.Command:
    """The same command under another name, hidden from the command list (Ollama's cobra aliases)."""
    return click.Command(name, callback=command.callback, params=command.params, help=command.help,
                         epilog=command.epilog, short_help=command.short_help, hidden=True)


cli.add_command(_alias(commands.list_, "ls"))
cli.add_command(_alias(serve, "start"))

def main() -> None:
    cli()
