"""Gateway overhead: the same model served by a direct llama-server and through ollama-py, in one run.

    .venv/bin/python bench/overhead.py --runner runners/cpu_avx2/llama-server \
        --model ~/.cache/ollama-py/models/SmolLM2-135M-Instruct.Q4_1.gguf [--rounds 41] [--cases ...]

For each phase an `ollama-py serve` subprocess (its own store in a temp dir) gets the model through
POST /api/blobs + /api/create and loads it. The direct side then calls the very llama-server process the
gateway started, on its own port (read from the process table): one process, so binary, flags, model file,
memory layout and prompt cache are the same, and what differs between the sides is the gateway alone. (Two
processes of the same binary and argv differ by up to +-5% in their own decode timings on a shared VM, more
than the gateway's cost; `--direct own` starts a second llama-server with the gateway's argv on another port,
as earlier runs did.) Prompts are rendered once by the direct server's /apply-template and sent to the gateway
as /api/generate with "raw": true, so both evaluate the identical prompt with the identical sampling
(temperature 0, fixed seed). Every round runs both sides back to back, alternating which goes first; the
table reports medians, and ratios/differences as medians of the per-round pairs. See bench/README.md.

Cases (issue 6, "Speed"):
  decode       streamed decode tokens/s, client-side: (tokens - 1) / (last token - first token)   >= 98% of direct
  ttft         time to first content byte for a warm model and a cached prompt                     <= +5 ms median
  turns        a ~1,000-token conversation's 2nd-turn TTFT / 1st-turn TTFT via /api/chat           <= 0.25
  concurrency  8 streams at once, 4 slots (-np 4; OLLAMA_NUM_PARALLEL=4): aggregate tokens/s      >= 95% of direct
  capacity     chunks/s relayed from the fake llama-server on one core (bench/gateway_capacity.py) >= 5,000

Writes bench/results/overhead.json and bench/results/overhead.md. No assertions: a missed target is reported.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (  # noqa: E402
    RESULTS,
    Child,
    cpu_seconds,
    create_model,
    free_port,
    load_average,
    machine_info,
    markdown_table,
    median,
    runner_argv,
    runner_key,
    start_llama_server,
    start_serve,
    summary,
    text_table,
    with_port,
    write_json,
    write_text,
)
from bench.gateway_capacity import measure_capacity  # noqa: E402

MODEL = "smollm2-bench"
SAMPLING = {"temperature": 0, "seed": 42}
CASES = ("decode", "ttft", "turns", "concurrency", "capacity")
TARGETS = {"decode": 0.98, "ttft_ms": 5.0, "turns": 0.25, "concurrency": 0.95, "capacity": 5000}


def log(msg: str) -> None:
    print(msg, flush=True)


# -- one streamed request -----------------------------------------------------------------------------------------
@dataclass
class Sample:
    t_start: float
    t_first: float | None  # first content byte
    t_last: float | None  # last content byte
    chunks: int  # chunks with content
    tokens: int  # predicted tokens (timings.predicted_n / eval_count)
    prompt_n: int  # prompt tokens evaluated (cached prefix left out)
    stop: str  # limit | eos | ...
    text: str
    server_rate: float | None = None  # decode tokens/s as the runner timed it
    gateway_cpu_s: float | None = None  # the serve process's CPU time over the request (gateway side only)

    @property
    def ttft(self) -> float:
        return (self.t_first or self.t_start) - self.t_start

    @property
    def decode_rate(self) -> float | None:
        """(tokens with text - 1) / (last - first): the first token is prompt processing, not decode."""
        n = self.tokens - (1 if self.stop in ("eos", "stop") else 0)
        if n < 2 or self.t_first is None or self.t_last is None or self.t_last <= self.t_first:
            return None
        return (n - 1) / (self.t_last - self.t_first)


async def stream(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> Sample:
    """POST a streaming request to llama-server (SSE) or ollama-py (NDJSON) and time its content."""
    sse = url.endswith("/completion")
    t_start = time.perf_counter()
    t_first = t_last = None
    chunks = 0
    parts: list[str] = []
    final: dict[str, Any] = {}
    async with session.post(url, json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{url}: {resp.status} {(await resp.text())[:500]}")
        async for line in resp.content:
            if sse:
                if not line.startswith(b"data: "):
                    continue
                line = line[6:]
            if not line.strip() or line.strip() == b"[DONE]":
                continue
            ev = json.loads(line)
            if "error" in ev:
                raise RuntimeError(f"{url}: {ev['error']}")
            text = ev.get("content") if sse else ev.get("response", (ev.get("message") or {}).get("content"))
            if text:
                t_last = time.perf_counter()
                t_first = t_first or t_last
                chunks += 1
                parts.append(text)
            if ev.get("stop") is True or ev.get("done") is True:
                final = ev
    if sse:
        timings = final.get("timings", {})
        tokens, prompt_n, stop = timings.get("predicted_n", 0), timings.get("prompt_n", 0), final.get("stop_type", "")
        # predicted_n / predicted_ms, as the gateway's eval_count / eval_duration below: llama-server's own
        # predicted_per_second divides predicted_n - 1 by the same time, 1 % less at 96 tokens.
        rate = tokens / (timings["predicted_ms"] / 1e3) if timings.get("predicted_ms") else None
    else:
        tokens, prompt_n = final.get("eval_count", 0), final.get("prompt_eval_count", 0)
        stop = {"length": "limit"}.get(final.get("done_reason", ""), final.get("done_reason", ""))
        rate = tokens / (final["eval_duration"] / 1e9) if final.get("eval_duration") else None
    return Sample(t_start, t_first, t_last, chunks, int(tokens), int(prompt_n), stop, "".join(parts), rate)


@dataclass
class Pair:
    """One model served two ways in one phase."""

    direct_url: str
    direct: Child | None  # a llama-server of our own (--direct own); None: the gateway's runner itself
    gateway: Child
    argv: list[str]
    session: aiohttp.ClientSession

    def gateway_cpu(self) -> float:
        """CPU seconds the serve process (not its runner) has used so far."""
        return cpu_seconds(self.gateway.proc.pid)

    async def template(self, messages: list[dict[str, Any]]) -> str:
        async with self.session.post(self.direct_url + "/apply-template", json={"messages": messages}) as r:
            return (await r.json())["prompt"]

    async def tokenize(self, text: str) -> int:
        async with self.session.post(self.direct_url + "/tokenize", json={"content": text}) as r:
            return len((await r.json())["tokens"])

    async def run(self, side: str, prompt: str, n_predict: int) -> Sample:
        if side == "direct":
            return await stream(self.session, self.direct_url + "/completion",
                                {"prompt": prompt, "stream": True, "cache_prompt": True, "n_predict": n_predict,
                                 **SAMPLING})
        cpu0 = self.gateway_cpu()
        sample = await stream(self.session, self.gateway.url + "/api/generate",
                              {"model": MODEL, "prompt": prompt, "raw": True, "stream": True,
                               "options": {"num_predict": n_predict, **SAMPLING}})
        sample.gateway_cpu_s = self.gateway_cpu() - cpu0
        return sample


def sides(round_no: int) -> tuple[str, str]:
    """Alternate which side goes first, so neither always runs right after the other's cache warm-up."""
    return ("direct", "gateway") if round_no % 2 == 0 else ("gateway", "direct")


