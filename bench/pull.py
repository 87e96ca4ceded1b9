"""Pull throughput: `ollama-py pull` of the SmolLM2 model (98 MB) from a local registry vs `curl` of the same blob.

    .venv/bin/python bench/pull.py [--model PATH.gguf] [--runs 9] [--out bench/results/pull.md]

A docker-registry on loopback serves the model (pushed once with our push); an `ollama-py serve` with an
empty store pulls it (POST /api/pull, stream false; the store is emptied between runs), and curl downloads
the weights blob from the same registry into the same directory. Runs alternate between the two; the
medians are compared. The pull includes what curl does not: the manifest, the config blob, the sha256 check,
an fsync of the blob and writing the manifest. Goal (issue 9): pull throughput >= 80% of curl's.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ollama_py.api.names import parse_name  # noqa: E402
from ollama_py.store.manifests import CONFIG_V1, MEDIA_MODEL, Layer, Manifest  # noqa: E402
from ollama_py.store.models import ModelStore  # noqa: E402
from ollama_py.store.registry import RegistryOptions, push_model  # noqa: E402
from tests.helpers.serve import start_serve, stop_serve  # noqa: E402
from tests.registry_fixture import start_registry, stop_registry  # noqa: E402

DEFAULT_MODEL = Path.home() / ".cache" / "ollama-py" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"


def publish(reg_model: str, gguf: Path, scratch: Path) -> tuple[str, int]:
    store = ModelStore(scratch)
    digest, size = store.blobs.write_file(gguf)
    config, config_size = store.blobs.write_bytes(json.dumps({"model_format": "gguf"}).encode())
    name = parse_name(reg_model)
    store.put_manifest(name, Manifest.build(Layer(CONFIG_V1, config, config_size), [Layer(MEDIA_MODEL, digest, size)]))
    for _ in push_model(store, name, options=RegistryOptions(insecure=True)):
        pass
    return digest, size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", type=Path, default=DEFAULT_MODEL)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "pull.md")
    args = ap.parse_args()
    if not args.model.is_file():
        sys.exit(f"{args.model} not found (make models fetches it)")
    if shutil.which("curl") is None:
        sys.exit("curl is not installed")

    tmp = Path(tempfile.mkdtemp(prefix="bench-pull-"))
    reg = start_registry(tmp / "registry")
    proc = None
    try:
        model = reg.model("bench/smollm2:135m")
        digest, size = publish(model, args.model, tmp / "source")
        (tmp / "server").mkdir()
        proc, url, _env = start_serve(tmp / "server")
        models = tmp / "server" / "models"
        blob_url = f"{reg.url}/v2/bench/smollm2/blobs/{digest}"
        server = psutil.Process(proc.pid)
        pulls: list[float] = []
        curls: list[float] = []
        pull_cpu: list[float] = []
        curl_cpu: list[float] = []

        def pull_once() -> None:
            shutil.rmtree(models / "blobs", ignore_errors=True)
            shutil.rmtree(models / "manifests", ignore_errors=True)
            c0, t0 = sum(server.cpu_times()[:2]), time.perf_counter()
            r = requests.post(url + "/api/pull", json={"model": model, "insecure": True, "stream": False}, timeout=600)
            pulls.append(time.perf_counter() - t0)
            pull_cpu.append(sum(server.cpu_times()[:2]) - c0)
            if r.status_code != 200 or r.json() != {"status": "success"}:
                sys.exit(f"pull failed: {r.status_code} {r.text}")

        def curl_once() -> None:
            out = models / "curl.out"
            r0, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
            subprocess.run(["curl", "-sS", "--fail", "-o", str(out), blob_url], check=True)
            curls.append(time.perf_counter() - t0)
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            curl_cpu.append(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime)
            out.unlink()

        for i in range(args.runs):
            for step in ((pull_once, curl_once) if i % 2 == 0 else (curl_once, pull_once)):
                step()
            print(f"run {i + 1}: pull {pulls[-1]:.3f}s ({size / pulls[-1] / 1e6:.0f} MB/s, {pull_cpu[-1]:.2f} CPU s)  "
                  f"curl {curls[-1]:.3f}s ({size / curls[-1] / 1e6:.0f} MB/s, {curl_cpu[-1]:.2f} CPU s)")

        pull_s, curl_s = statistics.median(pulls), statistics.median(curls)
        ratio = curl_s / pull_s
        verdict = "meets" if ratio >= 0.8 else "MISSES"
        print(f"median: pull {size / pull_s / 1e6:.0f} MB/s, curl {size / curl_s / 1e6:.0f} MB/s, "
              f"pull/curl throughput = {ratio:.2f} ({verdict} the 0.80 goal)")

        cpu = platform.processor() or platform.machine()
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(
            "# Pull throughput vs curl\n\n"
            f"{dt.date.today().isoformat()} · {platform.system()} {platform.release()} · {cpu} · "
            f"{os.cpu_count()} CPUs · Python {platform.python_version()} · "
            f"{subprocess.run(['docker-registry', '--version'], capture_output=True, text=True).stdout.strip()}\n\n"
            f"`bench/pull.py --runs {args.runs}`: `{args.model.name}` ({size / 1e6:.1f} MB) pushed to a "
            "docker-registry on loopback; `POST /api/pull` (stream false) into an empty store of an "
            "`ollama-py serve`, alternating with "
            "`curl -o` of the same blob into the same directory.\n\n"
            "| | median time | throughput | median CPU time | runs (s) |\n|---|---|---|---|---|\n"
            f"| ollama-py pull | {pull_s:.3f} s | {size / pull_s / 1e6:.0f} MB/s | "
            f"{statistics.median(pull_cpu):.3f} s | {', '.join(f'{t:.3f}' for t in pulls)} |\n"
            f"| curl | {curl_s:.3f} s | {size / curl_s / 1e6:.0f} MB/s | {statistics.median(curl_cpu):.3f} s | "
            f"{', '.join(f'{t:.3f}' for t in curls)} |\n\n"
            f"**pull / curl throughput: {ratio:.2f}** ({verdict} the issue's 0.80 goal).\n\n"
            "The pull's time also covers the manifest and config requests, the sha256 check (hashed as the bytes "
            "arrive), an fsync of the blob and the manifest write; curl only writes the file. CPU time is the "
            "server process's (all threads) for a pull and curl's own; the registry's is left out of both. "
            f"Load average when the runs ended: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs.\n"
        )
        print(f"wrote {args.out}")
    finally:
        if proc is not None:
            stop_serve(proc)
        stop_registry(reg)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
