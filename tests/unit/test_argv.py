"""runner.argv.build_argv: what each launch setting puts on llama-server's command line, as a table."""

from __future__ import annotations

from pathlib import Path

import pytest

from ollama_py.runner.argv import LaunchSpec, build_argv
from ollama_py.scheduler import policy

MODEL = Path("/m/model.gguf")


def flag_values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


def test_defaults_bind_loopback_and_share_the_context() -> None:
    argv = build_argv(LaunchSpec(model=MODEL, num_ctx=2048, parallel=4), "/bin/llama-server", 4321)
    assert argv[0] == "/bin/llama-server"
    assert flag_values(argv, "--host") == ["127.0.0.1"]
    assert flag_values(argv, "--port") == ["4321"]
    assert flag_values(argv, "-c") == ["8192"]  # num_ctx per slot times slots
    assert flag_values(argv, "-np") == ["4"]
    assert {"--no-webui", "--offline", "--metrics"} <= set(argv)


@pytest.mark.parametrize("parallel", [1, 4, 16])
def test_http_threads_leave_room_beside_the_slots_for_spare_connections_and_small_calls(parallel: int) -> None:
    """llama-server serves each connection on a thread of its own; the gateway's streams (one a slot), the
    requests it sent to wait in llama-server's queue, its spare connections (one a slot at most) and a tokenize
    or /metrics call at once must never wait for a thread."""
    argv = build_argv(LaunchSpec(model=MODEL, parallel=parallel), "/bin/llama-server", 4321)
    (threads,) = flag_values(argv, "--threads-http")
    assert int(threads) >= 2 * parallel + policy.runner_queue(parallel) + 4


@pytest.mark.parametrize(("spec", "present", "absent"), [
    pytest.param(LaunchSpec(model=MODEL, num_batch=256), [("-b", "256"), ("-ub", "256")], [], id="num_batch"),
    pytest.param(LaunchSpec(model=MODEL, n_gpu_layers=None), [], ["-ngl", "--fit"], id="gpu-layers-unset"),
    pytest.param(LaunchSpec(model=MODEL, n_gpu_layers=12), [("-ngl", "12"), ("--fit", "off")], ["--device"],
                 id="gpu-layers-placed-by-us"),
    pytest.param(LaunchSpec(model=MODEL, n_gpu_layers=0), [("-ngl", "0"), ("--device", "none")], [],
                 id="no-layers-no-gpu-at-all"),
    pytest.param(LaunchSpec(model=MODEL, num_thread=3), [("-t", "3")], [], id="threads"),
    pytest.param(LaunchSpec(model=MODEL, flash_attention="on"), [("--flash-attn", "on")], [], id="flash-attn"),
    pytest.param(LaunchSpec(model=MODEL, kv_cache_type="q8_0"),
                 [("--cache-type-k", "q8_0"), ("--cache-type-v", "q8_0")], [], id="kv-cache-type"),
    pytest.param(LaunchSpec(model=MODEL, adapters=(Path("/a.gguf"),)), [("--lora", "/a.gguf")], [], id="lora"),
    pytest.param(LaunchSpec(model=MODEL, projectors=(Path("/p.gguf"),)), [("--mmproj", "/p.gguf")], [],
                 id="projector"),
    pytest.param(LaunchSpec(model=MODEL, embedding=True), [("--pooling", "mean")], [], id="embedding"),
    pytest.param(LaunchSpec(model=MODEL, use_mmap=False), [("--load-mode", "none")], ["--no-mmap"], id="no-mmap"),
    pytest.param(LaunchSpec(model=MODEL, main_gpu=1), [("--main-gpu", "1"), ("--split-mode", "none")], [],
                 id="main-gpu-alone-pins"),
    pytest.param(LaunchSpec(model=MODEL, main_gpu=1, tensor_split=(3.0, 1.5)),
                 [("--main-gpu", "1"), ("--tensor-split", "3,1.5")], ["--split-mode"], id="main-gpu-with-split"),
    pytest.param(LaunchSpec(model=MODEL, rpc_servers=("127.0.0.1:50052", "127.0.0.1:50053")),
                 [("--rpc", "127.0.0.1:50052,127.0.0.1:50053")], [], id="rpc-workers"),
    pytest.param(LaunchSpec(model=MODEL, num_keep=-1), [], ["--keep"], id="num-keep-negative-left-out"),
    pytest.param(LaunchSpec(model=MODEL, num_keep=24), [("--keep", "24")], [], id="num-keep"),
    pytest.param(LaunchSpec(model=MODEL, metrics=False), [], ["--metrics"], id="no-metrics"),
])
def test_setting_reaches_argv(spec: LaunchSpec, present: list[tuple[str, str]], absent: list[str]) -> None:
    argv = build_argv(spec, "llama-server", 1)
    for flag, value in present:
        assert value in flag_values(argv, flag), (flag, argv)
    for flag in absent:
        assert flag not in argv


def test_extra_args_come_last() -> None:
    argv = build_argv(LaunchSpec(model=MODEL, extra=("--temp", "0")), "llama-server", 1)
    assert argv[-2:] == ["--temp", "0"]
