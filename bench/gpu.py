"""ollama-py on a lent NVIDIA GPU, in one time-boxed command (issue 35): what a GPU owner gets, measured.

    python bench/gpu.py --setup DIR --out OUT/gpu.md [--budget 270]      on the GPU machine
    python bench/gpu.py --pack DIR [--cuda RUNNERS/cuda] [--vulkan RUNNERS/vulkan]   here, before: fills DIR
    python bench/gpu.py --dump-tokenizer SmolLM2.gguf bench/data/smollm2-tokenizer.json.gz   (once)

No model is downloaded (real weights cannot travel to a lent machine): GGUFs of the llama architecture at real
models' shapes (SmolLM2-135M, Llama-3.2-1B, Llama-3-8B) are written in place, Q4_0 blocks of random bytes with a
small fixed scale, norms of 1, and SmolLM2's real tokenizer (bench/data/smollm2-tokenizer.json.gz). Their speed and
memory are a real model's; their text is noise, so only throughput and placement are compared.

What it records, writing the report after every step so a cut-off run still returns what it measured:
- the card, the driver, the variant the server chose and the devices llama-server lists (cuda and vulkan);
- per shape: cold load, `/api/ps` size / size_vram / PROCESSOR / devices, layers offloaded, the estimate vs
  llama-server's buffers (the server's log line) vs nvidia-smi's per-process memory;
- decode and time to first token through the gateway (native /api/generate and OpenAI chat) vs a direct
  llama-server with the gateway's exact argv, and one at llama-server's defaults, alternating rounds;
- short requests (8 tokens): added time to first token, native and OpenAI routes;
- 4 and 16 concurrent streams, aggregate tokens/s, gateway vs direct;
- `num_gpu: 0` (a CPU reload), a partial offload (OLLAMA_GPU_OVERHEAD = free memory - 3000 MiB) and the
  vulkan runner forced onto the same card.

Its direct side is a second llama-server process with the gateway's argv, and its rounds mix native and chat
prompts: right for decode, streams and memory, not for a first token (the card's switch between two processes,
~0.3 ms, and llama-server's switch of cached prompts, ~3 ms, fall on one side only). First tokens:
bench/gpu_first_token.py, every side on the serve's own runner.

--setup DIR (made by --pack): runners as xz (cuda/, vulkan/), wheels the machine's Python lacks, the Vulkan loader
and glvnd .debs (the NVIDIA Vulkan ICD needs them); the CUDA runtime libraries are looked up on the machine.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import gzip
import json
import lzma
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common

HERE = Path(__file__).resolve().parent
TOKENIZER = HERE / "data" / "smollm2-tokenizer.json.gz"
MIB = 2**20

# Real models' shapes (config.json of each): layers, embedding, feed-forward, heads, kv heads, tied output, rope base
SHAPES: dict[str, dict[str, Any]] = {
    "smollm2-135m": {"layers": 30, "embd": 576, "ff": 1536, "heads": 9, "kv": 3, "tied": True, "rope": 100000.0},
    "llama-3.2-1b": {"layers": 16, "embd": 2048, "ff": 8192, "heads": 32, "kv": 8, "tied": True, "rope": 500000.0},
    "llama-3-8b": {"layers": 32, "embd": 4096, "ff": 14336, "heads": 32, "kv": 8, "tied": False, "rope": 500000.0},
}
TOKENIZER_KEYS = ("tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                  "tokenizer.ggml.merges", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                  "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
                  "tokenizer.ggml.add_bos_token", "tokenizer.chat_template")
PROMPT = "Once upon a time, in a lighthouse at the edge of the sea, there lived a keeper who"


# -- the report ------------------------------------------------------------------------------------------------------
class Report:
    """Sections of markdown, rewritten to `out` (and its .json twin) after every step."""

    def __init__(self, out: Path, deadline: float, script: str = "bench/gpu.py") -> None:
        self.out, self.deadline, self.started, self.script = out, deadline, time.monotonic(), script
        self.sections: list[tuple[str, str]] = []
        self.data: dict[str, Any] = {}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def add(self, title: str, text: str, **data: Any) -> None:
        self.sections.append((title, text))
        self.data.setdefault(title, {}).update(data)
        self.write()
        print(f"== {title} ({time.monotonic() - self.started:.0f}s)\n{text}\n", flush=True)

    def write(self) -> None:
        head = (f"# ollama-py on a lent NVIDIA GPU ({self.script})\n\n"
                "Models are the llama architecture at real models' shapes with random Q4_0 weights and SmolLM2's "
                "tokenizer, written in place: their speed and memory are a real model's, their text is noise. "
                "Ratios are gateway / direct (> 1 is faster for rates, < 1 for times); medians of alternating "
                "rounds.\n")
        body = "\n".join(f"## {t}\n\n{x}\n" for t, x in self.sections)
        common.write_text(self.out, head + "\n" + body)
        common.write_json(self.out.with_suffix(".json"), self.data)


def step(report: Report, title: str, need: float, fn: Any, *args: Any) -> Any:
    """Run one step if `need` seconds are left; a failure is recorded and the run goes on."""
    if report.left() < need:
        report.add(title, f"skipped: {report.left():.0f}s left, the step needs ~{need:.0f}s")
        return None
    try:
        return fn(report, *args)
    except Exception as e:  # noqa: BLE001 - a bench step that fails is a finding, not the end of the run
        report.add(title, f"failed: {type(e).__name__}: {str(e)[:1500]}")
        return None


# -- setup on the lent machine --------------------------------------------------------------------------------------
def setup(carry: Path, work: Path) -> dict[str, str]:
    """Unpack the runners, install the carried wheels into work/site, the Vulkan/glvnd libraries (into / when
    root), and find the CUDA runtime; returns the environment additions for serve and direct llama-servers."""
    env: dict[str, str] = {}
    runners = work / "runners"
    for vdir in sorted((carry / "runners").iterdir()) if (carry / "runners").is_dir() else []:
        out = runners / vdir.name
        out.mkdir(parents=True, exist_ok=True)
        for f in vdir.iterdir():
            if f.suffix == ".xz":
                with lzma.open(f) as src, open(out / f.stem, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 22)
                (out / f.stem).chmod(0o755)
            else:
                shutil.copy2(f, out / f.name)
    env["OLLAMA_RUNNERS_DIR"] = str(runners)
    wheels = sorted((carry / "wheels").glob("*.whl")) if (carry / "wheels").is_dir() else []
    if wheels:
        site = work / "site"
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--target",
                        str(site), *map(str, wheels)], check=True)
        sys.path.insert(0, str(site))
        env["PYTHONPATH"] = os.pathsep.join([str(site), str(common.ROOT), os.environ.get("PYTHONPATH", "")])
    else:
        env["PYTHONPATH"] = os.pathsep.join([str(common.ROOT), os.environ.get("PYTHONPATH", "")])
    debs = sorted((carry / "debs").glob("*.deb")) if (carry / "debs").is_dir() else []
    if debs and os.geteuid() == 0:
        for deb in debs:
            subprocess.run(["dpkg", "-x", str(deb), "/"], check=False)
        subprocess.run(["ldconfig"], check=False)
    libdirs: list[str] = []
    for root in ("/usr/local", "/usr/lib", "/opt"):
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            found = subprocess.run(["find", root, "-name", "libcudart.so.1[0-9]*", "-o", "-name",
                                    "libcublas.so.1[0-9]*"], capture_output=True, text=True, timeout=60).stdout
            for line in found.splitlines():
                d = str(Path(line).parent)
                if d not in libdirs:
                    libdirs.append(d)
    if libdirs:
        env["LD_LIBRARY_PATH"] = os.pathsep.join([*libdirs, os.environ.get("LD_LIBRARY_PATH", "")])
    os.environ.update(env)
    return env


def pack(dest: Path, cuda: Path | None, vulkan: Path | None) -> None:
    """Here: what --setup needs, small enough for the lent machine's 64 MiB working-tree limit."""
    dest.mkdir(parents=True, exist_ok=True)
    for name, src in (("cuda", cuda), ("vulkan", vulkan)):
        if src is None or not (src / "llama-server").is_file():
            continue
        out = dest / "runners" / name
        out.mkdir(parents=True, exist_ok=True)
        stripped = out / "llama-server.tmp"
        shutil.copy2(src / "llama-server", stripped)
        subprocess.run(["strip", str(stripped)], check=False)
        with open(stripped, "rb") as f, lzma.open(out / "llama-server.xz", "wb", preset=6) as z:
            shutil.copyfileobj(f, z, 1 << 22)
        stripped.unlink()
        if (src / "build-info.json").is_file():
            shutil.copy2(src / "build-info.json", out / "build-info.json")
    wheels = dest / "wheels"
    wheels.mkdir(exist_ok=True)
    # what the image's Python 3.12 lacked (gpu-h200.md); manylinux wheels for CPython 3.12
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--only-binary", ":all:", "--python-version",
                    "3.12", "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_28_x86_64",
                    "--platform", "manylinux_2_17_x86_64", "--implementation", "cp", "-d", str(wheels), "gguf",
                    "platformdirs", "cryptography", "cffi", "pycparser", "jinja2", "markupsafe", "pyyaml",
                    "tqdm", "--no-deps"], check=True)
    debs = dest / "debs"
    debs.mkdir(exist_ok=True)
    subprocess.run(["apt-get", "download", "libvulkan1", "libglvnd0", "libegl1", "libgl1", "libglx0", "libgles2",
                    "libopengl0"], cwd=debs, check=False)
    total = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
    print(f"packed {dest}: {total / MIB:.1f} MiB")


