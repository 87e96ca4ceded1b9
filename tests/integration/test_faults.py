"""Faults the server survives: a runner killed or hung mid-request, a hung load, a full disk, a flood of
requests past OLLAMA_MAX_QUEUE, clients that hang up mid-stream. Each test checks what the client sees and
that the next request is served normally.

Most tests run the real app (in-process, or `serve` as a subprocess) over the fake llama-server; the test
marked integration kills the real llama-server under SmolLM2.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import os
import signal
import subprocess
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest
import requests

from ollama_py.scheduler.factory import plan_load
from ollama_py.scheduler.scheduler import Scheduler
from ollama_py.server.app import create_app
from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model, fake_runner_factory, make_settings
from tests.helpers.mixed_load import FAKE_SENTENCE, one_request
from tests.helpers.paths import FAKE_SERVER, required_path
from tests.helpers.processes import is_gone, runner_processes, start_fake_serve, wait_gone
from tests.helpers.serve import create_from_file, start_serve, stop_serve

ENDLESS = {"FAKE_TOKEN_DELAY": "0.02", "FAKE_TOKENS": "1000000"}  # a generation that never ends by itself
POLLS = 600  # bounded waits: POLLS x POLL_SECONDS at most
POLL_SECONDS = 0.05


def fake_runners() -> list[psutil.Process]:
    """The fake llama-servers this test process (the in-process app) has started."""
    out = []
    for child in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if any(str(FAKE_SERVER) in part for part in child.cmdline()) and not is_gone(child):
                out.append(child)
    return out


async def one_fake_runner() -> psutil.Process:
    for _ in range(POLLS):
        if found := fake_runners():
            assert len(found) == 1, found
            return found[0]
        await asyncio.sleep(POLL_SECONDS)
    raise AssertionError("no fake runner started")


def runner_port(proc: psutil.Process) -> int:
    argv = proc.cmdline()
    return int(argv[argv.index("--port") + 1])


async def wait_until_gone(proc: psutil.Process) -> bool:
    for _ in range(POLLS):
        if is_gone(proc):
            return True
        await asyncio.sleep(POLL_SECONDS)
    return False


async def ndjson_lines(resp: aiohttp.ClientResponse, timeout: float = 120) -> list[dict[str, Any]]:
    """The rest of an NDJSON stream (bounded: a stream that never ends fails the test)."""

    async def read() -> list[dict[str, Any]]:
        return [json.loads(line) async for line in resp.content if line.strip()]

    return await asyncio.wait_for(read(), timeout)


async def generate_ok(client: Any) -> None:
    """A normal request still works: complete answer, done."""
    resp = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False,
                                                    "options": {"num_predict": 3}})
    assert resp.status == 200, await resp.text()
    body = await resp.json()
    assert body["done"] is True
    assert body["response"] == " ".join(FAKE_SENTENCE[:3])


# -- a runner killed mid-stream (real llama-server) -----------------------------------------------------------

@pytest.mark.integration
def test_runner_sigkilled_mid_stream_ends_with_error_line_then_a_fresh_runner_answers(tmp_path: Path) -> None:
    model = required_path("OLLAMA_PY_TEST_MODEL")
    proc, url, _ = start_serve(tmp_path)
    try:
        create_from_file(url, "smollm2:135m", model)
        body = {"model": "smollm2:135m", "prompt": "Tell me a very long story about the sea.",
                "options": {"num_predict": 4096, "temperature": 0}}
        with requests.post(url + "/api/generate", json=body, stream=True, timeout=300) as resp:
            assert resp.status_code == 200
            lines = resp.iter_lines()
            first = [json.loads(next(lines)) for _ in range(3)]
            assert all(not item["done"] for item in first)
            [runner] = runner_processes(proc.pid)
            listening = [c for c in runner.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
            assert {c.laddr.ip for c in listening} == {"127.0.0.1"}  # never reachable from outside
            runner.send_signal(signal.SIGKILL)
            rest = [json.loads(line) for line in itertools.islice(lines, 10000) if line]
        assert rest, "the stream ended without a final line"
        assert "error" in rest[-1], rest[-1]
        assert "llama runner process has terminated" in rest[-1]["error"]
        assert wait_gone([runner]) == []
        again = requests.post(url + "/api/generate", timeout=300, json={
            "model": "smollm2:135m", "prompt": "Say hello.", "stream": False, "options": {"num_predict": 8}})
        assert again.status_code == 200, again.text
        assert again.json()["done"] is True and again.json()["response"]
        [fresh] = runner_processes(proc.pid)
        assert fresh.pid != runner.pid
    finally:
        stop_serve(proc)


# -- a runner that hangs ---------------------------------------------------------------------------------------

async def test_runner_hung_while_loading_hits_the_load_timeout_and_is_replaced(tmp_path: Path, tiny_gguf: Path,
                                                                              aiohttp_client: Any) -> None:
    """The first runner is SIGSTOPped while it loads (answering 503 "Loading model"); the stall timeout fires,
    the request gets a clear error, the runner is killed and reaped, the server answers throughout, and the
    next request gets a fresh runner (one that loads normally)."""
    settings = make_settings(tmp_path, load_timeout=3.0)
    create_tiny_model(settings, tiny_gguf)
    slow, normal = fake_runner_factory(settings, {"FAKE_LOAD_SECONDS": "60"}), fake_runner_factory(settings)
    started = itertools.count()

    def factory(plan: Any, name: str, on_exit: Any) -> Any:
        return (slow if next(started) == 0 else normal)(plan, name, on_exit)

    scheduler = Scheduler(settings, plan=lambda m, o, e: plan_load(settings, [], 1 << 40, m, o, e),
                          runner_factory=factory)
    client = await aiohttp_client(create_app(settings, scheduler=scheduler))
    first = asyncio.create_task(client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False}))
    hung = await one_fake_runner()
    health = f"http://127.0.0.1:{runner_port(hung)}/health"
    async with aiohttp.ClientSession() as session:
        for _ in range(POLLS):  # until it is loading: listening, answering 503
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(health) as r:
                    if r.status == 503:
                        break
            await asyncio.sleep(POLL_SECONDS)
    hung.suspend()  # SIGSTOP
    ps = await client.get("/api/ps")  # the server stays responsive while the load hangs
    assert ps.status == 200
    assert [m["name"] for m in (await ps.json())["models"]] == ["tiny:latest"]
    assert (await client.get("/api/tags")).status == 200

    resp = await asyncio.wait_for(first, 120)
    assert resp.status == 500
    error = (await resp.json())["error"]
    assert error.startswith("timed out waiting for llama runner to start - progress stalled after 3s")
    assert is_gone(hung)  # killed and reaped before the answer went out
    await generate_ok(client)
    assert (await one_fake_runner()).pid != hung.pid


async def test_runner_hung_mid_generation_hits_the_request_timeout_and_is_replaced(fake_app: Any,
                                                                                  aiohttp_client: Any) -> None:
    _, app = fake_app(ENDLESS, request_timeout=2.0)
    client = await aiohttp_client(app)
    resp = await client.post("/api/generate", json={"model": "tiny", "prompt": "go on"})
    assert resp.status == 200
    for _ in range(3):
        assert not json.loads(await resp.content.readline())["done"]
    hung = await one_fake_runner()
    hung.suspend()  # SIGSTOP: it keeps its socket open and says nothing more
    rest = await ndjson_lines(resp)
    assert rest[-1] == {"error": "llama runner stopped responding: no output for 2s"}
    assert await wait_until_gone(hung)  # SIGKILLed and reaped
    for _ in range(POLLS):  # and forgotten
        if not (await (await client.get("/api/ps")).json())["models"]:
            break
        await asyncio.sleep(POLL_SECONDS)
    await generate_ok(client)
    assert (await one_fake_runner()).pid != hung.pid


# -- disk full -------------------------------------------------------------------------------------------------

@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """The store on a 20 MiB tmpfs (needs root, as the test machines run)."""
    models = tmp_path / "models"
    models.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=20m", "tmpfs", str(models)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.fail(f"cannot mount a small tmpfs for the disk-full test (needs root and mount): {done.stderr.strip()}")
    try:
        yield models
    finally:
        subprocess.run(["umount", "-l", str(models)], check=False)


def store_state(models: Path) -> dict[str, Any]:
    blobs = models / "blobs"
    return {
        "blob_files": sorted(p.name for p in blobs.iterdir()) if blobs.exists() else [],
        "manifests": sorted(str(p.relative_to(models)) for p in (models / "manifests").rglob("*") if p.is_file()),
    }


async def assert_store_usable(client: Any, models: Path, before: dict[str, Any]) -> None:
    """Nothing partial is visible, listing works, every manifest's blobs exist, a small create works."""
    after = store_state(models)
    assert after == before
    assert not [n for n in after["blob_files"] if "tmp" in n or "partial" in n]
    tags = await client.get("/api/tags")
    assert tags.status == 200
    assert [m["name"] for m in (await tags.json())["models"]] == ["tiny:latest"]
    created = await client.post("/api/create", json={"model": "small", "from": "tiny", "system": "Be brief.",
                                                     "stream": False})
    assert created.status == 200, await created.text()
    shown = await client.post("/api/show", json={"model": "small"})
    assert (await shown.json())["system"] == "Be brief."


