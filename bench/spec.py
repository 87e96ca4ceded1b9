"""Speculative decoding (issue 26): decode tokens/s with and without speculation, same prompts, same run.

One `ollama-py serve` holds every model at once (each its own runner, OLLAMA_MAX_LOADED_MODELS high enough):
- smollm2 vs smollm2-draft: SmolLM2-135M drafting for itself (a Modelfile DRAFT of the same GGUF). It cannot be
  faster (the draft costs what the target does); it shows the acceptance and that the text does not change.
- smollm2 vs smollm2-ngram, gemma vs gemma-ngram: prompt-lookup speculation (PARAMETER draft_ngram true). The
  n-gram models are copies of the GGUF with 64 bytes appended: draft_ngram is a load option, so the same weights
  with and without it would reload one runner at every switch instead of holding two.
- gemma with SmolLM2 as its draft only where the vocabularies are compatible (llama.cpp's rule: same vocabulary
  type, sizes within 128, the same special tokens); SmolLM2 (BPE, 49152) and Gemma 3 (SentencePiece, 262144) are
  not, and llama-server refuses such a pair, so the case is reported as skipped with the reason.

Prompts: a story (little to copy) and "repeat this code with one change" (the answer copies the prompt). Every
request is /api/generate, temperature 0, a fixed seed and num_predict; the rate is the runner's own
(eval_count / eval_duration). Rounds alternate which side goes first. The acceptance is llama-server's own count
(`llamacpp:spec_decode_num_draft_tokens_total` and `..._accepted_tokens_total`, re-exported by our /metrics per
model) before and after each request. The load average is recorded at start and end; on a machine that was not
quiet the numbers are provisional.

    .venv/bin/python bench/spec.py [--runner runners/cpu_avx2/llama-server] [--rounds 3] [--num-predict 256]

Writes bench/results/spec.json and bench/results/spec.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import common

from ollama_py.store.gguf_meta import read_gguf_info

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = Path.home() / ".cache" / "ollama-py" / "models"
SEED = 42

STORY = "Write a short story about a lighthouse keeper who finds a message in a bottle."
CODE = '''def summarize(orders):
    total = 0
    count = 0
    largest = None
    for order in orders:
        if order.cancelled:
            continue
        total += order.amount
        count += 1
        if largest is None or order.amount > largest.amount:
            largest = order
    average = total / count if count else 0
    return {"total": total, "count": count, "average": average, "largest": largest}


def report(orders, out):
    summary = summarize(orders)
    out.write(f"orders: {summary['count']}\\n")
    out.write(f"total: {summary['total']:.2f}\\n")
    out.write(f"average: {summary['average']:.2f}\\n")
    if summary["largest"] is not None:
        out.write(f"largest: {summary['largest'].id}\\n")
'''
COPY = "Repeat this code exactly, with one change: rename the variable `total` to `acc`.\n\n" + CODE
PROMPTS = {"story": STORY, "copy": COPY}


def vocab_compatible(target: Path, draft: Path) -> tuple[bool, str]:
    """llama.cpp's common_speculative_are_compatible, from the GGUF headers: vocabulary type, size within 128,
    and the same BOS/EOS ids."""
    t, d = read_gguf_info(target).kv, read_gguf_info(draft).kv

    def describe(kv: dict[str, Any]) -> str:
        return f"{kv.get('tokenizer.ggml.model')} with {len(kv.get('tokenizer.ggml.tokens') or [])} tokens"

    if t.get("tokenizer.ggml.model") != d.get("tokenizer.ggml.model"):
        return False, f"vocabulary types differ ({describe(t)} vs {describe(d)})"
    if abs(len(t.get("tokenizer.ggml.tokens") or []) - len(d.get("tokenizer.ggml.tokens") or [])) > 128:
        return False, f"vocabulary sizes differ by more than 128 ({describe(t)} vs {describe(d)})"
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        if t.get(key) != d.get(key):
            return False, f"{key} differs ({t.get(key)} vs {d.get(key)})"
    return True, f"both {describe(t)}"


def spec_counters(url: str) -> dict[str, tuple[float, float]]:
    """(drafted, accepted) tokens per model name, from llama-server's counters re-exported by our /metrics."""
    out: dict[str, list[float]] = {}
    text = requests.get(url + "/metrics", timeout=30).text
    for line in text.splitlines():
        m = re.match(r'llamacpp:spec_decode_num_(draft|accepted)_tokens_total\{(.*)\} (\S+)', line)
        if m:
            model = re.search(r'model="([^"]*)"', m.group(2))
            if model:
                pair = out.setdefault(model.group(1), [0.0, 0.0])
                pair[0 if m.group(1) == "draft" else 1] += float(m.group(3))
    return {k: (v[0], v[1]) for k, v in out.items()}


