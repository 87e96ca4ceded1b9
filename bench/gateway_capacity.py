"""Gateway capacity: how many chunks per second ollama-py relays when the runner streams as fast as it can.

    .venv/bin/python bench/gateway_capacity.py [--rounds 5] [--tokens 20000]

The runner is the fake llama-server (tests/fakes/fake_llama_server.py, FAKE_TOKEN_DELAY=0, FAKE_TOKENS=N),
installed as the only runner variant of a temporary runners dir (`cpu/llama-server` is a shell script that
execs the fake), so the gateway is a real `ollama-py serve` subprocess with its real scheduler and argv.
Where taskset exists the serve is pinned to CPU 0 and the fake (and this client) to the other CPUs, so the
gateway has one core. The client counts newlines with http.client (cheap), and the gateway's own CPU time
(/proc schedstat, all its threads, not its children) is read around each request: chunks per gateway
CPU-second is the capacity of one core even when the machine is shared; chunks per wall-second is what this
run achieved.

The fake's own rate (a client reading its /completion stream directly) is measured too: the gateway can
relay no faster than its upstream produces.
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    Child,
    cpu_seconds,
    create_model,
    free_port,
    median,
    runner_argv,
    start_llama_server,
    start_serve,
    summary,
    taskset,
    with_port,
)

FAKE = ROOT / "tests" / "fakes" / "fake_llama_server.py"
TARGET_CHUNKS_PER_S = 5000
# The routes whose relay rate is measured; the first is the headline number.
ROUTES: dict[str, tuple[str, Any]] = {
    "/api/generate": ("ndjson", lambda model: {"model": model, "prompt": "go", "raw": True, "stream": True}),
    "/api/chat": ("ndjson", lambda model: {"model": model, "messages": [{"role": "user", "content": "go"}],
                                           "stream": True}),
    "/v1/chat/completions": ("sse", lambda model: {"model": model, "messages": [{"role": "user", "content": "go"}],
                                                   "stream": True}),
}


@dataclass(frozen=True, slots=True)
class Relay:
    chunks: int
    wall_s: float  # first byte to end of stream
    cpu_s: float | None  # the gateway's CPU time over the request

    @property
    def per_s(self) -> float:
        return self.chunks / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def per_cpu_s(self) -> float | None:
        return self.chunks / self.cpu_s if self.cpu_s else None


def count_stream(url: str, path: str, body: dict[str, Any], kind: str, cpu_of: Any = None) -> Relay:
    """POST and read the stream to its end, counting chunks (NDJSON lines or SSE events) without parsing."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=300)
    cpu0 = cpu_of() if cpu_of else None
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"{path}: {resp.status} {resp.read()[:500]!r}")
        newlines = 0
        first: float | None = None
        while data := resp.read1(1 << 16):
            if first is None:
                first = time.perf_counter()
            newlines += data.count(b"\n")
        end = time.perf_counter()
    finally:
        conn.close()
    cpu = cpu_of() - cpu0 if cpu_of else None
    chunks = newlines // 2 if kind == "sse" else newlines  # an SSE event is "data: ...\n\n"
    return Relay(chunks, end - (first or end), cpu)


def _fake_runners_dir(tmp: Path, tokens: int, pin: list[str]) -> Path:
    runners = tmp / "fake-runners"
    (runners / "cpu").mkdir(parents=True, exist_ok=True)
    script = runners / "cpu" / "llama-server"
    script.write_text("#!/bin/sh\n"
                      f"export FAKE_TOKEN_DELAY=0 FAKE_TOKENS={tokens}\n"
                      f"exec {' '.join(pin)} {sys.executable} {FAKE} \"$@\"\n")
    script.chmod(0o755)
    return runners


def _tiny_gguf(path: Path, ctx: int) -> Path:
    from tests.fakes.gguf_files import write_tiny_gguf  # numpy + gguf: the test suite's tiny model writer

    return write_tiny_gguf(path, ctx=ctx)