async def open_pair(tmp: Path, model: Path, runner: Path, parallel: int, own_direct: bool = False) -> Pair:
    """serve (OLLAMA_NUM_PARALLEL=parallel) with the model created and loaded; the direct side is the gateway's
    runner on its own port, or (own_direct) a second llama-server with the argv the gateway used."""
    env = {"OLLAMA_NUM_PARALLEL": str(parallel), "OLLAMA_LLM_LIBRARY": runner.parent.name,
           "OLLAMA_RUNNERS_DIR": str(runner.parent.parent)}
    gateway = start_serve(tmp / f"serve-np{parallel}", env)
    direct: Child | None = None
    # llama-server closes the connection after a streamed response (while announcing keep-alive), so a pooled
    # connection to it is a race; a fresh connection per request on both sides keeps the comparison even.
    session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=900),
                                    connector=aiohttp.TCPConnector(force_close=True))
    try:
        await asyncio.to_thread(create_model, gateway.url, MODEL, model)
        async with session.post(gateway.url + "/api/generate", json={"model": MODEL}) as r:  # load it
            if r.status != 200:
                raise RuntimeError(f"load: {r.status} {await r.text()}")
        argv = runner_argv(gateway)
        if argv is None:
            raise RuntimeError(f"no llama-server under serve:\n{gateway.log_tail()}")
        if Path(argv[0]).resolve() != runner.resolve():  # noqa: ASYNC240 - set-up, before anything is timed
            log(f"warning: the gateway runs {argv[0]}, not {runner}; the direct server uses the gateway's")
        if not own_direct:
            port = argv[argv.index("--port") + 1]
            log(f"  direct: the gateway's runner at 127.0.0.1:{port}")
            # the runner requires its key; the gateway, without OLLAMA_API_KEYS, ignores the header
            session.headers["Authorization"] = f"Bearer {runner_key(gateway)}"
            return Pair(f"http://127.0.0.1:{port}", None, gateway, argv, session)
        argv = with_port(argv, free_port())
        log(f"  direct: {' '.join(argv)}")
        direct = await asyncio.to_thread(start_llama_server, argv, tmp / f"direct-np{parallel}.log")
        return Pair(direct.url, direct, gateway, argv, session)
    except BaseException:
        await session.close()
        if direct is not None:
            direct.stop()
        gateway.stop()
        raise


