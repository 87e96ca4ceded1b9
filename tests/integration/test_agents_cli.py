"""The real coding agents against `serve` (issue 37): Claude Code (`claude -p`, Anthropic's /v1/messages),
OpenAI's Codex CLI (`codex exec` with a provider on /v1, wire_api "responses", and `codex exec --oss`, which asks
/api/version, /api/tags and then /v1/responses) and GitHub's Copilot CLI (`copilot -p` with a provider of its own:
the Responses API on /v1, no GitHub sign-in), and all of them with OpenCode through `ollama-py launch`, each
installed from npm at a pinned version by scripts/fetch_agents.sh. The model is the fake llama-server scripted to
answer: a plain turn, and a tool round trip (the model calls the agent's own file-reading tool, the agent runs it
and sends the result back, the model answers from it). Telemetry, auto-update and analytics off; each agent gets
a HOME of its own.

Skipped only where npm or its registry is not reachable (fetch_agents.sh exits 2 then).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.npm import copilot_binary, node_modules
from tests.helpers.processes import start_fake_serve
from tests.helpers.serve import stop_serve

# A GGUF chat template that mentions tools gives the model the "tools" capability.
TOOLS_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if tools %}{{ tools }}{% endif %}"
HELLO = "Hello from ollama-py."
SECRET = "ZEBRA-7731"  # what note.txt holds: in a prompt only once the agent's tool has read the file
ANSWER = f"The note says {SECRET}."
AGENT_SECONDS = 240  # a guard against a hung agent, not a timing assertion


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.fixture(scope="module")
def agents_bin() -> Path:
    """node_modules/.bin holding `claude`, `codex` and `opencode`, installed by scripts/fetch_agents.sh (once,
    cached)."""
    return node_modules() / ".bin"


@pytest.fixture(scope="module")
def tools_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tiny.gguf", chat_template=TOOLS_TEMPLATE, ctx=32768)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The agent's project directory, with the note its tool reads."""
    work = tmp_path / "project"
    work.mkdir()
    (work / "note.txt").write_text(SECRET + "\n")
    return work


@pytest.fixture
def serve(tmp_path: Path, tools_gguf: Path) -> Iterator[Callable[..., str]]:
    """Start `serve` over the fake runner with the tiny model as "tiny", the model saying `reply` -- or, once
    SECRET is in its prompt, ANSWER (`when`: other [text in the prompt, reply] pairs); gives its URL. The
    prompts the runner got are in tmp/runner_requests.jsonl."""
    procs = []

    def start(reply: str, when: list[list[str]] | None = None, **serve_env: str) -> str:
        env = {**serve_env, "OLLAMA_CONTEXT_LENGTH": "32768", "FAKE_REPLY": reply,
               "FAKE_REPLY_WHEN": json.dumps(when or [[SECRET, ANSWER]]),
               "FAKE_LOG_FILE": str(tmp_path / "runner_requests.jsonl")}
        proc, url = start_fake_serve(tmp_path / "serve", tools_gguf, env)
        procs.append(proc)
        return url

    (tmp_path / "serve").mkdir()
    yield start
    for proc in procs:
        stop_serve(proc)


def runner_prompts(tmp_path: Path) -> list[str]:
    """The prompt of each generation request the runner got, in order."""
    lines = (tmp_path / "runner_requests.jsonl").read_text().splitlines()
    return [json.dumps(body["prompt"]) for body in map(json.loads, lines) if "prompt" in body]


def agent_env(tmp_path: Path, agents_bin: Path, **extra: str) -> dict[str, str]:
    """A clean environment: a HOME of its own, no inherited API keys or endpoints, nothing phoned home."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    ours = ("ANTHROPIC_", "OPENAI_", "CODEX_", "CLAUDE_", "OLLAMA_", "COPILOT_", "GH_", "GITHUB_")
    keep = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    return {**keep, "HOME": str(home), "PATH": f"{agents_bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "DISABLE_TELEMETRY": "1", "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", **extra}


def run_agent(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=AGENT_SECONDS)
    assert done.returncode == 0, f"{argv[0]} exited {done.returncode}\nstdout: {done.stdout}\nstderr: {done.stderr}"
    return done


# -- Claude Code ---------------------------------------------------------------------------------------------------

def claude(url: str, tmp_path: Path, agents_bin: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`claude -p` as Ollama documents it: ANTHROPIC_BASE_URL at the server, a token it does not check."""
    env = agent_env(tmp_path, agents_bin, ANTHROPIC_BASE_URL=url, ANTHROPIC_AUTH_TOKEN="ollama", ANTHROPIC_API_KEY="")
    return run_agent([str(agents_bin / "claude"), "--model", "tiny", "-p", *args], workdir, env)


