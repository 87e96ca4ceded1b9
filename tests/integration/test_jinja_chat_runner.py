"""Our in-process rendering of GGUF chat templates against the real llama-server's /apply-template (issue 38), on
every template the pinned llama.cpp source carries (models/templates, the ones llama.cpp tests its own engine with),
on the SmolLM2 GGUF's own template, and on Gemma's (it has none: llama-server's ChatML). For each conversation the
gateway sends to the runner, one of the renders server/rendering.py tries must equal the runner's prompt, so the
gateway renders it in-process; the few it cannot match are listed with the reason, and there the runner keeps
rendering (checked too)."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from ollama_py.server.rendering import _candidates, chat_template_from_kv, oai_message
from ollama_py.store.gguf_meta import read_gguf_info
from tests.helpers.paths import llama_cpp_templates_dir, required_path

pytestmark = pytest.mark.integration

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "required": ["city"],
                   "properties": {"city": {"type": "string", "description": "the city"}}}}}]
# The conversations as the gateway receives them (Ollama's wire shape; oai_message makes the runner's).
CONVERSATIONS: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = {
    "user": ([{"role": "user", "content": "Hello"}], None),
    "system-multi-turn": ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"},
                           {"role": "assistant", "content": "Hi there"}, {"role": "user", "content": "How are you?"}],
                          None),
    "tools": ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}], TOOLS),
    "tool-call-and-result": ([{"role": "user", "content": "Weather in Paris?"},
                              {"role": "assistant", "content": "",
                               "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                              {"role": "tool", "content": "sunny", "tool_name": "get_weather"}], TOOLS),
    # an earlier answer's reasoning goes back as the client got it (reasoning_content to the runner)
    "thinking-history": ([{"role": "user", "content": "Hello"},
                          {"role": "assistant", "content": "Hi there", "thinking": "A greeting."},
                          {"role": "user", "content": "How are you?"}], None),
    "thinking-tool-call": ([{"role": "user", "content": "Weather in Paris?"},
                            {"role": "assistant", "content": "", "thinking": "Use the tool.",
                             "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                            {"role": "tool", "content": "sunny", "tool_name": "get_weather"}], TOOLS),
}
# Where the two engines part (the runner renders these; the reasons were read from the diffs).
KNOWN_DIFFERENT: dict[str, dict[str, str]] = {
    "Kimi-K2-Instruct": {c: "the template appends to a list (our sandbox is immutable)"
                         for c in ("tool-call-and-result", "thinking-tool-call")},
    "Kimi-K2-Thinking": {c: "the template appends to a list (our sandbox is immutable)"
                         for c in ("tool-call-and-result", "thinking-tool-call")},
    "fireworks-ai-llama-3-firefunction-v2": {c: "reads an undefined `functions` (jinja2 raises, llama.cpp renders "
                                                "nothing)" for c in CONVERSATIONS},
    "google-gemma-4-31B-it": {c: "llama-server's Gemma 4 handler formats the tool turns"
                              for c in ("tool-call-and-result", "thinking-tool-call")},
    "google-gemma-4-31B-it-interleaved": {c: "llama-server's Gemma 4 handler formats the turns"
                                          for c in ("tool-call-and-result", "thinking-tool-call")},
    "llama-cpp-deepseek-r1": {c: "llama-server's DeepSeek R1 handler"
                              for c in ("tools", "tool-call-and-result", "thinking-tool-call")},
    "meetkai-functionary-medium-v3.1": {c: "llama-server's Functionary handler"
                                        for c in ("tools", "tool-call-and-result", "thinking-tool-call")},
    "mistralai-Ministral-3-14B-Reasoning-2512": {c: "llama-server's Ministral 3 handler makes the reasoning a typed "
                                                    "content part" for c in ("thinking-history", "thinking-tool-call")},
    "unsloth-mistral-Devstral-Small-2507": {"thinking-history": "llama-server drops the answer's content when it has "
                                                                "reasoning (its Mistral handler)"},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def llama_server(model: Path, template_file: Path | None = None) -> Iterator[str]:
    runner = required_path("OLLAMA_PY_TEST_RUNNER")
    port = _free_port()
    argv = [str(runner), "--model", str(model), "--host", "127.0.0.1", "--port", str(port), "-c", "512", "-np", "1",
            "--no-webui", "--offline", "-ngl", "0", "--device", "none"]
    if template_file is not None:
        argv += ["--chat-template-file", str(template_file)]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert proc.poll() is None, f"llama-server exited: {proc.stderr.read().decode()[-2000:]}"  # type: ignore[union-attr]
            with contextlib.suppress(requests.RequestException):
                if requests.get(url + "/health", timeout=1).status_code == 200:
                    break
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _compare(url: str, kv: dict[str, Any], source: str | None) -> dict[str, str]:
    """conversation -> "same" when one of our renders is the runner's prompt, else what differed."""
    out = {}
    for name, (messages, tools) in CONVERSATIONS.items():
        body = [oai_message(m) for m in messages]  # type: ignore[arg-type]
        request: dict[str, Any] = {"messages": body, **({"tools": tools} if tools else {})}
        r = requests.post(url + "/apply-template", json=request, timeout=30)
        chat = chat_template_from_kv(kv, bool(tools), source)
        assert chat is not None
        renders = [prompt for _, prompt in _candidates(chat, body, tools, {})]  # type: ignore[arg-type]
        if r.status_code != 200:  # the runner refuses (its error goes to the client): so must we
            out[name] = "same" if not renders else f"runner refuses ({r.text[:200]}); ours renders"
            continue
        want = r.json()["prompt"]
        out[name] = "same" if want in renders else f"runner: {want[-200:]!r}; ours: {[p[-200:] for p in renders]}"
    return out


def test_every_llama_cpp_template_renders_here_as_the_runner_renders_it():
    model = required_path("OLLAMA_PY_TEST_MODEL")
    kv = read_gguf_info(model).kv
    failures = []
    templates = sorted(llama_cpp_templates_dir().glob("*.jinja"))
    assert len(templates) > 50
    for path in templates:
        with llama_server(model, path) as url:
            result = _compare(url, kv, path.read_text())
        known = KNOWN_DIFFERENT.get(path.stem, {})
        for conversation, outcome in result.items():
            if (outcome == "same") == (conversation in known):  # a new difference, or a listed one gone
                failures.append(f"{path.stem} / {conversation}: {outcome if outcome != 'same' else 'now the same'}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("var", ["OLLAMA_PY_TEST_MODEL", "OLLAMA_PY_TEST_GEMMA"])
def test_the_gguf_templates_of_the_test_models_render_here_as_the_runner_renders_them(var):
    model = required_path(var)
    with llama_server(model) as url:
        result = _compare(url, read_gguf_info(model).kv, None)
    assert result == dict.fromkeys(CONVERSATIONS, "same")
