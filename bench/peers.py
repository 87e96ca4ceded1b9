"""ollama-py against its peers at their defaults (issue 25): llama-server's router mode (`--models-dir`) and a
plain `llama-server -m`, the same GGUF, the same machine, one run, rounds alternating which side goes first.

What a user waits for, not what the gateway costs (that is overhead.py): every side runs at its own defaults
(ollama-py: `serve` as shipped; router: `llama-server --models-dir D`; plain: `llama-server -m F`), and every
number is taken at the client over 127.0.0.1.

Cases (each round runs every side; the order rotates round by round):
- cold: the model unloaded (keep_alive 0 / POST /models/unload) -> first content byte (OpenAI streaming).
  The plain server cannot unload, so it has no cold number.
- swap: model B requested while model A is loaded (B is a copy of the GGUF with 64 bytes appended, so that
  ollama-py sees different weights), B unloaded again afterwards.
- warm: streamed decode tokens/s ((tokens - 1) / (last - first)) and time to first token of a short prompt,
  OpenAI route on every side and ollama-py's native /api/chat too.
- c4, c16: 4 and 16 streams at once: aggregate tokens/s (all tokens / (last token - start)), slowest TTFT.
- long: a fresh ~3k-token prompt per round (a unique first line, so no prompt cache): TTFT and decode.
- chat10: a 10-turn chat (each turn appends the answer and a question): total time and the median TTFT of
  turns 2-10 (prompt-cache reuse).
- rss: gateway (ollama-py serve, the router process) and runner RSS at rest and at the end of the c16 load.

Prints medians and per-round paired ratios (ollama-py / peer: > 1 better for rates, < 1 better for times)
and writes bench/results/peers.json and peers.md. The load average is recorded at start and end.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil  # type: ignore[import-untyped]
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

RESULTS = Path(__file__).resolve().parent / "results"
QUESTION = "Tell me a long story about a lighthouse keeper and a storm."
FILLER = ("The committee reviewed the quarterly figures, the staffing plan and the schedule for the new harbour "
          "crane, and agreed to meet again after the inspection. ")


class Side:
    """One peer: how to name its models, stream a chat, unload, and which processes are its gateway/runner."""

    def __init__(self, name: str, url: str, proc: common.Child, models: dict[str, str], can_unload: bool) -> None:
        self.name, self.url, self.child, self.models, self.can_unload = name, url, proc, models, can_unload

    def unload(self, model: str) -> None:
        if self.name == "ollama-py":
            requests.post(self.url + "/api/generate", json={"model": self.models[model], "keep_alive": 0}, timeout=60)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(
                    m["name"].startswith(self.models[model]) for m in
                    requests.get(self.url + "/api/ps", timeout=30).json()["models"]):
                time.sleep(0.05)
        elif self.name == "router":
            requests.post(self.url + "/models/unload", json={"model": self.models[model]}, timeout=60)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and self._router_status(model) != "unloaded":
                time.sleep(0.05)

    def _router_status(self, model: str) -> str:
        for m in requests.get(self.url + "/v1/models", timeout=30).json()["data"]:
            if m["id"] == self.models[model]:
                return str(m.get("status", {}).get("value", ""))
        return ""

    def rss(self) -> tuple[int, int]:
        """(gateway RSS, runners' RSS) in bytes; the plain server is all runner."""
        me = psutil.Process(self.child.proc.pid)
        kids = sum(p.memory_info().rss for p in me.children(recursive=True)
                   if "llama-server" in " ".join(p.cmdline()[:1]))
        if self.name == "plain":
            return 0, me.memory_info().rss
        return me.memory_info().rss, kids


def stream(side: Side, model: str, messages: list[dict[str, str]], max_tokens: int, native: bool = False,
           t0: float | None = None) -> dict[str, Any]:
    """One streamed chat: ttft (s), decode tokens/s, the text, token count, end time."""
    start = t0 if t0 is not None else time.perf_counter()
    body: dict[str, Any]
    if native:
        url, body = side.url + "/api/chat", {"model": side.models[model], "messages": messages, "stream": True,
                                             "options": {"num_predict": max_tokens, "temperature": 0, "seed": 42}}
    else:
        url, body = side.url + "/v1/chat/completions", {"model": side.models[model], "messages": messages,
                                                        "stream": True, "max_tokens": max_tokens,
                                                        "temperature": 0, "seed": 42}
    stamps: list[float] = []
    text = []
    with requests.post(url, json=body, stream=True, timeout=600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line:
                continue
            if not native:
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                line = line[6:]
            ev = json.loads(line)
            piece = (ev.get("message") or {}).get("content") if native else \
                ((ev.get("choices") or [{}])[0].get("delta") or {}).get("content")
            if piece:
                stamps.append(time.perf_counter())
                text.append(piece)
    n = len(stamps)
    return {"ttft": stamps[0] - start if stamps else None, "tokens": n, "end": stamps[-1] if stamps else None,
            "tps": (n - 1) / (stamps[-1] - stamps[0]) if n > 2 and stamps[-1] > stamps[0] else None,
            "text": "".join(text)}


def user(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


def concurrent(side: Side, n: int, max_tokens: int, tag: str = "") -> dict[str, float]:
    """n streams at once. `tag` starts every prompt: a new tag per round keeps a server that stays loaded (the
    plain one) from answering the previous round's identical prompts from its slots' cache, while the runners
    that cold/swap restart each round start empty (measured: 4 streams' slowest first token 40-60 ms with the
    prompts cached, ~450 ms without, on either side's argv)."""
    start = time.perf_counter()
    with cf.ThreadPoolExecutor(n) as pool:
        futs = [pool.submit(stream, side, "a", user(f"{tag}{QUESTION} Story number {i}."), max_tokens, t0=start)
                for i in range(n)]
        got = [f.result() for f in futs]
    end = max(g["end"] for g in got if g["end"])
    return {"agg_tps": sum(g["tokens"] for g in got) / (end - start),
            "slowest_ttft": max(g["ttft"] for g in got if g["ttft"] is not None)}


def long_prompt(round_no: int, words: int) -> str:
    reps = max(words // len(FILLER.split()), 1)
    return f"Meeting notes, series {round_no}-{time.time_ns()}.\n" + FILLER * reps + "\nSummarize the notes."


def chat10(side: Side, max_tokens: int, round_no: int) -> dict[str, float]:
    messages: list[dict[str, str]] = []
    ttfts, start = [], time.perf_counter()
    for turn in range(10):
        messages.append({"role": "user", "content": f"(run {round_no}-{time.time_ns()}) Question {turn + 1}: "
                                                    f"what happens next in the lighthouse story?"
                         if turn == 0 else f"Question {turn + 1}: and then?"})
        got = stream(side, "a", messages, max_tokens)
        ttfts.append(got["ttft"])
        messages.append({"role": "assistant", "content": got["text"]})
    return {"total": time.perf_counter() - start, "ttft_later": statistics.median(ttfts[1:])}


# -- the run -------------------------------------------------------------------------------------------------------
def start_sides(runner: Path, model: Path, tmp: Path, which: list[str]) -> dict[str, Side]:
    mdir = tmp / "models-dir"
    mdir.mkdir()
    a, b = mdir / "smollm2-a.gguf", mdir / "smollm2-b.gguf"
    shutil.copyfile(model, a)
    shutil.copyfile(model, b)
    with open(b, "ab") as f:  # different bytes, same weights: ollama-py must load a second runner for it
        f.write(b"\0" * 64)
    sides: dict[str, Side] = {}
    if "ollama-py" in which:
        env = {"OLLAMA_LLM_LIBRARY": runner.parent.name, "OLLAMA_RUNNERS_DIR": str(runner.parent.parent),
               "OLLAMA_KEEP_ALIVE": "5m", "OLLAMA_NUM_PARALLEL": "", "OLLAMA_CONTEXT_LENGTH": ""}
        serve = common.start_serve(tmp / "serve", env, runners_dir=runner.parent.parent)
        common.create_model(serve.url, "smollm2-a", a)
        common.create_model(serve.url, "smollm2-b", b)
        sides["ollama-py"] = Side("ollama-py", serve.url, serve, {"a": "smollm2-a", "b": "smollm2-b"}, True)
    if "router" in which:
        port = common.free_port()
        router = common.start_llama_server([str(runner), "--models-dir", str(mdir), "--host", "127.0.0.1",
                                            "--port", str(port)], tmp / "router.log")
        sides["router"] = Side("router", router.url, router, {"a": "smollm2-a", "b": "smollm2-b"}, True)
    if "plain" in which:
        port = common.free_port()
        plain = common.start_llama_server([str(runner), "-m", str(a), "--host", "127.0.0.1", "--port", str(port)],
                                          tmp / "plain.log")
        sides["plain"] = Side("plain", plain.url, plain, {"a": "smollm2-a", "b": "smollm2-b"}, False)
    return sides


def run(args: argparse.Namespace) -> dict[str, Any]:
    info = common.machine_info(args.runner)
    tmp = Path(tempfile.mkdtemp(prefix="peers-"))
    sides = start_sides(args.runner, args.model, tmp, args.sides)
    order = list(sides)
    samples: dict[str, dict[str, list[float | None]]] = {s: {} for s in sides}
    run_id = time.strftime("%H%M%S")  # the same prompts for every side within a round, new ones each round

    def rec(side: str, key: str, value: float | None) -> None:
        samples[side].setdefault(key, []).append(value)

    def cold(side: Side, r: int) -> None:
        if not side.can_unload:
            return
        side.unload("a")
        rec(side.name, "cold_ttft_s", stream(side, "a", user("Say hi."), 4)["ttft"])

    def swap(side: Side, r: int) -> None:
        if not side.can_unload:
            return
        stream(side, "a", user("Say hi."), 2)  # A loaded
        side.unload("b")
        rec(side.name, "swap_ttft_s", stream(side, "b", user("Say hi."), 4)["ttft"])
        side.unload("b")

    def warm(side: Side, r: int) -> None:
        stream(side, "a", user("Say hi."), 2)  # loaded, and the short prompt cached
        ttfts = [stream(side, "a", user("Say hi."), 2)["ttft"] for _ in range(3)]
        rec(side.name, "warm_ttft_s", statistics.median(ttfts))
        rec(side.name, "decode_tps", stream(side, "a", user(QUESTION), args.decode_tokens)["tps"])
        if side.name == "ollama-py":
            stream(side, "a", user("Say hi."), 2, native=True)
            rec(side.name, "native_warm_ttft_s",
                statistics.median(stream(side, "a", user("Say hi."), 2, native=True)["ttft"] for _ in range(3)))
            rec(side.name, "native_decode_tps", stream(side, "a", user(QUESTION), args.decode_tokens,
                                                       native=True)["tps"])

    def conc(side: Side, r: int) -> None:
        for n in (4, 16):
            got = concurrent(side, n, args.concurrency_tokens, tag=f"(Round {r + 1}, {n} streams, run {run_id}.) ")
            rec(side.name, f"c{n}_agg_tps", got["agg_tps"])
            rec(side.name, f"c{n}_slowest_ttft_s", got["slowest_ttft"])

    def rss(side: Side, r: int) -> None:
        stream(side, "a", user("Say hi."), 2)
        g, k = side.rss()
        rec(side.name, "rss_gateway_rest_mib", g / 2**20)
        rec(side.name, "rss_runner_rest_mib", k / 2**20)
        with cf.ThreadPoolExecutor(1) as pool:
            load = pool.submit(concurrent, side, 16, args.concurrency_tokens)
            time.sleep(1.0)
            peak_g, peak_k = 0, 0
            while not load.done():
                g, k = side.rss()
                peak_g, peak_k = max(peak_g, g), max(peak_k, k)
                time.sleep(0.2)
            load.result()
        rec(side.name, "rss_gateway_load_mib", peak_g / 2**20)
        rec(side.name, "rss_runner_load_mib", peak_k / 2**20)

    def long(side: Side, r: int) -> None:
        got = stream(side, "a", user(long_prompt(r, args.long_words)), 32)
        rec(side.name, "long_ttft_s", got["ttft"])
        rec(side.name, "long_decode_tps", got["tps"])

    def chat(side: Side, r: int) -> None:
        got = chat10(side, args.turn_tokens, r)
        rec(side.name, "chat10_total_s", got["total"])
        rec(side.name, "chat10_later_ttft_s", got["ttft_later"])

    cases: dict[str, Callable[[Side, int], None]] = {"cold": cold, "swap": swap, "warm": warm, "concurrency": conc,
                                                     "rss": rss, "long": long, "chat10": chat}
    try:
        for r in range(args.rounds):
            rot = order[r % len(order):] + order[:r % len(order)]
            for case in args.cases:
                for name in rot:
                    cases[case](sides[name], r)
            print(f"round {r + 1}/{args.rounds} done (load {common.load_average()})", file=sys.stderr)
    finally:
        for s in sides.values():
            s.child.stop()
    info["load_average_at_end"] = common.load_average()
    return {"machine": info, "rounds": args.rounds, "samples": samples, "note": args.note}


HIGHER_IS_BETTER = {"decode_tps", "native_decode_tps", "c4_agg_tps", "c16_agg_tps", "long_decode_tps"}


def ratios(result: dict[str, Any]) -> list[tuple[str, str, float | None, float | None, float | None]]:
    """(metric, peer, ollama-py median, peer median, median of per-round ratios ollama-py / peer)."""
    s = result["samples"]
    ours = s.get("ollama-py", {})
    rows = []
    for peer in (p for p in s if p != "ollama-py"):
        for metric, vals in s[peer].items():
            mine = ours.get(metric) or ours.get(metric.replace("native_", ""))
            if not mine:
                continue
            pairs = [a / b for a, b in zip(mine, vals) if a and b]
            rows.append((metric, peer, common.median([v for v in mine if v is not None]),
                         common.median([v for v in vals if v is not None]), common.median(pairs)))
        for metric in ("native_warm_ttft_s", "native_decode_tps"):
            if metric in ours and metric.replace("native_", "") in s[peer]:
                vals = s[peer][metric.replace("native_", "")]
                pairs = [a / b for a, b in zip(ours[metric], vals) if a and b]
                rows.append((metric, peer, common.median([v for v in ours[metric] if v is not None]),
                             common.median([v for v in vals if v is not None]), common.median(pairs)))
    return rows


def fmt(x: float | None, metric: str = "") -> str:
    if x is None:
        return "-"
    if metric.endswith("_s"):
        return f"{x * 1000:.1f} ms"
    return f"{x:.1f}" if abs(x) >= 10 else f"{x:.3f}"


def report(result: dict[str, Any]) -> str:
    rows = [(m, p, fmt(a, m), fmt(b, m), "-" if r is None else f"{r:.2f}",
             "higher" if m in HIGHER_IS_BETTER else "lower") for m, p, a, b, r in ratios(result)]
    rss = [(side, *(fmt(common.median([v for v in vals.get(k, []) if v is not None]))
                    for k in ("rss_gateway_rest_mib", "rss_runner_rest_mib", "rss_gateway_load_mib",
                              "rss_runner_load_mib")))
           for side, vals in result["samples"].items()]
    return (common.markdown_table(["metric", "peer", "ollama-py", "peer value", "paired ratio", "better"], rows)
            + "\n\nRSS (MiB, median over rounds; load = the peak during 16 streams)\n\n"
            + common.markdown_table(["side", "gateway at rest", "runners at rest", "gateway under load",
                                     "runners under load"], rss))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runner", type=Path, default=common.ROOT / "runners/cpu_avx2/llama-server")
    ap.add_argument("--model", type=Path,
                    default=Path.home() / ".cache/ollama-py/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--sides", nargs="+", default=["ollama-py", "router", "plain"])
    ap.add_argument("--cases", nargs="+", default=["cold", "swap", "warm", "concurrency", "rss", "long", "chat10"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--decode-tokens", type=int, default=128)
    ap.add_argument("--concurrency-tokens", type=int, default=48)
    ap.add_argument("--turn-tokens", type=int, default=24)
    ap.add_argument("--long-words", type=int, default=2200, help="~1.4 tokens a word: ~3k tokens")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--note", default="")
    args = ap.parse_args()
    result = run(args)
    table = report(result)
    print(json.dumps(result["machine"], indent=1))
    print(table)
    common.write_json(args.out / "peers.json", result)
    with contextlib.suppress(OSError):
        (args.out / "peers.table.md").write_text(table + "\n")


if __name__ == "__main__":
    main()
