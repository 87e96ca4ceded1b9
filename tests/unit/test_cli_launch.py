"""`ollama-py launch` (cli/launch.py) against the fake server, up to the point where the agent would take the
process over: what it is told (argv, environment), what is saved, and the errors a user can meet. The agents
themselves run in tests/integration/test_agents_cli.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pexpect
import pytest
from click.testing import CliRunner, Result

from ollama_py.cli.launch import INTEGRATIONS, Target, find_binary, launch_command
from ollama_py.cli.main import cli
from tests.helpers.fake_ollama import FakeOllama

TAGS = {"models": [{"name": "qwen3:latest", "model": "qwen3:latest"}, {"name": "tiny:latest", "model": "tiny:latest"}]}


def until_pulled(fake: FakeOllama) -> Any:
    """/api/show's answer: the model is not found until a pull of it has been asked for."""
    return lambda body: {"capabilities": ["completion", "tools"]} if fake.bodies("POST", "/api/pull") else (
        404, {"error": f"model '{body['model']}' not found"})


def invoke(fake: FakeOllama, args: list[str], tmp_path: Path, **env: str) -> Result:
    base = {"OLLAMA_HOST": fake.host, "OLLAMA_PY_DATA_DIR": str(tmp_path / "data"),
            "XDG_CONFIG_HOME": str(tmp_path / "config"), "PATH": str(tmp_path / "bin")}
    return CliRunner().invoke(cli, ["launch", *args], env={**base, **env}, catch_exceptions=False)


def saved(tmp_path: Path) -> Any:
    return json.loads((tmp_path / "config" / "ollama-py" / "launch.json").read_text())


def command(name: str, model: str, context: int | None, extra: list[str], url: str = "http://127.0.0.1:11434",
            key: str = "", **environ: str) -> tuple[list[str], dict[str, str]]:
    return launch_command(INTEGRATIONS[name], f"/bin/{name}", Target(url, model, context, key, environ), extra)


