"""The issue-22 cases, each against a live `serve` over the fake llama-server: what a hostile or unlucky client
gets back, and the largest pause another client saw meanwhile.

    .venv/bin/python bench/reliability.py --cases hardening     (or run as part of the whole reliability bench)

Every step sends one thing (a template bomb, 10,000 tools, a GGUF header bomb, ...) while a *ticker* (another
client, its own thread and keep-alive connection) asks `GET /api/version` every 10 ms; the step records the
status and the error text it got, and the ticker the largest gap between two of its answers (from the step's
start to its end). The gateway answers /api/version on its event loop, so a gap is the longest time the loop (or
the process) was unavailable to anyone else, plus this machine's scheduling noise: the "idle" row measures that
noise with nothing else going on.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import select
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.gguf_files import (
    T_ARRAY,
    T_STRING,
    T_UINT32,
    gguf_string,
    nested_array,
    raw_gguf,
    u32,
    write_tiny_gguf,
)
from tests.helpers.processes import fake_runners_dir
from tests.helpers.serve import start_serve, stop_serve, upload_blob

TICK = 0.010  # seconds between the ticker's requests
CAP = 600  # OLLAMA_PY_MAX_CONNECTIONS for this serve: room for 500 console viewers, small enough to pass from here
TOOLS_TEMPLATE = ("{{- if .Tools }}{{ range .Tools }}{{ json . }}\n{{ end }}{{ end }}"
                  "{{ range .Messages }}{{ .Role }}: {{ .Content }}\n{{ end }}")


@dataclass
class Row:
    case: str
    step: str
    status: str  # an HTTP status, or what happened instead ("exit 1", "timeout")
    text: str  # the error text (or the part of the answer that matters)
    gap_ms: float  # the largest gap between two answers the ticker saw during the step (median over runs)
    ticker_errors: int  # the ticker's requests that failed (connection refused/reset, status != 200)
    gaps: tuple[float, ...] = ()  # the step's gap in each run, when repeated
    loop_ms: float = 0.0  # the longest the serve's own event loop was held (OLLAMA_PY_LOOP_WARN_MS), median


@dataclass
class Ticker:
    """Another client: GET /api/version every TICK seconds on its own thread and connection."""

    url: str
    answers: list[float] = field(default_factory=list)
    errors: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def _run(self) -> None:
        session = requests.Session()
        while not self._stop.is_set():
            try:
                ok = session.get(self.url + "/api/version", timeout=30).status_code == 200
            except requests.RequestException:
                ok = False
                session = requests.Session()  # the server may have closed it; a fresh connection next time
            if ok:
                self.answers.append(time.monotonic())
            else:
                self.errors += 1
            self._stop.wait(TICK)

    @contextlib.contextmanager
    def running(self) -> Iterator[Ticker]:
        start = time.monotonic()
        thread = threading.Thread(target=self._run, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join(60)
            self.answers = [start, *self.answers, time.monotonic()]

    @property
    def gap_ms(self) -> float:
        return max(b - a for a, b in zip(self.answers, self.answers[1:])) * 1000


def error_text(r: requests.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return r.text[:160]
    if isinstance(body, dict) and "error" in body:
        return str(body["error"])
    return json.dumps(body)[:160]


LOOP_WARN_MS = 20  # serve logs each hold of its event loop past this (server/loop_watch.py)
PRUNE_EVERY = 2  # seconds between the blob prune's passes (an hour by default)
_HELD = re.compile(r"event loop held for (\d+) ms")


@dataclass
class Bench:
    url: str
    rows: list[Row] = field(default_factory=list)
    log: Path | None = None  # the serve's log, where its loop watch writes

    def _log_size(self) -> int:
        return self.log.stat().st_size if self.log is not None and self.log.exists() else 0

    def _held_ms(self, since: int) -> float:
        """The longest loop hold serve logged after byte `since` of its log (0: none past LOOP_WARN_MS)."""
        if self.log is None:
            return 0.0
        with open(self.log, "rb") as f:
            f.seek(since)
            text = f.read().decode("utf-8", "replace")
        return max((float(m) for m in _HELD.findall(text)), default=0.0)

    def step(self, case: str, step: str, send: Callable[[], tuple[str, str]]) -> tuple[str, str]:
        ticker = Ticker(self.url)
        since = self._log_size()
        with ticker.running():
            time.sleep(0.1)  # the ticker's first answers: its connection is open before the step begins
            try:
                status, text = send()
            except requests.Timeout:
                status, text = "timeout", "no answer within the client's timeout"
            except requests.RequestException as e:
                status, text = "no answer", type(e).__name__
            time.sleep(0.1)
        time.sleep(0.05)  # the loop watch's line for a hold that just ended
        held = self._held_ms(since)
        self.rows.append(Row(case, step, status, text, ticker.gap_ms, ticker.errors, loop_ms=held))
        print(f"{case} / {step}: {status} {text[:100]!r} gap {ticker.gap_ms:.0f} ms, loop held {held:.0f} ms",
              file=sys.stderr)
        return status, text

    def call(self, method: str, path: str, timeout: float = 120, **kw: Any) -> tuple[str, str]:
        r = requests.request(method, self.url + path, timeout=timeout, **kw)
        return str(r.status_code), error_text(r) if r.status_code >= 400 else "ok"


def idle(b: Bench) -> None:
    def send() -> tuple[str, str]:
        time.sleep(2)
        return "-", "-"

    b.step("idle (the machine's own noise)", "nothing sent for 2 s", send)


def template_bombs(b: Bench) -> None:
    for bomb in ("{{range 10000000}}x{{end}}", '{{printf "%0400000000d" 1}}'):
        b.step("template bomb", f"/api/generate template `{bomb}`", functools.partial(
            b.call, "POST", "/api/generate", json={"model": "tiny", "prompt": "hi", "template": bomb,
                                                   "stream": False, "options": {"num_predict": 1}}))


def many_tools(b: Bench) -> None:
    b.call("POST", "/api/create", json={"model": "tooly", "from": "tiny", "template": TOOLS_TEMPLATE,
                                        "stream": False})
    tools = [{"type": "function", "function": {
        "name": f"tool_{i}", "description": f"tool number {i}", "parameters": {
            "type": "object", "properties": {"x": {"type": "string", "description": "an argument"}},
            "required": ["x"]}}} for i in range(10_000)]
    body = json.dumps({"model": "tooly", "messages": [{"role": "user", "content": "hi"}], "tools": tools,
                       "stream": False, "options": {"num_predict": 1}})
    b.step("10,000 tools", f"/api/chat, {len(body) >> 20} MiB body, a template that renders every tool",
           lambda: b.call("POST", "/api/chat", data=body, headers={"Content-Type": "application/json"}))
    # The same body to a model without tools: refused once parsed, so its gap is the body's parsing alone.
    plain_body = body.replace('"model": "tooly"', '"model": "tiny"', 1)
    b.step("10,000 tools", "the same body to a model without tools (refused after parsing)",
           lambda: b.call("POST", "/api/chat", data=plain_body, headers={"Content-Type": "application/json"}))
    # The body limit is 64 MiB: a body near it made of small JSON values is the most parsing one request can ask.
    context = json.dumps({"model": "tiny", "prompt": "hi", "stream": False, "context": [7] * 20_000_000})
    b.step("a big JSON body", f"/api/generate with a context of 2e7 token ids ({len(context) >> 20} MiB)",
           lambda: b.call("POST", "/api/generate", data=context, headers={"Content-Type": "application/json"}))


def rpc_servers(b: Bench) -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def send() -> tuple[str, str]:
            status, text = b.call("POST", "/api/generate", json={
                "model": "tiny", "prompt": "hi", "stream": False, "options": {"rpc_servers": f"127.0.0.1:{port}"}})
            ready, _, _ = select.select([listener], [], [], 2.0)  # a connection made late would still show
            return status, f"{text} — connections to the client's listener: {len(ready)}"

        b.step("options.rpc_servers", "/api/generate naming a listener of the client's", send)


def slowloris(b: Bench) -> None:
    """CAP + 64 connections that trickle a request head a byte at a time, then an ordinary request."""
    port = int(b.url.rsplit(":", 1)[1])
    socks: list[socket.socket] = []

    def send() -> tuple[str, str]:
        for _ in range(CAP + 64):
            with contextlib.suppress(OSError):
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(b"POST /api/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                socks.append(s)
        for _ in range(3):  # keep them all trickling for a while
            for s in socks:
                with contextlib.suppress(OSError):
                    s.sendall(b"a")
            time.sleep(0.5)
        status, text = b.call("POST", "/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False})
        closed = 0
        for s in socks:
            s.setblocking(False)
            try:
                closed += s.recv(1) == b""
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        return status, (f"{text} (an ordinary generate meanwhile); slow connections closed by serve: "
                        f"{closed} of {len(socks)}")

    try:
        b.step("slowloris", f"{CAP + 64} connections trickling headers, OLLAMA_PY_MAX_CONNECTIONS={CAP}", send)
    finally:
        for s in socks:
            s.close()


def huge_keep_alive(b: Bench) -> None:
    for keep in (1e12, "9999999999h"):
        b.step("keep_alive forever", f"/api/generate keep_alive {json.dumps(keep)}", functools.partial(
            b.call, "POST", "/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False,
                                                   "keep_alive": keep, "options": {"num_predict": 1}}))

        def ps() -> tuple[str, str]:
            r = requests.get(b.url + "/api/ps", timeout=60)
            if r.status_code != 200:
                return str(r.status_code), error_text(r)
            return "200", "expires_at " + ", ".join(m["expires_at"] for m in r.json()["models"])

        b.step("keep_alive forever", "then /api/ps", ps)
    b.call("POST", "/api/generate", json={"model": "tiny", "keep_alive": 0})


def gguf_bombs(b: Bench) -> None:
    arch = ("general.architecture", T_STRING, gguf_string("llama"))
    bombs = {"a GGUF claiming 2e7 blocks": raw_gguf([arch, ("llama.block_count", T_UINT32, u32(20_000_000))]),
             "a 5,000-deep nested array": raw_gguf([arch, ("a", T_ARRAY, nested_array(5000))]),
             "a GGUF claiming 2e7 shards": raw_gguf([arch, ("split.no", T_UINT32, u32(0)),
                                                    ("split.count", T_UINT32, u32(20_000_000))])}
    for what, data in bombs.items():
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        b.call("POST", f"/api/blobs/{digest}", data=data)
        b.step("GGUF header bomb", f"/api/create from {what} ({len(data):,} bytes)", functools.partial(
            b.call, "POST", "/api/create", json={"model": "bomb", "files": {"m.gguf": digest}, "stream": False}))


def server_paths(b: Bench) -> None:
    """Issue 34 item 7: /api/create's `from` naming a file on the server (no OLLAMA_PY_IMPORT_DIRS here)."""
    for path in ("/etc/passwd", str(ROOT / "README.md")):
        b.step("a server path as from", f"/api/create from {path}", functools.partial(
            b.call, "POST", "/api/create", json={"model": "stolen", "from": path, "stream": False}))


