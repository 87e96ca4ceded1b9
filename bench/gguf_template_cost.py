"""What rendering a GGUF chat template costs a chat: the runner's /apply-template round trip vs our in-process
render (server/rendering.py), on a real llama-server with SmolLM2 (issue 38).

    .venv/bin/python bench/gguf_template_cost.py --runner runners/cpu_avx2/llama-server \
        --model ~/.cache/ollama-py/models/SmolLM2-135M-Instruct.Q4_1.gguf [--rounds 300]

Both ways run from the same event loop, alternating: `render_gguf_chat` as the gateway calls it (the runner's
answer first, then ours once the two agreed), timed from call to prompt, and the loop thread's CPU time per call.
Prints a markdown table; no assertions.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import free_port, median  # noqa: E402
from ollama_py.runner.client import LlamaClient  # noqa: E402
from ollama_py.server.rendering import render_gguf_chat  # noqa: E402
from ollama_py.store.gguf_meta import read_gguf_info  # noqa: E402

MESSAGES: list[Any] = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Say hi"},
                       {"role": "assistant", "content": "Hi!"}, {"role": "user", "content": "Again, please."}]


class _Model:
    """What render_gguf_chat reads of a stored model."""

    def __init__(self, path: Path) -> None:
        self.info = read_gguf_info(path)
        self.digest = "bench"
        self.name = "smollm2"


class _RunnerOnly:
    """The runner's /apply-template alone (the gateway before in-process rendering)."""

    def __init__(self, client: LlamaClient) -> None:
        self.client = client

    async def post(self, path: str, body: dict[str, Any]) -> Any:
        return await self.client.post(path, body)


async def main_async(args: argparse.Namespace, port: int) -> None:
    client = LlamaClient(f"http://127.0.0.1:{port}")
    try:
        for _ in range(600):
            try:
                await client.post("/apply-template", {"messages": MESSAGES[:2]})
                break
            except Exception:
                await asyncio.sleep(0.1)
        model: Any = _Model(args.model)
        runner_ms, inproc_ms, runner_cpu, inproc_cpu = [], [], [], []
        same = 0
        for i in range(args.rounds + 5):
            for way in (("runner", "ours") if i % 2 else ("ours", "runner")):
                c0, t0 = time.thread_time(), time.perf_counter()
                if way == "runner":
                    want = (await client.post("/apply-template", {"messages": MESSAGES}))["prompt"]
                else:
                    got = await render_gguf_chat(model, MESSAGES, None, client)
                t1, c1 = time.perf_counter(), time.thread_time()
                if i >= 5:  # the first calls compare with the runner and warm the caches
                    (runner_ms if way == "runner" else inproc_ms).append((t1 - t0) * 1e3)
                    (runner_cpu if way == "runner" else inproc_cpu).append((c1 - c0) * 1e3)
            same += got == want
        print("| way | wall per render (ms, median) | event-loop thread CPU (ms, median) |")
        print("|---|---|---|")
        print(f"| runner /apply-template | {median(runner_ms):.3f} | {median(runner_cpu):.3f} |")
        print(f"| in-process (sandboxed jinja2, via the template pool) | {median(inproc_ms):.3f} | "
              f"{median(inproc_cpu):.3f} |")
        print(f"\nidentical prompts: {same}/{args.rounds + 5}; rounds {args.rounds}")
    finally:
        await client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runner", default=str(ROOT / "runners" / "cpu_avx2" / "llama-server"))
    ap.add_argument("--model", type=Path,
                    default=Path.home() / ".cache" / "ollama-py" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")
    ap.add_argument("--rounds", type=int, default=300)
    args = ap.parse_args()
    port = free_port()
    proc = subprocess.Popen([args.runner, "--model", str(args.model), "--host", "127.0.0.1", "--port", str(port),
                             "-c", "1024", "-np", "1", "--no-webui", "--offline", "-ngl", "0", "--device", "none"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        asyncio.run(main_async(args, port))
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
