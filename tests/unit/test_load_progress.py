"""llama-server's load reports read into one LoadReport (pure), and what /api/load and /api/unload show a client over
the fake llama-server, which reports progress as the real one does to a router that started it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from ollama_py.runner.load_progress import LoadReport, LoadStage, on_log_line, on_state_line

STATE = "cmd_child_to_router:state:"


def state(value: float, current: str = "text_model", stages: tuple[str, ...] = ("text_model",)) -> str:
    return STATE + json.dumps({"state": "loading", "payload": {"stages": list(stages), "current": current,
                                                               "value": value}})


LOG = "0.00.008.869 I "


@pytest.mark.parametrize(("lines", "stage", "fraction"), [
    ([], LoadStage.STARTING, 0.0),
    ([state(0.0)], LoadStage.LOADING, 0.0),
    ([state(0.0), state(0.45)], LoadStage.LOADING, 0.45),
    ([LOG + "srv    load_model: loading model '/m.gguf'"], LoadStage.LOADING, 0.0),
    ([state(1.0), LOG + "cmn  common_init_: warming up the model with an empty run - please wait ..."],
     LoadStage.WARMING_UP, 1.0),
    ([LOG + "cmn  common_init_: warming up the model with an empty run", state(1.0)], LoadStage.WARMING_UP, 1.0),
    ([state(0.3), STATE + '{"state":"ready","payload":{}}'], LoadStage.LOADING, 0.3),
    ([state(0.3), "just a line", STATE + "{not json"], LoadStage.LOADING, 0.3),
], ids=["nothing-yet", "first-report", "mid-load", "log-only", "warming-up", "late-report-while-warming",
        "ready-state-ignored", "noise-ignored"])
def test_reports_and_log_lines_give_the_stage(lines: list[str], stage: LoadStage, fraction: float) -> None:
    report = LoadReport()
    for line in lines:
        report = on_state_line(report, line) if line.startswith(STATE) else on_log_line(report, line)
    assert (report.stage, report.fraction) == (stage, fraction)


@pytest.mark.parametrize(("report", "done"), [
    (LoadReport(), (0, 1100)),
    (LoadReport(LoadStage.LOADING, ("text_model", "mmproj_model"), "text_model", 0.5), (500, 1100)),
    (LoadReport(LoadStage.WARMING_UP, ("text_model", "mmproj_model"), "text_model", 1.0), (1000, 1100)),
    (LoadReport(LoadStage.LOADING, ("text_model", "mmproj_model"), "mmproj_model", 0.5), (1050, 1100)),
    (LoadReport(LoadStage.READY, ("text_model", "mmproj_model"), "mmproj_model", 1.0), (1100, 1100)),
], ids=["starting", "half-the-model", "model-read-warming-up", "half-the-projector", "ready"])
def test_bytes_done_counts_the_parts_in_order(report: LoadReport, done: tuple[int, int]) -> None:
    assert report.bytes_done({"text_model": 1000, "mmproj_model": 100}) == done


def test_a_projector_after_the_warm_up_is_loading_again() -> None:
    report = on_log_line(on_state_line(LoadReport(), state(1.0, stages=("text_model", "mmproj_model"))),
                         "warming up the model")
    report = on_state_line(report, state(0.0, "mmproj_model", ("text_model", "mmproj_model")))
    assert (report.stage, report.part) == (LoadStage.LOADING, "mmproj_model")


# -- the routes over the fake runner ------------------------------------------------------------------------------
@pytest.fixture
async def slow(fake_app, aiohttp_client) -> Any:
    _, app = fake_app(fake_env={"FAKE_LOAD_SECONDS": "0.5", "FAKE_LOAD_STEPS": "4", "FAKE_WARMUP_SECONDS": "0.2"})
    return await aiohttp_client(app)


async def load_lines(client: Any, **body: Any) -> list[dict[str, Any]]:
    r = await client.post("/api/load", json={"model": "tiny", **body})
    assert r.status == 200, await r.text()
    assert r.headers["Content-Type"].startswith("application/x-ndjson")
    return [json.loads(line) for line in (await r.text()).splitlines()]


async def test_load_streams_progress_then_the_ps_entry(slow: Any) -> None:
    lines = await load_lines(slow, keep_alive="1h")
    *progress, last = lines
    statuses = [line["status"] for line in progress]
    assert statuses[0] == "starting runner" and statuses[-1] == "warming up"
    loading = [line for line in progress if line["status"] == "loading model"]
    completed = [line["completed"] for line in loading]
    assert completed == sorted(completed) and len(set(completed)) >= 4  # 0 and the fake's four steps
    total = progress[0]["total"]
    assert total > 0 and all(line["total"] == total for line in progress)
    assert progress[-1]["completed"] == total  # warming up: every byte read
    assert last["status"] == "success" and last["name"] == "tiny:latest" and last["state"] == "ready"
    ps = (await (await slow.get("/api/ps")).json())["models"]
    assert [m["name"] for m in ps] == ["tiny:latest"]
    assert last["expires_at"] == ps[0]["expires_at"]  # keep_alive 1h applied


async def test_loading_a_loaded_model_gives_the_entry_alone(slow: Any) -> None:
    await load_lines(slow)
    assert [line["status"] for line in await load_lines(slow)] == ["success"]


async def test_load_without_streaming_answers_the_entry(slow: Any) -> None:
    r = await slow.post("/api/load", json={"model": "tiny", "stream": False})
    entry = await r.json()
    assert r.status == 200 and entry["name"] == "tiny:latest" and "status" not in entry
    assert entry == (await (await slow.get("/api/ps")).json())["models"][0]


@pytest.mark.parametrize(("path", "body", "status", "error"), [
    ("/api/load", {"model": "nope"}, 404, "model 'nope' not found"),
    ("/api/load", {"model": "tiny", "keep_alive": "soon"}, 400, 'time: invalid duration "soon"'),
    ("/api/load", {}, 400, "model is required"),
    ("/api/unload", {"model": "nope"}, 404, "model 'nope' not found"),
], ids=["load-unknown", "load-bad-keep-alive", "load-no-model", "unload-unknown"])
async def test_load_and_unload_refuse(slow: Any, path: str, body: dict[str, Any], status: int, error: str) -> None:
    r = await slow.post(path, json=body)
    assert (r.status, (await r.json())["error"]) == (status, error)


async def test_unload_answers_once_the_model_is_gone(slow: Any) -> None:
    r = await slow.post("/api/unload", json={"model": "tiny"})
    assert await r.json() == {"model": "tiny", "status": "not loaded"}
    await load_lines(slow)
    r = await slow.post("/api/unload", json={"model": "tiny"})
    assert await r.json() == {"model": "tiny", "status": "unloaded"}
    assert (await (await slow.get("/api/ps")).json())["models"] == []


async def test_unload_waits_for_the_request_in_progress(fake_app, aiohttp_client) -> None:
    _, app = fake_app(fake_env={"FAKE_TOKEN_DELAY": "0.02", "FAKE_TOKENS": "40"})
    client = await aiohttp_client(app)
    answering = asyncio.ensure_future(client.post("/api/generate", json={
        "model": "tiny", "prompt": "hi", "stream": False, "options": {"num_predict": 40}}))
    while not (await (await client.get("/api/ps")).json())["models"]:
        await asyncio.sleep(0.01)
    r = await client.post("/api/unload", json={"model": "tiny"})
    assert await r.json() == {"model": "tiny", "status": "unloaded"}
    assert answering.done()
    answer = await (await answering).json()
    assert answer["eval_count"] == 40  # not cut short
    assert (await (await client.get("/api/ps")).json())["models"] == []


async def test_an_empty_generate_still_loads_and_keep_alive_0_unloads(slow: Any) -> None:
    r = await slow.post("/api/generate", json={"model": "tiny"})
    assert (await r.json())["done_reason"] == "load"
    assert len((await (await slow.get("/api/ps")).json())["models"]) == 1
    r = await slow.post("/api/generate", json={"model": "tiny", "keep_alive": 0})
    assert (await r.json())["done_reason"] == "unload"