def deleted_blob(b: Bench, models: Path, scratch: Path) -> None:
    """A loaded model whose weights file is deleted from disk (its own blob: not shared with "tiny")."""
    gguf = write_tiny_gguf(scratch / "gone.gguf", blocks=1)
    digest = upload_blob(b.url, gguf)
    b.call("POST", "/api/create", json={"model": "gone", "files": {"gone.gguf": digest}, "stream": False})
    gen = {"model": "gone", "prompt": "hi", "stream": False, "options": {"num_predict": 1}}
    b.call("POST", "/api/generate", json=gen)  # loaded
    (models / "blobs" / digest.replace(":", "-")).unlink()
    case = "blob deleted from disk"
    b.step(case, "generate (still loaded)", lambda: b.call("POST", "/api/generate", json=gen))
    b.step(case, "keep_alive 0 (unload)", lambda: b.call("POST", "/api/generate",
                                                         json={"model": "gone", "keep_alive": 0}))
    b.step(case, "generate (needs a load)", lambda: b.call("POST", "/api/generate", json=gen))
    b.step(case, "/api/delete", lambda: b.call("DELETE", "/api/delete", json={"model": "gone"}))


def wrong_digest(b: Bench) -> None:
    case = "DELETE name@sha256:<wrong>"
    b.step(case, "DELETE tiny@sha256:00…", lambda: b.call("DELETE", "/api/delete",
                                                          json={"model": "tiny@sha256:" + "0" * 64}))
    b.step(case, "then /api/show tiny", lambda: b.call("POST", "/api/show", json={"model": "tiny"}))


