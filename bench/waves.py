"""16 clients on 4 slots at the fake's GPU pace, wave by wave: where a side falls behind the runner reached directly
(issue 38's many-clients target, taken apart).

    .venv/bin/python bench/waves.py [--rounds 10] [--clients 16] [--tokens 64] [--tree PATH]

`bench/gpu_speed_fake.py` gives the 16 clients' aggregate ratio; this gives its anatomy. One `ollama-py serve` over
the fake llama-server (FAKE_CLOCK=steady: a token every 1 ms, the first after 2 ms; OLLAMA_NUM_PARALLEL=4), the
same fake process called directly, and the least aiohttp relay in front of it (bench/aiohttp_floor.py). Each round
sends the clients' requests at once to each side in turn (the order rotated every round) and records every chunk's
arrival. Per side it prints, for each wave of streams (the clients sorted by their first chunk, `slots` a wave),
the median over rounds of the wave's first and last chunks in ms from the burst's start, the turns between waves
(a wave's last chunk to the next wave's first), a stream's median length (its first chunk to its last), and the
aggregate chunks/s ratio to direct, and each process's CPU and wake-ups a request (the fake, this client, and
serve or the relay between them: /proc's schedstat and voluntary context switches, all threads); with `--json`,
the same as one object.

On two cores shared by the client, serve and the fake, the burst's start is where a gateway's per-request CPU shows
(bench/results/overhead.md, twenty-second session): the side's first wave starts late, its turns and streams
follow the runner's pace.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    cpu_seconds,
    create_model,
    free_port,
    median,
    runner_argv,
    runner_key,
    runner_pid,
    start_serve,
    wakeups,
)
from bench.gpu_speed_fake import _runners_dir, payloads  # noqa: E402
from bench.relay_floor import wait_listening  # noqa: E402


async def chunk_times(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                      headers: dict[str, str] | None, t0: float) -> list[float]:
    """Seconds from t0 at which each content chunk (an NDJSON line or an SSE data event) arrived."""
    return [time.perf_counter() - t0 async for _ in payloads(session, url, body, headers)]


def start_relay(port: int, upstream: str, key: str) -> subprocess.Popen[bytes]:
    """bench/aiohttp_floor.py on `port` in front of the fake at `upstream` (its port)."""
    return subprocess.Popen([sys.executable, str(ROOT / "bench" / "aiohttp_floor.py"), str(port), upstream, key],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def anatomy(rounds: list[list[list[float]]], slots: int) -> dict[str, Any]:
    """Per wave the median first and last chunk (ms), the turns between waves, a stream's median length."""
    waves = []
    n = len(rounds[0])
    for w in range(0, n, slots):
        firsts = [median([sorted(r)[k][0] for k in range(w, min(w + slots, n))]) or 0.0 for r in rounds]
        lasts = [median([sorted(r)[k][-1] for k in range(w, min(w + slots, n))]) or 0.0 for r in rounds]
        waves.append({"first_ms": (median(firsts) or 0.0) * 1e3, "last_ms": (median(lasts) or 0.0) * 1e3})
    turns = [b["first_ms"] - a["last_ms"] for a, b in zip(waves, waves[1:])]
    length = median([s[-1] - s[0] for r in rounds for s in r]) or 0.0
    return {"waves": waves, "turns_ms": turns, "stream_ms": length * 1e3}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.fakes.fake_llama_server import CHATML_TEMPLATE
    from tests.fakes.gguf_files import write_tiny_gguf

    with tempfile.TemporaryDirectory(prefix="waves-") as d:
        tmp = Path(d)
        serve = start_serve(tmp / "serve", {"OLLAMA_NUM_PARALLEL": str(args.slots)}, runners_dir=_runners_dir(tmp),
                            tree=args.tree)
        relay: subprocess.Popen[bytes] | None = None
        session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300),
                                        connector=aiohttp.TCPConnector(force_close=True, limit=0))
        try:
            gguf = write_tiny_gguf(tmp / "tiny.gguf", ctx=8192, chat_template=CHATML_TEMPLATE)
            await asyncio.to_thread(create_model, serve.url, "fake-gguf", gguf)
            async with session.post(serve.url + "/api/generate", json={"model": "fake-gguf"}) as r:
                r.raise_for_status()
            argv = runner_argv(serve, "fake_llama_server.py")
            if argv is None:
                raise RuntimeError("no fake runner under serve")
            port, key = argv[argv.index("--port") + 1], runner_key(serve, "fake_llama_server.py")
            relay_port = free_port()
            relay = start_relay(relay_port, port, key)
            await wait_listening(relay_port)
            runner_body = {"prompt": "hi", "n_predict": args.tokens, "stream": True, "temperature": 0,
                           "cache_prompt": True}
            sides: dict[str, tuple[str, dict[str, Any], dict[str, str] | None]] = {
                "direct": (f"http://127.0.0.1:{port}/completion", runner_body, {"Authorization": f"Bearer {key}"}),
                "aiohttp relay": (f"http://127.0.0.1:{relay_port}/completion", runner_body, None),
                "gateway": (serve.url + "/api/generate",
                            {"model": "fake-gguf", "prompt": "hi", "raw": True, "stream": True,
                             "options": {"num_predict": args.tokens, "temperature": 0}}, None),
            }
            names = list(sides)
            # each side's processes: the fake, this client, and between them serve or the relay (direct: none)
            fake = runner_pid(serve, "fake_llama_server.py")
            procs = {"fake": fake, "client": os.getpid()}
            middle = {"direct": None, "aiohttp relay": relay.pid, "gateway": serve.proc.pid}
            got: dict[str, list[list[list[float]]]] = {name: [] for name in names}
            rates: dict[str, list[float]] = {name: [] for name in names}
            costs: dict[str, list[dict[str, tuple[float, int]]]] = {name: [] for name in names}
            for i in range(args.rounds + 2):  # two rounds of warm-up
                for name in names[i % len(names):] + names[:i % len(names)]:
                    url, body, headers = sides[name]
                    watched = {k: p for k, p in {**procs, "middle": middle[name]}.items() if p is not None}
                    before = {k: (cpu_seconds(p), wakeups(p)) for k, p in watched.items()}
                    t0 = time.perf_counter()
                    streams = await asyncio.gather(*(chunk_times(session, url, body, headers, t0)
                                                     for _ in range(args.clients)))
                    wall = time.perf_counter() - t0
                    if i >= 2:
                        got[name].append(streams)
                        rates[name].append(sum(len(s) for s in streams) / wall)
                        costs[name].append({k: (cpu_seconds(p) - before[k][0], wakeups(p) - before[k][1])
                                            for k, p in watched.items()})
            out: dict[str, Any] = {"clients": args.clients, "slots": args.slots, "tokens": args.tokens,
                                   "rounds": args.rounds, "sides": {}}
            for name in names:
                side = anatomy(got[name], args.slots)
                side["ratio"] = median([r / d for r, d in zip(rates[name], rates["direct"])])
                side["per_request"] = per_request(costs[name], args.clients)
                out["sides"][name] = side
            return out
        finally:
            await session.close()
            if relay is not None:
                relay.terminate()
                relay.wait(10)
            serve.stop()