async def test_disk_full_during_blob_upload(small_disk: Path, fake_app: Any, aiohttp_client: Any) -> None:
    _, app = fake_app()
    client = await aiohttp_client(app)
    before = store_state(small_disk)
    blob = os.urandom(24 << 20)
    digest = "sha256:" + hashlib.sha256(blob).hexdigest()
    resp = await client.post(f"/api/blobs/{digest}", data=blob)
    assert resp.status == 507
    assert await resp.json() == {"error": "no space left on device"}
    assert (await client.head(f"/api/blobs/{digest}")).status == 404
    await assert_store_usable(client, small_disk, before)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "not-streamed"])
async def test_disk_full_during_create(stream: bool, small_disk: Path, fake_app: Any, aiohttp_client: Any,
                                       tmp_path: Path) -> None:
    big = write_tiny_gguf(tmp_path / "big.gguf", blocks=1, embd=1024)  # ~36 MiB: more than the disk holds
    _, app = fake_app(import_dirs=(tmp_path,))  # a server path, which the operator allows here
    client = await aiohttp_client(app)
    before = store_state(small_disk)
    resp = await client.post("/api/create", json={"model": "big", "from": str(big), "stream": stream})
    if stream:
        assert resp.status == 200
        lines = await ndjson_lines(resp)
        assert lines[-1] == {"error": "no space left on device"}
        assert all("error" not in line for line in lines[:-1])
    else:
        assert resp.status == 507
        assert await resp.json() == {"error": "no space left on device"}
    await assert_store_usable(client, small_disk, before)