def second_serve(b: Bench, env: dict[str, str]) -> None:
    def send() -> tuple[str, str]:
        port = socket.create_server(("127.0.0.1", 0))
        free = port.getsockname()[1]
        port.close()
        try:
            done = subprocess.run([sys.executable, "-m", "ollama_py", "serve"], check=False, cwd=ROOT,
                                  capture_output=True, text=True, timeout=60,
                                  env={**env, "OLLAMA_HOST": f"127.0.0.1:{free}"})
        except subprocess.TimeoutExpired:
            return "timeout", "the second serve was still running after 60 s"
        lines = done.stderr.strip().splitlines()
        return f"exit {done.returncode}", lines[-1] if lines else ""

    b.step("a second serve on the same store", "`ollama-py serve` with the same OLLAMA_MODELS", send)


def _rss_mb(pid: int) -> float:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def fan_out_and_slow_clients(b: Bench) -> None:
    """Issue 34 items 2 and 3, and /api/detokenize past the vocabulary: one embed request with thousands of
    inputs (was a runner connection per input, all at once), long inputs that must be tokenized first, and the
    threaded routes while slow uploads are open (they held every default-executor thread)."""
    inputs = [f"input number {i}" for i in range(2000)]

    def embed(body: dict[str, Any]) -> tuple[str, str]:
        r = requests.post(b.url + "/api/embed", json={"model": "tiny", **body}, timeout=300)
        if r.status_code != 200:
            return str(r.status_code), error_text(r)
        return "200", f"{len(r.json()['embeddings'])} embeddings"

    b.step("fan-out", "/api/embed with 2,000 short inputs", lambda: embed({"input": inputs}))
    long_inputs = [" ".join(f"w{i}x{j}" for j in range(40)) for i in range(300)]
    b.step("fan-out", "/api/embed with 300 inputs past num_ctx 64", lambda: embed(
        {"input": long_inputs, "options": {"num_ctx": 64}}))
    b.step("bad input", "/api/detokenize of id 10^9 (past the vocabulary)", functools.partial(
        b.call, "POST", "/api/detokenize", json={"model": "tiny", "tokens": [1, 10 ** 9]}))

    host, port = b.url.removeprefix("http://").rsplit(":", 1)
    uploads = []
    try:
        for i in range(12):  # more than the default executor's threads on any machine up to 8 cores
            s = socket.create_connection((host, int(port)))
            digest = hashlib.sha256(b"slow %d" % i).hexdigest()
            s.sendall(f"POST /api/blobs/sha256:{digest} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1000\r\n\r\nx"
                      .encode())
            uploads.append(s)
        time.sleep(1.0)  # each upload's handler has started and read its first byte

        def others() -> tuple[str, str]:
            tags = requests.get(b.url + "/api/tags", timeout=20)
            show = requests.post(b.url + "/api/show", json={"model": "tiny"}, timeout=20)
            return f"{tags.status_code}/{show.status_code}", "answered while 12 uploads were open"

        b.step("slow clients", "/api/tags and /api/show with 12 trickling uploads open", others)
    finally:
        for s in uploads:
            s.close()