def per_request(costs: list[dict[str, tuple[float, int]]], clients: int) -> dict[str, dict[str, float]]:
    """Each process's median CPU (µs) and wake-ups over a side's bursts, per request."""
    return {k: {"cpu_us": (median([c[k][0] for c in costs]) or 0.0) * 1e6 / clients,
                "wakeups": (median([float(c[k][1]) for c in costs]) or 0.0) / clients} for k in costs[0]}


def table(res: dict[str, Any]) -> str:
    sides = res["sides"]
    head = "| wave | " + " | ".join(f"{name}: first / last (ms)" for name in sides) + " |"
    rows = [head, "|---" * (len(sides) + 1) + "|"]
    for w in range(len(next(iter(sides.values()))["waves"])):
        cells = [f"{s['waves'][w]['first_ms']:.1f} / {s['waves'][w]['last_ms']:.1f}" for s in sides.values()]
        rows.append(f"| {w + 1} | " + " | ".join(cells) + " |")
    rows.append("| turns (ms) | " + " | ".join(", ".join(f"{t:.1f}" for t in s["turns_ms"]) for s in sides.values())
                + " |")
    rows.append("| a stream (ms) | " + " | ".join(f"{s['stream_ms']:.1f}" for s in sides.values()) + " |")
    rows.append("| aggregate / direct | " + " | ".join(f"{s['ratio']:.3f}" for s in sides.values()) + " |")
    for proc, what in (("fake", "the fake"), ("client", "the client"), ("middle", "serve / the relay")):
        cells = [(f"{s['per_request'][proc]['cpu_us']:.0f} µs, {s['per_request'][proc]['wakeups']:.1f}"
                  if proc in s["per_request"] else "-") for s in sides.values()]
        rows.append(f"| {what}: CPU, wake-ups a request | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--tree", type=Path, default=None, help="the source tree serve runs (default: this one)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON too")
    args = ap.parse_args()
    res = asyncio.run(run(args))
    print(table(res))
    if args.json:
        print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