def _counted(url: str, model: str) -> tuple[float, float]:
    counters = spec_counters(url)  # labelled with the loaded model's full name
    return counters.get(model) or counters.get(f"{model}:latest") or (0.0, 0.0)


def generate(url: str, model: str, prompt: str, num_predict: int) -> dict[str, Any]:
    before = _counted(url, model)
    started = time.perf_counter()
    r = requests.post(url + "/api/generate", timeout=900, json={
        "model": model, "prompt": prompt, "stream": False,
        "options": {"temperature": 0, "seed": SEED, "num_predict": num_predict}})
    wall = time.perf_counter() - started
    r.raise_for_status()
    out = r.json()
    after = _counted(url, model)
    return {"rate": out["eval_count"] / (out["eval_duration"] / 1e9), "tokens": out["eval_count"], "wall": wall,
            "text": out["response"], "drafted": after[0] - before[0], "accepted": after[1] - before[1]}


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run(args: argparse.Namespace) -> dict[str, Any]:
    smollm2, gemma = Path(args.model), Path(args.gemma)
    tmp = Path(tempfile.mkdtemp(prefix="bench-spec-"))
    copies = {}
    for name, src in (("smollm2", smollm2), ("gemma", gemma)):
        copies[name] = tmp / f"{name}-ngram.gguf"
        shutil.copyfile(src, copies[name])
        with open(copies[name], "ab") as f:
            f.write(b"\0" * 64)  # other weights to the store (another digest), the same model to llama-server
    runner = Path(args.runner)
    env = {"OLLAMA_LLM_LIBRARY": runner.parent.name, "OLLAMA_RUNNERS_DIR": str(runner.parent.parent),
           "OLLAMA_MAX_LOADED_MODELS": "8", "OLLAMA_NUM_PARALLEL": "1", "OLLAMA_KEEP_ALIVE": "1h"}
    ok, why = vocab_compatible(gemma, smollm2)
    result: dict[str, Any] = {"machine": common.cpu_model(), "cpus": os.cpu_count(), "load_start": load_average(),
                              "rounds": args.rounds, "num_predict": args.num_predict,
                              "gemma_with_smollm2_draft": {"compatible": ok, "why": why}, "cases": {}}
    serve = common.start_serve(tmp / "serve", env)
    try:
        url = serve.url
        common.create_model(url, "smollm2", smollm2)
        digest = common.upload_blob(url, smollm2)
        r = requests.post(url + "/api/create", timeout=300, json={
            "model": "smollm2-draft", "files": {smollm2.name: digest}, "draft_files": {"draft.gguf": digest},
            "stream": False})
        r.raise_for_status()
        common.create_model(url, "smollm2-ngram", copies["smollm2"], parameters={"draft_ngram": True})
        common.create_model(url, "gemma", gemma)
        common.create_model(url, "gemma-ngram", copies["gemma"], parameters={"draft_ngram": True})
        pairs = {"smollm2 drafting for itself": ("smollm2", "smollm2-draft"),
                 "smollm2 n-gram": ("smollm2", "smollm2-ngram"),
                 "gemma-3-270m n-gram": ("gemma", "gemma-ngram")}
        if ok:
            gemma_digest = common.upload_blob(url, gemma)
            r = requests.post(url + "/api/create", timeout=300, json={
                "model": "gemma-draft", "files": {gemma.name: gemma_digest}, "draft_files": {"draft.gguf": digest},
                "stream": False})
            r.raise_for_status()
            pairs["gemma-3-270m with smollm2 drafting"] = ("gemma", "gemma-draft")
        for model in {m for pair in pairs.values() for m in pair}:  # load all; a warm-up answer each
            generate(url, model, "Hi", 4)
        samples: dict[str, dict[str, list[dict[str, Any]]]] = {
            f"{case}|{p}": {"plain": [], "spec": []} for case in pairs for p in PROMPTS}
        for rnd in range(args.rounds):
            for case, (plain, spec) in pairs.items():
                for pname, prompt in PROMPTS.items():
                    order = [("plain", plain), ("spec", spec)]
                    if rnd % 2:
                        order.reverse()
                    for side, model in order:
                        samples[f"{case}|{pname}"][side].append(generate(url, model, prompt, args.num_predict))
            print(f"round {rnd + 1}/{args.rounds} done, load {load_average()}", file=sys.stderr)
        for key, sides in samples.items():
            case, pname = key.split("|")
            plain, spec = sides["plain"], sides["spec"]
            drafted = sum(s["drafted"] for s in spec)
            accepted = sum(s["accepted"] for s in spec)
            result["cases"][key] = {
                "case": case, "prompt": pname,
                "plain_tps": statistics.median(s["rate"] for s in plain),
                "spec_tps": statistics.median(s["rate"] for s in spec),
                "ratio": statistics.median(b["rate"] / a["rate"] for a, b in zip(plain, spec, strict=True)),
                "tokens": statistics.median(s["tokens"] for s in spec),
                "acceptance": accepted / drafted if drafted else None, "drafted": drafted, "accepted": accepted,
                "same_text": sum(a["text"] == b["text"] for a, b in zip(plain, spec, strict=True)),
                "n": len(plain)}
    finally:
        serve.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    result["load_end"] = load_average()
    return result