# -- a flood of requests past the queue limit ------------------------------------------------------------------

async def _peak_rss(pid: int, stop: asyncio.Event) -> int:
    peak = 0
    while not stop.is_set():
        peak = max(peak, psutil.Process(pid).memory_info().rss)
        await asyncio.sleep(0.05)
    return peak


async def test_200_concurrent_requests_past_max_queue_each_answered_or_refused(tmp_path: Path,
                                                                              tiny_gguf: Path) -> None:
    proc, url = start_fake_serve(tmp_path, tiny_gguf, {"OLLAMA_MAX_QUEUE": "8", "FAKE_TOKEN_DELAY": "0.05",
                                                       "FAKE_TOKENS": "4"})
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                         timeout=aiohttp.ClientTimeout(total=300)) as session:
            assert await one_request(session, url, 0) == "ok"  # loaded and warm
            [runner] = runner_processes(proc.pid)
            rss_before = psutil.Process(proc.pid).memory_info().rss
            stop = asyncio.Event()
            sampler = asyncio.create_task(_peak_rss(proc.pid, stop))
            outcomes = await asyncio.gather(*(one_request(session, url, i) for i in range(200)),
                                            return_exceptions=True)
            stop.set()
            peak = await sampler
            counts = Counter(o if isinstance(o, str) else f"exception {o!r}" for o in outcomes)
            assert set(counts) <= {"ok", "busy"}, counts
            assert counts["ok"] >= 1 and counts["busy"] >= 1, counts  # 200 at once vs 1 slot and a queue of 8
            assert proc.poll() is None  # never crashed
            assert peak < rss_before + (200 << 20), (rss_before, peak)
            for i in range(3):  # and serves normally afterwards, on the same runner
                assert await one_request(session, url, i) == "ok"
            assert [p.pid for p in runner_processes(proc.pid)] == [runner.pid]
    finally:
        stop_serve(proc)


# -- clients that hang up mid-stream ---------------------------------------------------------------------------

STREAMS = [
    pytest.param("/api/generate", {"model": "tiny", "prompt": "go on"}, id="native-ndjson"),
    pytest.param("/v1/chat/completions", {"model": "tiny", "stream": True,
                                          "messages": [{"role": "user", "content": "go on"}]}, id="openai-sse"),
    pytest.param("/v1/messages", {"model": "tiny", "stream": True, "max_tokens": 100000,
                                  "messages": [{"role": "user", "content": "go on"}]}, id="anthropic-sse"),
]


@pytest.mark.parametrize("path,body", STREAMS)
async def test_client_hanging_up_mid_stream_frees_the_slot_at_once(path: str, body: dict[str, Any], fake_app: Any,
                                                                   aiohttp_client: Any) -> None:
    """One slot (OLLAMA_NUM_PARALLEL=1) and an endless generation: the next request can only finish if the
    abandoned one was stopped, upstream included."""
    settings, app = fake_app(ENDLESS, num_parallel=1)
    client = await aiohttp_client(app)
    resp = await client.post(path, json=body)
    assert resp.status == 200
    for _ in range(4):
        assert await resp.content.readline()
    resp.close()  # hang up
    nxt = await asyncio.wait_for(client.post("/api/generate", json={
        "model": "tiny", "prompt": "hi", "stream": False, "options": {"num_predict": 3}}), timeout=120)
    assert nxt.status == 200
    assert (await nxt.json())["response"] == " ".join(FAKE_SENTENCE[:3])
    runner = await one_fake_runner()
    slots_url = f"http://127.0.0.1:{runner_port(runner)}/slots"
    key = runner.environ()["LLAMA_API_KEY"]  # the runner's own key (its environment: ours to read, not others')
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {key}"}) as session:
        for _ in range(POLLS):
            async with session.get(slots_url) as r:
                slots = await r.json()
            if not any(s["is_processing"] for s in slots):
                break
            await asyncio.sleep(POLL_SECONDS)
    assert [s["is_processing"] for s in slots] == [False]
