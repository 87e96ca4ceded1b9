"""A GGUF chat template that thinks, on the real runner: `think: false` reaches llama-server's template as
enable_thinking false (chat_template_kwargs), and the in-process render agrees with it, request after request."""

from __future__ import annotations

import gguf
import pytest

from tests.fakes.gguf_files import rewrite_gguf
from tests.helpers.paths import required_path
from tests.helpers.serve import create_from_file

pytestmark = pytest.mark.integration

THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}")
ASK = [{"role": "user", "content": "2+2?"}]
OPEN = "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n"


def test_think_false_renders_with_thinking_off_in_the_runner_and_here(live_server, tmp_path) -> None:
    thinker = rewrite_gguf(required_path("OLLAMA_PY_TEST_MODEL"), tmp_path / "thinker.gguf",
                           drop=("tokenizer.chat_template",),
                           add={"tokenizer.chat_template": (THINKING_TEMPLATE, gguf.GGUFValueType.STRING)})
    create_from_file(live_server.url, "thinker", thinker)
    show = live_server.api("POST", "/api/show", json={"model": "thinker"}).json()
    assert "thinking" in show["capabilities"]
    try:
        for _ in range(3):  # the first render is the runner's; the next ones are made here, as it was found to
            for think, prompt in ((False, OPEN + "<think>\n\n</think>\n\n"), (True, OPEN)):  # make them
                r = live_server.api("POST", "/api/chat", json={"model": "thinker", "messages": ASK, "think": think,
                                                               "_debug_render_only": True})
                assert r.status_code == 200, r.text
                assert r.json()["_debug_info"]["rendered_template"] == prompt
        r = live_server.api("POST", "/api/chat", json={"model": "thinker", "messages": ASK, "think": False,
                                                       "stream": False, "options": {"num_predict": 4}})
        assert r.status_code == 200 and r.json()["done"] is True
    finally:
        live_server.unload("thinker")  # the shared server's later tests count its runners
