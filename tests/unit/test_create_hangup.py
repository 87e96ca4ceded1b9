"""A client that hangs up on /api/create stops its conversion or quantization (issue 34, medium): the converter or
llama-quantize child is killed and its temp file removed, instead of running to the end for nobody. The children
are stand-ins (a converter script, a llama-quantize script) that write their pid and run for minutes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fakes.gguf_files import write_llama_gguf
from tests.helpers.app import as_serve
from tests.helpers.processes import alive

SLOW_CONVERTER = """import os, sys, time
open({pidfile!r}, "w").write(str(os.getpid()))
print("loading the model", flush=True)
time.sleep(300)
"""

SLOW_QUANTIZER = """#!{python}
import os, sys, time
open({pidfile!r}, "w").write(str(os.getpid()))
for i in range(1, 3001):
    print(f"[{{i:4d}}/3000] blk.{{i}}.weight - [ 64, 64, 1, 1], type = f16, converting to q8_0", flush=True)
    time.sleep(0.1)
open(sys.argv[2], "wb").write(b"quantized")
"""


async def eventually(condition: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    """Wait for `condition` (polled; fails after `limit` seconds, far longer than it takes)."""
    for _ in range(int(limit / 0.1)):
        if condition():
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"still not {what} after {limit:g} s")


async def upload(client: Any, data: bytes) -> str:
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert (await client.post(f"/api/blobs/{digest}", data=data)).status in (200, 201)
    return digest


async def hang_up_after(client: Any, req: dict, status: str, pidfile: Path, blobs: Path, temp_prefix: str) -> None:
    """Create streamed until a `status` line and the child's pid are there, hang up, and see the child go."""
    resp = await client.post("/api/create", json=req)
    assert resp.status == 200
    while True:
        line = json.loads(await resp.content.readline())
        assert "error" not in line, line
        if line["status"].startswith(status):
            break
    await eventually(pidfile.exists, "started")
    pid = int(await asyncio.to_thread(pidfile.read_text))
    assert alive(pid)
    resp.close()  # the client hangs up
    await eventually(lambda: not alive(pid), "stopped")
    await eventually(lambda: not list(blobs.glob(f"{temp_prefix}*")), "cleaned up")


async def test_hanging_up_stops_the_converter(fake_app, aiohttp_server, aiohttp_client, tmp_path: Path) -> None:
    scripts = tmp_path / "runners" / "convert"
    scripts.mkdir(parents=True)
    pidfile = tmp_path / "converter.pid"
    (scripts / "convert_hf_to_gguf.py").write_text(SLOW_CONVERTER.format(pidfile=str(pidfile)))
    settings, app = fake_app(runners_dir=tmp_path / "runners")
    client = await aiohttp_client(await aiohttp_server(app, **as_serve()))  # as `serve` runs
    files = {"config.json": await upload(client, json.dumps({"architectures": ["LlamaForCausalLM"]}).encode()),
             "model.safetensors": await upload(client, b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")}
    await hang_up_after(client, {"model": "slow", "files": files}, "converting model", pidfile,
                        settings.models / "blobs", "sha256-tmp-convert-")
    assert (await client.post("/api/show", json={"model": "slow"})).status == 404


async def test_hanging_up_stops_the_quantizer(fake_app, aiohttp_server, aiohttp_client, tmp_path: Path) -> None:
    tool = tmp_path / "runners" / "cpu_avx2" / "llama-quantize"
    tool.parent.mkdir(parents=True)
    pidfile = tmp_path / "quantize.pid"
    tool.write_text(SLOW_QUANTIZER.format(python=sys.executable, pidfile=str(pidfile)))
    tool.chmod(0o755)
    settings, app = fake_app(runners_dir=tmp_path / "runners")
    client = await aiohttp_client(await aiohttp_server(app, **as_serve()))
    f16 = await upload(client, write_llama_gguf(tmp_path / "f16.gguf").read_bytes())
    await hang_up_after(client, {"model": "slow", "files": {"m.gguf": f16}, "quantize": "q8_0"},
                        "quantizing F16 model to Q8_0", pidfile, settings.models / "blobs", "sha256-tmp-quantize-")
    assert (await client.post("/api/show", json={"model": "slow"})).status == 404


async def test_creates_running_for_minutes_leave_the_shared_threads_to_other_routes(fake_app, aiohttp_server,
                                                                                   aiohttp_client,
                                                                                   tmp_path: Path) -> None:
    """Eight conversions at once (more than the default executor's threads on a small machine) run in the creates'
    own threads: /api/tags and /api/show, which use the shared ones, still answer."""
    scripts = tmp_path / "runners" / "convert"
    scripts.mkdir(parents=True)
    (scripts / "convert_hf_to_gguf.py").write_text(SLOW_CONVERTER.format(pidfile=str(tmp_path / "c.pid")))
    settings, app = fake_app(runners_dir=tmp_path / "runners")
    client = await aiohttp_client(await aiohttp_server(app, **as_serve()))
    files = {"config.json": await upload(client, json.dumps({"architectures": ["LlamaForCausalLM"]}).encode()),
             "model.safetensors": await upload(client, b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")}
    converting = 0
    streams: list[Any] = []

    async def create(i: int) -> None:  # the answer's head comes with its first line: for some, once a thread is free
        nonlocal converting
        resp = await client.post("/api/create", json={"model": f"slow{i}", "files": files})
        streams.append(resp)
        while not json.loads(await resp.content.readline())["status"].startswith("converting model"):
            pass
        converting += 1

    creates = [asyncio.create_task(create(i)) for i in range(8)]
    try:
        await eventually(lambda: converting >= 4, "converting")
        tags = await asyncio.wait_for(client.get("/api/tags"), 20)
        assert tags.status == 200
        show = await asyncio.wait_for(client.post("/api/show", json={"model": "slow0"}), 20)
        assert show.status == 404  # not created (yet): answered all the same
    finally:
        for task in creates:
            task.cancel()
        for r in streams:
            r.close()
