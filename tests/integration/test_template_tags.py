"""What the answer parsers take from llama.cpp's copies of real chat templates (its models/templates, kept with the
source the test runner was built from): the tool-call tag of each family, Gemma 4's format and thinking, Mistral's
[THINK] thinking. The unit tests use short templates of the same shape; these say the real ones are read so."""

from __future__ import annotations

import pytest

from ollama_py.template.gemma4 import gemma4_thinks, is_gemma4
from ollama_py.template.jinja_chat import template_thinks
from ollama_py.template.thinking import MISTRAL_TAGS, chat_template_tags
from ollama_py.template.tool_calls import DEEPSEEK_TAG, LFM2_TAG, MISTRAL_TAG, gguf_tool_tag
from tests.helpers.paths import llama_cpp_templates_dir

pytestmark = pytest.mark.integration


def template(name: str) -> str:
    return (llama_cpp_templates_dir() / name).read_text()


@pytest.mark.parametrize(("name", "tag"), [
    ("LFM2.5-8B-A1B.jinja", LFM2_TAG),
    ("ibm-granite-granite-3.3-2B-Instruct.jinja", "<|tool_call|>"),
    ("NVIDIA-Nemotron-Nano-v2.jinja", "<TOOLCALL>"),
    ("Apriel-1.6-15b-Thinker-fixed.jinja", "<tool_calls>"),
    ("unsloth-Apriel-1.5.jinja", "<tool_calls>"),
    ("deepseek-ai-DeepSeek-V3.1.jinja", DEEPSEEK_TAG),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", DEEPSEEK_TAG),
    ("mistralai-Ministral-3-14B-Reasoning-2512.jinja", MISTRAL_TAG),
    ("unsloth-mistral-Devstral-Small-2507.jinja", MISTRAL_TAG),
    ("Qwen-Qwen3-0.6B.jinja", "<tool_call>"),
    ("ibm-granite-granite-4.0.jinja", "<tool_call>"),
    ("GLM-4.7-Flash.jinja", "<tool_call>"),
])
def test_the_tool_call_tag_of_a_real_template(name: str, tag: str) -> None:
    assert gguf_tool_tag(template(name)) == tag


def test_gemma_4s_format_and_thinking() -> None:
    for name in ("google-gemma-4-31B-it.jinja", "google-gemma-4-31B-it-interleaved.jinja"):
        assert is_gemma4(template(name)) and gemma4_thinks(template(name))
    assert not is_gemma4(template("google-gemma-2-2b-it.jinja"))


def test_mistrals_think_tags() -> None:
    source = template("mistralai-Ministral-3-14B-Reasoning-2512.jinja")
    assert template_thinks(source) and chat_template_tags(source) == MISTRAL_TAGS
    assert chat_template_tags(template("Qwen-Qwen3-0.6B.jinja")) == ("<think>", "</think>")
