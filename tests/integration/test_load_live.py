"""/api/load and /api/unload with the real llama-server and SmolLM2: the progress comes from llama-server's own
reports (as a router's child), counts the weights' bytes, and ends with the /api/ps entry; unload waits until the
runner process is gone."""

from __future__ import annotations

import json

import psutil
import pytest

from tests.helpers.serve import LiveServer

pytestmark = pytest.mark.integration


def runners(live: LiveServer) -> list[psutil.Process]:
    return [p for p in psutil.Process(live.proc.pid).children(recursive=True) if "llama-server" in p.name()]


def test_load_streams_llama_servers_progress_then_unload(live_server: LiveServer) -> None:
    live_server.unload()
    r = live_server.api("POST", "/api/load", json={"model": live_server.model, "keep_alive": "10m"}, stream=True)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/x-ndjson")
    *progress, last = [json.loads(line) for line in r.iter_lines() if line]
    blob = live_server.api("POST", "/api/show", json={"model": live_server.model}).json()
    assert progress, "a load that starts a runner reports progress"
    statuses = [line["status"] for line in progress]
    assert "loading model" in statuses and statuses[-1] == "warming up"
    total = progress[0]["total"]
    assert 80 << 20 < total < 110 << 20  # SmolLM2's weights file, about 92 MiB
    assert all(line["total"] == total for line in progress) and progress[-1]["completed"] == total
    assert last["status"] == "success" and last["name"] == live_server.model and last["state"] == "ready"
    assert last["details"] == blob["details"]
    assert len(runners(live_server)) == 1

    r = live_server.api("POST", "/api/unload", json={"model": live_server.model})
    assert r.json() == {"model": live_server.model, "status": "unloaded"}
    assert all(m["name"] != live_server.model for m in live_server.api("GET", "/api/ps").json()["models"])
    assert runners(live_server) == []  # stopped and reaped before the answer
