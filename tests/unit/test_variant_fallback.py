"""A runner variant that dies of SIGILL is remembered and skipped; the next variant serves (issue 3)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ollama_py.config import Settings
from ollama_py.runner import variants
from ollama_py.runner.argv import LaunchSpec
from ollama_py.scheduler.factory import runner_factory
from ollama_py.scheduler.scheduler import LoadPlan

FAKE = Path(__file__).resolve().parent.parent / "fakes" / "fake_llama_server.py"


def make_runners(root: Path) -> Path:
    runners = root / "runners"
    sigill = runners / "cpu_avx2" / "llama-server"
    sigill.parent.mkdir(parents=True)
    sigill.write_text("#!/bin/sh\necho 'about to use an instruction this CPU lacks' >&2\nkill -ILL $$\n")
    good = runners / "cpu" / "llama-server"
    good.parent.mkdir(parents=True)
    good.write_text(f"#!/bin/sh\nexec {sys.executable} {FAKE} \"$@\"\n")
    for binary in (sigill, good):
        binary.chmod(0o755)
        (binary.parent / "build-info.json").write_text(json.dumps({"variant": binary.parent.name, "key": "k1"}))
    return runners


async def test_sigill_variant_is_marked_bad_and_skipped_next_time(tmp_path):
    runners = make_runners(tmp_path)
    settings = Settings.from_env({"OLLAMA_MODELS": str(tmp_path / "models"),
                                  "OLLAMA_PY_DATA_DIR": str(tmp_path / "data"),
                                  "OLLAMA_RUNNERS_DIR": str(runners)})
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    plan = LoadPlan(key="m", spec=LaunchSpec(model=model, num_ctx=512), load_options={})
    host_has_avx2 = variants.suits_host("cpu_avx2", variants.probe_host())

    factory = runner_factory(settings, env=dict(os.environ))
    runner = factory(plan, "m", lambda r: None)
    expected_first = "cpu_avx2" if host_has_avx2 else "cpu"
    assert runner.variant == expected_first
    try:
        await runner.ensure_ready()  # falls back by itself when cpu_avx2 dies of SIGILL
        assert runner.variant == "cpu"
    finally:
        await runner.stop()

    bad_file = tmp_path / "data" / "bad-variants.json"
    if host_has_avx2:
        marks = json.loads(bad_file.read_text())
        assert "cpu_avx2" in marks and "SIGILL" in marks["cpu_avx2"]["reason"]
    second = runner_factory(settings, env=dict(os.environ))(plan, "m", lambda r: None)
    assert second.variant == "cpu"  # not tried again

    # Rebuilding the variant (a new build key) gives it another chance.
    (runners / "cpu_avx2" / "build-info.json").write_text(json.dumps({"variant": "cpu_avx2", "key": "k2"}))
    third = runner_factory(settings, env=dict(os.environ))(plan, "m", lambda r: None)
    assert third.variant == expected_first


def test_forced_variant_that_is_not_built_names_the_built_ones(tmp_path):
    runners = make_runners(tmp_path)
    settings = Settings.from_env({"OLLAMA_MODELS": str(tmp_path / "models"), "OLLAMA_RUNNERS_DIR": str(runners),
                                  "OLLAMA_PY_DATA_DIR": str(tmp_path / "data"), "OLLAMA_LLM_LIBRARY": "cuda"})
    plan = LoadPlan(key="m", spec=LaunchSpec(model=tmp_path / "m.gguf"), load_options={})
    try:
        runner_factory(settings)(plan, "m", lambda r: None)
    except Exception as e:  # noqa: BLE001 - the message is what the user sees
        assert "cuda" in str(e) and "cpu, cpu_avx2" in str(e)
    else:
        raise AssertionError("a missing forced variant must be refused")


def test_list_devices_output_gives_each_workers_memory():
    from ollama_py.runner.rpc import parse_list_devices

    text = ("Available devices:\n  RPC0: 127.0.0.1:50081 (24105 MiB, 20000 MiB free)\n"
            "  RPC1: 10.0.0.2:50052 (8192 MiB, 512 MiB free)\n  CPU: AMD EPYC (24105 MiB, 24105 MiB free)\n")
    assert parse_list_devices(text) == {"127.0.0.1:50081": (24105 << 20, 20000 << 20),
                                        "10.0.0.2:50052": (8192 << 20, 512 << 20)}


async def test_a_gpu_variant_that_fails_to_start_falls_back_to_the_cpu_build_without_offload(tmp_path):
    runners = make_runners(tmp_path)
    broken = runners / "vulkan" / "llama-server"
    broken.parent.mkdir(parents=True)
    broken.write_text("#!/bin/sh\necho 'ggml_vulkan: vk::createInstance: ErrorIncompatibleDriver' >&2\nexit 1\n")
    broken.chmod(0o755)
    settings = Settings.from_env({"OLLAMA_MODELS": str(tmp_path / "models"),
                                  "OLLAMA_PY_DATA_DIR": str(tmp_path / "data"),
                                  "OLLAMA_RUNNERS_DIR": str(runners)})
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")
    plan = LoadPlan(key="m", spec=LaunchSpec(model=model, num_ctx=512, n_gpu_layers=99), load_options={})
    host = variants.HostInfo("x86_64", "Linux", frozenset(), 0, vulkan_gpus=1)  # cpu_avx2 does not suit it
    runner = runner_factory(settings, env=dict(os.environ), host=host)(plan, "m", lambda r: None)
    assert runner.variant == "vulkan"
    try:
        await runner.ensure_ready()
        assert runner.variant == "cpu"
        assert runner.spec.n_gpu_layers == 0  # the CPU build gets no offload to plan around
    finally:
        await runner.stop()
    assert not (tmp_path / "data" / "bad-variants.json").exists()  # the GPU gets its chance again next load
