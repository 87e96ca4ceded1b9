"""CPU threads shared between runners (issue 36 item 3): two models decoding at once, aggregate tokens/s, with every
runner taking every core (before: llama-server's own default, given here as num_thread) and with ollama-py sharing
the cores between the runners it starts (after: policy.cpu_threads).

    python bench/threads.py --model SmolLM2-135M-Instruct.Q4_1.gguf [--rounds 3] [--tokens 128]

Two runners on the same weights (the second name has runner settings of its own, so its own runner), each asked for
`--tokens` tokens at once, `--rounds` times; aggregate = all tokens generated / wall time of the round. Needs a quiet
machine (`uptime` load under 1.5): the numbers are meaningless beside other work.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS, create_model, load_average, markdown_table, start_serve, write_json  # noqa: E402
from ollama_py.scheduler.factory import physical_cores  # noqa: E402


def round_trip(url: str, tokens: int, num_thread: int | None) -> tuple[float, list[dict[str, Any]]]:
    results: list[dict[str, Any]] = [{}, {}]
    options: dict[str, Any] = {"num_predict": tokens, "temperature": 0, "seed": 1}
    if num_thread:
        options["num_thread"] = num_thread

    def one(i: int, name: str) -> None:
        r = requests.post(url + "/api/generate", timeout=600, json={
            "model": name, "prompt": "Write a long story about a lighthouse keeper.", "stream": False,
            "options": options})
        r.raise_for_status()
        results[i] = r.json()

    threads = [threading.Thread(target=one, args=(i, n)) for i, n in enumerate(("a", "b"))]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start, results


def run(model: Path, mode: str, rounds: int, tokens: int) -> dict[str, Any]:
    cores = physical_cores()
    with tempfile.TemporaryDirectory() as d:
        config = Path(d) / "config.toml"
        config.write_text('[models."b"]\nnum_parallel = 2\n')  # runner settings of its own: a runner of its own
        serve = start_serve(Path(d), {"OLLAMA_PY_CONFIG": str(config), "OLLAMA_NUM_PARALLEL": "1"})
        try:
            create_model(serve.url, "a", model)
            create_model(serve.url, "b", model)
            num_thread = cores if mode == "before" else None
            round_trip(serve.url, 8, num_thread)  # load both
            aggregate, per_model = [], []
            for _ in range(rounds):
                wall, results = round_trip(serve.url, tokens, num_thread)
                aggregate.append(sum(r["eval_count"] for r in results) / wall)
                per_model.append([r["eval_count"] / (r["eval_duration"] / 1e9) for r in results])
            return {"mode": mode, "cores": cores, "aggregate_tok_s": [round(x, 1) for x in aggregate],
                    "median_aggregate": round(statistics.median(aggregate), 1),
                    "per_model_tok_s": [[round(x, 1) for x in pm] for pm in per_model]}
        finally:
            serve.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    args = ap.parse_args()
    load = load_average()
    if load and load[0] >= 1.5:
        print(f"warning: load {load[0]:.2f}: the machine is not quiet, the numbers will not mean much", flush=True)
    runs = [run(args.model, m, args.rounds, args.tokens) for m in ("before", "after")]
    out = {"load_before": load, "runs": runs, "load_after": load_average()}
    rows = [[r["mode"], " / ".join(map(str, r["aggregate_tok_s"])), str(r["median_aggregate"]),
             "; ".join(" + ".join(map(str, pm)) for pm in r["per_model_tok_s"])] for r in runs]
    print(markdown_table(["threads", "aggregate tok/s (rounds)", "median", "per model tok/s"], rows))
    write_json(RESULTS / "threads.json", out)


if __name__ == "__main__":
    main()
