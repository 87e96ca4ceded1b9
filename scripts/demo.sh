#!/usr/bin/env bash
# make run: start the server in the background if nothing answers on OLLAMA_HOST, create smollm2:135m once, ask it.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PY:-$ROOT/.venv/bin/python}"
CLI=("$PY" -m ollama_py)
prompt="${1:-Why is the sky blue?}"
if ! "${CLI[@]}" list >/dev/null 2>&1; then
  echo "Error: the server did not start; see the log under ~/.local/share/ollama-py/" >&2; exit 1
fi
if ! "${CLI[@]}" show smollm2:135m >/dev/null 2>&1; then
  "${CLI[@]}" create smollm2:135m -f "$ROOT/examples/Modelfile.smollm2"
fi
"${CLI[@]}" run smollm2:135m "$prompt"