def test_claude_is_pointed_at_the_server_and_told_the_models_context() -> None:
    argv, env = command("claude", "qwen3:latest", 65536, ["-p", "hi"], PATH="/bin", ANTHROPIC_API_KEY="sk-real")
    assert argv == ["/bin/claude", "--model", "qwen3:latest", "-p", "hi"]
    assert {k: env[k] for k in ("ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_API_KEY",
                                "CLAUDE_CODE_MAX_CONTEXT_TOKENS", "PATH")} == {
        "ANTHROPIC_BASE_URL": "http://127.0.0.1:11434", "ANTHROPIC_AUTH_TOKEN": "ollama", "ANTHROPIC_API_KEY": "",
        "CLAUDE_CODE_MAX_CONTEXT_TOKENS": "65536", "PATH": "/bin"}
    # a server that wants a key gets OLLAMA_API_KEY's; a window the user set stays theirs
    _, env = command("claude", "m", 8192, [], key="k1", CLAUDE_CODE_MAX_CONTEXT_TOKENS="1000")
    assert (env["ANTHROPIC_AUTH_TOKEN"], env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"]) == ("k1", "1000")


def test_codex_runs_its_local_provider_mode_at_the_servers_v1() -> None:
    argv, env = command("codex", "qwen3:latest", 32768, ["exec", "hi"], url="http://10.0.0.5:8080")
    assert argv == ["/bin/codex", "--oss", "--local-provider", "ollama", "-m", "qwen3:latest",
                    "-c", "model_context_window=32768", "exec", "hi"]
    assert env == {"CODEX_OSS_BASE_URL": "http://10.0.0.5:8080/v1"}


def test_codex_with_a_key_gets_a_provider_that_sends_it() -> None:
    argv, env = command("codex", "qwen3:latest", None, ["exec", "hi"], key="k1")
    assert argv == ["/bin/codex", "-c", 'model_provider="ollama-py"', "-c",
                    'model_providers.ollama-py={name="ollama-py", base_url="http://127.0.0.1:11434/v1", '
                    'wire_api="responses", env_key="OLLAMA_API_KEY"}', "-m", "qwen3:latest", "exec", "hi"]
    assert env == {"OLLAMA_API_KEY": "k1"}


def test_opencode_gets_a_provider_at_the_server_in_its_inline_config_beside_the_users() -> None:
    mine = {"provider": {"other": {"npm": "x"}}, "theme": "dark"}
    argv, env = command("opencode", "qwen3:latest", 65536, ["run", "hi"], key="k1",
                        OPENCODE_CONFIG_CONTENT=json.dumps(mine))
    assert argv == ["/bin/opencode", "run", "hi"]
    assert json.loads(env["OPENCODE_CONFIG_CONTENT"]) == {
        "theme": "dark", "model": "ollama-py/qwen3:latest",
        "provider": {"other": {"npm": "x"}, "ollama-py": {
            "npm": "@ai-sdk/openai-compatible", "name": "ollama-py",
            "options": {"baseURL": "http://127.0.0.1:11434/v1", "apiKey": "k1"},
            "models": {"qwen3:latest": {"name": "qwen3:latest", "limit": {"context": 65536, "output": 16384}}}}}}


def test_copilot_gets_a_provider_of_its_own_at_the_servers_v1() -> None:
    """As `ollama launch copilot`: COPILOT_PROVIDER_* (the Responses API), so no GitHub sign-in is needed."""
    argv, env = command("copilot", "qwen3:latest", 65536, ["-p", "hi"], url="http://10.0.0.5:8080", key="k1")
    assert argv == ["/bin/copilot", "--model", "qwen3:latest", "-p", "hi"]
    assert env == {"COPILOT_PROVIDER_BASE_URL": "http://10.0.0.5:8080/v1", "COPILOT_PROVIDER_API_KEY": "k1",
                   "COPILOT_PROVIDER_WIRE_API": "responses", "COPILOT_MODEL": "qwen3:latest"}


@pytest.mark.parametrize(("name", "where"), [("claude", ".claude/local/claude"), ("copilot", ".local/bin/copilot")])
def test_an_agent_off_path_is_found_where_its_installer_puts_it(tmp_path: Path, name: str, where: str) -> None:
    local = tmp_path / "home" / where
    local.parent.mkdir(parents=True)
    local.write_text("#!/bin/sh\n")
    local.chmod(0o755)
    environ = {"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path / "home")}
    assert find_binary(INTEGRATIONS[name], environ) == str(local)
    assert find_binary(INTEGRATIONS["codex"], environ) is None


def test_config_saves_the_model_as_the_server_lists_it_without_launching(fake: FakeOllama, tmp_path: Path) -> None:
    fake.on("POST", "/api/show", {"details": {}})
    fake.on("GET", "/api/tags", TAGS)
    result = invoke(fake, ["codex", "--model", "tiny", "--config"], tmp_path)
    assert result.exit_code == 0, result.output
    assert "Codex will use tiny:latest: run 'ollama-py launch codex' to start it" in result.stderr
    assert saved(tmp_path) == {"codex": {"model": "tiny:latest"}}
    assert not fake.bodies("POST", "/api/load")  # nothing loaded for a --config


def test_a_missing_agent_is_named_with_how_to_install_it(fake: FakeOllama, tmp_path: Path) -> None:
    result = invoke(fake, ["codex", "--model", "tiny"], tmp_path)
    assert result.exit_code == 1
    assert result.stderr == "Error: codex is not installed: npm install -g @openai/codex\n"


@pytest.mark.parametrize(("args", "message"), [
    pytest.param(["droid"], "unknown integration 'droid': one of claude, codex, opencode, copilot",
                 id="unknown-agent"),
    pytest.param([], "which agent? ollama-py launch claude|codex|opencode|copilot", id="no-agent-off-a-terminal"),
    pytest.param(["claude", "--config"], "no model: pass --model MODEL", id="no-model-off-a-terminal"),
])
def test_what_cannot_be_asked_off_a_terminal_is_a_clear_error(fake: FakeOllama, tmp_path: Path, args: list[str],
                                                              message: str) -> None:
    fake.on("GET", "/api/tags", TAGS)
    result = invoke(fake, args, tmp_path)
    assert result.exit_code == 1 and result.stderr == f"Error: {message}\n"


def test_a_missing_model_is_pulled_only_when_allowed(fake: FakeOllama, tmp_path: Path) -> None:
    fake.on("POST", "/api/show", until_pulled(fake))
    fake.on("GET", "/api/tags", TAGS)
    refused = invoke(fake, ["claude", "--model", "qwen3", "--config"], tmp_path)
    assert refused.exit_code == 1
    assert refused.stderr == ("Error: model 'qwen3' not found: pull it first (ollama-py pull qwen3) "
                              "or pass --yes\n")
    assert not fake.bodies("POST", "/api/pull")
    fake.on("POST", "/api/pull", [{"status": "pulling manifest"}, {"status": "success"}])
    pulled = invoke(fake, ["claude", "--model", "qwen3", "--config", "--yes"], tmp_path)
    assert pulled.exit_code == 0, pulled.output
    assert [b["model"] for b in fake.bodies("POST", "/api/pull")] == ["qwen3"]
    assert saved(tmp_path) == {"claude": {"model": "qwen3:latest"}}


def spawn_launch(fake: FakeOllama, tmp_path: Path, *args: str) -> pexpect.spawn:
    """`ollama-py launch ARGS` on a terminal (a pty), so it may ask."""
    env = {"OLLAMA_HOST": fake.host, "OLLAMA_PY_DATA_DIR": str(tmp_path / "data"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"), "PATH": str(tmp_path / "bin"), "TERM": "dumb"}
    return pexpect.spawn(sys.executable, ["-m", "ollama_py", "launch", *args], env=env, encoding="utf-8",
                         timeout=30, dimensions=(40, 200))


def test_on_a_terminal_the_agent_and_the_model_are_chosen_from_lists(fake: FakeOllama, tmp_path: Path) -> None:
    fake.on("POST", "/api/show", {"details": {}})
    fake.on("GET", "/api/tags", TAGS)
    child = spawn_launch(fake, tmp_path, "--config")
    child.expect_exact("Select an agent:")
    child.expect_exact("2. codex  Codex")
    child.sendline("2")
    child.expect_exact("Select a model:")
    child.expect_exact("2. tiny:latest")
    child.sendline("2")
    child.expect_exact("Codex will use tiny:latest")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert saved(tmp_path) == {"codex": {"model": "tiny:latest"}}


def test_on_a_terminal_a_missing_model_is_pulled_once_the_user_says_yes(fake: FakeOllama, tmp_path: Path) -> None:
    fake.on("POST", "/api/show", until_pulled(fake))
    fake.on("GET", "/api/tags", TAGS)
    fake.on("POST", "/api/pull", [{"status": "pulling manifest"}, {"status": "success"}])
    child = spawn_launch(fake, tmp_path, "claude", "--model", "qwen3", "--config")
    child.expect_exact("Download qwen3? [Y/n]")
    child.sendline("n")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus != 0 and not fake.bodies("POST", "/api/pull")
    child = spawn_launch(fake, tmp_path, "claude", "--model", "qwen3", "--config")
    child.expect_exact("Download qwen3? [Y/n]")
    child.sendline("y")
    child.expect_exact("Claude Code will use qwen3:latest")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0 and [b["model"] for b in fake.bodies("POST", "/api/pull")] == ["qwen3"]


def test_a_model_that_cannot_chat_is_refused_and_one_without_tools_gets_a_note(fake: FakeOllama,
                                                                              tmp_path: Path) -> None:
    fake.on("GET", "/api/tags", TAGS)
    fake.on("POST", "/api/show", {"capabilities": ["embedding"]})
    refused = invoke(fake, ["claude", "--model", "tiny", "--config"], tmp_path)
    assert refused.exit_code == 1
    assert refused.stderr == "Error: tiny cannot chat (embedding only): pick another model\n"
    fake.on("POST", "/api/show", {"capabilities": ["completion"]})
    noted = invoke(fake, ["claude", "--model", "tiny", "--config"], tmp_path)
    assert noted.exit_code == 0
    assert "Note: tiny does not call tools (its template has none): the agent can only talk with it" in noted.stderr
    fake.on("POST", "/api/show", {"capabilities": ["completion", "tools"]})
    assert "Note" not in invoke(fake, ["claude", "--model", "tiny", "--config"], tmp_path).stderr


def test_help_names_every_agent_launch_knows() -> None:
    top = CliRunner().invoke(cli, ["--help"], terminal_width=200).output
    own = CliRunner().invoke(cli, ["launch", "--help"], terminal_width=200).output
    line = next(row for row in top.splitlines() if row.strip().startswith("launch"))
    for name, integration in INTEGRATIONS.items():
        assert integration.title in line
        assert f"{name} ({integration.title})" in own
