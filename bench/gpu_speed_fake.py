"""The gateway's per-request cost at GPU speed: ollama-py over the fake llama-server set to a GPU's pace, beside
the same fake runner process called directly (issue 38).

    .venv/bin/python bench/gpu_speed_fake.py [--rounds 30] [--conc-rounds 8] [--label after]

A CPU llama-server's 10-20 ms first token hides the gateway's few milliseconds; a fake that answers its first
token after FAKE_PROMPT_DELAY (2 ms) and then one token per FAKE_TOKEN_DELAY (1 ms, ~1,000 tokens/s) does not.
The fake keeps that pace on a steady clock (FAKE_CLOCK=steady, `--clock`): a GPU's decode steps come at the
card's pace whatever the host's CPUs are doing, while a fake that sleeps a token's delay after each write runs at
~810 tokens/s here and slower still while the gateway beside it takes a core's share of these two.
A real `ollama-py serve` (its own temp store, OLLAMA_NUM_PARALLEL=4) runs the fake as its only runner variant,
with two models on the same tiny GGUF (its chat template is the fake's ChatML): `fake-gguf` without an Ollama
TEMPLATE (the GGUF's Jinja template renders the chat) and `fake-tmpl` with one. The direct side calls the very
fake process the gateway started for `fake-gguf`, on its own port with its API key.

Every round runs each case on both sides back to back, alternating which goes first; ratios and differences are
medians of the per-round pairs (the machine is shared: pairs share its load at that moment).

  native       /api/generate (raw) vs /completion, 8 tokens: added first-token time and the whole request's ratio
  oai          /v1/chat/completions through the gateway (GGUF template) vs the fake's own /v1/chat/completions
  oai_tmpl     the same with an Ollama TEMPLATE
  chat         /api/chat (GGUF template) vs the fake's /v1/chat/completions
  agent        an agent's turn (bench/agent_turn.py: twenty tools, 61 messages of calls and results, a Go TEMPLATE
               of Qwen's shape, a ~70 KB body) through /v1/chat/completions vs the fake's /completion given the very
               prompt the gateway renders for it (the gateway's /api/chat `_debug_render_only`): the gateway's own
               work on such a request. Reported, not one of the issue's targets (those are for short requests)
  conc16       16 clients at once on 4 slots, 64 tokens each: aggregate tokens/s ratio, and the aiohttp floor
               relay's (below) in the same rounds: how much of the gap any aiohttp gateway has here
  cpu          the serve process's CPU (/proc schedstat) per 8-token request, and per token from a 512-token one,
               per route: native, OpenAI chat, OpenAI chat with a tool, Anthropic Messages, Responses, with a tool
  floors       the native request through two relays in front of the same fake, beside it direct: the least any
               relay costs on this machine (bench/relay_floor.c: C, blocking sockets) and the least an aiohttp
               gateway costs (bench/aiohttp_floor.py: one handler over ollama-py's runner client): how much of the
               gateway's added time is the machine's and aiohttp's, and how much its own

Where the processes run: by default wherever the kernel puts them (on two cores the client, serve and the fake
contend, and the fake's clock loses what a late step costs it); `--pin` keeps the fake alone on the first CPU (serve
and the client share the others); `--pin-serve` keeps serve and the floor relays alone on the others (the fake and
the client share the first, on both sides alike): the gateway with CPU of its own, as on a GPU's host.

Writes bench/results/gpu_speed_fake.json (keyed by --label) and prints a markdown table, then issue 38's targets
for this case, each met or not (`make bench` runs it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.agent_turn import AGENT_TEMPLATE, agent_messages, agent_tools  # noqa: E402
from bench.common import (  # noqa: E402
    RESULTS,
    cpu_model,
    cpu_seconds,
    create_model,
    free_port,
    load_average,
    median,
    runner_argv,
    runner_key,
    start_serve,
)
from bench.relay_floor import build_relay, wait_listening  # noqa: E402

FAKE = ROOT / "tests" / "fakes" / "fake_llama_server.py"
PROMPT_DELAY, TOKEN_DELAY = 0.002, 0.001
GO_TEMPLATE = ("{{ range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n{{ end }}"
               "<|im_start|>assistant\n")
MESSAGES = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Say hi"}]
AGENT_TOOLS, AGENT_MESSAGES = agent_tools(), agent_messages()


def log(msg: str) -> None:
    print(msg, flush=True)


def _runners_dir(tmp: Path, pin: str = "", clock: str = "steady") -> Path:
    """The fake as the only runner variant (`pin`: the CPUs it runs on, taskset's list; `clock`: FAKE_CLOCK)."""
    runners = tmp / "fake-runners"
    (runners / "cpu").mkdir(parents=True, exist_ok=True)
    script = runners / "cpu" / "llama-server"
    script.write_text("#!/bin/sh\n"
                      f"export FAKE_PROMPT_DELAY={PROMPT_DELAY} FAKE_TOKEN_DELAY={TOKEN_DELAY} FAKE_TOKENS=100000 "
                      f"FAKE_CLOCK={clock}\n"
                      f"exec {f'taskset -c {pin} ' if pin else ''}{sys.executable} {FAKE} \"$@\"\n")
    script.chmod(0o755)
    return runners


async def payloads(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                   headers: dict[str, str] | None = None) -> AsyncIterator[bytes]:
    """POST `body` and yield each event's JSON as it arrives: an NDJSON line, or an SSE event's data (event names,
    comments and [DONE] skipped)."""
    async with session.post(url, json=body, headers=headers) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{url}: {resp.status} {(await resp.text())[:300]}")
        async for line in resp.content:
            line = line.strip()
            if line.startswith(b"data: "):
                line = line[6:]
            if not line or line == b"[DONE]" or line.startswith((b"event:", b":")):
                continue
            yield line


async def timed(session: aiohttp.ClientSession, url: str, body: dict[str, Any],
                headers: dict[str, str] | None = None) -> tuple[float, float, int]:
    """(first content at, end at, content chunks), seconds from the request's start."""
    t0 = time.perf_counter()
    first = None
    chunks = 0
    async for line in payloads(session, url, body, headers):
        ev = json.loads(line)
        if "choices" in ev:
            choices = ev["choices"]
            text = (choices[0].get("delta") or {}).get("content") if choices else None
        elif ev.get("type") == "content_block_delta":  # Anthropic's Messages
            text = (ev.get("delta") or {}).get("text")
        elif ev.get("type") == "response.output_text.delta":  # the Responses API
            text = ev.get("delta")
        else:
            text = ev.get("content") or ev.get("response") or (ev.get("message") or {}).get("content")
        if text:
            chunks += 1
            if first is None:
                first = time.perf_counter() - t0
    end = time.perf_counter() - t0
    return (first if first is not None else end), end, chunks


class Bench:
    def __init__(self, serve_url: str, direct_url: str, key: str, pid: int) -> None:
        self.serve, self.direct, self.pid = serve_url, direct_url, pid
        self.auth = {"Authorization": f"Bearer {key}"} if key else {}
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300),
                                             connector=aiohttp.TCPConnector(force_close=True, limit=0))
        self.agent_prompt = ""  # the prompt the gateway renders for the agent's turn (rendered_agent_prompt)

    async def rendered_agent_prompt(self) -> None:
        """The agent turn's prompt as the gateway renders it, for the direct side to send as is."""
        body = {"model": "fake-agent", "messages": AGENT_MESSAGES, "tools": AGENT_TOOLS, "_debug_render_only": True}
        async with self.session.post(self.serve + "/api/chat", json=body) as r:
            r.raise_for_status()
            self.agent_prompt = (await r.json())["_debug_info"]["rendered_template"]

    def cases(self, n: int) -> dict[str, tuple[Any, Any]]:
        """case -> (gateway request, direct request), each an awaitable factory."""
        s = self.session
        opts = {"num_predict": n, "temperature": 0}
        return {
            "native": (
                lambda: timed(s, self.serve + "/api/generate", {"model": "fake-gguf", "prompt": "hi", "raw": True,
                                                                "stream": True, "options": opts}),
                lambda: timed(s, self.direct + "/completion", {"prompt": "hi", "n_predict": n, "stream": True,
                                                              "temperature": 0, "cache_prompt": True}, self.auth)),
            "oai": (
                lambda: timed(s, self.serve + "/v1/chat/completions",
                              {"model": "fake-gguf", "messages": MESSAGES, "stream": True, "max_tokens": n,
                               "temperature": 0}),
                lambda: timed(s, self.direct + "/v1/chat/completions",
                              {"messages": MESSAGES, "stream": True, "max_tokens": n, "temperature": 0}, self.auth)),
            "oai_tmpl": (
                lambda: timed(s, self.serve + "/v1/chat/completions",
                              {"model": "fake-tmpl", "messages": MESSAGES, "stream": True, "max_tokens": n,
                               "temperature": 0}),
                lambda: timed(s, self.direct + "/v1/chat/completions",
                              {"messages": MESSAGES, "stream": True, "max_tokens": n, "temperature": 0}, self.auth)),
            "chat": (
                lambda: timed(s, self.serve + "/api/chat", {"model": "fake-gguf", "messages": MESSAGES,
                                                            "stream": True, "options": opts}),
                lambda: timed(s, self.direct + "/v1/chat/completions",
                              {"messages": MESSAGES, "stream": True, "max_tokens": n, "temperature": 0}, self.auth)),
            "agent": (
                lambda: timed(s, self.serve + "/v1/chat/completions",
                              {"model": "fake-agent", "messages": AGENT_MESSAGES, "tools": AGENT_TOOLS,
                               "stream": True, "max_tokens": n, "temperature": 0}),
                lambda: timed(s, self.direct + "/completion", {"prompt": self.agent_prompt, "n_predict": n,
                                                              "stream": True, "temperature": 0,
                                                              "cache_prompt": True}, self.auth)),
        }

    async def round_trip(self, rounds: int) -> dict[str, Any]:
        """Per case: gateway-minus-direct first token (ms), gateway/direct whole request, CPU per request."""
        out: dict[str, Any] = {}
        cases = self.cases(8)
        for name in cases:
            out[name] = {"added_ttft_ms": [], "ratio_total": [], "ttft_gw_ms": [], "ttft_direct_ms": [],
                         "cpu_ms": []}
        for i in range(rounds):
            for name, (gw, direct) in cases.items():
                order = [("g", gw), ("d", direct)] if i % 2 else [("d", direct), ("g", gw)]
                got: dict[str, tuple[float, float, int]] = {}
                for side, fn in order:
                    cpu0 = cpu_seconds(self.pid)
                    got[side] = await fn()
                    if side == "g":
                        out[name]["cpu_ms"].append((cpu_seconds(self.pid) - cpu0) * 1e3)
                out[name]["added_ttft_ms"].append((got["g"][0] - got["d"][0]) * 1e3)
                out[name]["ratio_total"].append(got["g"][1] / got["d"][1])
                out[name]["ttft_gw_ms"].append(got["g"][0] * 1e3)
                out[name]["ttft_direct_ms"].append(got["d"][0] * 1e3)
        return {name: {k: median(v) for k, v in d.items()} for name, d in out.items()}

    def token_routes(self, n: int) -> dict[str, Any]:
        """route -> a request of n tokens through the gateway: native, a plain OpenAI chat, one with a tool (its
        answer parsed for calls, as agents send it), Anthropic's Messages (Claude Code's route) and the Responses
        API (Codex's), with and without a tool."""
        s, say = self.session, [{"role": "user", "content": "Say hi"}]
        tool = AGENT_TOOLS[0]["function"]
        anthropic_tool = {"name": tool["name"], "description": tool["description"], "input_schema": tool["parameters"]}
        return {
            "native": self.cases(n)["native"][0],
            "openai": lambda: timed(s, self.serve + "/v1/chat/completions",
                                    {"model": "fake-gguf", "messages": say, "stream": True, "max_tokens": n}),
            "openai_tools": lambda: timed(s, self.serve + "/v1/chat/completions",
                                          {"model": "fake-agent", "messages": say, "tools": AGENT_TOOLS[:1],
                                           "stream": True, "max_tokens": n}),
            "anthropic": lambda: timed(s, self.serve + "/v1/messages",
                                       {"model": "fake-gguf", "messages": say, "stream": True, "max_tokens": n}),
            "anthropic_tools": lambda: timed(s, self.serve + "/v1/messages",
                                             {"model": "fake-agent", "messages": say, "tools": [anthropic_tool],
                                              "stream": True, "max_tokens": n}),
            "responses": lambda: timed(s, self.serve + "/v1/responses",
                                       {"model": "fake-gguf", "input": "Say hi", "stream": True,
                                        "max_output_tokens": n}),
            "responses_tools": lambda: timed(s, self.serve + "/v1/responses",
                                             {"model": "fake-agent", "input": "Say hi", "stream": True,
                                              "tools": [{"type": "function", **tool}], "max_output_tokens": n}),
        }

    async def per_token_cpu(self, rounds: int) -> dict[str, float]:
        """Gateway CPU per relayed token (µs), per route (token_routes): a 512-token request's CPU less an
        8-token one's, over 504."""
        shorts, longs = self.token_routes(8), self.token_routes(512)
        out = {}
        for route in shorts:
            diffs = []
            for _ in range(rounds):
                c0 = cpu_seconds(self.pid)
                await shorts[route]()
                c1 = cpu_seconds(self.pid)
                await longs[route]()
                c2 = cpu_seconds(self.pid)
                diffs.append(((c2 - c1) - (c1 - c0)) / 504 * 1e6)
            out[route] = median(diffs) or 0.0
        return out

    async def concurrency(self, rounds: int, clients: int = 16, n: int = 64,
                          relay: str | None = None) -> dict[str, Any]:
        """`clients` requests at once through the gateway, and to the fake directly (and through the aiohttp floor
        relay at `relay`, its URL), order rotated each round: the aggregate chunks/s ratio to direct of the
        same round, per side."""
        gw, direct = self.cases(n)["native"]
        body = {"prompt": "hi", "n_predict": n, "stream": True, "temperature": 0, "cache_prompt": True}
        sides: list[tuple[str, Any]] = [("d", direct), ("g", gw)]
        if relay is not None:
            sides.append(("r", lambda: timed(self.session, relay + "/completion", body)))
        ratios: dict[str, list[float]] = {"g": [], "r": []}
        rates: dict[str, list[float]] = {"g": [], "d": [], "r": []}
        for i in range(rounds):
            got = {}
            for side, fn in sides[i % len(sides):] + sides[:i % len(sides)]:
                t0 = time.perf_counter()
                results = await asyncio.gather(*(fn() for _ in range(clients)))
                wall = time.perf_counter() - t0
                got[side] = sum(r[2] for r in results) / wall
                rates[side].append(got[side])
            for side in got:
                if side != "d":
                    ratios[side].append(got[side] / got["d"])
        out = {"ratio": median(ratios["g"]), "gateway_chunks_per_s": median(rates["g"]),
               "direct_chunks_per_s": median(rates["d"])}
        if relay is not None:
            out["aiohttp_relay_ratio"] = median(ratios["r"])
        return out

    async def floors(self, rounds: int, relays: dict[str, str]) -> dict[str, Any]:
        """The native request direct, through the gateway and through each relay (name -> its URL, in front of
        the fake the direct side calls), order rotated each round: per side but direct, its added first token
        and whole-request ratio, paired with the direct request of the same round."""
        gateway, direct = self.cases(8)["native"]
        body = {"prompt": "hi", "n_predict": 8, "stream": True, "temperature": 0, "cache_prompt": True}
        sides: list[tuple[str, Any]] = [("direct", direct), ("gateway", gateway)]
        for name, url in relays.items():
            sides.append((name, lambda url=url: timed(self.session, url + "/completion", body)))
        added: dict[str, list[float]] = {name: [] for name, _ in sides[1:]}
        whole: dict[str, list[float]] = {name: [] for name, _ in sides[1:]}
        for i in range(rounds):
            turn = sides[i % len(sides):] + sides[:i % len(sides)]
            got = {name: await fn() for name, fn in turn}
            for name in added:
                added[name].append((got[name][0] - got["direct"][0]) * 1e3)
                whole[name].append(got[name][1] / got["direct"][1])
        return {name: {"added_ttft_ms": median(added[name]), "ratio_total": median(whole[name])} for name in added}


