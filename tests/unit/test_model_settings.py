"""scheduler.model_settings: the llama-server command line each [models."name"] runner setting yields, as a table,
and the plan it changes (slots, KV cache, flash attention, threads, GPU pinning, fingerprint)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from ollama_py import config_file as cf
from ollama_py.api.names import parse_name
from ollama_py.config import Settings
from ollama_py.runner.argv import build_argv
from ollama_py.scheduler import model_settings as msettings
from ollama_py.scheduler.factory import plan_load

FAKE_HELP = """----- common params -----

-h,    --help, --usage                  print usage and exit
-t,    --threads N                      number of CPU threads to use during generation (default: -1)
-fa,   --flash-attn [on|off|auto]       set Flash Attention use ('on', 'off', or 'auto', default: 'auto')
--jinja, --no-jinja                     whether to use jinja template engine for chat (default: enabled)
                                        only commonly used templates are accepted (unless --jinja is set
--spec-draft-type-k, -ctkd, --cache-type-k-draft TYPE
                                        KV cache data type for K for the draft model
-ncmoe, --n-cpu-moe N                   keep the Mixture of Experts (MoE) weights of the first N layers in the
"""


def settings_for(text: str) -> cf.ModelSettings:
    return cf.parse_config(text).models.for_name(parse_name("m"))


def argv_for(text: str, tmp_path: Path, tiny_gguf: Path, settings: Settings | None = None) -> list[str]:
    settings = settings or Settings.from_env({"OLLAMA_MODELS": str(tmp_path)})
    model = SimpleNamespace(model_path=tiny_gguf, adapters=(), projectors=(), name=parse_name("m"))
    plan = msettings.plan_with_settings(settings_for(text), settings, {"num_ctx": 512},
                                        lambda s, o, r: plan_load(s, [], 1 << 40, model, o, False, runner=r))
    return build_argv(plan.spec, "llama-server", 1234)


def values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


@pytest.mark.parametrize(("text", "present", "absent"), [
    pytest.param("", [], ["--n-cpu-moe", "--reasoning-budget", "--cache-type-k"], id="nothing"),
    pytest.param('kv_cache_type = "q8_0"', [("--cache-type-k", "q8_0"), ("--cache-type-v", "q8_0")], [],
                 id="kv-cache-type"),
    pytest.param("flash_attention = true", [("--flash-attn", "on")], [], id="flash-on"),
    pytest.param("flash_attention = false", [("--flash-attn", "off")], [], id="flash-off"),
    pytest.param("n_cpu_moe = 12", [("--n-cpu-moe", "12")], [], id="n-cpu-moe"),
    # no GPU here, so the plan offloads nothing: its own --device none stays the last word
    pytest.param('device = ["CUDA0", "CUDA1"]', [("--device", "none")], [], id="device-list-on-a-cpu-plan"),
    pytest.param('device = "none"', [("--device", "none")], [], id="device-none"),
    pytest.param("main_gpu = 1", [("--main-gpu", "1"), ("--split-mode", "none")], [], id="main-gpu-pins"),
    pytest.param('split_mode = "row"', [("--split-mode", "row")], [], id="split-mode"),
    pytest.param("tensor_split = [3, 1]", [("--tensor-split", "3,1")], [], id="tensor-split"),
    # a request option's default (server/model_lookup.default_options), not a flag: /completion never reads the flag's
    pytest.param("reasoning_budget = 0", [], ["--reasoning-budget"], id="reasoning-budget-is-no-flag"),
    pytest.param("threads = 6", [("-t", "6")], [], id="threads"),
    pytest.param("num_parallel = 3", [("-np", "3"), ("-c", "1536"), ("--kv-unified-per-slot", "512")], [],
                 id="num-parallel"),
    pytest.param('extra_args = ["--top-nsigma", "1", "--jinja"]', [("--top-nsigma", "1")], [], id="extra-args"),
])
def test_argv_of_each_setting(text, present, absent, tmp_path, tiny_gguf) -> None:
    argv = argv_for('[models."m"]\n' + text, tmp_path, tiny_gguf)
    for flag, value in present:
        assert values(argv, flag)[-1] == value, (flag, argv)  # the last one is the one llama-server keeps
    for flag in absent:
        assert flag not in argv


def test_main_gpu_with_a_split_mode_keeps_the_split_mode(tmp_path, tiny_gguf) -> None:
    argv = argv_for('[models."m"]\nmain_gpu = 1\nsplit_mode = "row"', tmp_path, tiny_gguf)
    assert values(argv, "--split-mode")[-1] == "row"


def test_model_settings_override_the_servers(tmp_path, tiny_gguf) -> None:
    server = Settings.from_env({"OLLAMA_MODELS": str(tmp_path), "OLLAMA_KV_CACHE_TYPE": "q4_0",
                                "OLLAMA_FLASH_ATTENTION": "1", "OLLAMA_NUM_PARALLEL": "2"})
    assert values(argv_for("", tmp_path, tiny_gguf, server), "--cache-type-k") == ["q4_0"]
    argv = argv_for('[models."m"]\nkv_cache_type = "q8_0"\nflash_attention = "auto"\nnum_parallel = 1', tmp_path,
                    tiny_gguf, server)
    assert values(argv, "--cache-type-k") == ["q8_0"]
    assert "--flash-attn" not in argv  # auto: llama-server's own choice
    assert values(argv, "-np") == ["1"]


def test_a_requests_num_thread_beats_the_models_threads(tmp_path, tiny_gguf) -> None:
    model = SimpleNamespace(model_path=tiny_gguf, adapters=(), projectors=(), name=parse_name("m"))
    settings = Settings.from_env({"OLLAMA_MODELS": str(tmp_path)})
    plan = msettings.plan_with_settings(settings_for('[models."m"]\nthreads = 6'), settings, {"num_thread": 2},
                                        lambda s, o, r: plan_load(s, [], 1 << 40, model, o, False, runner=r))
    assert plan.spec.num_thread == 2


def test_runner_settings_make_another_runner_key_of_the_same_lineage(tmp_path, tiny_gguf) -> None:
    from ollama_py.scheduler.policy import needs_reload

    model = SimpleNamespace(model_path=tiny_gguf, adapters=(), projectors=(), name=parse_name("m"))
    settings = Settings.from_env({"OLLAMA_MODELS": str(tmp_path)})

    def plan(text: str):
        return msettings.plan_with_settings(settings_for(text), settings, {},
                                            lambda s, o, r: plan_load(s, [], 1 << 40, model, o, False, runner=r))

    a, b = plan('[models."m"]\nkv_cache_type = "q8_0"'), plan('[models."m"]\nkv_cache_type = "q4_0"')
    c = plan('[models."m"]\nkv_cache_type = "q8_0"\noptions = { top_k = 2 }\nkeep_alive = "1h"')
    assert a.key != b.key  # other runner settings: another runner ...
    assert a.lineage == b.lineage  # ... of the same model, which replaces a's once idle (the scheduler's lineage)
    assert needs_reload(a.load_options, b.load_options)
    assert a.key == c.key  # defaults and keep-alive need no restart
    assert not needs_reload(a.load_options, c.load_options)
    assert plan("").key == plan_load(settings, [], 1 << 40, model, {}, False).key  # no settings: the weights' key


def test_help_flags_are_read_from_the_flag_column() -> None:
    flags = msettings.parse_help_flags(FAKE_HELP)
    assert {"-h", "--help", "--usage", "-t", "--threads", "-fa", "--flash-attn", "--jinja", "--no-jinja",
            "--spec-draft-type-k", "-ctkd", "--cache-type-k-draft", "-ncmoe", "--n-cpu-moe"} == flags


def test_no_runner_built_means_no_check(tmp_path) -> None:
    assert msettings.runner_flags(tmp_path) is None


def test_a_pinned_device_is_passed_only_when_the_plan_offloads() -> None:
    ms = settings_for('[models."m"]\ndevice = ["CUDA0", "CUDA1"]\n')
    assert msettings.runner_args(ms) == ("--device", "CUDA0,CUDA1")
    assert msettings.runner_args(ms, offload=False) == ()
