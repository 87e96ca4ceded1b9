"""The config file with the real llama-server and SmolLM2: a preloaded model is in /api/ps as soon as serve answers,
its runner settings reach llama-server's command line, an alias answers, and SIGHUP reloads an edited file
(a broken edit keeps serving)."""

from __future__ import annotations

import signal

import psutil
import pytest
import requests

from tests.helpers.app import create_tiny_model, make_settings
from tests.helpers.paths import required_path
from tests.helpers.serve import start_serve, stop_serve
from tests.helpers.wait import wait_until

pytestmark = pytest.mark.integration

CONFIG = """
[server]
keep_alive = "10m"

[models."smollm2:135m"]
aliases = ["small"]
preload = true
kv_cache_type = "q8_0"
options = { num_predict = 4 }
"""


def runner_cmdlines(serve_pid: int) -> dict[int, list[str]]:
    return {p.pid: p.cmdline() for p in psutil.Process(serve_pid).children(recursive=True)
            if "llama-server" in " ".join(p.cmdline())}


def flag(cmdline: list[str], name: str) -> str | None:
    return cmdline[cmdline.index(name) + 1] if name in cmdline else None




@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory):
    tmp = tmp_path_factory.mktemp("config-live")
    create_tiny_model(make_settings(tmp), required_path("OLLAMA_PY_TEST_MODEL"), name="smollm2:135m")
    config = tmp / "config.toml"
    config.write_text(CONFIG)
    proc, url, _ = start_serve(tmp, {"OLLAMA_PY_CONFIG": str(config)})
    try:
        yield proc, url, config, tmp / "serve.log"
    finally:
        stop_serve(proc)


def test_a_preloaded_model_is_running_when_serve_answers(served) -> None:
    proc, url, _, _ = served
    models = requests.get(url + "/api/ps", timeout=30).json()["models"]
    assert [m["name"] for m in models] == ["smollm2:135m"]
    (cmdline,) = runner_cmdlines(proc.pid).values()
    assert flag(cmdline, "--cache-type-k") == flag(cmdline, "--cache-type-v") == "q8_0"


def test_an_alias_answers_with_the_models_defaults(served) -> None:
    _, url, _, _ = served
    r = requests.post(url + "/api/generate", json={"model": "small", "prompt": "Hi", "stream": False}, timeout=300)
    assert r.status_code == 200, r.text
    assert r.json()["model"] == "small" and r.json()["eval_count"] == 4  # num_predict from the file
    names = {m["name"] for m in requests.get(url + "/api/tags", timeout=30).json()["models"]}
    assert names == {"smollm2:135m", "small:latest"}


def test_sighup_reloads_and_a_broken_edit_keeps_serving(served) -> None:
    proc, url, config, log = served
    (old_pid,) = runner_cmdlines(proc.pid)
    config.write_text(CONFIG.replace('"q8_0"', '"q4_0"\nn_cpu_moe = 2'))
    proc.send_signal(signal.SIGHUP)

    def restarted() -> bool:
        runners = runner_cmdlines(proc.pid)
        return bool(runners) and old_pid not in runners
    wait_until(restarted)
    (cmdline,) = runner_cmdlines(proc.pid).values()
    assert flag(cmdline, "--cache-type-k") == "q4_0"
    assert flag(cmdline, "--n-cpu-moe") == "2"
    wait_until(lambda: any(m["name"] == "smollm2:135m" for m in requests.get(url + "/api/ps", timeout=30).json()[
        "models"]))

    config.write_text(CONFIG.replace("preload = true", "preload = yes"))
    proc.send_signal(signal.SIGHUP)
    wait_until(lambda: "config reload failed" in log.read_text())
    line = next(x for x in log.read_text().splitlines() if "config reload failed" in x)
    assert f"keeping the previous settings: {config}:7: Invalid value (column 11)" in line
    r = requests.post(url + "/api/generate", json={"model": "small", "prompt": "Hi", "stream": False}, timeout=300)
    assert r.status_code == 200 and r.json()["eval_count"] == 4
    metrics = requests.get(url + "/metrics", timeout=30).text
    assert 'ollama_config_reloads_total{result="ok"} 1.0' in metrics
    assert 'ollama_config_reloads_total{result="error"} 1.0' in metrics
