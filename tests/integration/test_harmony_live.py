"""gpt-oss's own chat template (llama.cpp's models/templates copy of it) on the real runner, in a model that says
`PARSER harmony`: a think level reaches the template as its reasoning_effort, in the runner's render and in the
in-process one that follows it, and an answer that is not in harmony's format (SmolLM2 knows nothing of it) comes
back whole as content."""

from __future__ import annotations

import gguf
import pytest

from tests.fakes.gguf_files import rewrite_gguf
from tests.helpers.paths import llama_cpp_templates_dir, required_path
from tests.helpers.serve import create_from_file

pytestmark = pytest.mark.integration

ASK = [{"role": "user", "content": "Say hello."}]
WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                              "parameters": {"type": "object", "required": ["city"],
                                                             "properties": {"city": {"type": "string"}}}}}]


def test_gpt_oss_template_reasoning_levels_and_a_plain_answer(live_server, tmp_path) -> None:
    template = (llama_cpp_templates_dir() / "openai-gpt-oss-120b.jinja").read_text()
    model = rewrite_gguf(required_path("OLLAMA_PY_TEST_MODEL"), tmp_path / "harmony.gguf",
                         drop=("tokenizer.chat_template",),
                         add={"tokenizer.chat_template": (template, gguf.GGUFValueType.STRING)})
    create_from_file(live_server.url, "harmony", model, parser="harmony")
    show = live_server.api("POST", "/api/show", json={"model": "harmony"}).json()
    assert {"tools", "thinking"} <= set(show["capabilities"])
    try:
        for _ in range(3):  # the first render of each is the runner's; the next ones are made here, as it made them
            for think, level in (("low", "low"), ("max", "high"), (True, "medium")):
                r = live_server.api("POST", "/api/chat", json={"model": "harmony", "messages": ASK, "think": think,
                                                               "_debug_render_only": True})
                assert r.status_code == 200, r.text
                prompt = r.json()["_debug_info"]["rendered_template"]
                assert f"Reasoning: {level}\n" in prompt, prompt
                assert prompt.endswith("<|start|>user<|message|>Say hello.<|end|><|start|>assistant")
        # and the in-process render was found to agree with the runner's (else serve warns and the runner renders)
        log = live_server.log_path.read_text().splitlines()
        assert not [line for line in log if "renders differently" in line and "harmony" in line]
        # an agent's turn sends the call back with the reasoning it came with: the template renders it before the
        # call (harmony keeps a tool-calling turn's analysis), here as in the runner
        turn = [{"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "thinking": "Use the weather tool.",
                 "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
                {"role": "tool", "content": "sunny", "tool_name": "get_weather"}]
        # (the same turn without reasoning first: what is found of how the runner renders one does not decide
        # how the other is rendered)
        bare = [turn[0], {**turn[1], "thinking": ""}, turn[2]]
        for _ in range(2):
            r = live_server.api("POST", "/api/chat", json={"model": "harmony", "messages": bare, "tools": WEATHER,
                                                           "_debug_render_only": True})
            assert "<|channel|>analysis" not in r.json()["_debug_info"]["rendered_template"]
        for _ in range(2):
            r = live_server.api("POST", "/api/chat", json={"model": "harmony", "messages": turn, "tools": WEATHER,
                                                           "_debug_render_only": True})
            assert r.status_code == 200, r.text
            prompt = r.json()["_debug_info"]["rendered_template"]
            assert "<|channel|>analysis<|message|>Use the weather tool.<|end|>" in prompt, prompt
            assert 'to=functions.get_weather<|channel|>commentary json<|message|>{"city": "Paris"}<|call|>' in prompt
        r = live_server.api("POST", "/api/chat", json={"model": "harmony", "messages": ASK, "stream": False,
                                                       "options": {"num_predict": 8, "temperature": 0}})
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["done"] is True and body["eval_count"] >= 1
        assert body["message"]["content"].strip()  # SmolLM2's words, not lost as a header that never ended
        assert not body["message"].get("thinking")
    finally:
        live_server.unload("harmony")
