"""Reliability: inject faults into a running `serve`, count what clients saw, write bench/results/reliability.md.

    .venv/bin/python bench/reliability.py [--rounds 10] [--model PATH.gguf] [--out bench/results/reliability.md]
                                          [--cases faults bad load stop disk real hardening] [--hardening-runs 3]

`serve` runs as a subprocess over the fake llama-server (tests/fakes/fake_llama_server.py) for the fault
kinds that need a runner to misbehave on cue; with --model, a runner SIGKILLed mid-stream is also repeated
with the real llama-server and SmolLM2. Every request the script sends is classified:

    answered  a complete answer (done / [DONE] / finish_reason)
    refused   a clear error: a status >= 400 with an {"error": ...} body, or a final {"error": ...} line
    lost      anything else: a connection cut without an error line, a hang past the bound, a 5xx traceback

"Requests lost" must be 0. A fault is "survived" when the request it hit was answered or refused and the next
request on the same server was answered. Bad inputs are the table of tests/unit/test_bad_input.py plus
schema-generated and mistyped bodies (tests/unit/test_openapi.py) sent to serve; "refused" means a 4xx.
The issue-22 cases (bench/hardening.py: template bombs, 10,000 tools, a request's rpc_servers, slowloris, huge
keep_alive, GGUF header bombs, a deleted blob, a wrong digest, a second serve) record the status and error text
each got, and the largest gap another client (a ticker asking /api/version every 10 ms) saw meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import hardening  # noqa: E402
from tests.fakes.gguf_files import write_tiny_gguf  # noqa: E402
from tests.helpers.mixed_load import one_request  # noqa: E402
from tests.helpers.processes import runner_processes, start_fake_serve, wait_for_runners, wait_gone  # noqa: E402
from tests.helpers.serve import create_from_file, start_serve, stop_serve  # noqa: E402

DEFAULT_MODEL = Path.home() / ".cache" / "ollama-py" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
ENDLESS = {"FAKE_TOKEN_DELAY": "0.02", "FAKE_TOKENS": "1000000"}


@dataclass
class Tally:
    injected: Counter = field(default_factory=Counter)
    survived: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)  # answered / refused / lost
    notes: list[str] = field(default_factory=list)


def read_stream(resp: requests.Response, limit: int = 100000) -> str:
    """Classify a streamed NDJSON answer: answered, refused (final error line) or lost."""
    last = None
    try:
        for i, line in enumerate(resp.iter_lines()):
            if line:
                last = json.loads(line)
            if i > limit:
                return "lost"
    except (requests.RequestException, ValueError):
        return "lost"
    if last is None:
        return "lost"
    return "refused" if "error" in last else "answered" if last.get("done") else "lost"


def classify(r: requests.Response) -> str:
    """A non-streamed answer: complete, a JSON error, or lost."""
    try:
        body = r.json()
    except ValueError:
        return "lost"
    if r.status_code == 200 and body.get("done", True) and "error" not in body:
        return "answered"
    return "refused" if r.status_code >= 400 and "error" in body else "lost"


def plain(url: str, model: str = "tiny", timeout: float = 120) -> str:
    try:
        return classify(requests.post(url + "/api/generate", timeout=timeout, json={
            "model": model, "prompt": "hi", "stream": False, "options": {"num_predict": 3}}))
    except requests.RequestException:
        return "lost"


def disk_full(tmp: Path, gguf: Path, tally: Tally) -> None:
    """The store on a 20 MiB tmpfs: a 24 MiB blob upload and a create copying a 36 MiB GGUF, then a small create."""
    models = tmp / "models"
    models.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(models)]).returncode != 0:
        tally.notes.append("disk full: not run (mounting a tmpfs needs root)")
        return
    big = write_tiny_gguf(tmp / "big.gguf", blocks=1, embd=1024)
    proc, url = start_fake_serve(tmp, gguf, {"OLLAMA_PY_IMPORT_DIRS": str(tmp)})  # `from` big.gguf on the server
    try:
        blob = os.urandom(24 << 20)
        digest = "sha256:" + hashlib.sha256(blob).hexdigest()
        attempts = [
            ("disk full during a blob upload", lambda: classify(requests.post(
                f"{url}/api/blobs/{digest}", data=blob, timeout=120))),
            ("disk full during a create", lambda: read_stream(requests.post(
                url + "/api/create", json={"model": "big", "from": str(big)}, stream=True, timeout=120))),
        ]
        for kind, attempt in attempts:
            tally.injected[kind] += 1
            hit = attempt()
            tally.outcomes[hit] += 1
            after = classify(requests.post(url + "/api/create", timeout=120, json={
                "model": f"small{tally.injected[kind]}", "from": "tiny", "system": "x", "stream": False}))
            tally.outcomes[after] += 1
            partial = [p.name for p in (models / "blobs").iterdir() if "tmp" in p.name or "partial" in p.name]
            if hit == "refused" and after == "answered" and not partial:
                tally.survived[kind] += 1
    finally:
        stop_serve(proc)
        subprocess.run(["umount", "-l", str(models)])


def killed_mid_stream(url: str, serve_pid: int, sig: signal.Signals, model: str, tally: Tally, kind: str) -> None:
    """Start a long stream, hit its runner with `sig` after a few tokens, then ask again."""
    tally.injected[kind] += 1
    with requests.post(url + "/api/generate", stream=True, timeout=120, json={
            "model": model, "prompt": "Tell me a long story.", "options": {"num_predict": 100000}}) as resp:
        lines = resp.iter_lines()
        for _ in range(3):
            next(lines)
        [runner] = runner_processes(serve_pid)
        runner.send_signal(sig)
        hit = read_stream(resp)
    after = plain(url, model)
    tally.outcomes[hit] += 1
    tally.outcomes[after] += 1
    if hit in ("answered", "refused") and after == "answered" and not wait_gone([runner]):
        tally.survived[kind] += 1


def hung_up(url: str, tally: Tally) -> None:
    tally.injected["client hangs up mid-stream"] += 1
    with requests.post(url + "/api/generate", stream=True, timeout=120,
                       json={"model": "tiny", "prompt": "go on"}) as resp:
        lines = resp.iter_lines()
        for _ in range(3):
            next(lines)
    # one slot and an endless generation: this finishes only if the abandoned one was stopped
    after = plain(url, timeout=60)
    tally.outcomes[after] += 1
    if after == "answered":
        tally.survived["client hangs up mid-stream"] += 1


def serve_stopped(tmp: Path, gguf: Path, how: str, tally: Tally) -> None:
    kind = f"serve stopped with {how}"
    tally.injected[kind] += 1
    proc, url = start_fake_serve(tmp, gguf, {"OLLAMA_NUM_PARALLEL": "2", **ENDLESS})
    try:
        requests.post(url + "/api/embed", json={"model": "tiny", "input": "x"}, timeout=60)
        requests.post(url + "/api/generate", json={"model": "tiny"}, timeout=60)
        runners = wait_for_runners(proc.pid, 2)
        if how == "Ctrl-C":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM if how == "SIGTERM" else signal.SIGKILL)
        proc.wait(60)
        left = wait_gone(runners)
        if not left:
            tally.survived[kind] += 1
        else:
            tally.notes.append(f"{kind}: {len(left)} runner(s) left")
    finally:
        stop_serve(proc)


def flood(url: str, serve_pid: int, rounds: int, tally: Tally) -> dict[str, Any]:
    """rounds x 200 concurrent requests against OLLAMA_MAX_QUEUE=8; peak RSS of serve."""

    async def run() -> dict[str, Any]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                         timeout=aiohttp.ClientTimeout(total=600)) as session:
            await one_request(session, url, 0)
            rss0 = psutil.Process(serve_pid).memory_info().rss
            peak, counts = rss0, Counter()
            for _ in range(rounds):
                task = asyncio.gather(*(one_request(session, url, i) for i in range(200)), return_exceptions=True)
                while not task.done():
                    peak = max(peak, psutil.Process(serve_pid).memory_info().rss)
                    await asyncio.sleep(0.05)
                counts.update(o if o in ("ok", "busy") else "lost" for o in task.result())
            after = await one_request(session, url, 1)
            return {"counts": counts, "rss0": rss0, "peak": peak, "after": after,
                    "rss_end": psutil.Process(serve_pid).memory_info().rss}

    out = asyncio.run(run())
    tally.outcomes["answered"] += out["counts"]["ok"]
    tally.outcomes["refused"] += out["counts"]["busy"]
    tally.outcomes["lost"] += out["counts"]["lost"]
    return out


def bad_inputs(url: str) -> Counter:
    """The bad-input table and the fuzzers of the test suite, sent to serve."""
    from hypothesis import HealthCheck, given, settings

    from tests.unit import test_bad_input as sweep
    from tests.unit import test_openapi as fuzz

    seen: Counter = Counter()
    # The table's huge bodies are sized for its test app's 64 KiB limit; serve's is 64 MiB, so one body past it.
    huge = sweep.Case("generate-past-64MiB", "POST", "/api/generate",
                      b'{"model": "tiny", "x": "' + b"x" * (65 << 20) + b'"}', 413)
    for case in [c for c in sweep.CASES if not c.id.endswith("huge-body")] + [huge]:
        data = json.dumps(case.body).encode() if isinstance(case.body, dict) else case.body
        r = requests.request(case.method, url + case.path, data=data, timeout=60,
                             headers={"Content-Type": "application/json"})
        seen["tried"] += 1
        if 400 <= r.status_code < 500:
            seen["refused (4xx)"] += 1
        else:
            seen[f"status {r.status_code}"] += 1
            print(f"bad input {case.id}: {r.status_code} {r.text[:200]}", file=sys.stderr)
    for op in fuzz.FUZZED:
        for strategy in (fuzz.from_schema(fuzz.SCHEMAS[op.request]), fuzz.mistyped(fuzz.SCHEMAS[op.request])):
            @settings(max_examples=60, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            @given(body=strategy)
            def send(body: Any) -> None:  # run at once below, in this iteration: `op` is this loop's
                if op.path == "/api/delete" and isinstance(body, dict):  # noqa: B023
                    body = {**body, "model": "other"}
                r = requests.request(op.method.upper(), url + op.path, json=body, timeout=120)  # noqa: B023
                seen["fuzzed"] += 1
                seen["fuzz 5xx"] += r.status_code >= 500
                seen["fuzz 4xx"] += 400 <= r.status_code < 500

            send()
    return seen


def load_line() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.1f} / {five:.1f} / {fifteen:.1f} (1 / 5 / 15 min)"


def report(tally: Tally, load: dict[str, Any] | None, bad: Counter | None, rounds: int, real: bool,
           hard: list[hardening.Row], loads: tuple[str, str]) -> str:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Reliability", "",
        f"`bench/reliability.py --rounds {rounds}` on {platform.machine()}, {psutil.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {now}. `serve` runs as a subprocess over the fake llama-server"
        + (" (and the real llama-server with SmolLM2 for the SIGKILL row marked real)." if real else "."),
        f"The machine is shared and was busy: {loads[0]} at the start, {loads[1]} at the end, on "
        f"{psutil.cpu_count()} CPUs.",
        "Every request is classified: answered (complete), refused (status >= 400 or a final `{\"error\"}` line),"
        " lost (anything else). A fault is survived when its request was answered or refused, the runner was"
        " reaped, and the next request was answered.", "",
    ]
    if tally.injected:
        lines += ["## Faults", "", "| fault | injected | survived |", "|---|---:|---:|"]
        for kind in tally.injected:
            lines.append(f"| {kind} | {tally.injected[kind]} | {tally.survived[kind]} |")
        lines += ["", "## Requests", "",
                  "Every request of the fault runs and the load rounds (the 503s of the load rounds are refusals).",
                  "", "| answered | refused | lost |", "|---:|---:|---:|",
                  f"| {tally.outcomes['answered']} | {tally.outcomes['refused']} | **{tally.outcomes['lost']}** |",
                  ""]
    if hard:
        lines += hardening_section(hard)
    if load is not None:
        lines += load_section(load, rounds)
    if bad is not None:
        lines += bad_section(bad)
    lines += found_section()
    if tally.notes:
        lines += ["## Notes", "", *[f"- {n}" for n in tally.notes], ""]
    return "\n".join(lines)


def hardening_section(rows: list[hardening.Row]) -> list[str]:
    idle = next((r.gap_ms for r in rows if r.case.startswith("idle")), 0.0)
    return [
        "## Hostile and unlucky requests (issues 22 and 34)", "",
        f"bench/hardening.py, one `serve` over the fake runner (`OLLAMA_PY_MAX_CONNECTIONS={hardening.CAP}`, a config"
        " file with one alias, the web console on, `OLLAMA_PY_LOOP_WARN_MS=20`, otherwise the defaults). Each step"
        " sends one thing and records the status and the error text; meanwhile a ticker (another"
        " client, its own thread and keep-alive connection) asks `GET /api/version` every 10 ms, and *largest gap* is"
        " the longest time between two of its answers during the step: how long the gateway's event loop was"
        f" unavailable to everyone else, plus this machine's noise (the idle row: {idle:.0f} ms). Every step ran"
        f" {len(rows[0].gaps)} times, each run on a fresh serve; the gap is the median of the runs (each run's is"
        " listed: a neighbour on this shared machine can stretch any one of them), status and text the first"
        " run's. *serve's loop held* is the longest hold of serve's own event loop that it logged"
        " (server/loop_watch.py, median of the runs): the gap without the ticker's own waits for a CPU.", "",
        *hardening.table(rows), "",
        "Reading it: the printf bomb's 200 is Go's answer too (a width past 1e6 is not a width: the template"
        " prints `%!(NOVERB)%!(EXTRA int=1)`, as Go's fmt does); `\"9999999999h\"` is a 400 because Go's"
        " `time.ParseDuration` refuses it (it overflows), while the number 1e12 is clamped to forever.", "",
        *hardening_findings(rows, idle), "",
    ]


def hardening_findings(rows: list[hardening.Row], idle: float) -> list[str]:
    """What a reader must not miss: any 5xx, any answer other than 'exit 1' from a second serve, and every
    median gap past 100 ms and 4x the idle row (the machine's noise stays under that here)."""
    bound = max(100.0, 4 * idle)
    found = [f"- **{r.status}** for {r.case} / {r.step}: {r.text[:200]}" for r in rows
             if r.status.startswith("5") or r.status in ("timeout", "no answer")
             or (r.case.startswith("a second serve") and r.status != "exit 1")]
    found += [f"- **{r.gap_ms:.0f} ms** gap (median; runs {' / '.join(f'{g:.0f}' for g in r.gaps)} ms) during"
              f" {r.case} / {r.step}" for r in rows if r.gap_ms > bound]
    if not found:
        return [f"Not one 5xx, and no gap past {bound:.0f} ms."]
    return [f"Found (a 5xx, a missing refusal, or a gap past {bound:.0f} ms; not fixed here):", "", *found]


def load_section(load: dict[str, Any], rounds: int) -> list[str]:
    c = load["counts"]
    return [
        "## Load held", "",
        f"{rounds} rounds of 200 concurrent requests (generate, chat stream, OpenAI chat) with "
        "`OLLAMA_MAX_QUEUE=8`, one slot, 4 tokens at 50 ms: "
        f"{c['ok']} complete answers, {c['busy']} `503 server busy`, {c['lost']} other. "
        f"serve RSS {load['rss0'] >> 20} MiB before, peak {load['peak'] >> 20} MiB, "
        f"{load['rss_end'] >> 20} MiB after; the next request: {load['after']}.", "",
    ]


def bad_section(bad: Counter) -> list[str]:
    return [
        "## Bad input", "",
        f"{bad['tried']} hand-written bad requests (tests/unit/test_bad_input.py's table): "
        f"{bad['refused (4xx)']} refused with a 4xx"
        + "".join(f", {v} {k}" for k, v in bad.items() if k.startswith("status")) + ". "
        f"{bad['fuzzed']} generated bodies (schema-conforming and mistyped, tests/unit/test_openapi.py's "
        f"strategies): {bad['fuzz 4xx']} refused with a 4xx, {bad['fuzz 5xx']} got a 5xx, the rest answered.", "",
    ]


def found_section() -> list[str]:
    return [
        "## Found and fixed while building these", "",
        "- closing a runner's HTTP session under a stream left the stream waiting forever (aiohttp drops the"
        " payload before the connection-lost callback): SIGTERM of serve with a stream in flight took 10 s and cut"
        " the stream off; now in-flight requests fail at once with a final error line;",
        "- no request timeout: a runner that stopped answering (SIGSTOP, deadlock) hung its request forever;"
        " now `OLLAMA_REQUEST_TIMEOUT` (default 10m of silence) kills it and the next request gets a fresh one;",
        "- an unexpected exception (e.g. ENOSPC) was a plain-text 500, or a stream cut off without an error"
        " line; now a JSON error, 507 `no space left on device` for a full disk;",
        "- JSON that Go refuses (NaN, Infinity, nesting past the parser) and lone UTF-16 surrogates were 500s;",
        "- out-of-range `context` token ids went to the runner; a refused CORS origin still got"
        " `Access-Control-Allow-Origin`.", "",
    ]


CASES = ("faults", "bad", "load", "stop", "disk", "real", "hardening")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="SmolLM2 GGUF for the real-runner row")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "reliability.md")
    ap.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES), help="which parts to run (all)")
    ap.add_argument("--hardening-runs", type=int, default=3, help="runs of the issue-22 cases (gap: median)")
    args = ap.parse_args()
    cases = set(args.cases)
    tally = Tally()
    load: dict[str, Any] | None = None
    bad: Counter | None = None
    hard: list[hardening.Row] = []
    real = False
    load_before = load_line()
    with tempfile.TemporaryDirectory(prefix="reliability-") as scratch:
        tmp = Path(scratch)
        gguf = write_tiny_gguf(tmp / "tiny.gguf")

        if "hardening" in cases:
            hard = hardening.run_repeated(tmp / "h", gguf, args.hardening_runs)

        if "faults" in cases:
            proc, url = start_fake_serve(tmp / "a", gguf, {"OLLAMA_REQUEST_TIMEOUT": "1s", **ENDLESS})
            try:
                for _ in range(args.rounds):
                    killed_mid_stream(url, proc.pid, signal.SIGKILL, "tiny", tally, "runner SIGKILLed mid-stream")
                    killed_mid_stream(url, proc.pid, signal.SIGSTOP, "tiny", tally,
                                      "runner SIGSTOPped mid-stream (request timeout)")
                    hung_up(url, tally)
            finally:
                stop_serve(proc)

        if "bad" in cases:
            proc, url = start_fake_serve(tmp / "c", gguf, {"FAKE_TOKENS": "4"})
            try:
                bad = bad_inputs(url)
            finally:
                stop_serve(proc)

        if "load" in cases:
            proc, url = start_fake_serve(tmp / "b", gguf, {"OLLAMA_MAX_QUEUE": "8", "FAKE_TOKEN_DELAY": "0.05",
                                                           "FAKE_TOKENS": "4"})
            try:
                load = flood(url, proc.pid, args.rounds, tally)
            finally:
                stop_serve(proc)

        if "stop" in cases:
            for i, how in enumerate(["SIGTERM", "Ctrl-C", "SIGKILL"] * max(1, args.rounds // 3)):
                serve_stopped(tmp / f"s{i}", gguf, how, tally)

        if "disk" in cases:
            disk_full(tmp / "disk", gguf, tally)

        real = "real" in cases and args.model.is_file()
        if real:
            (tmp / "real").mkdir()
            proc, url, _ = start_serve(tmp / "real")
            try:
                create_from_file(url, "smollm2:135m", args.model)
                for _ in range(max(1, args.rounds // 3)):
                    killed_mid_stream(url, proc.pid, signal.SIGKILL, "smollm2:135m", tally,
                                      "real llama-server SIGKILLed mid-stream")
            finally:
                stop_serve(proc)

    text = report(tally, load, bad, args.rounds, real, hard, (load_before, load_line()))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)
    sys.exit(1 if tally.outcomes["lost"] else 0)


if __name__ == "__main__":
    main()
