"""The converter's fence (store/convert_sandbox.py + convert_bootstrap.py), probed from inside by a script that does
what hostile model files would make a converter do: ask transformers for the model's own code, import a module
from the model directory, connect to a listening socket, read the server's environment (issue 34 item 1)."""

from __future__ import annotations

import json
import socket
import sys
import threading
from pathlib import Path

import pytest

from ollama_py.errors import OllamaError, RequestCanceled
from ollama_py.store.convert_sandbox import GiB, child_env, limits_for, run_isolated
from tests.helpers.processes import alive

PROBE = r'''
import importlib.util, json, os, resource, socket, sys, tempfile
model, port = sys.argv[1], int(sys.argv[2])
out = {}
try:
    from transformers import AutoTokenizer
    AutoTokenizer.from_pretrained(model, trust_remote_code=True)
    out["tokenizer"] = "loaded"
except Exception as e:
    out["tokenizer"] = f"{type(e).__name__}: {e}"
sys.path.insert(0, model)
try:
    import tokenization_x
    out["import"] = "imported"
except ImportError as e:
    out["import"] = str(e)
try:
    spec = importlib.util.spec_from_file_location("x2", os.path.join(model, "tokenization_x.py"))
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
    out["exec_module"] = "ran"
except ImportError as e:
    out["exec_module"] = str(e)
s = socket.socket()
try:
    s.connect(("127.0.0.1", port))
    out["connect"] = "connected"
except OSError as e:
    out["connect"] = str(e)
out["env"] = dict(os.environ)
out["cwd"], out["tmp"] = os.getcwd(), tempfile.gettempdir()
out["limits"] = [resource.getrlimit(r)[0] for r in (resource.RLIMIT_AS, resource.RLIMIT_FSIZE, resource.RLIMIT_NOFILE)]
print("PROBE " + json.dumps(out))
'''


def hostile_model_dir(model: Path, marker: Path) -> Path:
    """A QWen-style tokenizer whose code is the model's own: tokenizer_config.json's auto_map names
    tokenization_x.py, which leaves `marker` behind when it runs. Laid out as is, as if staging had let it by."""
    model.mkdir(parents=True)
    (model / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "QWenTokenizer", "auto_map": {"AutoTokenizer": ["tokenization_x.QWenTokenizer", None]}}))
    (model / "config.json").write_text(json.dumps({"architectures": ["QWenLMHeadModel"], "model_type": "qwen"}))
    (model / "tokenization_x.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\nclass QWenTokenizer: pass\n")
    return model


def run(script: Path, *args: str, work: Path, timeout: float = 300,
        cancel: threading.Event | None = None) -> tuple[list[str], int]:
    lines: list[str] = []
    gen = run_isolated([str(script), *args], python=sys.executable, scripts_dir=script.parent, workspace=work,
                       limits=limits_for(1 << 20, timeout, ram=8 * GiB, cores=2), timeout=timeout, cancel=cancel)
    while True:
        try:
            lines.append(next(gen))
        except StopIteration as done:
            return lines, done.value


def test_the_converter_runs_no_model_code_and_reaches_no_socket(tmp_path: Path, monkeypatch) -> None:
    marker = tmp_path / "PWNED"
    work = tmp_path / "work"
    model = hostile_model_dir(work / "src", marker)
    (tmp_path / "scripts").mkdir()
    probe = tmp_path / "scripts" / "probe.py"
    probe.write_text(PROBE)
    monkeypatch.setenv("OLLAMA_API_KEYS", "server-secret")
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.setblocking(False)
        lines, rc = run(probe, str(model), str(listener.getsockname()[1]), work=work)
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    assert rc == 0, lines
    out = json.loads(next(line for line in lines if line.startswith("PROBE ")).removeprefix("PROBE "))
    assert not marker.exists()
    assert out["tokenizer"].startswith("ValueError: ") and "trust_remote_code=True" in out["tokenizer"]
    assert out["import"].startswith("refused to load model code: tokenization_x")
    assert out["exec_module"].startswith("refused to load model code: x2")
    assert out["connect"] != "connected"
    assert "OLLAMA_API_KEYS" not in out["env"] and out["env"]["HF_HUB_OFFLINE"] == "1"
    assert out["env"]["HOME"] == out["cwd"] == str(work / "home")
    assert out["tmp"] == str(work / "tmp")
    assert out["limits"] == [(1 << 20) + 12 * GiB, 4 * (1 << 20) + GiB, 4096]


