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
from common import (  # noqa: E402
    RESULTS,
    ROOT,
    Child,
    _spawn,
    create_model,
    free_port,
    machine_info,
    markdown_table,
    median,
    start_serve,
    write_json,
    write_text,
)

CAPS = (60, 400)  # MiB: uneven, and the small one holds only part of SmolLM2
DEFAULT_MODEL = Path.home() / ".cache" / "ollama-py" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def start_worker(tmp: Path, port: int, mem_mib: int | None = None) -> Child:
    log = tmp / f"worker-{port}.log"
    cap = ["--mem", str(mem_mib)] if mem_mib else []
    child = Child(_spawn([sys.executable, "-m", "ollama_py", "rpc-worker", "--port", str(port), "--threads", "1", *cap],
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
    load_before = os.getloadavg()
    ports = [free_port() for _ in range(4)]
    workers = [start_worker(tmp, ports[0]), start_worker(tmp, ports[1]),
               start_worker(tmp, ports[2], CAPS[0]), start_worker(tmp, ports[3], CAPS[1])]
    sides = {
        "local": start_serve(tmp / "local"),
        "rpc": start_serve(tmp / "spread", {"OLLAMA_RPC_SERVERS": ",".join(f"127.0.0.1:{p}" for p in ports[:2])}),
        "capped": start_serve(tmp / "capped", {"OLLAMA_RPC_SERVERS": ",".join(f"127.0.0.1:{p}" for p in ports[2:])}),
    }
    rates: dict[str, list[float]] = {name: [] for name in sides}
    split: dict[str, int] = {}
    try:
        for serve in sides.values():
            create_model(serve.url, "smollm2", args.model)
            decode_rate(serve.url, 4)  # load and warm up
        split = requests.get(sides["capped"].url + "/api/ps", timeout=30).json()["models"][0].get("devices", {})
        for _ in range(args.rounds):
            for name, serve in sides.items():
                rates[name].append(decode_rate(serve.url, args.tokens))
    finally:
        for child in (*sides.values(), *workers):
            child.stop()
    medians = {name: median(r) for name, r in rates.items()}
    loc = medians["local"]
    result = {"date": dt.datetime.now(dt.UTC).isoformat(), "machine": machine_info(),
              "load_average": {"start": load_before, "end": os.getloadavg()},
              "tokens": args.tokens, "rounds": args.rounds, "caps_mib": CAPS, "capped_split_bytes": split,
              **{f"{name}_tok_s": r for name, r in rates.items()}, **{f"median_{n}": m for n, m in medians.items()},
              "ratio": medians["rpc"] / loc if loc else None,
              "ratio_capped": medians["capped"] / loc if loc else None}
    write_json(RESULTS / "rpc.json", result)
    shown = ", ".join(f"{name} {size / 2**20:.1f} MiB" for name, size in split.items())
    table = markdown_table(["configuration", "decode tokens/s (median)", "ratio to local"],
                           [["local llama-server (CPU)", f"{loc:.1f}", "1.00"],
                            ["two loopback RPC workers", f"{medians['rpc']:.1f}", f"{medians['rpc'] / loc:.2f}"],
                            [f"two workers capped at {CAPS[0]} and {CAPS[1]} MiB (`--mem`)",
                             f"{medians['capped']:.1f}", f"{medians['capped'] / loc:.2f}"]])
    write_text(RESULTS / "rpc.md", f"# RPC: local vs two loopback workers\n\n{result['date']}, "
               f"{result['machine'].get('cpu', '')}, SmolLM2-135M Q4_1, {args.tokens} tokens, median of "
               f"{args.rounds} alternating rounds. Each worker uses 1 thread; all on the same 2-core machine, so this "
               f"measures the RPC transport's cost, not a speed-up. Load average {load_before[0]:.2f} at the start, "
               f"{os.getloadavg()[0]:.2f} at the end.\n\n{table}\n\n"
               f"The capped workers go through `rpc-worker --mem`'s relay; the scheduler placed the model as: "
               f"{shown}.\n")
    print(table)

if __name__ == "__main__":
    main()
