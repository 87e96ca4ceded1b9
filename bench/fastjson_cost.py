"""What fastjson saves per token on the ordinary (non-lane) path: decoding llama-server's event and encoding the
client's chunk, stdlib json vs ollama_py.fastjson, on the shapes the relay sees. Issue 29 asked whether fastjson
still earns its place now that plain tokens skip JSON (the lane): it still serves every token of a request with
thinking, tools or logprobs, and each first chunk.

Run: .venv/bin/python bench/fastjson_cost.py  (prints microseconds per call, warm loop and "cold": a cache-evicting
pass between calls, as between tokens when llama-server runs)
"""

from __future__ import annotations

import json
import statistics
import time

from ollama_py import fastjson

EVENT = ('{"index":0,"content":" Paris","tokens":[12095],"stop":false,"id_slot":0,"tokens_predicted":7,'
         '"tokens_evaluated":31}')
CHUNK = {"model": "qwen3:8b", "created_at": "2026-11-25T15:50:01.123456Z",
         "message": {"role": "assistant", "content": " Paris", "thinking": ""}, "done": False}
_JUNK = bytearray(8 << 20)  # 8 MiB touched between calls: the L2 and most of L3 go cold


def per_call(fn, arg, rounds: int, cold: bool) -> float:
    samples = []
    for _ in range(rounds):
        if cold:
            for i in range(0, len(_JUNK), 64):
                _JUNK[i] = (_JUNK[i] + 1) & 0xFF
        t = time.perf_counter_ns()
        fn(arg)
        samples.append(time.perf_counter_ns() - t)
    return statistics.median(samples) / 1000


def main() -> None:
    std_loads, std_dumps = json.loads, lambda o: json.dumps(o, ensure_ascii=False, separators=(",", ":"))
    print("| case | stdlib us | fastjson us | saved us |")
    print("|---|---|---|---|")
    for cold in (False, True):
        rounds = 300 if cold else 20000
        for what, a, b, arg in (("decode event", std_loads, fastjson.loads, EVENT),
                                ("encode chunk", std_dumps, fastjson.dumps, CHUNK)):
            sa, sb = per_call(a, arg, rounds, cold), per_call(b, arg, rounds, cold)
            print(f"| {what} ({'cold' if cold else 'warm'}) | {sa:.2f} | {sb:.2f} | {sa - sb:.2f} |")


if __name__ == "__main__":
    main()