def measure_capacity(tmp: Path, *, rounds: int = 5, tokens: int = 20000, routes: list[str] | None = None,
                     log: Any = print) -> dict[str, Any]:
    """Start serve (pinned to CPU 0) with the fake runner, relay `tokens` chunks per request `rounds` times per
    route, alternating with direct reads of a fake. Returns the results dict for overhead.json."""
    routes = routes or list(ROUTES)
    ncpu = os.cpu_count() or 1
    gateway_pin = taskset("0") if ncpu > 1 else []
    other_cpus = f"1-{ncpu - 1}" if ncpu > 2 else "1"
    other_pin = taskset(other_cpus) if ncpu > 1 and gateway_pin else []
    ctx = 1 << max(15, (tokens + 512).bit_length())
    runners = _fake_runners_dir(tmp, tokens, other_pin)
    serve = start_serve(tmp / "serve", {"OLLAMA_CONTEXT_LENGTH": str(ctx)}, prefix=gateway_pin, runners_dir=runners)
    fake: Child | None = None
    old_affinity = None
    try:
        create_model(serve.url, "fake-bench", _tiny_gguf(tmp / "tiny.gguf", ctx))
        def gateway_cpu() -> float:
            return cpu_seconds(serve.proc.pid)

        # Load the runner, then start a second fake with the same argv for the upstream reference.
        count_stream(serve.url, "/api/generate", {**ROUTES["/api/generate"][1]("fake-bench"),
                                                  "options": {"num_predict": 4}}, "ndjson")
        argv = runner_argv(serve, "fake_llama_server.py")
        if argv is None:
            raise RuntimeError("could not find the fake runner under serve")
        fake = start_llama_server(["env", "FAKE_TOKEN_DELAY=0", f"FAKE_TOKENS={tokens}", *other_pin,
                                   *with_port(argv, free_port())], tmp / "fake-direct.log")
        if hasattr(os, "sched_setaffinity") and other_pin:
            old_affinity = os.sched_getaffinity(0)
            os.sched_setaffinity(0, {int(c) for c in range(1, ncpu)})
        fake_body = {"prompt": "go", "stream": True, "cache_prompt": True}
        direct: list[Relay] = []
        relayed: dict[str, list[Relay]] = {r: [] for r in routes}
        for i in range(rounds):
            direct.append(count_stream(fake.url, "/completion", fake_body, "sse"))
            for route in routes:
                kind, make = ROUTES[route]
                relayed[route].append(count_stream(serve.url, route, make("fake-bench"), kind, gateway_cpu))
            log(f"  capacity round {i + 1}/{rounds}: fake {direct[-1].per_s:,.0f} ev/s; "
                + "; ".join(f"{r} {relayed[r][-1].per_s:,.0f}/s ({relayed[r][-1].per_cpu_s or 0:,.0f}/cpu-s)"
                            for r in routes))
    finally:
        if old_affinity is not None:
            os.sched_setaffinity(0, old_affinity)
        if fake is not None:
            fake.stop()
        serve.stop()
    out: dict[str, Any] = {
        "tokens_per_request": tokens,
        "pinned": bool(gateway_pin),
        "upstream_fake_events_per_s": summary([r.per_s for r in direct], 0),
        "routes": {},
    }
    for route, rs in relayed.items():
        out["routes"][route] = {
            "chunks": rs[0].chunks if rs else 0,
            "chunks_per_s": summary([r.per_s for r in rs], 0),
            "chunks_per_gateway_cpu_s": summary([r.per_cpu_s for r in rs if r.per_cpu_s], 0),
        }
    head = out["routes"][routes[0]]
    out["headline_route"] = routes[0]
    out["chunks_per_s"] = head["chunks_per_s"]["median"]
    out["chunks_per_gateway_cpu_s"] = head["chunks_per_gateway_cpu_s"]["median"]
    out["target"] = TARGET_CHUNKS_PER_S
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=20000)
    ap.add_argument("--routes", nargs="*", default=None, choices=list(ROUTES))
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ollama-py-capacity-") as tmp:
        res = measure_capacity(Path(tmp), rounds=args.rounds, tokens=args.tokens, routes=args.routes)
    print(json.dumps(res, indent=2))
    with contextlib.suppress(TypeError):
        print(f"relayed {res['chunks_per_s']:,.0f} chunks/s (wall), {res['chunks_per_gateway_cpu_s']:,.0f} per "
              f"gateway CPU-second; target >= {TARGET_CHUNKS_PER_S:,}; upstream fake "
              f"{median(res['upstream_fake_events_per_s']['samples']) or 0:,.0f} events/s")


if __name__ == "__main__":
    main()