def report(res: dict[str, Any]) -> str:
    cpus = res["cpus"] or 1
    busy = max(res["load_start"][0], res["load_end"][0]) > 0.5 * cpus
    lines = [
        "# Speculative decoding: tokens/s with and without (bench/spec.py)", "",
        f"Machine: {res['machine']}, {cpus} CPUs; load average (1, 5, 15 min) {res['load_start']} at start, "
        f"{res['load_end']} at end." + (" **Provisional: the machine was not quiet** (other work on its CPUs "
                                         "during the run), so absolute rates and small ratios are noise-prone."
                                         if busy else ""),
        f"{res['rounds']} rounds, sides alternating first; /api/generate, temperature 0, seed {SEED}, "
        f"num_predict {res['num_predict']}; rate = eval_count / eval_duration (llama-server's own timing), "
        "medians; ratio = median of per-round spec/plain; acceptance = accepted / drafted tokens over all rounds "
        "(llama-server's counters).", "",
        "| case | prompt | plain tok/s | with speculation tok/s | ratio | acceptance | drafted | same text |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in res["cases"].values():
        acc = f"{c['acceptance'] * 100:.1f} %" if c["acceptance"] is not None else "n/a"
        lines.append(f"| {c['case']} | {c['prompt']} | {c['plain_tps']:.1f} | {c['spec_tps']:.1f} | "
                     f"{c['ratio']:.2f}x | {acc} | {c['drafted']:.0f} | {c['same_text']}/{c['n']} |")
    g = res["gemma_with_smollm2_draft"]
    lines += ["", f"Gemma-3-270m drafted by SmolLM2: {'run' if g['compatible'] else 'not run'}: {g['why']}"
              + ("" if g["compatible"] else " (llama-server refuses a draft whose vocabulary is not the target's).")]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runner", default=str(common.ROOT / "runners" / "cpu_avx2" / "llama-server"))
    ap.add_argument("--model", default=str(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--gemma", default=str(MODELS / "gemma-3-270m-q4_k_m.gguf"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--num-predict", type=int, default=256)
    args = ap.parse_args()
    res = run(args)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "spec.json").write_text(json.dumps(
        {**res, "cases": {k: v for k, v in res["cases"].items()}}, indent=1) + "\n")
    (RESULTS / "spec.md").write_text(report(res))
    print(report(res))


if __name__ == "__main__":
    main()
