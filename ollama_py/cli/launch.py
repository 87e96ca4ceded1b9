"""`launch [INTEGRATION] [--model M] [--config] [--yes] [-- ARGS...]`: run a coding agent against this server, as
Ollama's `ollama launch` does, with nothing for the user to configure.

  claude   Claude Code: ANTHROPIC_BASE_URL at the server, ANTHROPIC_AUTH_TOKEN "ollama" (or the server's API
           key, from OLLAMA_API_KEY), ANTHROPIC_API_KEY empty, CLAUDE_CODE_MAX_CONTEXT_TOKENS the model's context;
           `claude --model M ARGS...`
  codex    Codex CLI: its local-provider mode, `codex --oss --local-provider ollama -m M -c
           model_context_window=N ARGS...`, with CODEX_OSS_BASE_URL at the server's /v1 (any OLLAMA_HOST); with
           an OLLAMA_API_KEY, a provider of its own (-c model_providers.ollama-py=..., env_key OLLAMA_API_KEY)
           instead, since --oss sends no key
  opencode OpenCode: `opencode ARGS...` with OPENCODE_CONFIG_CONTENT holding a provider "ollama-py" at the
           server's /v1 (with OLLAMA_API_KEY as its apiKey), the model with its context as its limit, and it as
           the default model (the user's own config files are not touched; their OPENCODE_CONFIG_CONTENT is
           kept, with this added)
  copilot  GitHub's Copilot CLI: `copilot --model M ARGS...` with COPILOT_PROVIDER_BASE_URL at the server's /v1,
           COPILOT_PROVIDER_WIRE_API "responses", COPILOT_PROVIDER_API_KEY the server's key (or empty) and
           COPILOT_MODEL M: a provider of your own, no GitHub sign-in

The model is loaded first (its progress shown), and the agent is told the context the server runs it with, the
window it compacts its conversation by; a context under 64k tokens gets a note on how to raise it.

The model: --model, else the one last used with that integration (kept in the user config dir's launch.json),
else chosen from the server's models on a terminal. A model the server does not have is pulled, after a yes on
a terminal (or with --yes). The name is passed as the server lists it (`tiny` -> `tiny:latest`): Codex compares
it with /api/tags and pulls what it does not find there. The agent replaces this process (its exit status is
the command's); `--config` only saves the choice.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from ollama_py.cli.commands import HOST_HELP, connect, same_model
from ollama_py.cli.session import RunOptions, load_model
from ollama_py.cli.session import pull as pull_model
from ollama_py.client import Client
from ollama_py.errors import NotFound, OllamaError


@dataclass(frozen=True, slots=True)
class Target:
    """What an agent is pointed at: the server, the model as it lists it, the context the model runs with (when
    known), the key to send (OLLAMA_API_KEY, for a server started with OLLAMA_API_KEYS) and the environment."""

    url: str
    model: str
    context: int | None
    key: str
    environ: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class Integration:
    name: str
    title: str
    binary: str
    install: str
    setup: Callable[[Target, Sequence[str]], tuple[list[str], dict[str, str]]]  # -> its arguments, env to set
    home_path: str = ""  # where its own installer puts it, under HOME, when that is off PATH


def _claude(t: Target, extra: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    env = {"ANTHROPIC_BASE_URL": t.url, "ANTHROPIC_AUTH_TOKEN": t.key or "ollama", "ANTHROPIC_API_KEY": ""}
    if t.context and not t.environ.get("CLAUDE_CODE_MAX_CONTEXT_TOKENS"):
        # the window it compacts by: a model it does not know is otherwise taken to hold a million tokens
        env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] = str(t.context)
    return ["--model", t.model, *extra], env


def _codex(t: Target, extra: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """Its local-provider mode; with a key, a provider of its own at the server (--oss sends none)."""
    window = ["-c", f"model_context_window={t.context}"] if t.context else []  # the window it compacts by
    if not t.key:
        return ["--oss", "--local-provider", "ollama", "-m", t.model, *window, *extra], \
            {"CODEX_OSS_BASE_URL": f"{t.url}/v1"}
    provider = (f'{{name="ollama-py", base_url={json.dumps(t.url + "/v1")}, wire_api="responses", '
                'env_key="OLLAMA_API_KEY"}')
    return ["-c", 'model_provider="ollama-py"', "-c", f"model_providers.ollama-py={provider}", "-m", t.model,
            *window, *extra], {"OLLAMA_API_KEY": t.key}


def _opencode(t: Target, extra: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """OpenCode's inline config (OPENCODE_CONFIG_CONTENT, over the user's files, which stay untouched): a provider
    at the server's /v1 with the model and its limits (without them OpenCode never compacts a custom model's
    conversation), and the model as the default."""
    try:
        config = json.loads(t.environ.get("OPENCODE_CONFIG_CONTENT") or "{}")
    except ValueError:
        config = {}
    config = config if isinstance(config, dict) else {}
    entry: dict[str, object] = {"name": t.model}
    if t.context:
        entry["limit"] = {"context": t.context, "output": min(t.context // 4, 32768)}
    options = {"baseURL": f"{t.url}/v1", **({"apiKey": t.key} if t.key else {})}
    providers = config.get("provider")
    config["provider"] = {**(providers if isinstance(providers, dict) else {}), "ollama-py": {
        "npm": "@ai-sdk/openai-compatible", "name": "ollama-py", "options": options, "models": {t.model: entry}}}
    config["model"] = f"ollama-py/{t.model}"
    return list(extra), {"OPENCODE_CONFIG_CONTENT": json.dumps(config)}


def _copilot(t: Target, extra: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """GitHub's Copilot CLI with a provider of your own (its COPILOT_PROVIDER_* variables): the Responses API at the
    server's /v1, as `ollama launch copilot` sets it; no GitHub sign-in is needed then."""
    env = {"COPILOT_PROVIDER_BASE_URL": f"{t.url}/v1", "COPILOT_PROVIDER_API_KEY": t.key,
           "COPILOT_PROVIDER_WIRE_API": "responses", "COPILOT_MODEL": t.model}
    return ["--model", t.model, *extra], env