async def close_pair(pair: Pair) -> None:
    await pair.session.close()
    if pair.direct is not None:
        pair.direct.stop()
    pair.gateway.stop()


# -- cases --------------------------------------------------------------------------------------------------------
async def case_decode(pair: Pair, rounds: int, n_predict: int) -> dict[str, Any]:
    prompt = await pair.template([{"role": "user", "content": "Write a long story about a dragon who learns to "
                                                              "fly, with many chapters and details."}])
    await pair.run("direct", prompt, 8)
    await pair.run("gateway", prompt, 8)
    rates: dict[str, list[float]] = {"direct": [], "gateway": []}
    server: dict[str, list[float]] = {"direct": [], "gateway": []}
    ratios: list[float] = []
    cpu_per_token: list[float] = []
    texts: dict[str, str] = {}
    for i in range(rounds):
        got: dict[str, Sample] = {}
        for side in sides(i):
            got[side] = s = await pair.run(side, prompt, n_predict)
            texts.setdefault(side, s.text)
            if s.server_rate:
                server[side].append(s.server_rate)
        d, g = got["direct"].decode_rate, got["gateway"].decode_rate
        if d and g:
            rates["direct"].append(d)
            rates["gateway"].append(g)
            ratios.append(g / d)
        if got["gateway"].gateway_cpu_s is not None and got["gateway"].tokens:
            cpu_per_token.append(got["gateway"].gateway_cpu_s / got["gateway"].tokens * 1e6)
        log(f"  decode {i + 1}/{rounds}: direct {_f(d)} tok/s, gateway {_f(g)} tok/s "
            f"(gateway CPU {cpu_per_token[-1] if cpu_per_token else 0:.0f} us/token)")
    d, g = median(rates["direct"]), median(rates["gateway"])
    return {"unit": "tokens/s", "n_predict": n_predict, "direct": summary(rates["direct"], 2),
            "gateway": summary(rates["gateway"], 2), "ratio_of_medians": round(g / d, 4) if d and g else None,
            "paired_ratio": summary(ratios, 4), "ratio": round(median(ratios), 4) if ratios else None,
            "runner_timed": {"direct": summary(server["direct"], 2), "gateway": summary(server["gateway"], 2)},
            "gateway_cpu_us_per_token": summary(cpu_per_token, 1),
            "target": TARGETS["decode"], "identical_output": texts.get("direct") == texts.get("gateway")}


