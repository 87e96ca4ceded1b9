"""The gateway's short scheduler slice: set on its own threads, not handed down to the runners it starts."""

from __future__ import annotations

import subprocess
import sys
import threading

from ollama_py import timeslice
from ollama_py.runner import process

PRINT_SLICE = "from ollama_py import timeslice; print(timeslice.current_slice_ns())"


def in_thread(fn):
    """Run fn on a fresh thread (the test's own thread keeps its slice) and return what it returned."""
    out = []
    t = threading.Thread(target=lambda: out.append(fn()))
    t.start()
    t.join()
    return out[0]


def child_slice(preexec) -> str:
    return subprocess.run([sys.executable, "-c", PRINT_SLICE], preexec_fn=preexec,
                          capture_output=True, text=True, check=True).stdout.strip()


def test_a_relay_thread_gets_the_short_slice_and_can_give_it_back():
    def probe():
        before = timeslice.current_slice_ns()
        ok = timeslice.relay_slices()
        during = timeslice.current_slice_ns()
        timeslice.default_slice()
        return before, ok, during, timeslice.current_slice_ns()

    before, ok, during, after = in_thread(probe)
    if before is None:  # not Linux on x86_64/aarch64: nothing is touched and nothing fails
        assert (ok, during, after) == (False, None, None)
        return
    if ok:
        assert during == timeslice.RELAY_SLICE_NS
        assert after != timeslice.RELAY_SLICE_NS
    else:  # a kernel without custom slices (before 6.12) refuses; the thread keeps what it had
        assert during == before == after


def test_a_runner_starts_with_the_default_slice_though_the_gateway_runs_short_ones():
    def probe():
        ok = timeslice.relay_slices()
        inherited = child_slice(None)
        runner = child_slice(process.pdeathsig_preexec)
        timeslice.default_slice()
        return ok, inherited, runner

    ok, inherited, runner = in_thread(probe)
    if not ok:
        assert inherited == runner  # nothing to hand down, nothing to take back
        return
    assert inherited == str(timeslice.RELAY_SLICE_NS)  # what a plain fork+exec would hand llama-server
    assert runner not in ("", "None", str(timeslice.RELAY_SLICE_NS))
