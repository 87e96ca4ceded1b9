"""Many clients at once on one model, through two (or more) source trees of the gateway, each beside its own runner
reached directly: the aggregate tokens/s ratio per tree (issue 38's 16 clients on 4 slots).

    .venv/bin/python bench/clients_ab.py OLD_TREE NEW_TREE [--rounds 20] [--clients 16] [--tokens 64]
        [--model ~/.cache/ollama-py/models/SmolLM2-135M-Instruct.Q4_1.gguf] [--parallel 4]

Each tree (a `git archive` of a commit, with this repository's .venv linked in) runs its own `ollama-py serve`
(OLLAMA_NUM_PARALLEL slots) with the real runner the tree's serve picks. A round sends `--clients` requests at once
(raw-socket client, bench/gpu_first_token.py's), each asking for `--tokens` tokens, through the gateway and then to
the same runner process directly (its port and API key), or the other way round, for each tree in turn (the trees'
order reversed every round; only one tree's runner is busy at a time: two runners busy on two cores thrash). Prints
per tree the median aggregate tokens/s of each side and the median and mean of the per-round ratios.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
from gpu_first_token import one


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="+", type=Path)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--parallel", type=int, default=4)
    ap.add_argument("--model", type=Path,
                    default=Path.home() / ".cache" / "ollama-py" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="clients-ab-"))
    serves: list[tuple[common.Child, str, str]] = []
    try:
        for i, tree in enumerate(args.trees):
            child = common.start_serve(work / f"serve{i}", {"OLLAMA_NUM_PARALLEL": str(args.parallel)}, tree=tree)
            common.create_model(child.url, "m", args.model)
            loaded = requests.post(child.url + "/api/generate", json={"model": "m", "prompt": ""}, timeout=300)
            loaded.raise_for_status()
            argv = common.runner_argv(child) or []
            serves.append((child, f"http://127.0.0.1:{argv[argv.index('--port') + 1]}", common.runner_key(child)))
        rates: dict[tuple[int, str], list[float]] = {(i, side): [] for i in range(len(serves))
                                                     for side in ("gateway", "direct")}
        n = args.clients
        with cf.ThreadPoolExecutor(n) as pool:
            for r in range(args.rounds):
                order = list(range(len(serves)))
                for i in (order if r % 2 == 0 else order[::-1]):
                    child, runner, key = serves[i]
                    for side in (("gateway", "direct") if r % 2 == 0 else ("direct", "gateway")):
                        url, k = (child.url, "") if side == "gateway" else (runner, key)
                        start = time.perf_counter()
                        got = list(pool.map(one, [url] * n, [side] * n, ["m"] * n, [args.tokens] * n, [k] * n))
                        rates[(i, side)].append(sum(g["tokens"] for g in got) / (time.perf_counter() - start))
        for i, tree in enumerate(args.trees):
            ratios = [g / d for g, d in zip(rates[(i, "gateway")], rates[(i, "direct")], strict=False)]
            print(f"{tree}: gateway {statistics.median(rates[(i, 'gateway')]):.0f} tokens/s, directly "
                  f"{statistics.median(rates[(i, 'direct')]):.0f}; ratio median {statistics.median(ratios):.3f}, "
                  f"mean {statistics.mean(ratios):.3f} ({len(ratios)} rounds)", flush=True)
    finally:
        for child, _, _ in serves:
            child.stop()


if __name__ == "__main__":
    main()