async def case_ttft(pair: Pair, rounds: int) -> dict[str, Any]:
    # The prompt is the same every time, so both servers answer from their prompt cache: what is left is the
    # HTTP, scheduling and first-token path -- the overhead the gateway adds.
    prompt = await pair.template([{"role": "user", "content": "Say hello."}])
    for side in ("direct", "gateway", "direct", "gateway"):
        await pair.run(side, prompt, 2)
    ms: dict[str, list[float]] = {"direct": [], "gateway": []}
    cpu_ms: list[float] = []
    for i in range(rounds):
        for side in sides(i):
            s = await pair.run(side, prompt, 2)
            ms[side].append(s.ttft * 1000)
            if s.gateway_cpu_s is not None:
                cpu_ms.append(s.gateway_cpu_s * 1000)
    diffs = [g - d for d, g in zip(ms["direct"], ms["gateway"])]
    d, g = median(ms["direct"]), median(ms["gateway"])
    log(f"  ttft: direct {d:.1f} ms, gateway {g:.1f} ms (median of paired differences {median(diffs):.1f} ms; "
        f"gateway CPU {median(cpu_ms) or 0:.2f} ms per request)")
    return {"unit": "ms", "direct": summary(ms["direct"], 2), "gateway": summary(ms["gateway"], 2),
            "difference_of_medians_ms": round(g - d, 2), "paired_diff_ms": summary(diffs, 2),
            "added_ms": round(median(diffs), 2), "gateway_cpu_ms_per_request": summary(cpu_ms, 2),
            "target_added_ms": TARGETS["ttft_ms"]}


_COLORS = ("red", "green", "blue", "amber", "violet", "silver", "golden")
_ANIMALS = ("fox", "heron", "badger", "otter", "lynx", "crow", "hare", "newt", "wolf", "moth", "seal")
_PLACES = ("old mill", "river bend", "stone bridge", "market square", "north tower")
_THINGS = ("apples", "lanterns", "pebbles", "boats", "letters", "keys", "shells", "candles", "coins", "bells",
           "feathers", "maps", "ropes")


def long_text(n: int, salt: int) -> str:
    rnd = random.Random(salt)
    return " ".join(f"Note {i}: the {rnd.choice(_COLORS)} {rnd.choice(_ANIMALS)} walked past the "
                    f"{rnd.choice(_PLACES)} and counted {rnd.randint(2, 99)} {rnd.choice(_THINGS)}." for i in range(n))


