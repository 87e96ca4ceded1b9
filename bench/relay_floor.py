"""What any relay costs decode on this machine, against what ollama-py's costs: direct vs a C relay vs ollama-py.

    .venv/bin/python bench/relay_floor.py --runner runners/cpu_avx2/llama-server \
        --model ~/.cache/ollama-py/models/SmolLM2-135M-Instruct.Q4_1.gguf [--rounds 30]

One `ollama-py serve` loads the model (as in overhead.py); three clients then stream the same prompt with the
same sampling from the same llama-server process, rotating the order each round: directly (/completion), through
`relay_floor.c` (the least a relay can do: blocking sockets, the event's content copied into an NDJSON chunk;
built with cc into a temp dir), and through ollama-py (/api/generate, raw). Decode tokens/s at the client,
ratios as medians of per-round pairs, and the runner's own timing of each request. The gap between the C relay
and ollama-py is what the gateway's Python costs; the gap between direct and the C relay is what relaying at all
costs on this machine. Writes bench/results/relay_floor.json and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import RESULTS, free_port, machine_info, markdown_table, median, summary, write_json, write_text  # noqa: E402
from bench.overhead import MODEL, SAMPLING, Pair, close_pair, log, open_pair, stream  # noqa: E402

SIDES = ("direct", "C relay", "ollama-py")
PROMPT = [{"role": "user", "content": "Tell me a long story about a dragon who learns to cook."}]


def build_relay(tmp: Path) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        sys.exit("relay_floor needs a C compiler (cc)")
    out = tmp / "relay_floor"
    subprocess.run([cc, "-O2", "-o", str(out), str(ROOT / "bench" / "relay_floor.c")], check=True)
    return out


async def wait_listening(port: int) -> None:
    for _ in range(100):
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            await asyncio.sleep(0.05)
    raise RuntimeError(f"relay_floor did not listen on {port}")


async def one(pair: Pair, side: str, relay_url: str, prompt: str, n_predict: int) -> tuple[float | None, float | None]:
    body = {"prompt": prompt, "stream": True, "cache_prompt": True, "n_predict": n_predict, **SAMPLING}
    if side == "direct":
        s = await stream(pair.session, pair.direct_url + "/completion", body)
    elif side == "C relay":
        s = await stream(pair.session, relay_url + "/api/generate", body)
    else:
        s = await stream(pair.session, pair.gateway.url + "/api/generate",
                         {"model": MODEL, "prompt": prompt, "raw": True, "stream": True,
                          "options": {"num_predict": n_predict, **SAMPLING}})
    return s.decode_rate, s.server_rate


async def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    relay_bin = build_relay(tmp)
    pair = await open_pair(tmp, args.model, args.runner, 1)
    port = free_port()
    up = pair.direct_url.rsplit(":", 1)[1]
    relay = subprocess.Popen([str(relay_bin), str(port), up])  # noqa: ASYNC220 - set-up, before anything is timed
    try:
        await wait_listening(port)
        prompt = await pair.template(PROMPT)
        rates: dict[str, list[tuple[float | None, float | None]]] = {s: [] for s in SIDES}
        for i in range(args.rounds):
            order = SIDES[i % 3:] + SIDES[:i % 3]
            for side in order:
                rates[side].append(await one(pair, side, f"http://127.0.0.1:{port}", prompt, args.tokens))
            log(f"  round {i + 1}/{args.rounds}: " + ", ".join(f"{s} {rates[s][-1][0] or 0:.1f}" for s in SIDES))
    finally:
        relay.kill()
        relay.wait()
        await close_pair(pair)
    out: dict[str, Any] = {"tokens": args.tokens, "rounds": args.rounds, "sides": {}}
    for side in SIDES:
        client = [c for c, _ in rates[side]]
        runner = [r for _, r in rates[side]]
        entry: dict[str, Any] = {"client_tokens_per_s": summary([c for c in client if c], 1),
                                 "runner_tokens_per_s": summary([r for r in runner if r], 1)}
        if side != "direct":
            pairs = list(zip(rates["direct"], rates[side]))
            entry["paired_ratio"] = median([b[0] / a[0] for a, b in pairs if a[0] and b[0]])
            entry["runner_paired_ratio"] = median([b[1] / a[1] for a, b in pairs if a[1] and b[1]])
        out["sides"][side] = entry
    return out


def render(doc: dict[str, Any]) -> str:
    m, res = doc["machine"], doc["results"]
    rows = []
    for side in SIDES:
        e = res["sides"][side]
        ratio = "" if side == "direct" else f"{100 * e['paired_ratio']:.1f} %"
        runner = "" if side == "direct" else f"{100 * e['runner_paired_ratio']:.1f} %"
        rows.append([side, f"{e['client_tokens_per_s']['median']:.1f}", ratio,
                     f"{e['runner_tokens_per_s']['median']:.1f}", runner])
    return "\n".join([
        "# Relay floor: direct llama-server vs a C relay vs ollama-py", "",
        f"Run {doc['date']} on {m.get('cores')} cores ({m.get('cpu')}, {m.get('os')}), git {doc.get('git', '?')}; "
        f"{res['rounds']} rounds of {res['tokens']} tokens, order rotated each round, one llama-server process "
        "for all three.", "",
        markdown_table(["Side", "Decode at the client (tok/s)", "vs direct (paired)",
                        "llama-server's own timing (tok/s)", "own timing vs direct (paired)"], rows), "",
        "The C relay (`bench/relay_floor.c`) is the least a relay can do; the gap between it and ollama-py is what "
        "the gateway's Python costs, the gap between direct and it what relaying at all costs on this machine. "
        "Reproduce with `bench/relay_floor.py`.", ""])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runner", type=Path, default=ROOT / "runners" / "cpu_avx2" / "llama-server")
    ap.add_argument("--model", type=Path,
                    default=Path.home() / ".cache" / "ollama-py" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--tokens", type=int, default=96)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    args.runner, args.model = args.runner.expanduser().resolve(), args.model.expanduser().resolve()
    git = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="ollama-py-floor-") as tmp:
        results = asyncio.run(run(args, Path(tmp)))
    doc = {"date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git": git,
           "machine": machine_info(args.runner), "results": results}
    write_json(args.out / "relay_floor.json", doc)
    md = render(doc)
    write_text(args.out / "relay_floor.md", md)
    print(md)


if __name__ == "__main__":
    main()
