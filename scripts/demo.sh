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
# Which device will answer: the runner variant the server chose and the devices that runner sees.
"$PY" - <<'EOF' || true
import json, os, urllib.request
host = os.environ.get("OLLAMA_HOST") or "127.0.0.1:11434"
url = (host if "://" in host else "http://" + host).rstrip("/") + "/ui/api/server"
request = urllib.request.Request(url, headers={"Authorization": f"Bearer {os.environ['OLLAMA_API_KEY']}"}
                                 if os.environ.get("OLLAMA_API_KEY") else {})
info = json.load(urllib.request.urlopen(request, timeout=30))
variant = info["runner"]["variant"]
gpus = [d for d in info["devices"] if d["library"] == variant]
if gpus:
    where = "; ".join(f"{d['name']} ({d['total'] / 2**30:.0f} GiB, {d['free'] / 2**30:.0f} GiB free)" for d in gpus)
    print(f"==> answering on the GPU: {where} ({variant} runner)")
elif variant in ("cuda", "vulkan", "metal"):
    print(f"==> answering on the CPU: the {variant} runner sees no device (the server log says what it looked for)")
else:
    print(f"==> answering on the CPU ({variant or 'no'} runner: no GPU runner for this host)")
EOF
if ! "${CLI[@]}" show smollm2:135m >/dev/null 2>&1; then
  "${CLI[@]}" create smollm2:135m -f "$ROOT/examples/Modelfile.smollm2"
fi
"${CLI[@]}" run smollm2:135m "$prompt"