# -- models ----------------------------------------------------------------------------------------------------------
def dump_tokenizer(gguf_path: Path, out: Path) -> None:
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf_path))
    data: dict[str, Any] = {}
    for key in TOKENIZER_KEYS:
        field = reader.fields.get(key)
        if field is None:
            continue
        data[key] = field.contents()
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt", encoding="utf-8") as f:
        json.dump(data, f)
    print(f"{out}: {out.stat().st_size / 1024:.0f} KiB, {len(data)} keys")


def write_model(path: Path, shape: dict[str, Any], tokenizer: dict[str, Any]) -> None:
    """A llama-architecture GGUF with random Q4_0 weights (a fixed small fp16 scale, so activations stay finite)."""
    import numpy as np
    from gguf import GGMLQuantizationType, GGUFWriter, LlamaFileType, TokenType  # noqa: F401

    rng = np.random.default_rng(0)
    n_vocab = len(tokenizer["tokenizer.ggml.tokens"])
    embd, ff, heads, kv = shape["embd"], shape["ff"], shape["heads"], shape["kv"]
    head_dim = embd // heads
    w = GGUFWriter(str(path), "llama")
    w.add_name(path.stem)
    w.add_block_count(shape["layers"])
    w.add_context_length(8192)
    w.add_embedding_length(embd)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(shape["rope"])
    w.add_rope_dimension_count(head_dim)
    w.add_vocab_size(n_vocab)
    w.add_file_type(int(LlamaFileType.MOSTLY_Q4_0))
    w.add_tokenizer_model(tokenizer["tokenizer.ggml.model"])
    if "tokenizer.ggml.pre" in tokenizer:
        w.add_tokenizer_pre(tokenizer["tokenizer.ggml.pre"])
    w.add_token_list(tokenizer["tokenizer.ggml.tokens"])
    if "tokenizer.ggml.token_type" in tokenizer:
        w.add_token_types(tokenizer["tokenizer.ggml.token_type"])
    if "tokenizer.ggml.merges" in tokenizer:
        w.add_token_merges(tokenizer["tokenizer.ggml.merges"])
    for key, add in (("bos_token_id", w.add_bos_token_id), ("eos_token_id", w.add_eos_token_id),
                     ("unknown_token_id", w.add_unk_token_id), ("padding_token_id", w.add_pad_token_id)):
        if f"tokenizer.ggml.{key}" in tokenizer:
            add(int(tokenizer[f"tokenizer.ggml.{key}"]))
    if "tokenizer.ggml.add_bos_token" in tokenizer:
        w.add_add_bos_token(bool(tokenizer["tokenizer.ggml.add_bos_token"]))
    if "tokenizer.chat_template" in tokenizer:
        w.add_chat_template(tokenizer["tokenizer.chat_template"])

    blocks: dict[tuple[int, int], Any] = {}

    def q4(rows: int, cols: int) -> Any:
        if (rows, cols) not in blocks:
            raw = rng.integers(0, 256, size=(rows, cols // 32, 18), dtype=np.uint8)
            raw[:, :, 0:2] = np.frombuffer(np.float16(0.02).tobytes(), dtype=np.uint8)
            blocks[(rows, cols)] = raw.reshape(rows, cols // 32 * 18)
        return blocks[(rows, cols)]

    ones = np.ones(embd, dtype=np.float32)
    w.add_tensor("token_embd.weight", q4(n_vocab, embd), raw_dtype=GGMLQuantizationType.Q4_0)
    w.add_tensor("output_norm.weight", ones)
    if not shape["tied"]:
        w.add_tensor("output.weight", q4(n_vocab, embd), raw_dtype=GGMLQuantizationType.Q4_0)
    for i in range(shape["layers"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones)
        w.add_tensor(p + "attn_q.weight", q4(embd, embd), raw_dtype=GGMLQuantizationType.Q4_0)
        w.add_tensor(p + "attn_k.weight", q4(kv * head_dim, embd), raw_dtype=GGMLQuantizationType.Q4_0)
        w.add_tensor(p + "attn_v.weight", q4(kv * head_dim, embd), raw_dtype=GGMLQuantizationType.Q4_0)
        w.add_tensor(p + "attn_output.weight", q4(embd, embd), raw_dtype=GGMLQuantizationType.Q4_0)
        w.add_tensor(p + "ffn_norm.weight", ones)
        w.add_tensor(p + "ffn_gate.weight", q4(ff, embd), raw_dtype=GGMLQuantizationType.Q4_0)
        w.add_tensor(p + "ffn_up.weight", q4(ff, embd), raw_dtype=GGMLQuantizationType.Q4_0)
        w.add_tensor(p + "ffn_down.weight", q4(embd, ff), raw_dtype=GGMLQuantizationType.Q4_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# -- measuring -------------------------------------------------------------------------------------------------------
def stream(url: str, kind: str, model: str, n: int, prompt: str = PROMPT, t0: float | None = None) -> dict[str, Any]:
    """One streamed generation: ttft, decode tokens/s (client-side stamps), tokens, whole time.
    kind: native (/api/generate raw), openai (/v1/chat/completions), direct (/completion),
    direct-openai (llama-server's /v1/chat/completions)."""
    start = t0 if t0 is not None else time.perf_counter()
    sse = kind != "native"
    body: dict[str, Any]
    if kind == "native":
        path, body = "/api/generate", {"model": model, "prompt": prompt, "raw": True, "stream": True,
                                       "options": {"num_predict": n, "temperature": 0, "seed": 1}}
    elif kind == "direct":
        path, body = "/completion", {"prompt": prompt, "n_predict": n, "stream": True, "temperature": 0,
                                     "seed": 1, "cache_prompt": True}
    else:
        path, body = "/v1/chat/completions", {"model": model, "messages": [{"role": "user", "content": prompt}],
                                              "stream": True, "max_tokens": n, "temperature": 0, "seed": 1}
    stamps: list[float] = []
    with requests.post(url + path, json=body, stream=True, timeout=300) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line:
                continue
            if sse:
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                line = line[6:]
            ev = json.loads(line)
            if kind == "native":
                piece = ev.get("response")
            elif kind == "direct":
                piece = ev.get("content")
            else:
                piece = ((ev.get("choices") or [{}])[0].get("delta") or {}).get("content")
            if piece:
                stamps.append(time.perf_counter())
    end = time.perf_counter()
    k = len(stamps)
    return {"ttft": stamps[0] - start if stamps else None, "tokens": k, "whole": end - start,
            "tps": (k - 1) / (stamps[-1] - stamps[0]) if k > 2 and stamps[-1] > stamps[0] else None,
            "end": stamps[-1] if stamps else end}


def concurrent(url: str, kind: str, model: str, streams: int, n: int, tag: str) -> float:
    start = time.perf_counter()
    with cf.ThreadPoolExecutor(streams) as pool:
        got = list(pool.map(lambda i: stream(url, kind, model, n, f"{tag} story {i}: {PROMPT}", t0=start),
                            range(streams)))
    end = max(g["end"] for g in got)
    return sum(g["tokens"] for g in got) / (end - start)


def med(values: Sequence[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return statistics.median(vals) if vals else None


def fmt(x: float | None, unit: str = "", digits: int = 1) -> str:
    return "–" if x is None else f"{x:.{digits}f}{unit}"


def ratio(a: float | None, b: float | None) -> str:
    return "–" if not a or not b else f"{a / b:.3f}"


def gpu_procs() -> dict[int, int]:
    """nvidia-smi's per-process memory: pid -> MiB."""
    if shutil.which("nvidia-smi") is None:
        return {}
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30).stdout
    procs = {}
    for line in out.splitlines():
        with contextlib.suppress(ValueError):
            pid, mem = (x.strip() for x in line.split(","))
            procs[int(pid)] = int(mem)
    return procs


def runner_pids(serve: common.Child) -> dict[int, list[str]]:
    import psutil

    out: dict[int, list[str]] = {}
    with contextlib.suppress(psutil.Error):
        for p in psutil.Process(serve.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                cmd = p.cmdline()
                if cmd and Path(cmd[0]).name == "llama-server":
                    out[p.pid] = cmd
    return out


def processor(size: int, vram: int) -> str:
    if not vram:
        return "100% CPU"
    if vram >= size:
        return "100% GPU"
    cpu = round((size - vram) / size * 100)
    return f"{cpu}%/{100 - cpu}% CPU/GPU"


def ps_row(serve: common.Child, name: str) -> dict[str, Any]:
    for m in requests.get(serve.url + "/api/ps", timeout=30).json()["models"]:
        if m["name"].split(":")[0] == name or m["model"].split(":")[0] == name:
            return dict(m)
    return {}


def estimate_line(serve: common.Child, name: str) -> str:
    lines = [x for x in serve.log_tail(2_000_000).splitlines() if f"memory of {name}" in x]
    return lines[-1].split("memory of ", 1)[-1] if lines else "–"


def offloaded(log_text: str) -> str:
    found = re.findall(r"offloaded (\d+/\d+) layers to GPU", log_text)
    return found[-1] if found else "–"


# -- the steps -------------------------------------------------------------------------------------------------------
class Run:
    def __init__(self, args: argparse.Namespace, env: dict[str, str], work: Path) -> None:
        self.args, self.env, self.work = args, env, work
        self.models: dict[str, Path] = {}
        self.serve: common.Child | None = None
        self.cuda_decode: dict[str, float | None] = {}

    def start_serve(self, tag: str, extra: dict[str, str] | None = None) -> common.Child:
        if self.serve is not None:
            self.serve.stop()
        # one store for every serve of the run: a restart finds the blobs and creates in a moment
        env = {**self.env, "OLLAMA_KEEP_ALIVE": "1h", "OLLAMA_MAX_LOADED_MODELS": "0",
               "OLLAMA_MODELS": str(self.work / "store"), **(extra or {})}
        runners = Path(self.env["OLLAMA_RUNNERS_DIR"])
        self.serve = common.start_serve(self.work / f"serve-{tag}", env, runners_dir=runners)
        for name, path in self.models.items():
            common.create_model(self.serve.url, name, path)
        return self.serve

    def card(self, report: Report) -> None:
        q = "no nvidia-smi"
        if shutil.which("nvidia-smi"):
            q = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,memory.free,driver_version,compute_cap",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=30).stdout.strip()
        lines = [f"- nvidia-smi: `{q}`"]
        for v in ("cuda", "vulkan"):
            binary = Path(self.env["OLLAMA_RUNNERS_DIR"]) / v / "llama-server"
            if binary.is_file():
                out = subprocess.run([str(binary), "--list-devices"], capture_output=True, text=True, timeout=60)
                devs = [x.strip() for x in (out.stdout + out.stderr).splitlines() if re.match(r"\s*\w+\d+:", x)]
                lines.append(f"- `{v}/llama-server --list-devices`: {'; '.join(devs) or 'none'}")
        lines.append(f"- runner library path: `{self.env.get('LD_LIBRARY_PATH', '')[:200]}`")
        report.add("The card", "\n".join(lines), nvidia_smi=q)

    def write_models(self, report: Report) -> None:
        with gzip.open(self.args.tokenizer, "rt", encoding="utf-8") as f:
            tokenizer = json.load(f)
        rows = []
        for name in self.args.shapes:
            path = self.work / "models" / f"{name}.gguf"
            path.parent.mkdir(parents=True, exist_ok=True)
            t = time.perf_counter()
            write_model(path, SHAPES[name], tokenizer)
            self.models[name] = path
            rows.append([name, f"{path.stat().st_size / MIB:.0f} MiB", f"{time.perf_counter() - t:.1f} s"])
        report.add("Models written in place", common.markdown_table(["shape", "file", "written in"], rows))

    def shape(self, report: Report, name: str) -> None:
        serve = self.serve
        assert serve is not None
        before = set(runner_pids(serve))
        t = time.perf_counter()
        r = requests.post(serve.url + "/api/generate", json={"model": name, "prompt": "", "keep_alive": "1h"},
                          timeout=600)
        r.raise_for_status()
        cold = time.perf_counter() - t
        time.sleep(0.5)
        pids = {p: c for p, c in runner_pids(serve).items() if p not in before}
        pid, argv = next(iter(pids.items())) if pids else (0, [])
        ps = ps_row(serve, name)
        smi = gpu_procs().get(pid)
        size, vram = int(ps.get("size", 0)), int(ps.get("size_vram", 0))
        ngl = argv[argv.index("--n-gpu-layers") + 1] if "--n-gpu-layers" in argv else (
            argv[argv.index("-ngl") + 1] if "-ngl" in argv else "–")
        rounds = self.args.rounds
        direct = default = None
        try:
            if argv:
                port = common.free_port()
                d_argv = [str(x) for x in common.with_port(argv, port)]
                direct = common.start_llama_server(d_argv, self.work / f"direct-{name}.log", timeout=300)
                port2 = common.free_port()
                default = common.start_llama_server(
                    [argv[0], "-m", argv[argv.index("-m") + 1] if "-m" in argv else argv[argv.index("--model") + 1],
                     "--host", "127.0.0.1", "--port", str(port2)], self.work / f"default-{name}.log", timeout=300)
            res: dict[str, list[dict[str, Any]]] = {k: [] for k in ("native", "openai", "direct", "direct-openai",
                                                                    "default")}
            short: dict[str, list[dict[str, Any]]] = {k: [] for k in ("native", "openai", "direct", "direct-openai")}
            for i in range(rounds):
                order = [("native", serve.url), ("openai", serve.url)]
                if direct:
                    order += [("direct", direct.url), ("direct-openai", direct.url)]
                if default:
                    order += [("default", default.url)]
                if i % 2:
                    order.reverse()
                for kind, url in order:
                    k = "direct" if kind == "default" else kind
                    res[kind].append(stream(url, k, name, self.args.tokens, f"round {i}. {PROMPT}"))
                for _ in range(self.args.short):
                    for kind, url in order:
                        if kind == "default":
                            continue
                        short[kind].append(stream(url, kind, name, 8, f"r{i}. {PROMPT}"))
            c: dict[str, list[float]] = {}
            for n in (4, 16):
                for i in range(max(1, rounds - 1)):
                    c.setdefault(f"gw{n}", []).append(concurrent(serve.url, "openai", name, n, 64, f"c{n}-{i}g"))
                    if direct:
                        c.setdefault(f"d{n}", []).append(
                            concurrent(direct.url, "direct-openai", name, n, 64, f"c{n}-{i}d"))
            direct_smi = gpu_procs().get(direct.proc.pid) if direct else None
        finally:
            for child in (direct, default):
                if child is not None:
                    child.stop()
        dec = {k: med([x["tps"] for x in v]) for k, v in res.items()}
        self.cuda_decode[name] = dec["native"]
        ttft = {k: med([x["ttft"] for x in v]) for k, v in short.items()}
        whole = {k: med([x["whole"] for x in v]) for k, v in short.items()}
        log_text = serve.log_tail(2_000_000)
        rows = [
            ["cold load (s)", fmt(cold, digits=2), "", ""],
            ["/api/ps size / size_vram (MiB)", f"{size / MIB:.0f} / {vram / MIB:.0f}", "", ""],
            ["PROCESSOR", processor(size, vram), "", ""],
            ["devices", json.dumps(ps.get("devices", ""))[:200], "", ""],
            ["-ngl / offloaded", f"{ngl} / {offloaded(log_text)}", "", ""],
            ["estimate vs llama-server's buffers", estimate_line(serve, name), "", ""],
            ["nvidia-smi MiB (runner / direct same argv)", f"{smi} / {direct_smi}", "", ""],
            ["decode tok/s native vs /completion", fmt(dec["native"]), fmt(dec["direct"]),
             ratio(dec["native"], dec["direct"])],
            ["decode tok/s OpenAI chat vs direct", fmt(dec["openai"]), fmt(dec["direct-openai"]),
             ratio(dec["openai"], dec["direct-openai"])],
            ["decode tok/s native vs llama-server at its defaults", fmt(dec["native"]), fmt(dec["default"]),
             ratio(dec["native"], dec["default"])],
            ["TTFT ms, 8-token request, native vs /completion", fmt(_ms(ttft["native"]), digits=2),
             fmt(_ms(ttft["direct"]), digits=2), _added(ttft["native"], ttft["direct"])],
            ["TTFT ms, OpenAI chat vs direct", fmt(_ms(ttft["openai"]), digits=2),
             fmt(_ms(ttft["direct-openai"]), digits=2), _added(ttft["openai"], ttft["direct-openai"])],
            ["whole 8-token request ms, native vs /completion", fmt(_ms(whole["native"]), digits=2),
             fmt(_ms(whole["direct"]), digits=2), ratio(whole["native"], whole["direct"])],
            ["4 streams agg tok/s (OpenAI)", fmt(med(c.get("gw4", []))), fmt(med(c.get("d4", []))),
             ratio(med(c.get("gw4", [])), med(c.get("d4", []))),],
            ["16 streams agg tok/s (OpenAI)", fmt(med(c.get("gw16", []))), fmt(med(c.get("d16", []))),
             ratio(med(c.get("gw16", [])), med(c.get("d16", [])))],
        ]
        report.add(f"{name}: gateway vs direct llama-server (same argv)",
                   common.markdown_table(["", "gateway", "direct", "ratio / added"], rows) +
                   f"\n\nrunner argv: `{' '.join(argv[1:])[:600]}`",
                   ps=ps, cold=cold, decode=dec, ttft=ttft, whole=whole, concurrent=c, smi=smi, argv=argv)

    def shared(self, report: Report) -> None:
        assert self.serve is not None
        ps = requests.get(self.serve.url + "/api/ps", timeout=30).json()["models"]
        smi = gpu_procs()
        rows = [[m["name"], f"{m['size'] / MIB:.0f}", f"{m['size_vram'] / MIB:.0f}",
                 processor(m["size"], m["size_vram"])] for m in ps]
        rows.append(["nvidia-smi, all processes (MiB)", str(sum(smi.values())), "", ""])
        report.add("All shapes loaded at once", common.markdown_table(["model", "size MiB", "vram MiB", "PROCESSOR"],
                                                                      rows))

    def cpu_reload(self, report: Report, name: str) -> None:
        assert self.serve is not None
        got = stream(self.serve.url, "native", name, 1, "warm")  # loaded as planned
        r = requests.post(self.serve.url + "/api/generate", json={
            "model": name, "prompt": PROMPT, "raw": True, "stream": False,
            "options": {"num_gpu": 0, "num_predict": 64, "temperature": 0}}, timeout=600)
        r.raise_for_status()
        body = r.json()
        ps = ps_row(self.serve, name)
        tps = body["eval_count"] / (body["eval_duration"] / 1e9) if body.get("eval_duration") else None
        report.add(f"{name} with num_gpu: 0", f"- /api/ps: {processor(ps.get('size', 0), ps.get('size_vram', 0))}, "
                   f"size_vram {ps.get('size_vram', 0) / MIB:.0f} MiB\n- decode {fmt(tps)} tok/s on the CPU "
                   f"(GPU: {fmt(self.cuda_decode.get(name))}); warm-up answered {got['tokens']} token(s)")

    def partial(self, report: Report, name: str) -> None:
        if self.serve is not None:  # its runners' memory must be back before "free" is read
            self.serve.stop()
            self.serve = None
            time.sleep(1.0)
        free = int(subprocess.run(["nvidia-smi", "--query-gpu=memory.free", "--format=csv,noheader,nounits"],
                                  capture_output=True, text=True, timeout=30).stdout.split()[0])
        overhead = max(free - 3000, 0) * MIB
        serve = self.start_serve("partial", {"OLLAMA_GPU_OVERHEAD": str(overhead)})
        before = set(runner_pids(serve))
        got = stream(serve.url, "native", name, self.args.tokens)
        pid = next((p for p in runner_pids(serve) if p not in before), 0)
        ps = ps_row(serve, name)
        smi = gpu_procs().get(pid)
        report.add(f"{name}: partial offload (OLLAMA_GPU_OVERHEAD = free - 3000 MiB)",
                   f"- free before {free} MiB; overhead {overhead // MIB} MiB\n"
                   f"- /api/ps: {processor(ps.get('size', 0), ps.get('size_vram', 0))}, size "
                   f"{ps.get('size', 0) / MIB:.0f} MiB, size_vram {ps.get('size_vram', 0) / MIB:.0f} MiB\n"
                   f"- offloaded {offloaded(serve.log_tail(2_000_000))}; nvidia-smi runner {smi} MiB (budget 3000)\n"
                   f"- decode {fmt(got['tps'])} tok/s (full offload: {fmt(self.cuda_decode.get(name))})")

    def vulkan(self, report: Report, name: str) -> None:
        if not (Path(self.env["OLLAMA_RUNNERS_DIR"]) / "vulkan" / "llama-server").is_file():
            report.add("vulkan runner on the same card", "skipped: no vulkan runner was carried")
            return
        serve = self.start_serve("vulkan", {"OLLAMA_LLM_LIBRARY": "vulkan"})
        decs = [stream(serve.url, "native", name, self.args.tokens, f"v{i}. {PROMPT}")["tps"] for i in range(3)]
        ps = ps_row(serve, name)
        variant = re.findall(r"runner variant (\S+)", serve.log_tail(2_000_000))
        report.add("vulkan runner on the same card",
                   f"- variant: {variant[-1] if variant else '–'}; /api/ps: "
                   f"{processor(ps.get('size', 0), ps.get('size_vram', 0))}; offloaded "
                   f"{offloaded(serve.log_tail(2_000_000))}\n- decode {fmt(med(decs))} tok/s vs cuda "
                   f"{fmt(self.cuda_decode.get(name))} ({ratio(med(decs), self.cuda_decode.get(name))})")


def _ms(x: float | None) -> float | None:
    return None if x is None else x * 1000


def _added(a: float | None, b: float | None) -> str:
    return "–" if a is None or b is None else f"+{(a - b) * 1000:.2f} ms"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--setup", type=Path, help="a directory made by --pack (on the GPU machine)")
    ap.add_argument("--out", type=Path, default=common.RESULTS / "gpu.md")
    ap.add_argument("--budget", type=float, default=270, help="seconds for the whole run (default 270)")
    ap.add_argument("--tokenizer", type=Path, default=TOKENIZER)
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--short", type=int, default=5, help="8-token requests per round and route")
    ap.add_argument("--tokens", type=int, default=256, help="tokens per decode measurement")
    ap.add_argument("--pack", type=Path, help="here: write what --setup needs into this directory")
    ap.add_argument("--cuda", type=Path, help="with --pack: the cuda runner directory")
    ap.add_argument("--vulkan", type=Path, help="with --pack: the vulkan runner directory")
    ap.add_argument("--dump-tokenizer", nargs=2, type=Path, metavar=("GGUF", "OUT"))
    args = ap.parse_args()
    if args.dump_tokenizer:
        dump_tokenizer(*args.dump_tokenizer)
        return
    if args.pack:
        pack(args.pack, args.cuda, args.vulkan)
        return
    deadline = time.monotonic() + args.budget
    work = Path(tempfile.mkdtemp(prefix="gpu-bench-"))
    report = Report(args.out, deadline)
    env = setup(args.setup, work) if args.setup else {"OLLAMA_RUNNERS_DIR": str(common.ROOT / "runners")}
    run = Run(args, env, work)
    try:
        step(report, "The card", 5, Run.card.__get__(run))
        step(report, "Models written in place", 30, Run.write_models.__get__(run))
        if not run.models:
            return
        serve = step(report, "ollama-py serve (the variant it chose)", 60, lambda rep: run.start_serve("main"))
        if serve is None:
            return
        variant = re.findall(r"runner variant .*", serve.log_tail(200_000))
        for name in args.shapes:
            step(report, f"{name}: gateway vs direct llama-server (same argv)", 25, Run.shape.__get__(run), name)
        variant = re.findall(r"runner variant .*", serve.log_tail(2_000_000))
        report.add("Variant chosen", f"`{variant[-1] if variant else '–'}`")
        step(report, "All shapes loaded at once", 3, Run.shared.__get__(run))
        step(report, f"{args.shapes[0]} with num_gpu: 0", 15, Run.cpu_reload.__get__(run), args.shapes[0])
        big = args.shapes[-1]
        step(report, f"{big}: partial offload", 45, Run.partial.__get__(run), big)
        mid = args.shapes[1] if len(args.shapes) > 1 else args.shapes[0]
        step(report, "vulkan runner on the same card", 40, Run.vulkan.__get__(run), mid)
    finally:
        if run.serve is not None:
            run.serve.stop()
        report.add("Run", f"{time.monotonic() - report.started:.0f} s of bench; git {common.machine_info().get('git')}")


if __name__ == "__main__":
    main()
