"""What a loading llama-server says about its progress, as one value (pure: lines in, a LoadReport out).

llama-server reports its own load progress only to a router that started it. With `LLAMA_SERVER_ROUTER_PORT` in
its environment it takes itself for a router's child and writes, on stdout,

    cmd_child_to_router:state:{"state":"loading","payload":{"stages":["text_model"],"current":"text_model",
                                                            "value":0.45}}

from libllama's load callback: `value` is the fraction of the current part's tensor bytes read (sent at 0, at
1 and at most every 200 ms between), parts being the model (`text_model`), a draft model (`spec_model`) and a
projector (`mmproj_model`), in the order `stages` gives. `{"state":"ready"}` follows once it serves. A child also
ends when its stdin closes (RunnerProcess keeps a pipe open for that).

Before the tensors (fitting the model to memory, reading metadata and vocabulary) and after them (allocating the
KV cache, a warm-up run) nothing is counted; the stderr log names those stages, and they are reported as stages:

    starting runner   spawned, llama-server has said nothing yet
    loading model     llama-server is loading; `fraction` of the parts' bytes read (0 until tensors are read)
    warming up        the model's weights read; llama-server's empty warm-up run ("warming up the model" in
                      its log), before it reads a projector if there is one (back to "loading model")
    ready             answering /health

A llama-server that does not speak the router protocol (an older build) still gives the stages from its log.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

STATE_PREFIX = "cmd_child_to_router:state:"
# Any value makes llama-server a router's child; nothing in it connects to that port (it is only tested for).
ROUTER_ENV = {"LLAMA_SERVER_ROUTER_PORT": "0"}
EXIT_COMMAND = b"cmd_router_to_child:exit\n"  # what a router writes to a child's stdin to stop it
MODEL_PART = "text_model"


class LoadStage(enum.StrEnum):
    STARTING = "starting runner"
    LOADING = "loading model"
    WARMING_UP = "warming up"
    READY = "ready"


@dataclass(frozen=True, slots=True)
class LoadReport:
    """Where a load is: its stage, the parts llama-server loads (in order), the one it is on and how far."""

    stage: LoadStage = LoadStage.STARTING
    parts: tuple[str, ...] = (MODEL_PART,)
    part: str = MODEL_PART
    fraction: float = 0.0  # of `part`'s tensor bytes

    def bytes_done(self, sizes: Mapping[str, int]) -> tuple[int, int]:
        """(completed, total) bytes, given the size of each part's files (0 or absent: a part not loaded): the
        parts before the current one in full, then the current one's fraction, out of all of them."""
        total = sum(sizes.values())
        if self.stage == LoadStage.READY:
            return total, total
        if self.stage == LoadStage.STARTING or self.part not in self.parts:
            return 0, total
        index = self.parts.index(self.part)
        done = sum(sizes.get(p, 0) for p in self.parts[:index])
        done += int(sizes.get(self.part, 0) * min(max(self.fraction, 0.0), 1.0))
        return min(done, total), total


def parse_state_line(line: str) -> tuple[str, dict[str, Any]] | None:
    """(state, payload) of a `cmd_child_to_router:state:` line; None for any other line or bad JSON."""
    if not line.startswith(STATE_PREFIX):
        return None
    try:
        data = json.loads(line[len(STATE_PREFIX):])
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("state"), str):
        return None
    payload = data.get("payload")
    return data["state"], payload if isinstance(payload, dict) else {}


def on_state_line(report: LoadReport, line: str) -> LoadReport:
    """The report after one stdout line (unchanged for lines that are not a loading state)."""
    parsed = parse_state_line(line)
    if parsed is None or report.stage == LoadStage.READY or parsed[0] != "loading":
        return report
    payload = parsed[1]
    parts = payload.get("stages")
    if isinstance(parts, list) and parts and all(isinstance(p, str) for p in parts):
        report = replace(report, parts=tuple(parts))
    part = payload.get("current", payload.get("stage"))
    value = payload.get("value")
    if isinstance(part, str) and part != report.part:
        report = replace(report, stage=LoadStage.LOADING, part=part, fraction=0.0)
    elif report.stage == LoadStage.WARMING_UP:
        return report  # a late report of the part being warmed up (stdout and stderr are two pipes)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        report = replace(report, fraction=float(value))
    return replace(report, stage=LoadStage.LOADING)


# What the stderr log says at each stage, after llama.cpp's "M.SS.mmm.uuu L " prefix.
_LOADING_MARKS = ("load_model: loading model", "fitting params to device memory", "llama_model_loader: loaded meta")
_WARMING_MARK = "warming up the model"


def on_log_line(report: LoadReport, line: str) -> LoadReport:
    """The report after one stderr line: the stages the router protocol does not count."""
    if report.stage == LoadStage.READY:
        return report
    if _WARMING_MARK in line:
        return replace(report, stage=LoadStage.WARMING_UP, fraction=1.0)  # of the model, before any projector
    if report.stage == LoadStage.STARTING and any(mark in line for mark in _LOADING_MARKS):
        return replace(report, stage=LoadStage.LOADING)
    return report