async def case_turns(pair: Pair, rounds: int, target_tokens: int, n_predict: int) -> dict[str, Any]:
    """Each round a fresh ~1,000-token conversation (a different first sentence, so turn 1 is not cached);
    turn 2 repeats it with the reply and a short question, and should evaluate only the new tokens."""
    per_note = max(1, await pair.tokenize(long_text(10, 0)) // 10)
    notes = max(1, target_tokens // per_note)

    async def conversation(side: str, salt: int) -> tuple[Sample, Sample]:
        msgs = [{"role": "system", "content": "You are a careful assistant."},
                {"role": "user", "content": f"Session {salt}. Read these notes.\n{long_text(notes, salt)}\n"
                                            "Which animal is mentioned first?"}]
        turn = []
        for k in range(2):
            if side == "direct":
                turn.append(await pair.run("direct", await pair.template(msgs), n_predict))
            else:
                turn.append(await stream(pair.session, pair.gateway.url + "/api/chat",
                                         {"model": MODEL, "messages": msgs, "stream": True,
                                          "options": {"num_predict": n_predict, **SAMPLING}}))
            if k == 0:
                msgs = [*msgs, {"role": "assistant", "content": turn[0].text},
                        {"role": "user", "content": "And which one is mentioned last?"}]
        return turn[0], turn[1]

    out: dict[str, dict[str, list[float]]] = {s: {"ttft1_ms": [], "ttft2_ms": [], "ratio": [], "prompt1": [],
                                                  "prompt2": []} for s in ("direct", "gateway")}
    salt = random.randrange(1 << 30)
    for i in range(rounds):
        for side in sides(i):
            salt += 1
            t1, t2 = await conversation(side, salt)
            o = out[side]
            o["ttft1_ms"].append(t1.ttft * 1000)
            o["ttft2_ms"].append(t2.ttft * 1000)
            o["ratio"].append(t2.ttft / t1.ttft)
            o["prompt1"].append(t1.prompt_n)
            o["prompt2"].append(t2.prompt_n)
        g = out["gateway"]
        log(f"  turns {i + 1}/{rounds}: gateway turn 1 {g['ttft1_ms'][-1]:.0f} ms ({g['prompt1'][-1]:.0f} tokens), "
            f"turn 2 {g['ttft2_ms'][-1]:.0f} ms ({g['prompt2'][-1]:.0f} tokens evaluated)")
    res: dict[str, Any] = {"unit": "ms", "target_ratio": TARGETS["turns"]}
    for side, o in out.items():
        res[side] = {k: summary(v, 3 if k == "ratio" else 1) for k, v in o.items()}
    res["ratio"] = res["gateway"]["ratio"]["median"]
    return res


async def case_concurrency(pair: Pair, rounds: int, streams: int, n_predict: int) -> dict[str, Any]:
    topics = ["a lighthouse keeper", "a lost robot", "a city under the sea", "a clockmaker's apprentice",
              "a desert caravan", "a talking tree", "a winter festival", "a pirate librarian",
              "a mountain railway", "a garden on the moon", "a retired detective", "a singing river"]
    prompts = [await pair.template([{"role": "user",
                                                "content": f"Write a long story about {topics[i % len(topics)]}."}])
               for i in range(streams)]
    for side in ("direct", "gateway"):  # warm the slots' caches with these prompts
        await asyncio.gather(*(pair.run(side, p, 2) for p in prompts))
    agg: dict[str, list[float]] = {"direct": [], "gateway": []}
    ratios: list[float] = []
    for i in range(rounds):
        for side in sides(i):
            t0 = time.perf_counter()
            samples = await asyncio.gather(*(pair.run(side, p, n_predict) for p in prompts))
            end = max(s.t_last or s.t_start for s in samples)
            agg[side].append(sum(s.tokens for s in samples) / (end - t0))
        ratios.append(agg["gateway"][-1] / agg["direct"][-1])
        log(f"  concurrency {i + 1}/{rounds}: direct {agg['direct'][-1]:.1f} tok/s, "
            f"gateway {agg['gateway'][-1]:.1f} tok/s")
    d, g = median(agg["direct"]), median(agg["gateway"])
    return {"unit": "tokens/s (aggregate)", "streams": streams, "slots": 4, "n_predict": n_predict,
            "direct": summary(agg["direct"], 2), "gateway": summary(agg["gateway"], 2),
            "ratio_of_medians": round(g / d, 4) if d and g else None, "paired_ratio": summary(ratios, 4),
            "ratio": round(median(ratios), 4), "target": TARGETS["concurrency"]}


# -- report -------------------------------------------------------------------------------------------------------
HEADERS = ("Case", "Direct llama-server", "Through ollama-py", "Result", "Target", "Met")


def _met(ok: bool | None) -> str:
    return "n/a" if ok is None else ("yes" if ok else "**no**")


def _f(x: float | None, spec: str = ".1f") -> str:
    return "n/a" if x is None else format(x, spec)


def table_rows(results: dict[str, Any]) -> list[list[str]]:
    """One row per case: medians, the ratio or difference, the target, met or not."""
    rows: list[list[str]] = []
    if d := results.get("decode"):
        r, rm = d["ratio"], d["ratio_of_medians"]
        rows.append(["Streamed decode (tokens/s)", _f(d["direct"]["median"]), _f(d["gateway"]["median"]),
                     f"{_f(r and r * 100)} % (medians: {_f(rm and rm * 100)} %)", f">= {d['target'] * 100:.0f} %",
                     _met(r and r >= d["target"])])
    if t := results.get("ttft"):
        a = t["added_ms"]
        rows.append(["Time to first token, warm (ms)", _f(t["direct"]["median"]), _f(t["gateway"]["median"]),
                     f"{a:+.1f} ms (medians: {t['difference_of_medians_ms']:+.1f})",
                     f"<= +{t['target_added_ms']:.0f} ms", _met(a <= t["target_added_ms"])])
    if c := results.get("concurrency"):
        r, rm = c["ratio"], c["ratio_of_medians"]
        rows.append([f"{c['streams']} streams, {c['slots']} slots (aggregate tokens/s)", _f(c["direct"]["median"]),
                     _f(c["gateway"]["median"]), f"{_f(r and r * 100)} % (medians: {_f(rm and rm * 100)} %)",
                     f">= {c['target'] * 100:.0f} %", _met(r and r >= c["target"])])
    if t := results.get("turns"):
        d, g = t["direct"], t["gateway"]
        rows.append(["2nd-turn TTFT / 1st-turn TTFT, ~1k-token chat",
                     f"{_f(d['ratio']['median'], '.3f')} ({_f(d['ttft2_ms']['median'], '.0f')} / "
                     f"{_f(d['ttft1_ms']['median'], '.0f')} ms)",
                     f"{_f(g['ratio']['median'], '.3f')} ({_f(g['ttft2_ms']['median'], '.0f')} / "
                     f"{_f(g['ttft1_ms']['median'], '.0f')} ms)",
                     f"{_f(t['ratio'], '.3f')}", f"<= {t['target_ratio']}", _met(t["ratio"] <= t["target_ratio"])])
    if c := results.get("capacity"):
        per_cpu, wall = c["chunks_per_gateway_cpu_s"], c["chunks_per_s"]
        rows.append([f"Gateway capacity, fake runner ({c['headline_route']}, chunks/s)",
                     f"{_f(c['upstream_fake_events_per_s']['median'], ',.0f')} (fake's own rate)",
                     f"{_f(wall, ',.0f')} wall; {_f(per_cpu, ',.0f')} per gateway CPU-s",
                     f"{_f(per_cpu, ',.0f')} per core", f">= {c['target']:,}",
                     _met(per_cpu is not None and per_cpu >= c["target"])])
    return rows


def _argv(argv: list[str]) -> str:
    """The runner's flags for the report, the model blob's temp path shortened."""
    out = list(argv[1:])
    if "--model" in out:
        i = out.index("--model") + 1
        out[i] = "<blob>/" + Path(out[i]).name[:19] + "..."
    return " ".join(out)


def render_table(doc: dict[str, Any]) -> str:
    return text_table(HEADERS, [[c.replace("**", "") for c in r] for r in table_rows(doc["results"])])


def render_markdown(doc: dict[str, Any]) -> str:
    m, res = doc["machine"], doc["results"]
    out = [
        "# Gateway overhead: direct llama-server vs ollama-py",
        "",
        f"Run {m['date']} on {m['cores']} cores ({m['cpu']}, {m.get('memory_gib', '?')} GiB, {m['os']}, "
        f"Python {m['python']}), git {m.get('git', '?')}; {doc['duration_s']:.0f} s in all. "
        f"Model `{Path(doc['model']).name}`, runner `{doc['runner'].replace(str(ROOT) + '/', '')}`"
        + (f" ({'; '.join(str(v) for v in m['llama_cpp'].values())})" if m.get("llama_cpp") else "") + ".",
        "",
        f"Load average {m.get('load_average_at_start')} at the start, {m.get('load_average_at_end')} at the "
        f"end, on {m['cores']} cores (the benchmark itself keeps both busy). Rounds alternate between the two sides "
        "and the table shows medians, but single "
        "numbers are noisy; compare the ratios, not the absolute speeds.",
        "",
    ]
    if doc.get("note"):
        out += [doc["note"], ""]
    out += [markdown_table(HEADERS, table_rows(res)), ""]
    s = doc["settings"]
    out += ["## How", ""]
    own = s.get("direct") == "own"
    if "argv_np1" in res:
        out.append("- Direct server argv (the gateway's runner argv, another port): " if own else
                   "- Direct: the very llama-server process the gateway started, called on its own port, so both "
                   "sides share one process (its binary, flags, memory layout and prompt cache); argv: ")
        out[-1] += f"`{_argv(res['argv_np1'])}`."
    if "argv_np4" in res:
        out.append(f"- Concurrency phase: `{_argv(res['argv_np4'])}` and `OLLAMA_NUM_PARALLEL=4`.")
    out.append("- Ratios and differences are medians of per-round pairs (each round runs both sides back to "
               "back, so they share the machine's load at that moment); the ratio of the two medians is shown too.")
    if d := res.get("decode"):
        rt = d["runner_timed"]
        out.append(f"- Decode: {s['rounds']} rounds per side, {d['n_predict']} tokens, temperature 0, seed 42, the "
                   "same rendered prompt (`/api/generate` with `raw: true` vs `/completion`); rate = (tokens - 1) / "
                   "(last token - first token) at the client. Identical output on both sides: "
                   f"{'yes' if d.get('identical_output') else 'no'}. As llama-server timed itself: direct "
                   f"{_f(rt['direct']['median'])}, under the gateway {_f(rt['gateway']['median'])} tokens/s. "
                   f"The gateway process used {_f(d['gateway_cpu_us_per_token']['median'], '.0f')} us of CPU per "
                   "relayed token.")
    if t := res.get("ttft"):
        out.append(f"- TTFT: {t['direct']['n']} rounds per side, a short prompt answered from the prompt cache "
                   "(2 tokens generated); request start to first content byte at the client, a new connection per "
                   "request on both sides (llama-server closes the connection after a streamed response). The "
                   f"gateway process used {_f(t['gateway_cpu_ms_per_request']['median'], '.2f')} ms of CPU per "
                   "request.")
    if c := res.get("concurrency"):
        out.append(f"- Concurrency: {s['concurrency_rounds']} rounds per side; {c['streams']} streams of "
                   f"{c['n_predict']} tokens started together; aggregate = "
                   "all tokens / (last token - start).")
    if t := res.get("turns"):
        g = t["gateway"]
        out.append(f"- Second turn: {g['ratio']['n']} fresh conversations per side through `/api/chat` "
                   f"(first turn ~{g['prompt1']['median']:.0f} prompt tokens evaluated, second turn "
                   f"{g['prompt2']['median']:.0f}); the direct column renders with `/apply-template` and calls "
                   "`/completion` itself.")
    if c := res.get("capacity"):
        routes = "; ".join(f"`{r}` {_f(v['chunks_per_s']['median'], ',.0f')}/s wall, "
                           f"{_f(v['chunks_per_gateway_cpu_s']['median'], ',.0f')} per gateway CPU-s"
                           for r, v in c["routes"].items())
        out.append(f"- Capacity: the fake llama-server (`FAKE_TOKEN_DELAY=0`, `FAKE_TOKENS={c['tokens_per_request']}`) "
                   f"as the only runner variant of a real `ollama-py serve`"
                   + (" pinned to CPU 0 (the fake and the client on the other CPUs)" if c["pinned"] else "")
                   + f"; {s['capacity_rounds']} rounds. Chunks per gateway CPU-second (/proc schedstat: the serve "
                   "process, all threads, without its children) is the capacity of one core; wall chunks/s is what "
                   f"this shared machine gave. Per route: {routes}.")
    out += ["", "Raw samples: `bench/results/overhead.json`. Reproduce with `make bench`.", ""]
    return "\n".join(out)


# -- main ---------------------------------------------------------------------------------------------------------
async def run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    results: dict[str, Any] = {}
    if {"decode", "ttft", "turns"} & set(args.cases):
        log("phase 1: one slot (-np 1), as `ollama-py serve` runs by default")
        pair = await open_pair(tmp, args.model, args.runner, 1, args.direct == "own")
        try:
            results["argv_np1"] = pair.argv
            if "decode" in args.cases:
                results["decode"] = await case_decode(pair, args.rounds, args.decode_tokens)
            if "ttft" in args.cases:
                results["ttft"] = await case_ttft(pair, args.ttft_rounds)
            if "turns" in args.cases:
                results["turns"] = await case_turns(pair, args.turn_rounds, args.turn_tokens, 16)
        finally:
            await close_pair(pair)
    if "concurrency" in args.cases:
        log(f"phase 2: {args.streams} concurrent streams, 4 slots (-np 4)")
        pair = await open_pair(tmp, args.model, args.runner, 4, args.direct == "own")
        try:
            results["argv_np4"] = pair.argv
            results["concurrency"] = await case_concurrency(pair, args.concurrency_rounds, args.streams,
                                                            args.concurrency_tokens)
        finally:
            await close_pair(pair)
    if "capacity" in args.cases:
        log("phase 3: gateway capacity with the fake llama-server")
        results["capacity"] = await asyncio.to_thread(
            measure_capacity, tmp / "capacity", rounds=args.capacity_rounds, tokens=args.capacity_tokens, log=log)
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runner", type=Path, default=ROOT / "runners" / "cpu_avx2" / "llama-server")
    ap.add_argument("--model", type=Path,
                    default=Path.home() / ".cache" / "ollama-py" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    ap.add_argument("--direct", choices=("shared", "own"), default="shared",
                    help="shared: the direct side calls the gateway's own runner process; own: a second "
                         "llama-server with the same argv")
    ap.add_argument("--rounds", type=int, default=41, help="rounds per side for decode")
    ap.add_argument("--decode-tokens", type=int, default=96)
    ap.add_argument("--ttft-rounds", type=int, default=61)
    ap.add_argument("--turn-rounds", type=int, default=5)
    ap.add_argument("--turn-tokens", type=int, default=1000, help="size of the first turn's prompt")
    ap.add_argument("--concurrency-rounds", type=int, default=7)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--concurrency-tokens", type=int, default=64)
    ap.add_argument("--capacity-rounds", type=int, default=5)
    ap.add_argument("--capacity-tokens", type=int, default=20000)
    ap.add_argument("--out", type=Path, default=RESULTS, help="directory for overhead.json and overhead.md")
    ap.add_argument("--note", default="", help="a line about the conditions, for the markdown report")
    ap.add_argument("--rerender", action="store_true",
                    help="only rewrite overhead.md (and the table) from the existing overhead.json; with --note, "
                         "replace its note")
    args = ap.parse_args()
    if args.rerender:
        doc = json.loads((args.out / "overhead.json").read_text())
        if args.note:
            doc["note"] = args.note
            write_json(args.out / "overhead.json", doc)
        write_text(args.out / "overhead.md", render_markdown(doc))
        print(render_table(doc))
        return
    args.runner = args.runner.expanduser().resolve()
    args.model = args.model.expanduser().resolve()
    for p in (args.runner, args.model):
        if not p.exists():
            sys.exit(f"{p} does not exist (make runners models)")
    machine = machine_info(args.runner)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ollama-py-bench-") as tmp:
        results = asyncio.run(run(args, Path(tmp)))
    machine["load_average_at_end"] = load_average()
    doc = {"machine": machine, "duration_s": round(time.monotonic() - started, 1), "note": args.note,
           "model": str(args.model), "runner": str(args.runner),
           "settings": {k: v for k, v in vars(args).items() if k not in ("runner", "model", "out", "note")},
           "results": results}
    write_json(args.out / "overhead.json", doc)
    write_text(args.out / "overhead.md", render_markdown(doc))
    print()
    print(render_table(doc))
    print(f"\nwrote {args.out / 'overhead.json'} and {args.out / 'overhead.md'}")


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
