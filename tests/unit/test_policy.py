"""scheduler.policy: the pure scheduling decisions, as tables."""

from __future__ import annotations

import math

import pytest

from ollama_py.scheduler.policy import Resident, choose_victim, expiry, max_runners, must_evict, needs_reload


def res(name: str, busy: bool = False, keep: float = 300.0, size: int = 0) -> Resident:
    return Resident(key=name, name=name, busy=busy, session_duration=keep, size=size)


@pytest.mark.parametrize(("setting", "gpus", "want"), [
    pytest.param(0, 0, 3, id="unset-cpu-3"),
    pytest.param(0, 1, 3, id="unset-one-gpu-3"),
    pytest.param(0, 2, 6, id="unset-two-gpus-6"),
    pytest.param(1, 4, 1, id="set-wins-over-gpus"),
    pytest.param(7, 0, 7, id="set-on-cpu"),
])
def test_max_runners(setting: int, gpus: int, want: int) -> None:
    assert max_runners(setting, gpus) == want


@pytest.mark.parametrize(("loaded", "want"), [
    pytest.param([], None, id="nothing-loaded"),
    pytest.param([res("a", busy=True), res("b", busy=True)], None, id="all-busy"),
    pytest.param([res("a", busy=True), res("b")], "b", id="the-only-idle"),
    pytest.param([res("a", keep=600), res("b", keep=60)], "b", id="shortest-keep-alive"),
    pytest.param([res("b"), res("a")], "a", id="tie-broken-by-name"),
    pytest.param([res("a", keep=math.inf), res("b", keep=5)], "b", id="forever-is-evicted-last"),
])
def test_choose_victim(loaded: list[Resident], want: str | None) -> None:
    victim = choose_victim(loaded)
    assert (victim.name if victim else None) == want


@pytest.mark.parametrize(("loaded", "limit", "need", "free", "want"), [
    pytest.param([], 1, 10**12, 0, False, id="empty-never-evicts"),
    pytest.param([res("a")], 1, 1, None, True, id="at-the-count-limit"),
    pytest.param([res("a")], 3, 1, None, False, id="below-limit-memory-unknown"),
    pytest.param([res("a")], 3, 100, 50, True, id="does-not-fit"),
    pytest.param([res("a")], 3, 50, 50, False, id="fits-exactly"),
])
def test_must_evict(loaded: list[Resident], limit: int, need: int, free: int | None, want: bool) -> None:
    assert must_evict(loaded, limit, need, free) is want


@pytest.mark.parametrize(("current", "wanted", "want"), [
    pytest.param({"num_ctx": 4096}, {"num_ctx": 4096}, False, id="same"),
    pytest.param({"num_ctx": 4096}, {"num_ctx": 8192}, True, id="num_ctx-changed"),
    pytest.param({"num_gpu": 10}, {"num_gpu": -1}, False, id="auto-gpu-accepts-any"),
    pytest.param({"num_gpu": 10}, {}, False, id="gpu-unset-accepts-any"),
    pytest.param({"num_gpu": 10}, {"num_gpu": 5}, True, id="explicit-gpu-changed"),
    pytest.param({}, {"num_batch": 256}, True, id="new-load-option"),
])
def test_needs_reload(current: dict[str, object], wanted: dict[str, object], want: bool) -> None:
    assert needs_reload(current, wanted) is want


@pytest.mark.parametrize(("duration", "want"), [
    pytest.param(0.0, 100.0, id="zero-expires-now"),
    pytest.param(300.0, 400.0, id="five-minutes"),
    pytest.param(math.inf, math.inf, id="forever"),
])
def test_expiry(duration: float, want: float) -> None:
    assert expiry(100.0, duration) == want