def test_claude_code_answers_one_turn(serve: Callable[..., str], tmp_path: Path, agents_bin: Path,
                                      workdir: Path) -> None:
    done = claude(serve(HELLO), tmp_path, agents_bin, workdir, "say hi")
    assert done.stdout.strip() == HELLO


def test_claude_code_tool_round_trip(serve: Callable[..., str], tmp_path: Path, agents_bin: Path,
                                     workdir: Path) -> None:
    url = serve(tool_call("Read", {"file_path": str(workdir / "note.txt")}))
    done = claude(url, tmp_path, agents_bin, workdir, "What does note.txt say?",
                  "--output-format", "stream-json", "--verbose", "--include-partial-messages")
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    uses = [b for e in events if e["type"] == "assistant" for b in e["message"]["content"] if b["type"] == "tool_use"]
    assert [(u["name"], u["input"]) for u in uses] == [("Read", {"file_path": str(workdir / "note.txt")})]
    results = [b for e in events if e["type"] == "user" for b in e["message"]["content"]
               if isinstance(b, dict) and b.get("type") == "tool_result"]
    assert [r["tool_use_id"] for r in results] == [uses[0]["id"]] and SECRET in json.dumps(results[0]["content"])
    # streamed: the answer reached Claude Code as text deltas, and it is the turn's result
    deltas = [e["event"]["delta"].get("text", "") for e in events
              if e["type"] == "stream_event" and e["event"]["type"] == "content_block_delta"]
    assert "".join(deltas) == ANSWER
    assert events[-1]["type"] == "result" and events[-1]["result"] == ANSWER and not events[-1]["is_error"]
    prompts = runner_prompts(tmp_path)
    assert SECRET not in prompts[0] and SECRET in prompts[-1]  # the tool's result went back to the model


# -- Codex CLI -----------------------------------------------------------------------------------------------------

CODEX_QUIET = 'check_for_update_on_startup = false\n\n[analytics]\nenabled = false\n'


def codex(tmp_path: Path, agents_bin: Path, workdir: Path, config: str, *args: str,
          **env: str) -> subprocess.CompletedProcess[str]:
    """`codex exec` with CODEX_HOME's config.toml = `config`. Its sandbox is off: the one command it runs is the
    test's own script, and bubblewrap's needs are Codex's business, not the server's."""
    home = tmp_path / "codex_home"
    home.mkdir(exist_ok=True)
    (home / "config.toml").write_text(config)
    return run_agent([str(agents_bin / "codex"), "exec", "--skip-git-repo-check", "--sandbox", "danger-full-access",
                      *args], workdir, agent_env(tmp_path, agents_bin, CODEX_HOME=str(home), **env))


def provider_config(url: str) -> str:
    """A custom provider on /v1 speaking the Responses API, as Ollama's docs configure Codex."""
    return (f'model = "tiny"\nmodel_provider = "ollama-py"\n{CODEX_QUIET}\n'
            f'[model_providers.ollama-py]\nname = "ollama-py"\nbase_url = "{url}/v1"\nwire_api = "responses"\n')


def codex_items(stdout: str) -> list[dict[str, Any]]:
    """The items of `codex exec --json`'s event lines, as they completed."""
    events = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert events[-1]["type"] == "turn.completed", events[-1]
    return [e["item"] for e in events if e["type"] == "item.completed"]


def test_codex_answers_one_turn(serve: Callable[..., str], tmp_path: Path, agents_bin: Path, workdir: Path) -> None:
    done = codex(tmp_path, agents_bin, workdir, provider_config(serve(HELLO)), "say hi")
    assert done.stdout.strip() == HELLO


