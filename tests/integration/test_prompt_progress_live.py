"""Prompt-processing progress from the real llama-server (issue 27): a ~1,500-token prompt asked with
`"prompt_progress": true` streams llama-server's own progress (per batch) before its first token."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.integration


def test_a_long_prompt_reports_its_progress(live_server) -> None:
    prompt = " ".join(f"item {i}," for i in range(500)) + " What was the last item?"
    r = live_server.api("POST", "/api/generate", json={
        "model": live_server.model, "prompt": prompt, "prompt_progress": True,
        "options": {"num_predict": 4, "temperature": 0, "num_batch": 256}}, stream=True)
    assert r.status_code == 200, r.text
    chunks = [json.loads(line) for line in r.iter_lines() if line]
    progress = [c["prompt_progress"] for c in chunks if "prompt_progress" in c]
    assert len(progress) >= 3, progress  # the start, then a batch at a time
    total = progress[-1]["total"]
    assert total > 1000 and progress[-1]["processed"] == total
    done = [p["processed"] for p in progress]
    assert done == sorted(done) and done[0] < total
    assert chunks[-1]["done"] is True and chunks[-1]["prompt_eval_count"] >= total - progress[-1]["cache"]
