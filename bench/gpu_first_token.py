"""Where the gateway's first-token time goes on a lent GPU (issue 38), in one short time-boxed command.

    python3 bench/gpu_first_token.py --setup .gpu-carry --out OUT/first_token.md [--rounds 100] [--budget 240]
        [--trees OLD_TREE NEW_TREE] [--variants '--poll 0' '-t 1'] [--skip fake,profile,other,trace]

The SmolLM2-135M shape (or --shape) written in place (bench/gpu.py's writer), the cuda runner, and a client on a
raw socket (no client library's own time): time to the first byte, to the first event with text, to the end
of the chunked body (where a keep-alive client is done; the request asks for Connection: close all the same).
Steps, each written to the report as it ends (bench/gpu.py's Report, so a cut-off run still returns them):

- every side on the serve's own runner process (its port and API key), alternating, 8-token requests: `direct`
  (/completion, the very body the gateway sends for a raw /api/generate), `relay` (the least an aiohttp relay
  can do in Python: one handler that posts to the runner and writes each event as an NDJSON line; uvloop as
  serve), `gateway` (/api/generate raw); then `openai` (/v1/chat/completions) beside llama-server's own. The
  native and chat sides run as separate rotations: a request whose prompt differs from the runner's previous
  one pays llama-server's switch of cached prompts (~3 ms on an H200), which a mixed rotation charged to the
  gateway's sides only. serve's CPU per native request (schedstat).
- `keepalive`: the native and OpenAI rotations with the gateway's client connection kept between requests, as
  the official clients keep theirs (llama-server's sides: a new connection a request, its best case).
- `decode`: one 256-token stream through the gateway (/api/generate, and Anthropic's /v1/messages as Claude Code
  streams) and from the same runner directly, rotating rounds: tokens/s between the first and last token at the
  client.
- `long`: an 8-token answer after a ~10 KB conversation (an agent's system prompt and tools, a few turns),
  through the gateway's OpenAI and native chat routes and llama-server's own chat endpoint, alternating.
- `conc`: 16 clients at once on the runner's 4 slots, 64 tokens each, through the gateway and to the same runner
  directly, alternating rounds: the aggregate tokens/s ratio.
- `other`: a second llama-server with the same argv after each gateway request, against the serve's own runner:
  what the card's switch between two processes adds (bench/gpu.py's direct side is such a second process).
- `--trees`: source trees side by side, each its own serve, in blocks (step_ab): the added first token of each.
- `--variants`: llama-server arguments added to the runner's argv, direct vs the relay for each.
- `trace`: a serve with perf_counter marks at each step of a request (this script's own patches, never in
  serve), aligned with the client's clock (perf_counter is CLOCK_MONOTONIC across processes).
- `fake`: bench/gpu_speed_fake.py on this machine; `profile`: serve under cProfile for 205 native requests.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gzip
import io
import json
import os
import pstats
import re
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common
import gpu

HERE = Path(__file__).resolve().parent
PROMPT = gpu.PROMPT


# -- the least an aiohttp relay can do (run as its own process: --relay PORT RUNNER_URL) ---------------------------
def relay_main(port: int, runner: str, key: str = "") -> None:
    import aiohttp
    from aiohttp import web

    async def generate(request: web.Request) -> web.StreamResponse:
        req = await request.json()
        opts = req.get("options") or {}
        body = {"cache_prompt": True, "n_predict": opts.get("num_predict", -1), "temperature": opts.get("temperature"),
                "seed": opts.get("seed"), "prompt": req["prompt"], "stream": True}
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await resp.prepare(request)
        session: aiohttp.ClientSession = request.app["session"]
        headers = {"Authorization": f"Bearer {key}"} if key else None
        async with session.post(runner + "/completion", json=body, headers=headers) as r:
            async for line in r.content:
                if not line.startswith(b"data: "):
                    continue
                ev = json.loads(line[6:])
                done = bool(ev.get("stop"))
                await resp.write(json.dumps({"model": req["model"], "response": ev.get("content", ""),
                                             "done": done}).encode() + b"\n")
        await resp.write_eof()
        return resp

    async def start(app: web.Application) -> None:
        app["session"] = aiohttp.ClientSession()

    async def stop(app: web.Application) -> None:
        await app["session"].close()

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_post("/api/generate", generate)
    app.router.add_get("/health", health)
    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    with contextlib.suppress(ImportError):
        import uvloop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    web.run_app(app, host="127.0.0.1", port=port, print=None)


# -- serve under cProfile (run as its own process: --profiled-serve OUT) --------------------------------------------
def profiled_serve(out: str) -> None:
    import atexit

    prof = cProfile.Profile()

    def dump() -> None:
        prof.disable()
        prof.dump_stats(out)

    atexit.register(dump)
    sys.argv = ["ollama-py", "serve"]
    from ollama_py.cli.main import main as cli_main

    prof.enable()
    cli_main()


FIRST = re.compile(rb'"(?:content|response|text)": ?"[^"]')  # the first event with text, SSE or NDJSON


def traced_serve(out: str) -> None:
    """serve with perf_counter marks at each step of a request (this bench's own patches, never in serve):
    request bytes in, runner connect begun, request written, runner's first bytes, its first token event, the
    first write to the client; written to `out` as JSON at exit."""
    import atexit

    import aiohttp.web_protocol as web_protocol

    from ollama_py.runner import sse
    from ollama_py.server import streaming

    clock = time.perf_counter
    marks: list[dict[str, float]] = []
    current: dict[str, float] = {}

    def mark(name: str) -> None:
        current.setdefault(name, clock())

    original_made = web_protocol.RequestHandler.connection_made
    original_in = web_protocol.RequestHandler.data_received

    def made(self: Any, transport: Any) -> None:
        if current:
            marks.append(dict(current))
        current.clear()
        mark("accepted")
        original_made(self, transport)

    def data_in(self: Any, data: bytes) -> None:
        mark("in")
        original_in(self, data)

    original_post = sse.post_stream

    async def post_stream(*a: Any, **k: Any) -> Any:
        mark("connect")
        stream = await original_post(*a, **k)
        mark("written")
        return stream

    original_runner_in = sse.SSEStream.data_received

    def runner_in(self: Any, data: bytes) -> None:
        mark("runner_first_bytes")
        if b"data: " in data:
            mark("runner_token")
        original_runner_in(self, data)

    original_write = streaming._StreamResponse.write

    async def write(self: Any, data: bytes) -> None:
        mark("write_begun")
        await original_write(self, data)
        mark("client_first")

    web_protocol.RequestHandler.connection_made = made  # type: ignore[method-assign]
    web_protocol.RequestHandler.data_received = data_in  # type: ignore[method-assign]
    sse.post_stream = post_stream
    sse.SSEStream.data_received = runner_in  # type: ignore[method-assign]
    streaming._StreamResponse.write = write  # type: ignore[method-assign,assignment]

    def dump() -> None:
        if current:
            marks.append(dict(current))
        Path(out).write_text(json.dumps(marks))

    atexit.register(dump)
    sys.argv = ["ollama-py", "serve"]
    from ollama_py.cli.main import main as cli_main

    cli_main()


def phases(marks: list[dict[str, float]]) -> list[list[str]]:
    """Median time of each step between marks (those every request has), in ms."""
    order = ["client_sends", "accepted", "in", "connect", "written", "runner_first_bytes", "runner_token",
             "write_begun", "client_first"]
    rows = []
    for a, b in zip(order, order[1:], strict=False):
        d = [m[b] - m[a] for m in marks if a in m and b in m]
        if d:
            rows.append([f"{a} -> {b}", f"{statistics.median(d) * 1e3:.3f}", f"{len(d)}"])
    for a, b in (("in", "client_first"), ("client_first", "client_reads"), ("client_sends", "client_reads")):
        total = [m[b] - m[a] for m in marks if a in m and b in m]
        if total:
            rows.append([f"{a} -> {b}", f"{statistics.median(total) * 1e3:.3f}", f"{len(total)}"])
    return rows


class KeepAlive:
    """A client's connections kept between requests, as the official clients keep theirs (httpx pools): one
    socket per server, used again unless the response said `Connection: close` or the server has closed it
    since (llama-server does after a stream, without saying so), in which case the next request connects anew,
    in its own time."""

    def __init__(self) -> None:
        self.socks: dict[tuple[str, int], socket.socket] = {}

    def close(self) -> None:
        for sock in self.socks.values():
            sock.close()
        self.socks.clear()


def one(url: str, kind: str, model: str, n: int, key: str = "",
        messages: list[dict[str, str]] | None = None, keep: KeepAlive | None = None) -> dict[str, Any]:
    """One 8-token request by a raw socket (no client library's own time in it): time to the response's first
    byte, to the first event with text, and to the end. A new connection each time (`Connection: close`), or
    `keep`'s."""
    chat = messages or [{"role": "user", "content": PROMPT}]
    path, body = {
        "gateway": ("/api/generate", {"model": model, "prompt": PROMPT, "raw": True, "stream": True,
                                      "options": {"num_predict": n, "temperature": 0, "seed": 1}}),
        "relay": ("/api/generate", {"model": model, "prompt": PROMPT, "raw": True, "stream": True,
                                    "options": {"num_predict": n, "temperature": 0, "seed": 1}}),
        "direct": ("/completion", {"prompt": PROMPT, "n_predict": n, "stream": True, "temperature": 0, "seed": 1,
                                   "cache_prompt": True}),
        "openai": ("/v1/chat/completions", {"model": model, "messages": chat, "stream": True, "max_tokens": n,
                                            "temperature": 0, "seed": 1}),
        "direct-openai": ("/v1/chat/completions", {"model": model, "messages": chat, "stream": True,
                                                   "max_tokens": n, "temperature": 0, "seed": 1}),
        "chat": ("/api/chat", {"model": model, "messages": chat, "stream": True,
                               "options": {"num_predict": n, "temperature": 0, "seed": 1}}),
        "anthropic": ("/v1/messages", {"model": model, "messages": chat, "stream": True, "max_tokens": n,
                                       "temperature": 0}),
    }[kind]
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    data = json.dumps(body).encode()
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: {'keep-alive' if keep else 'close'}\r\n"
            + (f"Authorization: Bearer {key}\r\n" if key else "") + "\r\n").encode()
    t = time.perf_counter()
    first_byte = ttft = last_token = None
    buf = b""
    where = (host, int(port))
    s = keep.socks.pop(where, None) if keep is not None else None
    if s is not None and select.select([s], [], [], 0)[0] and not s.recv(1, socket.MSG_PEEK):
        s.close()  # closed by the server after its last response (llama-server after a stream): as httpx does,
        s = None   # a new connection, in this request's time
    if s is None:
        s = socket.create_connection(where)
        if keep is not None:  # as httpx sets it: on a connection used again, Nagle would hold a request back
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    with s:
        s.sendall(head + data)
        while True:
            got = s.recv(1 << 16)
            if not got:
                break
            now = time.perf_counter()
            if first_byte is None:
                first_byte = now - t
            buf += got
            if FIRST.search(buf, max(0, len(buf) - len(got) - 16)):  # text in this read (an event may straddle two)
                last_token = now - t
                if ttft is None:
                    ttft = last_token
            if buf.endswith(b"\r\n0\r\n\r\n"):  # the chunked body's end: where a keep-alive client is done
                break
        whole = time.perf_counter() - t
        head_end = buf.find(b"\r\n\r\n")
        if keep is not None and b"connection: close" not in buf[:head_end].lower() and buf.endswith(b"0\r\n\r\n"):
            keep.socks[where] = socket.socket(fileno=os.dup(s.fileno()))  # kept for the next request
    return {"ttft": ttft, "first_byte": first_byte, "whole": whole,
            "tokens": len(FIRST.findall(buf)), "last_token": last_token}


def start_relay(runner_url: str, key: str = "") -> tuple[subprocess.Popen[bytes], str]:
    port = common.free_port()
    proc = subprocess.Popen([sys.executable, __file__, "--relay", str(port), runner_url, *([key] if key else [])],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        with contextlib.suppress(requests.RequestException):
            if requests.get(url + "/health", timeout=1).ok:
                break
        time.sleep(0.1)
    return proc, url


def start_wrapped(tmp: Path, env: dict[str, str], mode: str, out: Path, name: str) -> common.Child:
    """serve run by this script in `mode` (--traced-serve / --profiled-serve, writing `out` at exit), `name` loaded."""
    child = common.start_serve(tmp, env, runners_dir=Path(env["OLLAMA_RUNNERS_DIR"]),
                               prefix=[sys.executable, __file__, mode, str(out)])
    requests.post(child.url + "/api/generate", json={"model": name, "prompt": "", "keep_alive": "1h"},
                  timeout=300).raise_for_status()
    return child


def wait_for_file(path: Path, seconds: float = 5.0) -> None:
    """A stopped serve writes its marks or profile as it exits: wait for the file to be there."""
    deadline = time.monotonic() + seconds
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)


def step_keepalive(report: gpu.Report, sides: dict[str, tuple[str, str]], name: str, rounds: int) -> None:
    """The native and OpenAI rotations again, the gateway's sides on a connection kept between requests, as the
    official clients (ollama-python, openai, anthropic: httpx pools) keep theirs. llama-server's sides keep a new
    connection a request: its best case here (on a connection used again its events come late: its sockets
    leave Nagle on, and a used connection's receiver delays its ACKs)."""
    keep = KeepAlive()
    kept = {"gateway", "openai"}
    families = (["direct", "gateway"], ["openai", "direct-openai"])
    got: dict[str, list[dict[str, Any]]] = {k: [] for fam in families for k in fam}
    try:
        for fam in families:
            for kind in fam:
                for _ in range(3):
                    one(sides[kind][0], kind, name, 8, sides[kind][1], keep=keep if kind in kept else None)
            for r in range(rounds):
                if report.left() < 60:
                    break
                for kind in (fam if r % 2 == 0 else fam[::-1]):
                    got[kind].append(one(sides[kind][0], kind, name, 8, sides[kind][1],
                                         keep=keep if kind in kept else None))
    finally:
        keep.close()

    def paired(a: str, b: str, key: str = "ttft") -> float:
        return (gpu.med([x[key] - y[key] for x, y in zip(got[a], got[b], strict=False)
                         if x[key] is not None and y[key] is not None]) or 0) * 1e3

    def m(kind: str, key: str) -> float:
        return (gpu.med([g[key] for g in got[kind] if g[key] is not None]) or 0) * 1e3

    rows = [[k, f"{m(k, 'ttft'):.2f}", f"{m(k, 'whole'):.2f}"] for k in got]
    whole = m("gateway", "whole") / max(m("direct", "whole"), 1e-9)
    report.add("The gateway's client connection kept between requests (as the official clients keep theirs)",
               common.markdown_table(["side", "first token ms", "whole ms"], rows)
               + f"\n\nPaired ({len(got['gateway'])} rounds): gateway - direct "
                 f"**{paired('gateway', 'direct'):+.2f} ms** first token, whole {whole:.3f}x; openai - "
                 f"direct-openai {paired('openai', 'direct-openai'):+.2f} ms. llama-server's sides: a new "
                 "connection a request, as in the rotations above.", rounds=got)


def long_chat(chars: int) -> list[dict[str, str]]:
    """An agent's kind of conversation, about `chars` characters (~4 a token): a long system prompt of rules and
    tool descriptions, then a few turns."""
    rule = ("- When you edit `src/app/{i}.py`, run `pytest tests/test_{i}.py -q` and read the output; "
            "never guess at a result.\n")
    tool = ('{{"name": "tool_{i}", "description": "Reads or writes file number {i}", "parameters": {{"type": '
            '"object", "properties": {{"path": {{"type": "string"}}}}, "required": ["path"]}}}}\n')
    system, i = "You are a coding agent working in a repository.\n", 0
    while len(system) < chars:
        system += rule.format(i=i) + tool.format(i=i)
        i += 1
    return [{"role": "system", "content": system},
            {"role": "user", "content": "List the files that the tests touch."},
            {"role": "assistant", "content": "src/app/1.py, src/app/2.py and tests/test_1.py."},
            {"role": "user", "content": "Now say which of them to change first, in one word."}]


def step_long(report: gpu.Report, sides: dict[str, tuple[str, str]], name: str, rounds: int,
              chars: int = 10_000) -> None:
    """An 8-token answer after a long conversation (the same one each time: the runner's prompt cache holds it),
    through the gateway's OpenAI and native chat routes and llama-server's own /v1/chat/completions, alternating:
    what the gateway adds when the request itself is large (its template render and the body it sends)."""
    chat = long_chat(chars)
    kinds = ["direct-openai", "openai", "chat"]
    got: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for kind in kinds:  # warm: the runner caches the prompt
        one(sides[kind][0], kind, name, 8, sides[kind][1], chat)
    for r in range(rounds):
        if report.left() < 60:
            break
        for kind in (kinds if r % 2 == 0 else kinds[::-1]):
            got[kind].append(one(sides[kind][0], kind, name, 8, sides[kind][1], chat))

    def m(kind: str, key: str) -> float:
        return (gpu.med([g[key] for g in got[kind]]) or 0) * 1e3

    def paired(a: str, key: str) -> float:
        return (gpu.med([x[key] - y[key] for x, y in zip(got[a], got["direct-openai"], strict=False)]) or 0) * 1e3

    rows = [[k, f"{m(k, 'ttft'):.2f}", f"{m(k, 'whole'):.2f}",
             "" if k == "direct-openai" else f"{paired(k, 'ttft'):+.2f}"] for k in kinds]
    report.add(f"A long conversation ({len(json.dumps(chat)) // 1024} KiB of messages), 8-token answers",
               common.markdown_table(["side", "first token ms", "whole ms", "added first token (paired) ms"], rows)
               + f"\n\n{len(got['openai'])} rounds; llama-server renders and tokenizes the conversation on every "
                 "side; the gateway renders its template too and sends the prompt as text.", rounds=got)


def step_decode(report: gpu.Report, sides: dict[str, tuple[str, str]], name: str, rounds: int,
                n: int = 256) -> None:
    """Decode of one stream through the gateway (native, raw), through Anthropic's Messages (Claude Code's route:
    its events made per token) and from the same runner directly, rotating: tokens/s between the first and the
    last token at the client (temperature 0: the same tokens each way)."""
    kinds = ("gateway", "anthropic", "direct")
    got: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
    for r in range(rounds):
        if report.left() < 60:
            break
        for kind in kinds[r % 3:] + kinds[:r % 3]:
            url, key = sides["direct" if kind == "direct" else "gateway"]
            got[kind].append(one(url, kind, name, n, key))

    def rate(g: dict[str, Any]) -> float:
        span = (g["last_token"] or 0) - (g["ttft"] or 0)
        return (g["tokens"] - 1) / span if span > 0 and g["tokens"] > 1 else 0.0

    def ratio_of(kind: str) -> tuple[float, float, float, int]:
        pairs = [(rate(a), rate(b)) for a, b in zip(got[kind], got["direct"], strict=False) if rate(b) > 0]
        return (gpu.med([a / b for a, b in pairs]) or 0, gpu.med([a for a, _ in pairs]) or 0,
                gpu.med([b for _, b in pairs]) or 0, len(pairs))

    ratio, through, direct, n_pairs = ratio_of("gateway")
    ant_ratio, ant_through, _, _ = ratio_of("anthropic")
    tokens = gpu.med([float(g["tokens"]) for g in got["gateway"]]) or 0
    report.add(f"Decode of one stream, {n} tokens asked, the same runner process",
               f"tokens/s at the client through the gateway's /api/generate {through:.0f}, its /v1/messages "
               f"{ant_through:.0f}, directly {direct:.0f}: **{ratio:.3f}** and **{ant_ratio:.3f}** of direct (medians "
               f"of {n_pairs} paired rounds; {tokens:.0f} tokens a stream)", ratio=ratio, anthropic_ratio=ant_ratio,
               rounds=got)


def step_variant(report: gpu.Report, work: Path, argv: list[str], extra: list[str], name: str, rounds: int) -> None:
    """A direct llama-server with the gateway's argv plus `extra`, and the relay in front of it: first tokens,
    and the runner's own CPU while idle (does it spin between requests?) and per request."""
    server = common.start_llama_server(common.with_port(argv, common.free_port()) + extra,
                                       work / f"direct{'_'.join(extra)}.log", timeout=300)
    relay, relay_url = start_relay(server.url)
    try:
        got: dict[str, list[dict[str, Any]]] = {"direct": [], "relay": []}
        urls = {"direct": server.url, "relay": relay_url}
        for kind in urls:
            for _ in range(3):
                one(urls[kind], "gateway" if kind == "relay" else kind, name, 8)
        t = common.cpu_seconds(server.proc.pid)
        time.sleep(1.0)
        idle = common.cpu_seconds(server.proc.pid) - t
        t, n = common.cpu_seconds(server.proc.pid), 0
        for r in range(rounds):
            if report.left() < 45:
                break
            for kind in (("direct", "relay") if r % 2 == 0 else ("relay", "direct")):
                got[kind].append(one(urls[kind], "gateway" if kind == "relay" else kind, name, 8))
                n += 1
        per = (common.cpu_seconds(server.proc.pid) - t) / max(n, 1)
        diff = gpu.med([x["ttft"] - y["ttft"] for x, y in zip(got["relay"], got["direct"], strict=False)
                        if x["ttft"] is not None and y["ttft"] is not None]) or 0
        text = (f"direct first token {(gpu.med([g['ttft'] for g in got['direct']]) or 0) * 1e3:.2f} ms, relay "
                f"{(gpu.med([g['ttft'] for g in got['relay']]) or 0) * 1e3:.2f} ms, relay - direct paired "
                f"**{diff * 1e3:+.2f} ms** ({len(got['relay'])} rounds); whole direct "
                f"{(gpu.med([g['whole'] for g in got['direct']]) or 0) * 1e3:.2f} ms; runner CPU idle "
                f"{idle * 100:.0f} % of a core, per request {per * 1e3:.1f} ms")
        report.add(f"runner argv + `{' '.join(extra) or '(nothing)'}`", text)
    finally:
        relay.terminate()
        server.stop()


def step_conc(report: gpu.Report, sides: dict[str, tuple[str, str]], name: str, rounds: int,
              clients: int = 16, tokens: int = 64, label: str = "") -> None:
    """`clients` requests at once (the runner has 4 slots: the rest queue), through the gateway and to the same
    runner directly, alternating rounds: aggregate tokens/s of each, and their paired ratio."""
    import concurrent.futures as cf

    rates: dict[str, list[float]] = {"gateway": [], "direct": []}
    with cf.ThreadPoolExecutor(clients) as pool:
        for r in range(rounds):
            if report.left() < 40:
                break
            for kind in (("gateway", "direct") if r % 2 == 0 else ("direct", "gateway")):
                url, key = sides[kind]
                start = time.perf_counter()
                got = list(pool.map(one, [url] * clients, [kind] * clients, [name] * clients,
                                    [tokens] * clients, [key] * clients))
                rates[kind].append(sum(g["tokens"] for g in got) / (time.perf_counter() - start))
    pairs = [g / d for g, d in zip(rates["gateway"], rates["direct"], strict=False) if d]
    report.add(f"{clients} clients at once on the runner's 4 slots, {tokens} tokens each{label}",
               f"aggregate tokens/s through the gateway {gpu.med(rates['gateway']) or 0:.0f}, directly "
               f"{gpu.med(rates['direct']) or 0:.0f}: **{gpu.med(pairs) or 0:.3f}** of direct (median of "
               f"{len(pairs)} paired rounds, the same runner process)", rates=rates)


def step_ab(report: gpu.Report, work: Path, env: dict[str, str], trees: list[Path], model_path: Path, name: str,
            blocks: int, per: int, conc: int = 0) -> None:
    """Source trees side by side on the card: each its own serve (own store, own runner), blocks of `per`
    rounds to one tree at a time (the order reversed every block, so the card's switch between the two runner
    processes falls on the tree in front alike); a round is the gateway's request, then the same runner's
    directly. Per tree: first token through the gateway, directly, and their paired difference; the whole
    request's ratio; then `conc` times for each tree in turn, 16 clients at once (step_conc)."""
    serves = []
    try:
        for i, tree in enumerate(trees):
            child = common.start_serve(work / f"serve-ab{i}", {**env, "OLLAMA_KEEP_ALIVE": "1h"},
                                       runners_dir=Path(env["OLLAMA_RUNNERS_DIR"]), tree=tree)
            serves.append(child)
            common.create_model(child.url, name, model_path)
            requests.post(child.url + "/api/generate", json={"model": name, "prompt": "", "keep_alive": "1h"},
                          timeout=300).raise_for_status()
            argv = common.runner_argv(child) or []
            child.runner = (f"http://127.0.0.1:{argv[argv.index('--port') + 1]}", common.runner_key(child))  # type: ignore[attr-defined]
        res: dict[int, dict[str, list[float]]] = {i: {"gw": [], "direct": [], "added": [], "whole": []}
                                                  for i in range(len(trees))}
        order = list(range(len(trees)))
        for b in range(blocks):
            if report.left() < 30:
                break
            for i in (order if b % 2 == 0 else order[::-1]):
                child = serves[i]
                for _ in range(per):
                    g = one(child.url, "gateway", name, 8)
                    d = one(child.runner[0], "direct", name, 8, child.runner[1])  # type: ignore[attr-defined]
                    res[i]["gw"].append(g["ttft"] or 0)
                    res[i]["direct"].append(d["ttft"] or 0)
                    res[i]["added"].append((g["ttft"] or 0) - (d["ttft"] or 0))
                    res[i]["whole"].append(g["whole"] / d["whole"])
        rows = [[str(tree), f"{statistics.median(r['gw']) * 1e3:.3f}", f"{statistics.median(r['direct']) * 1e3:.3f}",
                 f"{statistics.median(r['added']) * 1e3:+.3f}", f"{statistics.median(r['whole']):.3f}",
                 str(len(r["gw"]))]
                for tree, r in zip(trees, res.values(), strict=False) if r["gw"]]
        report.add("Source trees side by side (native, 8 tokens, raw socket client)",
                   common.markdown_table(["tree", "gateway first token ms", "same runner directly ms",
                                          "added (paired median) ms", "whole request gateway/direct", "rounds"],
                                         rows))
        for _ in range(conc):  # 16 clients per tree, the trees in turn
            for tree, child in zip(trees, serves, strict=False):
                if report.left() > 40:
                    step_conc(report, {"gateway": (child.url, ""), "direct": child.runner}, name,  # type: ignore[attr-defined]
                              rounds=4, label=f", {tree}")
    finally:
        for child in serves:
            child.stop()


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--profiled-serve":  # serve's own argv follows (bench/common's prefix)
        profiled_serve(sys.argv[2])
        return
    if len(sys.argv) > 2 and sys.argv[1] == "--traced-serve":
        traced_serve(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setup", type=Path, help="a directory made by bench/gpu.py --pack (on the GPU machine)")
    ap.add_argument("--out", type=Path, default=common.RESULTS / "gpu_first_token.md")
    ap.add_argument("--budget", type=float, default=240)
    ap.add_argument("--rounds", type=int, default=60)
    ap.add_argument("--shape", default="smollm2-135m", choices=list(gpu.SHAPES))
    ap.add_argument("--trees", nargs="*", type=Path, default=[],
                    help="source trees to compare side by side (step_ab), e.g. a `git archive` of the commit before")
    ap.add_argument("--skip", default="",
                    help="steps to leave out, comma-separated: keepalive, conc, decode, long, other, trace, fake, "
                         "profile")
    ap.add_argument("--variants", nargs="*", default=[], metavar="ARGS",
                    help="llama-server arguments added to the gateway's argv, one quoted string a variant "
                         "('--poll 0', '-t 2'): each gets a direct server and the relay, alternating rounds")
    ap.add_argument("--relay", nargs="+", metavar="PORT RUNNER_URL [KEY]", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.relay:
        relay_main(int(args.relay[0]), args.relay[1], *args.relay[2:3])
        return

    report = gpu.Report(args.out, time.monotonic() + args.budget, "bench/gpu_first_token.py")
    work = Path(tempfile.mkdtemp(prefix="gpu-ttft-"))
    env = gpu.setup(args.setup, work) if args.setup else {"OLLAMA_RUNNERS_DIR": str(common.ROOT / "runners")}
    children: list[common.Child] = []
    try:
        with gzip.open(gpu.TOKENIZER, "rt", encoding="utf-8") as f:
            tokenizer = json.load(f)
        model_path = work / "models" / f"{args.shape}.gguf"
        model_path.parent.mkdir(parents=True)
        gpu.write_model(model_path, gpu.SHAPES[args.shape], tokenizer)
        store = {"OLLAMA_MODELS": str(work / "store"), "OLLAMA_KEEP_ALIVE": "1h"}
        serve = common.start_serve(work / "serve", {**env, **store}, runners_dir=Path(env["OLLAMA_RUNNERS_DIR"]))
        children.append(serve)
        name = args.shape
        common.create_model(serve.url, name, model_path)
        requests.post(serve.url + "/api/generate", json={"model": name, "prompt": "", "keep_alive": "1h"},
                      timeout=300).raise_for_status()
        argv = common.runner_argv(serve) or []
        key = common.runner_key(serve)
        runner_url = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}"
        variant = next((line for line in serve.log_tail(200_000).splitlines() if "runner variant" in line), "")
        relay_proc, relay_url = start_relay(runner_url, key)
        report.add("Setup", f"- {variant.strip()}\n- runner argv: `{' '.join(argv[1:])}`\n"
                            f"- python {sys.version.split()[0]}, {os.cpu_count()} CPUs")

        # -- alternating rounds, every side on the serve's own runner process ---------------------------------------
        sides = {"direct": (runner_url, key), "relay": (relay_url, ""), "gateway": (serve.url, ""),
                 "openai": (serve.url, ""), "direct-openai": (runner_url, key)}
        kinds = list(sides)
        for kind in kinds:  # warm each path
            for _ in range(3):
                one(sides[kind][0], kind, name, 8, sides[kind][1])
        got: dict[str, list[dict[str, Any]]] = {k: [] for k in kinds}
        cpu: list[float] = []
        # Two rotations: the native sides share one prompt and the chat sides another. Mixed in one rotation, a
        # request whose prompt differs from the runner's last one pays llama-server's switch of cached prompts
        # (~3 ms on the H200), and only the sides next to the other family ever did: the gateway's, not direct's.
        families = (["direct", "relay", "gateway"], ["openai", "direct-openai"])
        for fam in families:  # one family's rounds, then the other's
            for r in range(args.rounds):
                if report.left() < 120:
                    break
                for kind in (fam if r % 2 == 0 else fam[::-1]):
                    before = common.cpu_seconds(serve.proc.pid) if kind == "gateway" else 0.0
                    got[kind].append(one(sides[kind][0], kind, name, 8, sides[kind][1]))
                    if kind == "gateway":
                        cpu.append(common.cpu_seconds(serve.proc.pid) - before)

        def m(kind: str, key: str) -> float:
            return (gpu.med([g[key] for g in got[kind]]) or 0) * 1e3

        def paired(a: str, b: str, key: str = "ttft") -> float:
            return (gpu.med([x[key] - y[key] for x, y in zip(got[a], got[b], strict=False)
                             if x[key] is not None and y[key] is not None]) or 0) * 1e3

        rows = [[k, f"{m(k, 'first_byte'):.2f}", f"{m(k, 'ttft'):.2f}", f"{m(k, 'whole'):.2f}"] for k in kinds]
        text = common.markdown_table(["side (8 tokens, raw socket client)", "first byte ms", "first token ms",
                                      "whole ms"], rows)
        text += (f"\n\nPaired first-token differences (medians of per-round pairs, {len(got['gateway'])} rounds): "
                 f"gateway - direct **{paired('gateway', 'direct'):+.2f} ms**, relay - direct "
                 f"**{paired('relay', 'direct'):+.2f} ms**, gateway - relay **{paired('gateway', 'relay'):+.2f} ms**"
                 f", openai - direct-openai {paired('openai', 'direct-openai'):+.2f} ms; whole request: gateway - "
                 f"direct {paired('gateway', 'direct', 'whole'):+.2f} ms, ratio "
                 f"{m('gateway', 'whole') / max(m('direct', 'whole'), 1e-9):.3f}. serve CPU per native request "
                 f"{(gpu.med(list(cpu)) or 0) * 1e3:.2f} ms.")
        report.add(f"{name}: first token, gateway vs relay floor vs direct (one runner process)", text,
                   rounds={k: v for k, v in got.items()}, cpu_per_request=gpu.med(list(cpu)))

        if "conc" not in args.skip and report.left() > 90:
            step_conc(report, sides, name, rounds=max(args.rounds // 10, 4))

        if "keepalive" not in args.skip and report.left() > 90:
            step_keepalive(report, sides, name, rounds=args.rounds)

        if "decode" not in args.skip and report.left() > 90:
            step_decode(report, sides, name, rounds=max(args.rounds // 8, 6))

        if "long" not in args.skip and report.left() > 90:
            sides["chat"] = (serve.url, "")
            step_long(report, sides, name, rounds=max(args.rounds // 4, 10))

        # -- what a second llama-server process on the same card costs a comparison ---------------------------------
        if report.left() > 150 and "other" not in args.skip:
            other = common.start_llama_server(common.with_port(argv, common.free_port()), work / "other.log",
                                              timeout=300)
            children.append(other)
            for _ in range(3):
                one(other.url, "direct", name, 8)
            after: dict[str, list[dict[str, Any]]] = {"same": [], "other": []}
            for r in range(args.rounds):
                if report.left() < 120:
                    break
                for side in (("same", "other") if r % 2 == 0 else ("other", "same")):
                    one(serve.url, "gateway", name, 8)  # the card last ran the serve's runner
                    url, k = (runner_url, key) if side == "same" else (other.url, "")
                    after[side].append(one(url, "direct", name, 8, k))
            same = gpu.med([g["ttft"] for g in after["same"]]) or 0
            oth = gpu.med([g["ttft"] for g in after["other"]]) or 0
            report.add("A second llama-server process on the card",
                       f"Each measured request follows one through the gateway (the serve's runner): the first "
                       f"token from that same runner {same * 1e3:.2f} ms, from a second llama-server with the same "
                       f"argv {oth * 1e3:.2f} ms ({(oth - same) * 1e3:+.2f} ms, {len(after['other'])} rounds): the "
                       "card switching between two processes' contexts. bench/gpu.py's direct side is such a second "
                       "process, so its alternating rounds charged that switch to whichever side came second.",
                       same=same, other=oth)
            other.stop()

        if len(args.trees) > 1 and report.left() > 60:
            serve.stop()
            step_ab(report, work, env, args.trees, model_path, name, blocks=8, per=max(args.rounds // 8, 5),
                    conc=0 if "conc" in args.skip else 2)

        for extra in args.variants:
            if report.left() < 60:
                break
            step_variant(report, work, argv, extra.split(), name, args.rounds)

        # -- marks inside the gateway (a traced serve) ----------------------------------------------------------------
        if report.left() > 60 and "trace" not in args.skip:
            trace_out = work / "marks.json"
            serve.stop()  # one serve per store
            tserve = start_wrapped(work / "serve-trace", {**env, **store}, "--traced-serve", trace_out, name)
            children.append(tserve)
            targv = common.runner_argv(tserve) or []
            turl, tkey = f"http://127.0.0.1:{targv[targv.index('--port') + 1]}", common.runner_key(tserve)
            direct_t: list[float] = []
            client: list[tuple[float, float]] = []  # perf_counter is CLOCK_MONOTONIC: one clock for both processes
            for _ in range(args.rounds):
                if report.left() < 50:
                    break
                t0 = time.perf_counter()
                got1 = one(tserve.url, "gateway", name, 8)
                client.append((t0, t0 + (got1["ttft"] or 0)))
                direct_t.append(one(turl, "direct", name, 8, tkey)["ttft"] or 0)
            tserve.stop()
            wait_for_file(trace_out)
            marks = [m for m in json.loads(trace_out.read_text()) if "written" in m][-len(client):]  # generations
            for mk, (sent, read) in zip(marks, client, strict=False):
                mk["client_sends"], mk["client_reads"] = sent, read
            marks = marks[3:]
            report.add("Inside the gateway: median time between marks (native, 8 tokens)",
                       common.markdown_table(["step", "ms", "requests"], phases(marks))
                       + f"\n\nThe same runner reached directly, alternating: first token "
                         f"{(gpu.med(list(direct_t)) or 0) * 1e3:.2f} ms.", marks=marks)

        if report.left() > 90 and "fake" not in args.skip:
            t = time.perf_counter()
            out = subprocess.run([sys.executable, str(HERE / "gpu_speed_fake.py"), "--rounds", "30", "--conc-rounds",
                                  "3", "--label", "gpu-machine", "--no-save"],
                                 capture_output=True, text=True, timeout=max(report.left() - 60, 30),
                                 env={**os.environ, **env})
            table = "\n".join(line for line in out.stdout.splitlines() if line.startswith("|") or "16 clients" in line)
            report.add("bench/gpu_speed_fake.py on this machine",
                       (table or out.stderr[-2000:]) + f"\n\n({time.perf_counter() - t:.0f} s)")

        # -- serve under cProfile ----------------------------------------------------------------------------------
        if report.left() > 45 and "profile" not in args.skip:
            for child in children[:1]:
                child.stop()
            prof_out = work / "serve.prof"
            pserve = start_wrapped(work / "serve-prof", {**env, **store}, "--profiled-serve", prof_out, name)
            children.append(pserve)
            for _ in range(5):
                one(pserve.url, "gateway", name, 8)
            n = 200
            for _ in range(n):
                one(pserve.url, "gateway", name, 8)
            pserve.stop()
            wait_for_file(prof_out)
            buf = io.StringIO()
            stats = pstats.Stats(str(prof_out), stream=buf)
            stats.sort_stats("tottime").print_stats(40)
            report.add("serve under cProfile: 205 native 8-token requests (plus the load), top 40 by own time",
                       "```\n" + buf.getvalue()[-9000:] + "\n```")
    finally:
        for child in children:
            with contextlib.suppress(Exception):
                child.stop()
        with contextlib.suppress(Exception):
            relay_proc.terminate()
        report.add("Run", f"{time.monotonic() - report.started:.0f} s; git {common.machine_info().get('git')}")


if __name__ == "__main__":
    main()