def test_codex_tool_round_trip(serve: Callable[..., str], tmp_path: Path, agents_bin: Path, workdir: Path) -> None:
    url = serve(tool_call("exec_command", {"cmd": "cat note.txt"}))
    done = codex(tmp_path, agents_bin, workdir, provider_config(url), "--json", "What does note.txt say?")
    items = codex_items(done.stdout)
    [command] = [i for i in items if i["type"] == "command_execution"]
    assert "cat note.txt" in command["command"] and command["exit_code"] == 0
    assert command["aggregated_output"] == SECRET + "\n"
    assert [i["text"] for i in items if i["type"] == "agent_message"] == [ANSWER]
    prompts = runner_prompts(tmp_path)
    assert SECRET not in prompts[0] and SECRET in prompts[-1]  # the command's output went back to the model


def test_codex_edits_a_file_with_its_freeform_apply_patch(serve: Callable[..., str], tmp_path: Path,
                                                          agents_bin: Path, workdir: Path) -> None:
    """A model Codex knows by name (a local model copied to "gpt-5.5") is offered apply_patch as a `custom` tool
    with a Lark grammar: the model's call reaches Codex as a custom_tool_call whose input is the patch, Codex
    applies it, and the next request carries the call and its output back as custom_tool_call items."""
    url = serve(tool_call("apply_patch", {"input": "*** Begin Patch\n*** Add File: hello.txt\n+hi there\n"
                                                   "*** End Patch\n"}), when=[["Success", "Patched."]])
    requests.post(f"{url}/api/copy", json={"source": "tiny", "destination": "gpt-5.5"}, timeout=30).raise_for_status()
    done = codex(tmp_path, agents_bin, workdir, provider_config(url).replace('"tiny"', '"gpt-5.5"', 1), "--json",
                 "Add hello.txt")
    items = codex_items(done.stdout)
    [change] = [i for i in items if i["type"] == "file_change"]
    assert change["status"] == "completed" and change["changes"] == [{"path": str(workdir / "hello.txt"),
                                                                      "kind": "add"}]
    assert (workdir / "hello.txt").read_text() == "hi there\n"
    assert [i["text"] for i in items if i["type"] == "agent_message"] == ["Patched."]
    assert "Success" in runner_prompts(tmp_path)[-1]  # apply_patch's report went back to the model


def test_codex_runs_the_tool_search_the_model_asks_for(serve: Callable[..., str], tmp_path: Path,
                                                      agents_bin: Path, workdir: Path) -> None:
    """For a model it knows ("gpt-5.5") Codex holds some tools back and offers a client-run `tool_search`: the
    model's search reaches Codex as a tool_search_call, Codex runs it, and the tools it loaded come back in a
    tool_search_output -- offered from then on, and named to the model."""
    url = serve(tool_call("tool_search", {"query": "spawn an agent"}), when=[["Tools loaded", "Found them."]])
    requests.post(f"{url}/api/copy", json={"source": "tiny", "destination": "gpt-5.5"}, timeout=30).raise_for_status()
    done = codex(tmp_path, agents_bin, workdir, provider_config(url).replace('"tiny"', '"gpt-5.5"', 1), "--json",
                 "Start a helper agent")
    assert [i["text"] for i in codex_items(done.stdout) if i["type"] == "agent_message"] == ["Found them."]
    prompts = runner_prompts(tmp_path)
    assert "Tools loaded" not in prompts[0]
    assert "Tools loaded: " in prompts[-1] and "spawn_agent" in prompts[-1].split("Tools loaded: ")[1]


