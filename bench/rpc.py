"""Decode tokens/s of SmolLM2 served locally vs spread over two loopback llama.cpp RPC workers (issue 12).

    .venv/bin/python bench/rpc.py [--model GGUF] [--rounds 3] [--tokens 64]

Writes bench/results/rpc.md and rpc.json. Both configurations run in the same process lifetime, alternating.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (RESULTS, ROOT, Child, _spawn, create_model, free_port, machine_info, markdown_table,  # noqa: E402
                    median, start_serve, write_json, write_text)

DEFAULT_MODEL = Path.home() / ".cache" / "ollama-py" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def start_worker(tmp: Path, port: int) -> Child:
    log = tmp / f"worker-{port}.log"
    child = Child(_spawn([sys.executable, "-m", "ollama_py", "rpc-worker", "--port", str(port), "--threads", "1"],
                         {**os.environ, "OLLAMA_RUNNERS_DIR": str(ROOT / "runners")}, log),
                  f"127.0.0.1:{port}", log)
    time.sleep(1.0)
    return child


def decode_rate(url: str, tokens: int) -> float:
    r = requests.post(url + "/api/generate", timeout=600, json={
        "model": "smollm2", "prompt": "Write a story about a lighthouse keeper.", "stream": False,
        "options": {"num_predict": tokens, "temperature": 0, "seed": 1}}).json()
    return r["eval_count"] / (r["eval_duration"] / 1e9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-rpc-"))
    ports = [free_port(), free_port()]
    workers = [start_worker(tmp, p) for p in ports]
    local = start_serve(tmp / "local")
    spread = start_serve(tmp / "spread", {"OLLAMA_RPC_SERVERS": ",".join(f"127.0.0.1:{p}" for p in ports)})
    rates: dict[str, list[float]] = {"local": [], "rpc": []}
    try:
        for serve in (local, spread):
            create_model(serve.url, "smollm2", args.model)
            decode_rate(serve.url, 4)  # load and warm up
        for _ in range(args.rounds):
            rates["local"].append(decode_rate(local.url, args.tokens))
            rates["rpc"].append(decode_rate(spread.url, args.tokens))
    finally:
        for child in (local, spread, *workers):
            child.stop()
    loc, rpc = median(rates["local"]), median(rates["rpc"])
    result = {"date": dt.datetime.now(dt.timezone.utc).isoformat(), "machine": machine_info(),
              "tokens": args.tokens, "rounds": args.rounds, "local_tok_s": rates["local"], "rpc_tok_s": rates["rpc"],
              "median_local": loc, "median_rpc": rpc, "ratio": rpc / loc if loc else None}
    write_json(RESULTS / "rpc.json", result)
    table = markdown_table(["configuration", "decode tokens/s (median)", "ratio to local"],
                           [["local llama-server (CPU)", f"{loc:.1f}", "1.00"],
                            ["two loopback RPC workers", f"{rpc:.1f}", f"{rpc / loc:.2f}"]])
    write_text(RESULTS / "rpc.md", f"# RPC: local vs two loopback workers\n\n{result['date']}, "
               f"{result['machine'].get('cpu', '')}, SmolLM2-135M Q4_1, {args.tokens} tokens, median of "
               f"{args.rounds} alternating rounds. Each worker uses 1 thread; all on the same 2-core machine, so this "
               f"measures the RPC transport's cost, not a speed-up.\n\n{table}\n")
    print(table)


if __name__ == "__main__":
    main()