def hostile_registry(b: Bench, pid: int) -> None:
    """Pulls from a registry that lies (issue 34 item 5), each with the serve's RSS growth in its text."""
    import gzip

    from tests.fakes.hostile_registry import CONFIG, HostileRegistry, manifest_bytes, reply, serve_blobs, sha

    huge = manifest_bytes([("sha256:" + "a" * 64, 20 * 1000 ** 4)], (sha(CONFIG), len(CONFIG)))
    bomb = gzip.compress(b"{" + b" " * (256 << 20) + b"}", compresslevel=9)

    def endless(h: Any, seen: Any) -> None:
        h.send_response(200)
        h.end_headers()
        with contextlib.suppress(OSError):
            for _ in range(4096):  # 4 GiB, unless the client hangs up first
                h.wfile.write(b" " * (1 << 20))

    answers: dict[str, Callable[[Any, Any], None]] = {
        "a manifest claiming a 20 TB layer": lambda h, seen: serve_blobs(h, seen, {sha(CONFIG): CONFIG}, huge),
        f"a gzip-bomb manifest ({len(bomb) // 1000} KB -> 256 MiB)":
            lambda h, seen: reply(h, 200, bomb, Content_Encoding="gzip"),
        "an endless manifest": endless,
        "a redirect loop": lambda h, seen: reply(h, 302, Location=seen.path),
    }
    registry = HostileRegistry()
    try:
        for what, answer in answers.items():
            registry.answer = answer

            def send() -> tuple[str, str]:
                before = _rss_mb(pid)
                status, text = b.call("POST", "/api/pull", json={"model": f"{registry.host}/evil/m:1",
                                                                 "insecure": True, "stream": False})
                return status, f"{text} (serve RSS {_rss_mb(pid) - before:+.0f} MB)"

            b.step("hostile registry", f"/api/pull from {what}", send)
    finally:
        registry.close()