def test_codex_runs_a_command_from_its_code_mode_exec(serve: Callable[..., str], tmp_path: Path,
                                                     agents_bin: Path, workdir: Path) -> None:
    """For its newest models ("gpt-5.6-sol" here, a local model copied to that name) Codex declares its tools in an
    `additional_tools` input item: a `functions` namespace whose custom `exec` tool takes JavaScript that calls
    the other tools. The model's exec call reaches Codex as a custom_tool_call in that namespace, Codex runs the
    command the script asks for, and its output goes back to the model."""
    script = "const r = await tools.exec_command({cmd: 'cat note.txt'}); text(r);"
    url = serve(tool_call("functions.exec", {"input": script}))
    requests.post(f"{url}/api/copy", json={"source": "tiny", "destination": "gpt-5.6-sol"},
                  timeout=30).raise_for_status()
    done = codex(tmp_path, agents_bin, workdir, provider_config(url).replace('"tiny"', '"gpt-5.6-sol"', 1),
                 "--json", "What does note.txt say?")
    items = codex_items(done.stdout)
    [command] = [i for i in items if i["type"] == "command_execution"]
    assert "cat note.txt" in command["command"] and command["aggregated_output"] == SECRET + "\n"
    assert [i["text"] for i in items if i["type"] == "agent_message"] == [ANSWER]
    prompts = runner_prompts(tmp_path)
    assert SECRET not in prompts[0] and SECRET in prompts[-1]


def test_codex_oss_answers_one_turn(serve: Callable[..., str], tmp_path: Path, agents_bin: Path,
                                    workdir: Path) -> None:
    """`codex --oss` asks /api/version (it refuses an Ollama older than 0.13.4), looks for the model in /api/tags
    (by exact name: "tiny:latest"), then talks to /v1/responses."""
    url = serve(HELLO)
    done = codex(tmp_path, agents_bin, workdir, f'oss_provider = "ollama"\n{CODEX_QUIET}', "--oss",
                 "-m", "tiny:latest", "say hi", CODEX_OSS_BASE_URL=f"{url}/v1")
    assert done.stdout.strip() == HELLO


# -- GitHub Copilot CLI ----------------------------------------------------------------------------------------------

COPILOT_QUIET = ["-s", "--disable-client-telemetry", "--allow-all-tools"]  # the answer alone; tools run unasked


def copilot_path_dir(tmp_path: Path, agents_bin: Path) -> Path:
    """A directory with `copilot` (its native binary: the npm launcher wants node >= 20), for PATH."""
    shim = tmp_path / "copilot-bin"
    shim.mkdir(exist_ok=True)
    if not (shim / "copilot").exists():
        (shim / "copilot").symlink_to(copilot_binary(agents_bin.parent))
    return shim