def start_floors(tmp: Path, upstream: str, key: str, prefix: Sequence[str] = (),
                 ) -> tuple[dict[str, str], list[subprocess.Popen[bytes]]]:
    """The two floor relays in front of the fake at `upstream` (its URL): name -> URL, and their processes (the C
    one only where a C compiler is; `prefix` wraps their commands: taskset). The caller waits for them to
    listen."""
    port = upstream.rsplit(":", 1)[1]
    relays: dict[str, str] = {}
    procs: list[subprocess.Popen[bytes]] = []
    with open(tmp / "floors.log", "wb") as log:
        if shutil.which("cc") or shutil.which("gcc"):
            c_port = free_port()
            procs.append(subprocess.Popen([*prefix, str(build_relay(tmp)), str(c_port), port, key], stdout=log,
                                          stderr=log))
            relays["C relay"] = f"http://127.0.0.1:{c_port}"
        a_port = free_port()
        procs.append(subprocess.Popen([*prefix, sys.executable, str(ROOT / "bench" / "aiohttp_floor.py"), str(a_port),
                                       port, key], stdout=log, stderr=log))
        relays["aiohttp relay"] = f"http://127.0.0.1:{a_port}"
    return relays, procs


def table(res: dict[str, Any]) -> str:
    rows = ["| Case (8 tokens) | first token direct (ms) | through gateway (ms) | added (ms, paired) "
            "| whole request gateway/direct | gateway CPU per request (ms) |", "|---|---|---|---|---|---|"]
    names = {"native": "native /api/generate vs /completion", "oai": "OpenAI chat (GGUF template) vs "
             "/v1/chat/completions", "oai_tmpl": "OpenAI chat (Ollama TEMPLATE) vs /v1/chat/completions",
             "chat": "/api/chat (GGUF template) vs /v1/chat/completions",
             "agent": "agent turn (20 tools, 61 messages, Go TEMPLATE) vs /completion of its prompt"}
    for name, label in names.items():
        r = res["cases"].get(name)
        if r is None:  # a case this run's results predate
            continue
        rows.append(f"| {label} | {r['ttft_direct_ms']:.2f} | {r['ttft_gw_ms']:.2f} | {r['added_ttft_ms']:+.2f} "
                    f"| {r['ratio_total']:.3f} | {r['cpu_ms']:.2f} |")
    c = res["conc16"]
    rows.append("")
    rows.append(f"16 clients on 4 slots, 64 tokens each: aggregate gateway/direct **{c['ratio']:.3f}** "
                f"({c['gateway_chunks_per_s']:.0f} vs {c['direct_chunks_per_s']:.0f} chunks/s)"
                + (f", the aiohttp floor relay {c['aiohttp_relay_ratio']:.3f} in the same rounds"
                   if "aiohttp_relay_ratio" in c else "") + "; gateway CPU per "
                f"relayed token {res['cpu_per_token_us']:.0f} µs; load {res['load']}; CPU {res.get('cpu', '?')}.")
    by_route = res.get("cpu_per_token_us_by_route")
    if by_route:
        names = {"native": "native", "openai": "OpenAI chat", "openai_tools": "OpenAI chat with a tool",
                 "anthropic": "Anthropic Messages", "anthropic_tools": "Anthropic Messages with a tool",
                 "responses": "Responses", "responses_tools": "Responses with a tool"}
        rows.append("")
        rows.append("Gateway CPU per relayed token, by route (512-token answers less 8-token ones): "
                    + ", ".join(f"{names.get(k, k)} {v:.0f} µs" for k, v in by_route.items())
                    + ". (The lane writes an answer's plain tokens from the runner's socket callback on every "
                    "route, with a tool the text its parsers call plain; Anthropic's and the Responses API's as "
                    "their block translators make the events.)")
    if res.get("floors"):
        rows.append("")
        rows.append(f"Floors: the native request in front of the same fake, each paired with a direct one in the same "
                    f"round ({res['floor_rounds']} rounds, order rotated): "
                    + "; ".join(f"{name} **{f['added_ttft_ms']:+.2f} ms** first token, whole {f['ratio_total']:.3f}"
                                for name, f in res["floors"].items()) + ".")
    return "\n".join(rows)


