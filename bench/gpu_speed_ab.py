"""Two (or more) source trees of the gateway compared at GPU speed on the fake runner, interleaved (issue 38).

    .venv/bin/python bench/gpu_speed_ab.py BEFORE_TREE AFTER_TREE [--blocks 12] [--per 40]
        [--route native|chat|generate|agent]

Each tree (a checkout or `git archive` of a commit, with this repository's .venv, or a venv of its own on another
interpreter) runs its own `ollama-py serve`
over the fake llama-server at bench/gpu_speed_fake.py's pace (first token after 2 ms, then 1 token/ms), all at
once, so they share the machine's load moment by moment. Requests go to one serve at a time in blocks of `--per`,
the order of the trees reversed every block: 8-token `/api/generate` (raw) or `/v1/chat/completions` (the GGUF's
template; `agent`: bench/agent_turn.py's turn of twenty tools and 61 messages through its Go TEMPLATE). Prints,
per tree, the median first-token and whole-request times at the client and the serve process's CPU per request
(/proc: all its threads, not its runner). Per-request differences of 0.1-0.2 ms that single gpu_speed_fake.py runs
cannot separate from the machine's noise show here run after run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.agent_turn import AGENT_TEMPLATE, agent_messages, agent_tools  # noqa: E402
from bench.common import Child, _wait_http, cpu_seconds, create_model, free_port  # noqa: E402
from bench.gpu_speed_fake import MESSAGES, _runners_dir, timed  # noqa: E402


def interpreter(tree: Path) -> str:
    """The tree's own `.venv/bin/python` (a tree may bring another interpreter: another version, or another
    build of the same one), else this one."""
    own = tree / ".venv" / "bin" / "python"
    return str(own) if own.exists() else sys.executable


def start(tree: Path, tmp: Path) -> Child:
    """`ollama-py serve` of `tree` (its own store and fake runner under `tmp`)."""
    port = free_port()
    tmp.mkdir(parents=True)
    env = {**os.environ, "OLLAMA_HOST": f"127.0.0.1:{port}", "OLLAMA_MODELS": str(tmp / "models"),
           "OLLAMA_PY_DATA_DIR": str(tmp / "data"), "OLLAMA_RUNNERS_DIR": str(_runners_dir(tmp)),
           "OLLAMA_KEEP_ALIVE": "1h", "OLLAMA_NUM_PARALLEL": "4"}
    env.pop("OLLAMA_DEBUG", None)
    with open(tmp / "serve.log", "wb") as out:  # the child keeps its own descriptor
        proc = subprocess.Popen([interpreter(tree), "-m", "ollama_py", "serve"], env=env, cwd=tree, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    child = Child(proc, f"http://127.0.0.1:{port}", tmp / "serve.log")
    _wait_http(child, "/api/version", f"serve of {tree}", 60)
    return child


async def compare(serves: dict[str, Child], blocks: int, per: int, route: str) -> dict[str, dict[str, Any]]:
    res: dict[str, dict[str, Any]] = {t: {"ttft": [], "total": [], "cpu": 0.0, "n": 0} for t in serves}
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        agent = {"model": "fake-agent", "messages": agent_messages(), "tools": agent_tools(), "stream": True,
                 "max_tokens": 8}

        def request(child: Child) -> Any:
            if route == "agent":
                return timed(s, child.url + "/v1/chat/completions", agent)
            if route == "chat":
                return timed(s, child.url + "/v1/chat/completions",
                             {"model": "fake-gguf", "messages": MESSAGES, "stream": True, "max_tokens": 8})
            return timed(s, child.url + "/api/generate", {"model": "fake-gguf", "prompt": "hi",
                                                          "raw": route == "native", "stream": True,
                                                          "options": {"num_predict": 8}})

        for child in serves.values():  # warm-up: the runner, the template's first renders, the plan
            for _ in range(30):
                await request(child)
        items = list(serves.items())
        for block in range(blocks):
            for tree, child in (items if block % 2 == 0 else items[::-1]):
                cpu0 = cpu_seconds(child.proc.pid)
                for _ in range(per):
                    first, end, _chunks = await request(child)
                    res[tree]["ttft"].append(first * 1e3)
                    res[tree]["total"].append(end * 1e3)
                res[tree]["cpu"] += cpu_seconds(child.proc.pid) - cpu0
                res[tree]["n"] += per
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="+", type=Path)
    ap.add_argument("--blocks", type=int, default=12)
    ap.add_argument("--per", type=int, default=40)
    ap.add_argument("--route", choices=("native", "chat", "generate", "agent"), default="native",
                    help="native: raw /api/generate; generate: /api/generate through the template, with context; "
                         "agent: an agent's turn through /v1/chat/completions")
    args = ap.parse_args()
    from tests.fakes.fake_llama_server import CHATML_TEMPLATE
    from tests.fakes.gguf_files import write_tiny_gguf

    with tempfile.TemporaryDirectory(prefix="gpu-speed-ab-") as d:
        tmp = Path(d)
        gguf = write_tiny_gguf(tmp / "tiny.gguf", ctx=8192, chat_template=CHATML_TEMPLATE)
        serves: dict[str, Child] = {}
        try:
            for i, tree in enumerate(args.trees):
                serves[f"{i}:{tree}"] = child = start(tree.resolve(), tmp / f"serve{i}")
                create_model(child.url, "fake-gguf", gguf)
                if args.route == "agent":
                    create_model(child.url, "fake-agent", gguf, template=AGENT_TEMPLATE)
            res = asyncio.run(compare(serves, args.blocks, args.per, args.route))
        finally:
            for child in serves.values():
                child.stop()
    print(f"{args.route}, {args.blocks} blocks of {args.per} requests per tree, load {os.getloadavg()[0]:.2f}")
    for tree, r in res.items():
        print(f"  {tree}: first token {statistics.median(r['ttft']):.3f} ms, whole request "
              f"{statistics.median(r['total']):.3f} ms, serve CPU per request {r['cpu'] / r['n'] * 1e3:.3f} ms")


if __name__ == "__main__":
    main()