def big_bodies(b: Bench) -> None:
    """The issue 34/38 bodies: each is read, decoded and sent on in slices or threads; past OLLAMA_PY_MAX_BODY
    (64 MiB) a 413 before it is read."""
    json_headers = {"Content-Type": "application/json"}

    def post(path: str, body: bytes) -> Callable[[], tuple[str, str]]:
        return lambda: b.call("POST", path, data=body, headers=json_headers)

    chat = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": "word " * ((33 << 20) // 5)}],
                       "stream": False, "options": {"num_predict": 1}}).encode()
    b.step("a big JSON body", f"/api/chat, one {len(chat) >> 20} MiB message (cut to fit the context)",
           post("/api/chat", chat))
    many = json.dumps({"model": "tiny", "messages": [{"role": "user", "content": f"m{i}"} for i in range(100_000)],
                       "stream": False, "options": {"num_predict": 1}}).encode()
    b.step("a big JSON body", f"/api/chat, 100,000 short messages ({len(many) >> 20} MiB, cut to fit)",
           post("/api/chat", many))
    text = json.dumps({"model": "tiny", "content": "ab " * ((32 << 20) // 3)}).encode()
    b.step("a big JSON body", f"/api/tokenize, {len(text) >> 20} MiB of text", post("/api/tokenize", text))
    image = json.dumps({"model": "tiny", "prompt": "hi", "images": ["A" * 60_000_000], "stream": False}).encode()
    b.step("a big JSON body", f"/api/generate with a {len(image) // 1_000_000} MB base64 image (not a vision model)",
           post("/api/generate", image))
    over = b"{" + b" " * (80 << 20) + b"}"
    b.step("a big JSON body", "an 80 MiB body (over the 64 MiB limit)", post("/api/chat", over))


def more_issue_34(b: Bench, scratch: Path, config: Path) -> None:
    """The rest of issue 34 that a client (or an operator's mistake) can reach: model code in an HF import, a
    chat template that loops, 500 idle console viewers, four clients on a slow template, the config file
    replaced by a FIFO, and /metrics after a model is deleted."""
    files: dict[str, str] = {}
    (scratch / "evil").mkdir(exist_ok=True)
    evil = {
        "config.json": json.dumps({"architectures": ["QWenLMHeadModel"], "model_type": "qwen", "hidden_size": 64,
                                   "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 512}).encode(),
        "tokenizer_config.json": json.dumps({"tokenizer_class": "QWenTokenizer", "auto_map": {
            "AutoTokenizer": ["tokenization_x.QWenTokenizer", None]}}).encode(),
        "tokenization_x.py": f"open({str(scratch / 'PWNED')!r}, 'w').write('ran')\nclass QWenTokenizer: pass\n"
                             .encode(),
        "model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ",
    }
    for name, data in evil.items():
        (scratch / "evil" / name).write_bytes(data)
        files[name] = upload_blob(b.url, scratch / "evil" / name)

    def hf_import() -> tuple[str, str]:
        status, text = b.call("POST", "/api/create", json={"model": "qwen-evil", "files": files, "stream": False})
        return status, f"{text} (the .py ran: {(scratch / 'PWNED').exists()})"

    b.step("model code", "/api/create from HF files whose auto_map names an uploaded tokenization_x.py", hf_import)

    looping = write_tiny_gguf(scratch / "looping.gguf",
                              chat_template="{% for i in range(100000000) %}x{% endfor %}{{ messages[0].content }}")
    digest = upload_blob(b.url, looping)
    b.step("chat template", "/api/create from a GGUF whose chat template loops 1e8 times", functools.partial(
        b.call, "POST", "/api/create", json={"model": "loops", "files": {"m.gguf": digest}, "stream": False}))

    host, port = b.url.removeprefix("http://").rsplit(":", 1)
    viewers = []
    try:
        for _ in range(500):
            s = socket.create_connection((host, int(port)))
            s.sendall(f"GET /ui/api/events HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
            viewers.append(s)
        time.sleep(1.0)

        def idle_viewers() -> tuple[str, str]:
            before, t0 = _cpu_seconds(_serve_pid), time.monotonic()
            time.sleep(5)
            share = (_cpu_seconds(_serve_pid) - before) / (time.monotonic() - t0) * 100
            status, _ = b.call("GET", "/api/tags")
            return status, f"serve used {share:.1f} % of a core over 5 s with 500 idle viewers connected"

        b.step("console", "500 idle /ui/api/events viewers", idle_viewers)
    finally:
        for s in viewers:
            s.close()

    slow_template = "{{ range 3000000 }}{{ end }}{{ range .Messages }}{{ .Content }}{{ end }}"
    results: list[float] = []

    def slow_client() -> None:
        with contextlib.suppress(requests.RequestException):
            requests.post(b.url + "/api/generate", json={"model": "tiny", "prompt": "hi", "template": slow_template,
                                                        "stream": False, "options": {"num_predict": 1}}, timeout=120)

    def chat_beside_slow_templates() -> tuple[str, str]:
        clients = [threading.Thread(target=slow_client) for _ in range(4)]
        for t in clients:
            t.start()
        time.sleep(0.3)
        t0 = time.monotonic()
        status, text = b.call("POST", "/api/chat", json={"model": "tiny", "messages": [{"role": "user",
                                                          "content": "hi"}], "stream": False,
                                                          "options": {"num_predict": 1}})
        results.append(time.monotonic() - t0)
        for t in clients:
            t.join(120)
        return status, f"{text}: answered in {results[-1] * 1000:.0f} ms while 4 clients rendered a slow template"

    b.step("template threads", "a chat while 4 clients render a ~1 s template", chat_beside_slow_templates)

    def fifo_config() -> tuple[str, str]:
        text = config.read_text()
        config.unlink()
        os.mkfifo(config)
        try:
            time.sleep(5)  # two of the watcher's looks (every 2 s)
            status, answer = b.call("GET", "/api/tags")
        finally:
            config.unlink()
            config.write_text(text)
        time.sleep(3)
        after = requests.post(b.url + "/api/show", json={"model": "small"}, timeout=10).status_code
        return status, f"{answer} while the config file was a FIFO; its alias after the file came back: {after}"

    b.step("config file", "the config file replaced by a FIFO for 5 s", fifo_config)

    def metrics_after_delete() -> tuple[str, str]:
        b.call("POST", "/api/copy", json={"source": "tiny", "destination": "gone-soon"})
        b.call("POST", "/api/generate", json={"model": "gone-soon", "prompt": "hi", "stream": False,
                                              "options": {"num_predict": 1}})
        label = 'model="gone-soon'
        before = requests.get(b.url + "/metrics", timeout=10).text.count(label)
        b.call("DELETE", "/api/delete", json={"model": "gone-soon"})
        r = requests.get(b.url + "/metrics", timeout=10)
        return str(r.status_code), f"series naming the model: {before} before /api/delete, {r.text.count(label)} after"

    b.step("/metrics", "a model's series after /api/delete", metrics_after_delete)


_serve_pid = 0


SLOW_CONVERTER = """import os, sys, time
print("loading the model", flush=True)
time.sleep(600)
"""


def create_hang_up(b: Bench, scratch: Path) -> None:
    """Issue 34: a client that hangs up during /api/create's conversion; the converter ran on for nobody. A serve
    of its own, whose converter takes ten minutes (it sleeps)."""

    from tests.helpers.app import create_tiny_model, make_settings

    global _serve_pid
    scratch = scratch / "hang-up"
    scratch.mkdir(parents=True, exist_ok=True)
    create_tiny_model(make_settings(scratch), write_tiny_gguf(scratch / "tiny.gguf"))
    runners = fake_runners_dir(scratch)
    (runners / "convert").mkdir(exist_ok=True)
    (runners / "convert" / "convert_hf_to_gguf.py").write_text(SLOW_CONVERTER)
    proc, url, _ = start_serve(scratch, {"OLLAMA_RUNNERS_DIR": str(runners), "OLLAMA_NOUI": "1"})
    main_url, main_pid = b.url, _serve_pid
    b.url, _serve_pid = url, proc.pid
    try:
        _create_hang_up(b, scratch)
    finally:
        b.url, _serve_pid = main_url, main_pid
        stop_serve(proc)


def _create_hang_up(b: Bench, scratch: Path) -> None:
    import psutil

    files = {}
    (scratch / "hf").mkdir(exist_ok=True)
    for name, data in {"config.json": json.dumps({"architectures": ["LlamaForCausalLM"]}).encode(),
                       "model.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{}      "}.items():
        (scratch / "hf" / name).write_bytes(data)
        files[name] = upload_blob(b.url, scratch / "hf" / name)

    def converters() -> list[psutil.Process]:
        with contextlib.suppress(psutil.Error):
            return [p for p in psutil.Process(_serve_pid).children(recursive=True)
                    if any("convert" in part for part in p.cmdline())]
        return []

    def send() -> tuple[str, str]:
        host, port = b.url.removeprefix("http://").rsplit(":", 1)
        payload = json.dumps({"model": "left", "files": files}).encode()
        s = socket.create_connection((host, int(port)), timeout=60)  # a raw client: it leaves when it chooses
        s.sendall(b"POST /api/create HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (host.encode(), len(payload), payload))
        seen = b""
        while b"converting model" not in seen:
            chunk = s.recv(65536)
            if not chunk:
                break
            seen += chunk
        status = seen.split(b" ", 2)[1].decode() if seen.startswith(b"HTTP/") else "no answer"
        deadline = time.monotonic() + 30
        while not converters() and time.monotonic() < deadline:
            time.sleep(0.1)
        running = len(converters())
        s.close()  # the client hangs up
        deadline = time.monotonic() + 30
        blobs = scratch / "models" / "blobs"
        while (converters() or list(blobs.glob("sha256-tmp-*"))) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = len(converters())
        temp = list(blobs.glob("sha256-tmp-*"))
        return status, (f"converters running when the client left: {running}, 30 s later: {left}; "
                                    f"temporary files left: {len(temp)}")

    b.step("create", "the client hangs up while its HF import is converting", send)


def orphan_blob(b: Bench, scratch: Path) -> None:
    """Issue 34: a blob no model names (an upload whose create never came) stayed until a restart."""
    blob = scratch / "orphan.bin"
    blob.write_bytes(os.urandom(4096))
    digest = upload_blob(b.url, blob)
    stored = scratch / "models" / "blobs" / digest.replace(":", "-")
    two_hours_ago = time.time() - 7200
    os.utime(stored, (two_hours_ago, two_hours_ago))  # past the hour's grace an upload gets for its create
    models_blobs = {p.name for p in stored.parent.iterdir()} - {stored.name}

    def send() -> tuple[str, str]:
        t0 = time.monotonic()
        while stored.exists() and time.monotonic() - t0 < 10 * PRUNE_EVERY:
            time.sleep(0.1)
        kept = models_blobs <= {p.name for p in stored.parent.iterdir()}
        status, _ = b.call("POST", "/api/show", json={"model": "tiny"})
        return status, (f"the unreferenced blob, 2 h old: {'removed' if not stored.exists() else 'still there'} "
                        f"after {time.monotonic() - t0:.1f} s (OLLAMA_PY_PRUNE_INTERVAL={PRUNE_EVERY}); "
                        f"every other blob kept: {kept}")

    b.step("orphan blob", "a blob no model names, while serve runs", send)


def _cpu_seconds(pid: int) -> float:
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def run(scratch: Path, gguf: Path) -> list[Row]:
    """Every case against one serve (over the fake runner, one slot, 2 fast tokens)."""
    from tests.helpers.app import create_tiny_model, make_settings

    global _serve_pid
    scratch.mkdir(parents=True, exist_ok=True)
    create_tiny_model(make_settings(scratch), gguf)
    config = scratch / "config.toml"
    config.write_text('[models."tiny"]\naliases = ["small"]\n')
    runners = fake_runners_dir(scratch)
    if (ROOT / "runners" / "convert").is_dir():  # the real converter, for the HF import with model code
        with contextlib.suppress(FileExistsError):
            (runners / "convert").symlink_to(ROOT / "runners" / "convert")
    proc, url, env = start_serve(scratch, {"OLLAMA_RUNNERS_DIR": str(runners), "OLLAMA_PY_CONFIG": str(config),
                                           "OLLAMA_PY_MAX_CONNECTIONS": str(CAP),
                                           "OLLAMA_PY_LOOP_WARN_MS": str(LOOP_WARN_MS),
                                           "OLLAMA_PY_PRUNE_INTERVAL": str(PRUNE_EVERY),
                                           "FAKE_TOKENS": "2", "FAKE_TOKEN_DELAY": "0.005"})
    _serve_pid = proc.pid
    b = Bench(url, log=scratch / "serve.log")
    try:
        b.call("POST", "/api/generate", json={"model": "tiny", "prompt": "warm up", "stream": False})
        only = set(filter(None, os.environ.get("HARDENING_ONLY", "").split(",")))  # while developing a case
        for case in (idle, template_bombs, many_tools, rpc_servers, slowloris, huge_keep_alive, gguf_bombs,
                     server_paths, wrong_digest, fan_out_and_slow_clients, big_bodies):
            if not only or case.__name__ in only:
                case(b)
        if not only or "more_issue_34" in only:
            more_issue_34(b, scratch, config)
            orphan_blob(b, scratch)
            create_hang_up(b, scratch)
        if not only:
            deleted_blob(b, scratch / "models", scratch)
            hostile_registry(b, proc.pid)
            second_serve(b, env)
        alive = b.call("GET", "/api/version")
        if alive[0] != "200" or proc.poll() is not None:
            b.rows.append(Row("after every case", "GET /api/version", alive[0], alive[1], 0, 0))
    finally:
        stop_serve(proc)
    return b.rows


def run_repeated(scratch: Path, gguf: Path, times: int) -> list[Row]:
    """run() `times` times, each on a fresh serve and store; a step's gap is the median of its runs (one run's
    gap can be a neighbour's doing on a shared machine), its status and text the first run's, and a status
    that differs between runs is said in the text."""
    runs = [run(scratch / f"run{i}", gguf) for i in range(times)]
    out = []
    for i, first in enumerate(runs[0]):
        same = [r[i] for r in runs if i < len(r) and (r[i].case, r[i].step) == (first.case, first.step)]
        gaps = tuple(r.gap_ms for r in same)
        statuses = sorted({r.status for r in same})
        text = first.text if len(statuses) == 1 else f"{first.text} (statuses over the runs: {', '.join(statuses)})"
        out.append(Row(first.case, first.step, first.status, text, statistics.median(gaps),
                       sum(r.ticker_errors for r in same), gaps, statistics.median(r.loop_ms for r in same)))
    return out


def table(rows: list[Row]) -> list[str]:
    out = ["| case | step | status | error text (or answer) | largest gap, median | each run | ticker errors "
           "| serve's loop held, median |", "|---|---|---|---|---:|---|---:|---:|"]
    for r in rows:
        text = r.text.replace("|", "\\|").replace("\n", " ")
        if len(text) > 220:
            text = text[:217] + "..."
        each = " / ".join(f"{g:.0f}" for g in r.gaps)
        held = f"{r.loop_ms:.0f} ms" if r.loop_ms else f"< {LOOP_WARN_MS} ms"
        out.append(f"| {r.case} | {r.step} | {r.status} | {text} | {r.gap_ms:.0f} ms | {each} | {r.ticker_errors} "
                   f"| {held} |")
    return out


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="hardening-") as tmp:
        rows = run_repeated(Path(tmp) / "h", write_tiny_gguf(Path(tmp) / "tiny.gguf"), 3)
    print("\n".join(table(rows)))
    print(f"load average: {os.getloadavg()}")