# Issue 38's targets for this case: added first token, whole short request, 16 clients on 4 slots.
TARGET_ADDED_MS, TARGET_WHOLE, TARGET_CONC = 1.0, 1.1, 0.98


def targets(res: dict[str, Any]) -> str:
    """Each target against this run's figure, met or not (issue 38: "ratios in one run; make bench prints them")."""
    rows = ["| target | this run | met |", "|---|---|---|"]
    cases = res["cases"]
    for name, label in (("native", "native"), ("oai", "OpenAI chat"), ("oai_tmpl", "OpenAI chat, TEMPLATE"),
                        ("chat", "/api/chat")):
        added, whole = cases[name]["added_ttft_ms"], cases[name]["ratio_total"]
        rows.append(f"| added first token <= {TARGET_ADDED_MS:g} ms, {label} | {added:+.2f} ms "
                    f"| {'yes' if added <= TARGET_ADDED_MS else 'no'} |")
        rows.append(f"| whole short request <= {TARGET_WHOLE:g}x, {label} | {whole:.3f}x "
                    f"| {'yes' if whole <= TARGET_WHOLE else 'no'} |")
    conc = res["conc16"]["ratio"]
    rows.append(f"| 16 clients on 4 slots >= {TARGET_CONC:g} of direct | {conc:.3f} "
                f"| {'yes' if conc >= TARGET_CONC else 'no'} |")
    cpu = ", ".join(f"{cases[n]['cpu_ms']:.2f}" for n in ("native", "oai", "oai_tmpl", "chat"))
    rows.append(f"| gateway CPU per request and per token reported | {cpu} ms; {res['cpu_per_token_us']:.0f} µs "
                "| yes |")
    note = ("The chat routes' direct side is the fake's own /v1/chat/completions, which renders no template: a "
            "real llama-server's chat endpoint does (bench/gpu_first_token.py compares with it on a GPU).")
    return "\n".join(rows) + "\n\n" + note


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    from tests.fakes.fake_llama_server import CHATML_TEMPLATE
    from tests.fakes.gguf_files import write_tiny_gguf

    with tempfile.TemporaryDirectory(prefix="gpu-speed-fake-") as d:
        tmp = Path(d)
        cpus = sorted(os.sched_getaffinity(0))
        between: tuple[str, ...] = ()  # serve's and the relays' taskset, with --pin-serve
        if args.pin:  # the fake on the first CPU; serve and this client on the others
            os.sched_setaffinity(0, cpus[1:])
        elif args.pin_serve:  # serve and the relays on the others; the fake and this client on the first
            os.sched_setaffinity(0, cpus[:1])
            between = ("taskset", "-c", ",".join(map(str, cpus[1:])))
        serve = start_serve(tmp / "serve", {"OLLAMA_NUM_PARALLEL": "4", "OLLAMA_MAX_LOADED_MODELS": "3"},
                            prefix=between,
                            runners_dir=_runners_dir(tmp, str(cpus[0]) if args.pin or args.pin_serve else "",
                                                     args.clock))
        bench: Bench | None = None
        try:
            gguf = write_tiny_gguf(tmp / "tiny.gguf", ctx=8192, chat_template=CHATML_TEMPLATE)
            await asyncio.to_thread(create_model, serve.url, "fake-gguf", gguf)
            await asyncio.to_thread(create_model, serve.url, "fake-tmpl", gguf, template=GO_TEMPLATE)
            await asyncio.to_thread(create_model, serve.url, "fake-agent", gguf, template=AGENT_TEMPLATE)
            async with aiohttp.ClientSession() as s:
                for model in ("fake-gguf", "fake-tmpl", "fake-agent"):
                    async with s.post(serve.url + "/api/generate", json={"model": model}) as r:
                        r.raise_for_status()
            argv = runner_argv(serve, "fake_llama_server.py")
            if argv is None:
                raise RuntimeError("no fake runner under serve")
            port = argv[argv.index("--port") + 1]
            bench = Bench(serve.url, f"http://127.0.0.1:{port}", runner_key(serve, "fake_llama_server.py"),
                          serve.proc.pid)
            await bench.rendered_agent_prompt()
            load0 = load_average()
            await bench.round_trip(3)  # warm-up: connections, caches, the first render of each shape
            cases = await bench.round_trip(args.rounds)
            per_token = await bench.per_token_cpu(max(3, args.rounds // 8))
            floors: dict[str, Any] = {}
            relays, floor_procs = (start_floors(tmp, bench.direct, runner_key(serve, "fake_llama_server.py"), between)
                                   if args.floor_rounds else ({}, []))
            try:
                for url in relays.values():
                    await wait_listening(int(url.rsplit(":", 1)[1]))
                # (the C relay answers one connection at a time: no side for many clients at once)
                conc = await bench.concurrency(args.conc_rounds, relay=relays.get("aiohttp relay"))
                if relays:
                    await bench.floors(4, relays)  # warm-up
                    floors = await bench.floors(args.floor_rounds, relays)
            finally:
                for proc in floor_procs:
                    proc.terminate()
                    proc.wait(10)
            return {"floors": floors, "floor_rounds": args.floor_rounds,
                    "label": args.label, "rounds": args.rounds, "pinned": args.pin,
                    "serve_pinned": args.pin_serve, "clock": args.clock,
                    "cases": cases, "conc16": conc,
                    "cpu_per_token_us": per_token["native"], "cpu_per_token_us_by_route": per_token,
                    "load": [load0, load_average()], "cpu": cpu_model(),
                    "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                    "fake": {"prompt_delay_s": PROMPT_DELAY, "token_delay_s": TOKEN_DELAY}}
        finally:
            if bench is not None:
                await bench.session.close()
            serve.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--conc-rounds", type=int, default=8)
    ap.add_argument("--label", default="now")
    ap.add_argument("--floor-rounds", type=int, default=40,
                    help="rounds of the floor relays (C, aiohttp) beside the direct fake; 0: none")
    ap.add_argument("--no-save", action="store_true", help="print the table only (bench/gpu_first_token.py)")
    ap.add_argument("--pin", action="store_true",
                    help="the fake alone on CPU 0, serve and the client on the others: the runner's pace kept "
                         "apart from the gateway's CPU, as a GPU's is")
    ap.add_argument("--pin-serve", action="store_true",
                    help="serve (and the floor relays) alone on the CPUs but the first; the fake and the client on "
                         "the first: the gateway's CPU kept apart from the runner's and the client's, as on a "
                         "machine with cores to spare (a GPU's), while the direct side shares the very same CPU")
    ap.add_argument("--clock", choices=("steady", "relative"), default="steady",
                    help="the fake's decode clock: steady (a token every FAKE_TOKEN_DELAY on a fixed clock, as a "
                         "GPU's decode steps come whatever the host is doing) or relative (each token that delay "
                         "after the previous one was written: every late wake-up on a busy CPU slows the runner)")
    args = ap.parse_args()
    res = asyncio.run(main_async(args))
    if not args.no_save:
        path = RESULTS / "gpu_speed_fake.json"
        data = json.loads(path.read_text()) if path.exists() else {}
        data[args.label] = res
        path.write_text(json.dumps(data, indent=1) + "\n")
    log(table(res))
    log("")
    log(targets(res))


if __name__ == "__main__":
    main()