INTEGRATIONS = {
    "claude": Integration("claude", "Claude Code", "claude", "https://code.claude.com/docs/en/quickstart", _claude,
                          ".claude/local/claude"),
    "codex": Integration("codex", "Codex", "codex", "npm install -g @openai/codex", _codex),
    "opencode": Integration("opencode", "OpenCode", "opencode", "npm install -g opencode-ai", _opencode),
    "copilot": Integration("copilot", "Copilot CLI", "copilot", "npm install -g @github/copilot", _copilot,
                           ".local/bin/copilot"),
}
AGENT_CONTEXT = 64000  # tokens: less and an agent's own instructions and tools crowd out the work (Ollama's advice)


def find_binary(integration: Integration, environ: Mapping[str, str]) -> str | None:
    """The agent's executable: on PATH, else where its own installer puts it (Claude Code: ~/.claude/local, Copilot
    CLI: ~/.local/bin)."""
    found = shutil.which(integration.binary, path=environ.get("PATH"))
    if found:
        return found
    if integration.home_path:
        local = Path(environ.get("HOME") or Path.home()) / integration.home_path
        if local.is_file() and os.access(local, os.X_OK):
            return str(local)
    return None


def launch_command(integration: Integration, binary: str, target: Target,
                   extra: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """The argv and environment the agent runs with."""
    args, env = integration.setup(target, extra)
    return [binary, *args], {**target.environ, **env}


# -- the saved choice ----------------------------------------------------------------------------------------------

def saved_path() -> Path:
    """launch.json, beside the config file (the user config dir: ~/.config/ollama-py, or $XDG_CONFIG_HOME's)."""
    from ollama_py import config_file  # noqa: PLC0415 - platformdirs only when a command needs it

    return config_file.default_path().parent / "launch.json"


def read_saved(path: Path) -> dict[str, dict[str, str]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_model(path: Path, name: str, model: str) -> None:
    """Remember `model` for integration `name` (written atomically: a crash leaves the old file or the new)."""
    data = read_saved(path)
    data[name] = {"model": model}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".launch-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -- the command ---------------------------------------------------------------------------------------------------

def _interactive() -> bool:
    return sys.stdin.isatty() and sys.stdout.isatty()


def _choose(title: str, items: Sequence[tuple[str, str]]) -> str:
    """A numbered choice on the terminal; the item's key."""
    click.echo(title, err=True)
    for i, (_key, label) in enumerate(items, 1):
        click.echo(f"  {i}. {label}", err=True)
    n = click.prompt("Number", type=click.IntRange(1, len(items)), err=True)
    return items[n - 1][0]


def resolve_model(client: Client, model: str, *, yes: bool) -> str:
    """The model as the server lists it (pulled first when missing, after a yes). One that cannot chat is refused;
    one without tool calling gets a note (an agent works through its tools)."""
    try:
        info = client.show(model)
    except NotFound:
        if not yes:
            if not _interactive():
                raise OllamaError(f"model '{model}' not found: pull it first (ollama-py pull {model}) "
                                  "or pass --yes") from None
            if not click.confirm(f"Download {model}?", default=True, err=True):
                raise click.exceptions.Abort() from None
        pull_model(client, model)
        info = client.show(model)
    capabilities = info.get("capabilities")
    if isinstance(capabilities, list) and capabilities:  # (a server that does not say: no judgement)
        if "completion" not in capabilities:
            raise OllamaError(f"{model} cannot chat ({', '.join(capabilities)} only): pick another model")
        if "tools" not in capabilities:
            click.echo(f"Note: {model} does not call tools (its template has none): the agent can only talk with it",
                       err=True)
    listed = [m.get("model") or m.get("name", "") for m in client.list().get("models", [])]
    return next((name for name in listed if same_model(name, model)), model)


def pick_model(client: Client) -> str:
    models = [m.get("name", "") for m in client.list().get("models", [])]
    if not models:
        raise OllamaError("no models yet: pull one first (ollama-py pull MODEL)")
    return _choose("Select a model:", [(m, m) for m in models])


_AGENTS = ", ".join(f"{k} ({v.title})" for k, v in INTEGRATIONS.items())


@click.command(short_help=f"Launch a coding agent ({', '.join(v.title for v in INTEGRATIONS.values())}) on this "
               "server", epilog=HOST_HELP,
               help=f"Run a coding agent against this server, configured for it: {_AGENTS}. Arguments after `--` go "
               "to the agent, e.g. `ollama-py launch claude --model qwen3 -- -p \"explain this repo\"`.")
@click.argument("integration", required=False)
@click.argument("extra", nargs=-1, type=click.UNPROCESSED)
@click.option("--model", "model", metavar="MODEL", help="Model to use (remembered for the next launch)")
@click.option("--config", "config_only", is_flag=True, help="Choose and save the model without launching")
@click.option("-y", "--yes", is_flag=True, help="Pull a missing model without asking (needs --model or a saved one)")
def launch(integration: str | None, extra: tuple[str, ...], model: str | None, config_only: bool,
           yes: bool) -> None:
    """The agent's help is built from INTEGRATIONS (above), so it names every agent launch knows."""
    environ = dict(os.environ)
    if integration is None:
        if not _interactive():
            raise click.UsageError(f"which agent? ollama-py launch {'|'.join(INTEGRATIONS)}")
        integration = _choose("Select an agent:", [(k, f"{k}  {v.title}") for k, v in INTEGRATIONS.items()])
    chosen = INTEGRATIONS.get(integration.lower())
    if chosen is None:
        raise click.UsageError(f"unknown integration {integration!r}: one of {', '.join(INTEGRATIONS)}")
    binary = find_binary(chosen, environ)
    if binary is None and not config_only:
        raise OllamaError(f"{chosen.binary} is not installed: {chosen.install}")

    client = connect()
    path = saved_path()
    model = model or read_saved(path).get(chosen.name, {}).get("model")
    if not model:
        if yes or not _interactive():
            raise click.UsageError("no model: pass --model MODEL")
        model = pick_model(client)
    model = resolve_model(client, model, yes=yes)
    save_model(path, chosen.name, model)
    if config_only:
        click.echo(f"{chosen.title} will use {model}: run 'ollama-py launch {chosen.name}' to start it", err=True)
        return
    assert binary is not None
    # Loaded now (its progress shown), so the agent's first request does not wait, and it is told the context
    # the server runs the model with.
    context = load_model(client, RunOptions(model=model)).get("context_length")
    context = context if isinstance(context, int) and context > 0 else None
    if context is not None and context < AGENT_CONTEXT:
        click.echo(f"Note: {model} runs with a {context}-token context; coding agents need {AGENT_CONTEXT} or "
                   "more (start serve with OLLAMA_CONTEXT_LENGTH=65536, or give the model a num_ctx)", err=True)
    target = Target(client.base_url, model, context, environ.get("OLLAMA_API_KEY", ""), environ)
    argv, env = launch_command(chosen, binary, target, extra)
    click.echo(f"Launching {chosen.title} with {model}...", err=True)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(argv[0], argv, env)  # the agent takes this process over: its exit status is ours