SLEEPER = "import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\nprint('started', flush=True)\n" \
          "time.sleep(120)\n"


def test_a_converter_past_its_timeout_is_killed(tmp_path: Path) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    with pytest.raises(OllamaError, match=r"^converting model took longer than 3 s and was stopped "
                                          r"\(OLLAMA_PY_CONVERT_TIMEOUT\)$"):
        run(script, str(tmp_path / "pid"), work=tmp_path / "work", timeout=3)
    assert not alive(int((tmp_path / "pid").read_text()))


def test_cancel_kills_the_converter(tmp_path: Path) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    cancel = threading.Event()
    gen = run_isolated([str(script), str(tmp_path / "pid")], python=sys.executable, scripts_dir=tmp_path,
                       workspace=tmp_path / "work", limits=limits_for(0, 600, ram=8 * GiB, cores=2), timeout=600,
                       cancel=cancel)
    assert next(gen) == "started"
    cancel.set()
    with pytest.raises(RequestCanceled):
        next(gen)
    assert not alive(int((tmp_path / "pid").read_text()))


def test_closing_the_generator_kills_the_converter(tmp_path: Path) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    gen = run_isolated([str(script), str(tmp_path / "pid")], python=sys.executable, scripts_dir=tmp_path,
                       workspace=tmp_path / "work", limits=limits_for(0, 600, ram=8 * GiB, cores=2), timeout=600)
    assert next(gen) == "started"
    gen.close()
    assert not alive(int((tmp_path / "pid").read_text()))


def test_child_env_keeps_only_path_locale_and_the_offline_switches(tmp_path: Path) -> None:
    env = child_env(tmp_path, {"PATH": "/usr/bin", "LANG": "C.UTF-8", "AWS_SECRET_ACCESS_KEY": "x",
                               "HTTPS_PROXY": "http://proxy:3128", "HF_TOKEN": "hf_x", "PYTHONPATH": "/evil"})
    assert env["PATH"] == "/usr/bin" and env["LANG"] == "C.UTF-8"
    assert not {"AWS_SECRET_ACCESS_KEY", "HTTPS_PROXY", "HF_TOKEN", "PYTHONPATH"} & set(env)
    assert env["HOME"] == str(tmp_path / "home") and env["TMPDIR"] == str(tmp_path / "tmp")
    assert env["HF_MODULES_CACHE"].startswith(str(tmp_path))
    assert env["HF_HUB_OFFLINE"] == env["TRANSFORMERS_OFFLINE"] == "1"


@pytest.mark.parametrize(("inputs", "timeout", "ram", "cores", "want"), [
    pytest.param(10 * GiB, 3600, 16 * GiB, 4, (30 * GiB, 41 * GiB, 14460), id="10GiB-model"),
    pytest.param(0, 60, 1 * GiB, 0, (8 * GiB, GiB, 120), id="small-host-floor"),
    pytest.param(0, float("inf"), 8 * GiB, 2, (12 * GiB, GiB, None), id="no-timeout-no-cpu-limit"),
])
def test_limits_for(inputs: int, timeout: float, ram: int, cores: int, want: tuple[int, int, int | None]) -> None:
    limits = limits_for(inputs, timeout, ram=ram, cores=cores)
    assert (limits.address_space, limits.file_size, limits.cpu_seconds) == want
