"""Prompt cache memory (issue 36): a runner's RSS across distinct prompts with and without a --cache-ram cap, and
the time to the first token of a long conversation's next turn after an unload, with and without the slots saved
to disk.

    python bench/memory.py --model SmolLM2-135M-Instruct.Q4_1.gguf [--prompts 14] [--tokens 2000] [--rounds 3]

Part 1 (RSS): `serve` with one slot (OLLAMA_NUM_PARALLEL=1) and OLLAMA_CACHE_RAM = each cap; N prompts that share
nothing (num_predict 1); the runner's RSS after each. llama-server keeps the prompt a slot lets go in its host
cache, so without a cap (8192 MiB is llama-server's own default, what ollama-py passed before) RSS grows by one
prompt's KV state per prompt; with a cap it stops there.
Part 2 (reload TTFT): a ~3k-token chat; turn N+1's time to first token on a warm runner, after `keep_alive: 0`
(unload) with the prompt cache on disk (default), and after an unload with it off (OLLAMA_PY_PROMPT_CACHE_DISK=0).
Results: bench/results/memory.md (the "Prompt cache" section is printed for pasting) and memory_cache.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import RESULTS, create_model, load_average, markdown_table, start_serve, write_json  # noqa: E402

MiB = 1 << 20


def runner_rss(serve_pid: int) -> int:
    for p in psutil.Process(serve_pid).children(recursive=True):
        try:
            if "llama-server" in " ".join(p.cmdline()[:2]):
                return int(p.memory_info().rss)
        except psutil.Error:
            continue
    return 0


def distinct_prompt(i: int, tokens: int) -> str:
    """A prompt of about `tokens` SmolLM2 tokens that shares nothing with the others (its first word is its own)."""
    return f"Document {i * 7919}: " + " ".join(f"item{i}x{j}" for j in range(tokens // 6))


def rss_curve(model: Path, cap: str, prompts: int, tokens: int) -> list[dict[str, Any]]:
    """cap: MiB, "none" (8192: llama-server's default) or "auto" (ollama-py's default: OLLAMA_CACHE_RAM unset)."""
    with tempfile.TemporaryDirectory() as d:
        env = {"OLLAMA_NUM_PARALLEL": "1", "OLLAMA_PY_PROMPT_CACHE_DISK": "0"}
        if cap != "auto":
            env["OLLAMA_CACHE_RAM"] = "8192" if cap == "none" else cap
        serve = start_serve(Path(d), env)
        try:
            create_model(serve.url, "m", model)
            rows = []
            for i in range(prompts):
                r = requests.post(serve.url + "/api/generate", timeout=600, json={
                    "model": "m", "prompt": distinct_prompt(i, tokens), "raw": True, "stream": False,
                    "options": {"num_predict": 1, "num_ctx": 4096}})
                r.raise_for_status()
                rows.append({"prompt": i + 1, "prompt_tokens": r.json()["prompt_eval_count"],
                             "rss_mib": round(runner_rss(serve.proc.pid) / MiB, 1)})
                print(f"cap={cap} prompt {i + 1}: {rows[-1]}", flush=True)
            return rows
        finally:
            serve.stop()


def conversation(turns: int) -> list[dict[str, str]]:
    messages = [{"role": "system", "content": "You are a careful assistant who keeps notes of every fact."}]
    for t in range(turns):
        facts = " ".join(f"Fact {t}.{k}: the {['red', 'green', 'blue'][k % 3]} box {t * 31 + k} holds "
                         f"{k * 17 % 97} marbles." for k in range(12))
        messages += [{"role": "user", "content": f"Remember these. {facts}"},
                     {"role": "assistant", "content": f"Noted {12} facts of round {t}."}]
    return messages


def ttft(url: str, messages: list[dict[str, str]], keep_alive: Any = "1h") -> tuple[float, int, float]:
    """Time to the first token, prompt_eval_count and load_duration (s) of one chat turn."""
    start = time.perf_counter()
    first = None
    prompt_eval, load = 0, 0.0
    with requests.post(url + "/api/chat", stream=True, timeout=600, json={
            "model": "m", "messages": messages, "stream": True, "keep_alive": keep_alive,
            "options": {"num_predict": 4, "temperature": 0, "num_ctx": 4096}}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line:
                continue
            chunk = json.loads(line)
            if first is None and (chunk.get("message", {}).get("content") or chunk.get("done")):
                first = time.perf_counter() - start
            if chunk.get("done"):
                prompt_eval, load = chunk.get("prompt_eval_count", 0), chunk.get("load_duration", 0) / 1e9
    return first or 0.0, prompt_eval, load


def wait_unloaded(url: str) -> None:
    for _ in range(600):
        if not requests.get(url + "/api/ps", timeout=10).json()["models"]:
            return
        time.sleep(0.05)
    raise RuntimeError("model did not unload")


def reload_ttft(model: Path, turns: int, rounds: int) -> dict[str, Any]:
    out: dict[str, list[float]] = {"warm": [], "reload, slots restored": [], "reload, no disk cache": []}
    evals: dict[str, list[int]] = {k: [] for k in out}
    loads: dict[str, list[float]] = {k: [] for k in out}
    for disk, label in (("4096", "reload, slots restored"), ("0", "reload, no disk cache")):
        with tempfile.TemporaryDirectory() as d:
            serve = start_serve(Path(d), {"OLLAMA_NUM_PARALLEL": "1", "OLLAMA_PY_PROMPT_CACHE_DISK": disk})
            try:
                create_model(serve.url, "m", model)
                for rnd in range(rounds):
                    history = conversation(turns)
                    history[0]["content"] += f" (session {rnd})"  # each round its own conversation
                    ttft(serve.url, history)  # turn N: fills the cache
                    history += [{"role": "user", "content": "How many marbles are in box 5?"}]
                    if disk == "4096":  # the warm case once per round, on the first server
                        t, n, load = ttft(serve.url, history)
                        out["warm"].append(t)
                        evals["warm"].append(n)
                        loads["warm"].append(load)
                        history.pop()
                        ttft(serve.url, history)  # back to turn N in the slot
                        history += [{"role": "user", "content": "How many marbles are in box 5?"}]
                    requests.post(serve.url + "/api/generate", json={"model": "m", "keep_alive": 0}, timeout=60)
                    wait_unloaded(serve.url)
                    t, n, load = ttft(serve.url, history)
                    out[label].append(t)
                    evals[label].append(n)
                    loads[label].append(load)
                    print(f"{label} round {rnd}: ttft {t * 1000:.0f} ms (load {load * 1000:.0f} ms), "
                          f"prompt_eval_count {n}", flush=True)
            finally:
                serve.stop()
    return {k: {"ttft_ms": [round(x * 1000, 1) for x in v], "median_ms": round(statistics.median(v) * 1000, 1),
                "load_ms": [round(x * 1000, 1) for x in loads[k]],
                "median_after_load_ms": round(statistics.median(t - x for t, x in zip(v, loads[k], strict=True))
                                              * 1000, 1),
                "prompt_eval_count": evals[k]} for k, v in out.items() if v}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, required=True)
    ap.add_argument("--prompts", type=int, default=14)
    ap.add_argument("--tokens", type=int, default=2000, help="about this many tokens per prompt (part 1)")
    ap.add_argument("--caps", default="none,auto,64",
                    help="comma-separated OLLAMA_CACHE_RAM MiB; none = 8192 (llama-server's), auto = unset (ours)")
    ap.add_argument("--turns", type=int, default=12, help="conversation rounds before turn N+1 (~3k tokens)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--skip-rss", action="store_true")
    ap.add_argument("--skip-ttft", action="store_true")
    args = ap.parse_args()
    result: dict[str, Any] = {"load_before": load_average()}
    if not args.skip_rss:
        curves = {c: rss_curve(args.model, c, args.prompts, args.tokens) for c in args.caps.split(",")}
        result["rss"] = curves
        names = {"none": "8192 (llama-server's default)", "auto": "auto (ours: the KV cache's size)"}
        headers = ["prompt", "tokens", *[f"RSS MiB, cap {names.get(c, c)}" for c in curves]]
        first = next(iter(curves.values()))
        rows = [[str(r["prompt"]), str(r["prompt_tokens"]), *[str(curves[c][i]["rss_mib"]) for c in curves]]
                for i, r in enumerate(first)]
        print(markdown_table(headers, rows))
    if not args.skip_ttft:
        result["ttft"] = reload_ttft(args.model, args.turns, args.rounds)
        rows = [[k, " / ".join(f"{x:.0f}" for x in v["ttft_ms"]), f"{v['median_ms']:.0f}",
                 " / ".join(f"{x:.0f}" for x in v["load_ms"]), f"{v['median_after_load_ms']:.0f}",
                 " / ".join(map(str, v["prompt_eval_count"]))] for k, v in result["ttft"].items()]
        print(markdown_table(["turn N+1", "TTFT ms (rounds)", "median ms", "of it loading ms", "median less the load",
                              "prompt_eval_count"], rows))
    result["load_after"] = load_average()
    write_json(RESULTS / "memory_cache.json", result)


if __name__ == "__main__":
    main()
