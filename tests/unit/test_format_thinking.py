"""A format (structured output) asked of a thinking model: it thinks first, unconstrained, and its answer is asked
for again under the format once the thinking is over, the prompt going on with the thoughts as written (Ollama's
structured outputs of a thinking model). Before, the format's grammar held from the first token: it forbade the
thinking tags, so no thoughts came back, and the model answered without them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model

TEMPLATE = ('{{- range .Messages }}<|im_start|>{{ .Role }}\n'
            '{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}{{ .Content }}<|im_end|>\n{{ end }}'
            '<|im_start|>assistant\n{{ if and .IsThinkSet (not .Think) }}<think>\n\n</think>\n\n{{ end }}')
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
ASK = [{"role": "user", "content": "Where is the Eiffel Tower? JSON."}]
SEP = "§"
JSON_ANSWER = SEP.join(['{"city":', ' "Paris"}'])


def _app(fake_app, tmp_path: Path, reply: str, when: list[list[str]], **model: Any) -> tuple[Any, Path]:
    log = tmp_path / "runner.jsonl"
    settings, app = fake_app({"FAKE_REPLY": reply, "FAKE_REPLY_SPLIT": SEP, "FAKE_REPLY_WHEN": json.dumps(when),
                              "FAKE_LOG_FILE": str(log)})
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "m.gguf"), name="thinker",
                      **({"template": TEMPLATE} | model))
    return app, log


def _completions(log: Path) -> list[dict[str, Any]]:
    return [b for b in map(json.loads, log.read_text().splitlines()) if "n_predict" in b]


@pytest.mark.parametrize("stream", [False, True])
async def test_it_thinks_then_answers_under_the_format(fake_app, aiohttp_client, tmp_path, stream) -> None:
    reply = SEP.join(["<think>", " The tower is in", " Paris.", " </think>", " It is in", " Paris."])
    app, log = _app(fake_app, tmp_path, reply, [["Paris. </think>", JSON_ANSWER]])
    client = await aiohttp_client(app)
    r = await client.post("/api/chat", json={"model": "thinker", "messages": ASK, "format": SCHEMA, "think": True,
                                             "stream": stream})
    assert r.status == 200
    if stream:
        lines = [json.loads(x) for x in (await r.text()).splitlines()]
        thinking = "".join(x["message"].get("thinking", "") for x in lines)
        content = "".join(x["message"]["content"] for x in lines)
        final = lines[-1]
    else:
        final = await r.json()
        thinking, content = final["message"]["thinking"], final["message"]["content"]
    assert thinking == "The tower is in Paris."
    assert json.loads(content) == {"city": "Paris"}  # the unconstrained "It is in Paris." is not shown
    first, second = _completions(log)
    assert "json_schema" not in first
    assert second["json_schema"] == SCHEMA
    assert second["prompt"] == first["prompt"] + "<think> The tower is in Paris. </think>"
    assert final["eval_count"] > 3  # both requests' tokens


async def test_an_answer_without_thoughts_is_asked_for_again_under_the_format(fake_app, aiohttp_client,
                                                                              tmp_path) -> None:
    app, log = _app(fake_app, tmp_path, SEP.join(["It is", " in Paris."]), [["NEVER", ""]])
    client = await aiohttp_client(app)
    r = await client.post("/api/chat", json={"model": "thinker", "messages": ASK, "format": "json", "think": True,
                                             "stream": False})
    body = await r.json()
    first, second = _completions(log)
    assert second["prompt"] == first["prompt"] and second["json_schema"] == {"type": "object"}
    assert "json_schema" not in first
    assert body["message"]["content"] == "It is in Paris."  # the fake ignores the grammar: what it said again


async def test_think_false_or_a_model_that_cannot_think_is_constrained_at_once(fake_app, aiohttp_client,
                                                                               tmp_path) -> None:
    app, log = _app(fake_app, tmp_path, JSON_ANSWER, [])
    client = await aiohttp_client(app)
    r = await client.post("/api/chat", json={"model": "thinker", "messages": ASK, "format": SCHEMA, "think": False,
                                             "stream": False})
    assert json.loads((await r.json())["message"]["content"]) == {"city": "Paris"}
    (only,) = _completions(log)
    assert only["json_schema"] == SCHEMA


async def test_harmony_goes_on_in_its_final_channel(fake_app, aiohttp_client, tmp_path) -> None:
    """gpt-oss: the prompt goes on with the analysis and the final channel's header, as Ollama continues it."""
    harmony = ("{% for m in messages %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endfor %}"
               "<|start|>assistant")
    control = ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>"]
    reply = SEP.join(["<|channel|>", "analysis", "<|message|>", "Paris, clearly.", "<|end|>", "<|start|>",
                      "assistant", "<|channel|>", "final", "<|message|>", "Paris"])
    log = tmp_path / "runner.jsonl"
    settings, app = fake_app({"FAKE_REPLY": reply, "FAKE_REPLY_SPLIT": SEP, "FAKE_CONTROL_TOKENS": json.dumps(control),
                              "FAKE_REPLY_WHEN": json.dumps([["final<|message|>", JSON_ANSWER]]),
                              "FAKE_LOG_FILE": str(log)})
    create_tiny_model(settings, write_tiny_gguf(tmp_path / "gpt-oss.gguf", arch="gpt-oss", chat_template=harmony),
                      name="gpt-oss:tiny")
    client = await aiohttp_client(app)
    r = await client.post("/api/chat", json={"model": "gpt-oss:tiny", "messages": ASK, "format": SCHEMA,
                                             "stream": False})
    message = (await r.json())["message"]
    assert message["thinking"] == "Paris, clearly."
    assert json.loads(message["content"]) == {"city": "Paris"}
    first, second = _completions(log)
    assert second["prompt"].endswith(
        "<|channel|>analysis<|message|>Paris, clearly.<|end|><|start|>assistant<|channel|>final<|message|>")