def copilot(url: str, tmp_path: Path, agents_bin: Path, workdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`copilot -p` as `ollama launch copilot` sets it up: COPILOT_PROVIDER_BASE_URL at the server's /v1, the
    Responses API, an empty key."""
    env = agent_env(tmp_path, agents_bin, COPILOT_PROVIDER_BASE_URL=f"{url}/v1", COPILOT_PROVIDER_API_KEY="",
                    COPILOT_PROVIDER_WIRE_API="responses")
    return run_agent([str(copilot_path_dir(tmp_path, agents_bin) / "copilot"), "--model", "tiny", *COPILOT_QUIET,
                      "-p", *args], workdir, env)


def test_copilot_answers_one_turn(serve: Callable[..., str], tmp_path: Path, agents_bin: Path,
                                  workdir: Path) -> None:
    done = copilot(serve(HELLO), tmp_path, agents_bin, workdir, "say hi")
    assert done.stdout.strip() == HELLO


def test_copilot_tool_round_trip(serve: Callable[..., str], tmp_path: Path, agents_bin: Path, workdir: Path) -> None:
    """The model calls Copilot's `view` tool on the note; Copilot reads it and sends it back; the model answers."""
    url = serve(tool_call("view", {"path": "note.txt"}))
    done = copilot(url, tmp_path, agents_bin, workdir, "What does note.txt say?")
    assert done.stdout.strip() == ANSWER
    prompts = runner_prompts(tmp_path)
    assert SECRET not in prompts[0] and SECRET in prompts[-1]  # the file's text went back to the model


# -- ollama-py launch ------------------------------------------------------------------------------------------------

def test_launch_runs_each_agent_configured_for_the_server(serve: Callable[..., str], tmp_path: Path,
                                                          agents_bin: Path, workdir: Path) -> None:
    """`ollama-py launch claude|codex` as `ollama launch` works: nothing to configure, the model loaded and named as
    the server lists it, remembered for the next launch, arguments after `--` passed on."""
    url = serve(HELLO)
    home = tmp_path / "codex_home"
    home.mkdir()
    (home / "config.toml").write_text(CODEX_QUIET)
    env = agent_env(tmp_path, agents_bin, OLLAMA_HOST=url, XDG_CONFIG_HOME=str(tmp_path / "config"),
                    CODEX_HOME=str(home))
    launch = [sys.executable, "-m", "ollama_py", "launch"]

    claude = run_agent([*launch, "claude", "--model", "tiny", "--", "-p", "say hi"], workdir, env)
    assert claude.stdout.strip() == HELLO
    assert "Launching Claude Code with tiny:latest..." in claude.stderr
    assert "runs with a 32768-token context" in claude.stderr  # under the 64k an agent wants: said how to raise

    codex = run_agent([*launch, "codex", "--model", "tiny", "--", "exec", "--skip-git-repo-check", "--sandbox",
                       "danger-full-access", "say hi"], workdir, env)
    assert codex.stdout.strip() == HELLO
    again = run_agent([*launch, "claude", "--", "-p", "say hi"], workdir, env)  # the model it used last time
    assert again.stdout.strip() == HELLO and "with tiny:latest" in again.stderr

    opencode = run_agent([*launch, "opencode", "--model", "tiny", "--", "run", "say hi"], workdir,
                         {**env, "OPENCODE_DISABLE_AUTOUPDATE": "1"})
    assert HELLO in opencode.stdout
    # its model entry's limits came from the context the server runs the model with: its answers may be 1/4 of it
    assert json.loads((tmp_path / "runner_requests.jsonl").read_text().splitlines()[-1])["n_predict"] == 8192

    on_path = {**env, "PATH": f"{copilot_path_dir(tmp_path, agents_bin)}{os.pathsep}{env['PATH']}"}
    copilot = run_agent([*launch, "copilot", "--model", "tiny", "--", *COPILOT_QUIET, "-p", "say hi"], workdir,
                        on_path)
    assert copilot.stdout.strip() == HELLO
    assert "Launching Copilot CLI with tiny:latest..." in copilot.stderr
    saved = json.loads((tmp_path / "config" / "ollama-py" / "launch.json").read_text())
    assert saved == {"claude": {"model": "tiny:latest"}, "codex": {"model": "tiny:latest"},
                     "opencode": {"model": "tiny:latest"}, "copilot": {"model": "tiny:latest"}}


def test_launch_sends_the_key_a_server_asks_for(serve: Callable[..., str], tmp_path: Path, agents_bin: Path,
                                                workdir: Path) -> None:
    """A server started with OLLAMA_API_KEYS: `launch` itself and each agent it starts send OLLAMA_API_KEY (Codex
    through a provider of its own: its --oss mode sends no key)."""
    url = serve(HELLO, OLLAMA_API_KEYS="sekrit-1")
    home = tmp_path / "codex_home"
    home.mkdir()
    (home / "config.toml").write_text(CODEX_QUIET)
    env = agent_env(tmp_path, agents_bin, OLLAMA_HOST=url, XDG_CONFIG_HOME=str(tmp_path / "config"),
                    CODEX_HOME=str(home), OLLAMA_API_KEY="sekrit-1", OPENCODE_DISABLE_AUTOUPDATE="1")
    launch = [sys.executable, "-m", "ollama_py", "launch"]
    env["PATH"] = f"{copilot_path_dir(tmp_path, agents_bin)}{os.pathsep}{env['PATH']}"
    for agent, args in (("claude", ["-p", "say hi"]), ("opencode", ["run", "say hi"]),
                        ("codex", ["exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", "say hi"]),
                        ("copilot", [*COPILOT_QUIET, "-p", "say hi"])):
        done = run_agent([*launch, agent, "--model", "tiny", "--", *args], workdir, env)
        assert HELLO in done.stdout, (agent, done.stdout, done.stderr)
    refused = subprocess.run([*launch, "claude", "--model", "tiny"], cwd=workdir, capture_output=True, text=True,
                             env={**env, "OLLAMA_API_KEY": ""}, timeout=AGENT_SECONDS)
    assert refused.returncode == 1 and "set OLLAMA_API_KEY" in refused.stderr
