#!/usr/bin/env bash
# Install the coding agents the integration tests drive (tests/integration/test_agents_cli.py) from npm into the
# cache, once: Claude Code, OpenAI's Codex CLI, OpenCode and GitHub's Copilot CLI, at pinned versions, and the
# ollama-js library (the
# `ollama` package, tests/integration/test_ollama_js.py). Prints nothing when they are already there.
#
# Usage: scripts/fetch_agents.sh            -> $OLLAMA_PY_CACHE/agents (default ~/.cache/ollama-py/agents)
#        then $DIR/node_modules/.bin/claude, .../codex and .../opencode, Copilot CLI's binary in
#        $DIR/node_modules/@github/copilot-linux-<arch>/copilot, and $DIR/node_modules/ollama
# Exit status: 0 installed; 2 npm or its registry is not reachable (the message says which; the tests skip then);
# anything else a real failure.
set -euo pipefail
CLAUDE_CODE_VERSION=2.1.332
CODEX_VERSION=0.171.0
OPENCODE_VERSION=1.18.33
COPILOT_VERSION=1.0.102
OLLAMA_JS_VERSION=0.6.4
DIR="${OLLAMA_PY_CACHE:-$HOME/.cache/ollama-py}/agents"

installed() {  # the version of an installed package, or nothing
  local pkg="$DIR/node_modules/$1/package.json"
  [ -f "$pkg" ] && sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$pkg" | head -1
}
copilot_bin() {  # Copilot CLI's own binary: its npm launcher needs node >= 20 (import.meta.resolve), Debian 12 has 18
  ls "$DIR"/node_modules/@github/copilot-linux*-*/copilot 2>/dev/null | head -1
}
works() {  # the CLIs start and say their version
  "$DIR/node_modules/.bin/claude" --version >/dev/null 2>&1 && "$DIR/node_modules/.bin/codex" --version >/dev/null 2>&1 \
    && "$DIR/node_modules/.bin/opencode" --version >/dev/null 2>&1 && "$(copilot_bin)" --version >/dev/null 2>&1
}

if [ "$(installed @anthropic-ai/claude-code)" = "$CLAUDE_CODE_VERSION" ] \
   && [ "$(installed @openai/codex)" = "$CODEX_VERSION" ] && [ "$(installed opencode-ai)" = "$OPENCODE_VERSION" ] \
   && [ "$(installed @github/copilot)" = "$COPILOT_VERSION" ] \
   && [ "$(installed ollama)" = "$OLLAMA_JS_VERSION" ] && DISABLE_AUTOUPDATER=1 works; then
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "fetch_agents: npm is not installed (scripts/setup_system.sh test installs it): coding-agent tests skip" >&2
  exit 2
fi
if ! npm view --silent "@openai/codex@$CODEX_VERSION" version >/dev/null 2>&1; then
  echo "fetch_agents: the npm registry ($(npm config get registry)) is not reachable: coding-agent tests skip" >&2
  exit 2
fi
echo "==> installing Claude Code $CLAUDE_CODE_VERSION, Codex CLI $CODEX_VERSION, OpenCode $OPENCODE_VERSION," \
  "Copilot CLI $COPILOT_VERSION and ollama-js $OLLAMA_JS_VERSION from npm into $DIR" >&2
mkdir -p "$DIR"
# Claude Code's package asks for node >= 22 but runs a native binary (its postinstall, plain node, puts it in
# place); Debian 12's node 18 installs it with an engine warning, which we silence.
npm install --prefix "$DIR" --save-exact --no-audit --no-fund --loglevel=error \
  "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" "@openai/codex@$CODEX_VERSION" "opencode-ai@$OPENCODE_VERSION" \
  "@github/copilot@$COPILOT_VERSION" "ollama@$OLLAMA_JS_VERSION" >&2
if ! DISABLE_AUTOUPDATER=1 works; then
  echo "fetch_agents: installed, but claude, codex, opencode or copilot does not start: try" \
    "$DIR/node_modules/.bin/opencode --version" >&2
  exit 1
fi
