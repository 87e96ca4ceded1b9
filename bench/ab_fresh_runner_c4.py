"""A/B for bench/results/peers.md (issue 25): 4 concurrent streams on a plain llama-server just started (after one
warm request) vs one kept running, a new prompt each round, rounds alternating which side goes first.

    .venv/bin/python bench/ab_fresh_runner_c4.py [--rounds 6]

Prints each round's slowest first token (ms) per side, the load average, and the median paired ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import time
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
MODEL = Path.home() / ".cache" / "ollama-py" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
BINARY = ROOT / "runners" / "cpu_avx2" / "llama-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen([str(BINARY), "-m", str(MODEL), "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


async def wait_ready(url: str) -> None:
    async with aiohttp.ClientSession() as s:
        for _ in range(600):
            try:
                async with s.get(url + "/health") as r:
                    if r.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"{url} did not become ready")


async def first_token(s: aiohttp.ClientSession, url: str, prompt: str) -> float:
    t = time.perf_counter()
    body = {"messages": [{"role": "user", "content": prompt}], "stream": True, "max_tokens": 48, "temperature": 0}
    first = None
    async with s.post(url + "/v1/chat/completions", json=body) as r:
        async for line in r.content:
            if first is None and line.startswith(b"data: {") and b'"content":"' in line:
                first = time.perf_counter() - t
    return first if first is not None else float("nan")


async def four_streams(url: str, tag: str) -> float:
    """The slowest first token of 4 streams, after one warm request (as bench/peers.py's round does)."""
    # a connection per request: llama-server closes idle keep-alive connections, which a pool would reuse
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        await first_token(s, url, f"{tag} Say hi.")
        firsts = await asyncio.gather(*(first_token(s, url, f"{tag} Tell me a story. Story number {i}.")
                                        for i in range(4)))
    return max(firsts)


async def main(rounds: int) -> None:
    kept_url = f"http://127.0.0.1:{(kept_port := free_port())}"
    kept = start(kept_port)
    try:
        await wait_ready(kept_url)
        await four_streams(kept_url, "warm-up")
        fresh_ms: list[float] = []
        kept_ms: list[float] = []
        for r in range(rounds):
            for side in ("fresh", "kept") if r % 2 == 0 else ("kept", "fresh"):
                tag = f"[round {r} {side}]"
                if side == "kept":
                    kept_ms.append(await four_streams(kept_url, tag) * 1000)
                    continue
                port = free_port()
                proc = start(port)
                try:
                    await wait_ready(f"http://127.0.0.1:{port}")
                    fresh_ms.append(await four_streams(f"http://127.0.0.1:{port}", tag) * 1000)
                finally:
                    proc.terminate()
                    proc.wait()
            print(f"round {r}: fresh {fresh_ms[-1]:.0f} ms, kept {kept_ms[-1]:.0f} ms, load {os.getloadavg()[0]:.2f}",
                  flush=True)
        ratio = statistics.median(a / b for a, b in zip(fresh_ms, kept_ms, strict=True))
        print(f"median slowest first token: fresh {statistics.median(fresh_ms):.0f} ms, "
              f"kept {statistics.median(kept_ms):.0f} ms; median paired ratio {ratio:.2f}")
    finally:
        kept.terminate()
        kept.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6)
    asyncio.run(main(parser.parse_args().rounds))
