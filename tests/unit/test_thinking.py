"""Thinking models: the output split into thinking and content as Ollama splits it, over any chunking, and
the fields the native and OpenAI APIs return for it (fake runner; no thinking model fits in the test budget)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ollama_py.template.thinking import ThinkingParser, infer_tags, partial_suffix, think_budget, uses_thinking
from tests.helpers.app import create_tiny_model, fake_scheduler, make_settings


def split_all(text: str, cuts: list[int], **kw) -> tuple[str, str]:
    parser = ThinkingParser(**kw)
    points = sorted({c % (len(text) + 1) for c in cuts} | {0, len(text)})
    thinking, content = "", ""
    for a, b in zip(points, points[1:]):
        t, c = parser.add(text[a:b])
        thinking, content = thinking + t, content + c
    t, c = parser.finish()
    return thinking + t, content + c


@pytest.mark.parametrize("text,inside,expected", [
    ("<think>plan</think>answer", False, ("plan", "answer")),
    ("  \n<think>\n  plan it \n</think>\n\n  answer", False, ("plan it", "answer")),
    ("answer <think>not thinking</think>", False, ("", "answer <think>not thinking</think>")),
    ("plan</think>answer", True, ("plan", "answer")),  # the prompt opened the block
    ("<think>still going", False, ("still going", "")),  # cut off by num_predict
    ("<thi", False, ("", "<thi")),
    ("<think></think>", False, ("", "")),
    ("<think>a</think>b</think>c", False, ("a", "b</think>c")),  # only the first block is thinking
])
def test_split(text, inside, expected):
    assert split_all(text, [], inside=inside) == expected


@given(thought=st.text(st.sampled_from("ab <>/\n"), max_size=20),
       answer=st.text(st.sampled_from("xy <>\n"), max_size=20), cuts=st.lists(st.integers(0, 200), max_size=10))
def test_any_chunking_gives_what_one_chunk_gives(thought, answer, cuts):
    text = f"<think>{thought}</think>{answer}"
    assert split_all(text, cuts) == split_all(text, [])


def test_tags_come_from_the_template():
    assert infer_tags("{{ if .Thinking }}<reasoning>{{ .Thinking }}</reasoning>{{ end }}") == (
        "<reasoning>", "</reasoning>")
    assert infer_tags("{{ .Prompt }}") == ("<think>", "</think>")
    assert uses_thinking("{{ .Thinking }}") and not uses_thinking("{{ .Prompt }}")


# A qwen3-style template: past thoughts are shown, and think=false closes an empty block for the model.
TEMPLATE = ('{{- range .Messages }}<|im_start|>{{ .Role }}\n'
            '{{ if .Thinking }}<think>{{ .Thinking }}</think>{{ end }}{{ .Content }}<|im_end|>\n{{ end }}'
            '<|im_start|>assistant\n{{ if and .IsThinkSet (not .Think) }}<think>\n\n</think>\n\n{{ end }}')
REPLY = "<think> Let me think. </think> Hello there."


@pytest.fixture
async def client(tmp_path: Path, tiny_gguf: Path, aiohttp_client):
    from ollama_py.server.app import create_app

    settings = make_settings(tmp_path)
    create_tiny_model(settings, tiny_gguf, "thinker", template=TEMPLATE)
    create_tiny_model(settings, tiny_gguf, "plain")
    log = tmp_path / "requests.jsonl"
    app = create_app(settings, scheduler=fake_scheduler(settings, {"FAKE_REPLY": REPLY, "FAKE_LOG_FILE": str(log)}))
    c = await aiohttp_client(app)
    c.prompts = lambda: [p for line in log.read_text().splitlines() if (p := json.loads(line).get("prompt"))]  # type: ignore
    c.bodies = lambda: [b for line in log.read_text().splitlines() if "prompt" in (b := json.loads(line))]  # type: ignore
    return c


async def test_show_lists_the_thinking_capability(client):
    caps = (await (await client.post("/api/show", json={"model": "thinker"})).json())["capabilities"]
    assert "thinking" in caps
    assert "thinking" not in (await (await client.post("/api/show", json={"model": "plain"})).json())["capabilities"]


async def test_generate_streams_thinking_then_response(client):
    r = await client.post("/api/generate", json={"model": "thinker", "prompt": "hi"})
    lines = [json.loads(x) for x in (await r.text()).splitlines()]
    assert "".join(x.get("thinking", "") for x in lines) == "Let me think."
    assert "".join(x["response"] for x in lines) == "Hello there."
    assert lines[-1]["done"] is True
    first_thought = next(i for i, x in enumerate(lines) if x.get("thinking"))
    first_word = next(i for i, x in enumerate(lines) if x["response"])
    assert first_thought < first_word


async def test_generate_non_stream_and_think_false(client):
    body = await (await client.post("/api/generate", json={"model": "thinker", "prompt": "hi", "stream": False})).json()
    assert (body["thinking"], body["response"]) == ("Let me think.", "Hello there.")
    off = await (await client.post("/api/generate", json={"model": "thinker", "prompt": "hi", "stream": False,
                                                          "think": False})).json()
    assert "thinking" not in off and off["response"] == REPLY  # not split: the model was told not to think
    assert client.prompts()[-1].endswith("<think>\n\n</think>\n\n")


async def test_chat_returns_thinking_and_renders_past_thoughts(client):
    body = await (await client.post("/api/chat", json={"model": "thinker", "stream": False, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello.", "thinking": "greet back"},
        {"role": "user", "content": "again"}]})).json()
    assert body["message"] == {"role": "assistant", "content": "Hello there.", "thinking": "Let me think."}
    assert "<think>greet back</think>Hello." in client.prompts()[-1]


async def test_openai_reasoning(client):
    body = await (await client.post("/v1/chat/completions", json={
        "model": "thinker", "messages": [{"role": "user", "content": "hi"}]})).json()
    message = body["choices"][0]["message"]
    assert (message["reasoning"], message["content"]) == ("Let me think.", "Hello there.")
    r = await client.post("/v1/chat/completions", json={
        "model": "thinker", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
    deltas = [json.loads(line[6:])["choices"][0]["delta"] for line in (await r.text()).splitlines()
              if line.startswith("data: {")]
    assert "".join(d.get("reasoning", "") for d in deltas) == "Let me think."
    assert "".join(d.get("content", "") for d in deltas) == "Hello there."
    none = await (await client.post("/v1/chat/completions", json={
        "model": "thinker", "reasoning_effort": "none", "messages": [{"role": "user", "content": "hi"}]})).json()
    assert "reasoning" not in none["choices"][0]["message"]
    bad = await client.post("/v1/chat/completions", json={
        "model": "thinker", "reasoning_effort": "extreme", "messages": [{"role": "user", "content": "hi"}]})
    assert bad.status == 400
    assert (await bad.json())["error"]["message"] == (
        'invalid reasoning value: "extreme" (must be "minimal", "low", "medium", "high", "xhigh", "ultra", "max", '
        'or "none")')
    # a model without thinking ignores reasoning_effort on this API (Ollama relaxes it), unlike think on /api
    plain = await client.post("/v1/chat/completions", json={
        "model": "plain", "reasoning_effort": "high", "messages": [{"role": "user", "content": "hi"}]})
    assert plain.status == 200


async def test_anthropic_thinking_blocks(client):
    ask = {"model": "thinker", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    body = await (await client.post("/v1/messages", json=ask)).json()
    assert body["content"] == [{"type": "thinking", "thinking": "Let me think.", "signature": ""},
                               {"type": "text", "text": "Hello there."}]
    r = await client.post("/v1/messages", json={**ask, "stream": True})
    events = [json.loads(line[6:]) for line in (await r.text()).splitlines() if line.startswith("data: ")]
    starts = [e["content_block"]["type"] for e in events if e["type"] == "content_block_start"]
    assert starts == ["thinking", "text"]
    deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
    assert "".join(d.get("thinking", "") for d in deltas) == "Let me think."
    assert "".join(d.get("text", "") for d in deltas) == "Hello there."
    off = await (await client.post("/v1/messages", json={**ask, "thinking": {"type": "disabled"}})).json()
    assert [b["type"] for b in off["content"]] == ["text"]


async def test_official_clients_see_the_thinking(client):
    import anthropic
    import ollama
    import openai

    url = str(client.make_url("")).rstrip("/")
    generated = await ollama.AsyncClient(host=url).generate(model="thinker", prompt="hi")
    assert (generated.thinking, generated.response) == ("Let me think.", "Hello there.")
    chunks = [c async for c in await ollama.AsyncClient(host=url).chat(
        model="thinker", messages=[{"role": "user", "content": "hi"}], stream=True)]
    assert "".join(c.message.thinking or "" for c in chunks) == "Let me think."

    oai = openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    done = await oai.chat.completions.create(model="thinker", messages=[{"role": "user", "content": "hi"}])
    assert done.choices[0].message.content == "Hello there."
    assert done.choices[0].message.model_extra["reasoning"] == "Let me think."

    ant = anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0)
    message = await ant.messages.create(model="thinker", max_tokens=64, messages=[{"role": "user", "content": "hi"}],
                                        thinking={"type": "enabled", "budget_tokens": 32})
    assert [b.type for b in message.content] == ["thinking", "text"]
    assert message.content[0].thinking == "Let me think." and message.content[1].text == "Hello there."


LEVELS = "{{ if .ThinkLevel }}Reasoning: {{ .ThinkLevel }}{{ end }}{{ .Thinking }}"


@pytest.mark.parametrize(("think", "option", "template", "expected"), [
    pytest.param(True, None, TEMPLATE, None, id="true-no-limit"),
    pytest.param(False, 100, TEMPLATE, None, id="not-thinking"),
    pytest.param(None, 100, TEMPLATE, None, id="unset"),
    pytest.param("low", None, TEMPLATE, 1024, id="low"),
    pytest.param("medium", None, TEMPLATE, 4096, id="medium"),
    pytest.param("high", None, TEMPLATE, 16384, id="high"),
    pytest.param("max", None, TEMPLATE, None, id="max-no-limit"),
    pytest.param(True, 256, TEMPLATE, 256, id="option"),
    pytest.param("high", 0, TEMPLATE, 0, id="option-wins-over-level"),
    pytest.param("low", -1, TEMPLATE, None, id="option-minus-one-lifts-it"),
    pytest.param("low", None, LEVELS, None, id="template-takes-the-level"),
    pytest.param("low", 300, LEVELS, 300, id="option-even-where-template-takes-levels"),
])
def test_think_budget(think, option, template, expected):
    assert think_budget(think, option, template) == expected


def budget_of(body: dict) -> tuple:
    return (body.get("reasoning_budget_tokens"), body.get("reasoning_budget_start_tag"),
            body.get("reasoning_budget_end_tags"), body.get("reasoning_budget_message"), body.get("generation_prompt"))


async def test_native_budget_reaches_the_runner(client):
    chat = {"model": "thinker", "stream": False, "messages": [{"role": "user", "content": "hi"}]}
    await client.post("/api/chat", json={**chat, "options": {"reasoning_budget": 7}})
    assert budget_of(client.bodies()[-1]) == (7, "<think>", ["</think>"], "", None)  # the model opens the block
    await client.post("/api/chat", json={**chat, "think": "low"})
    assert budget_of(client.bodies()[-1])[0] == 1024
    await client.post("/api/chat", json=chat)
    assert "reasoning_budget_tokens" not in client.bodies()[-1]  # thinking as asked: no limit
    await client.post("/api/generate", json={"model": "thinker", "prompt": "hi", "think": "medium", "stream": False})
    assert budget_of(client.bodies()[-1])[0] == 4096
    await client.post("/api/chat", json={**chat, "think": False, "options": {"reasoning_budget": 7}})
    assert "reasoning_budget_tokens" not in client.bodies()[-1]  # not thinking: nothing to limit
    bad = await client.post("/api/chat", json={**chat, "options": {"reasoning_budget": -2}})
    assert bad.status == 400 and "reasoning_budget" in (await bad.json())["error"]


async def test_openai_effort_and_anthropic_budget_tokens_reach_the_runner(client):
    await client.post("/v1/chat/completions", json={
        "model": "thinker", "reasoning_effort": "low", "messages": [{"role": "user", "content": "hi"}]})
    assert budget_of(client.bodies()[-1])[0] == 1024
    await client.post("/v1/chat/completions", json={  # Codex's model_reasoning_effort = "minimal": Ollama's low
        "model": "thinker", "reasoning_effort": "minimal", "messages": [{"role": "user", "content": "hi"}]})
    assert budget_of(client.bodies()[-1])[0] == 1024
    xhigh = await client.post("/v1/responses", json={"model": "thinker", "input": "hi",
                                                     "reasoning": {"effort": "xhigh"}})
    assert xhigh.status == 200 and "reasoning_budget_tokens" not in client.bodies()[-1]  # max: no limit
    ask = {"model": "thinker", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    await client.post("/v1/messages", json={**ask, "thinking": {"type": "enabled", "budget_tokens": 40}})
    assert budget_of(client.bodies()[-1]) == (40, "<think>", ["</think>"], "", None)
    bad = await client.post("/v1/messages", json={**ask, "thinking": {"type": "enabled", "budget_tokens": -1}})
    assert bad.status == 400
    assert (await bad.json())["error"]["message"] == "thinking.budget_tokens must be a non-negative integer"
    # Claude Code's every request: adaptive thinking at an effort -> that level's budget
    await client.post("/v1/messages", json={**ask, "thinking": {"type": "adaptive"},
                                            "output_config": {"effort": "high"}})
    assert budget_of(client.bodies()[-1])[0] == 16384


async def test_budget_counts_from_a_block_the_prompt_opened(tmp_path: Path, tiny_gguf: Path, aiohttp_client):
    from ollama_py.server.app import create_app

    settings = make_settings(tmp_path)
    opened = TEMPLATE.replace("{{ if and .IsThinkSet (not .Think) }}", "{{ if .Think }}<think>\n{{ else }}")
    create_tiny_model(settings, tiny_gguf, "opener", template=opened)
    log = tmp_path / "requests.jsonl"
    app = create_app(settings, scheduler=fake_scheduler(settings, {"FAKE_REPLY": "plan</think> answer",
                                                                   "FAKE_LOG_FILE": str(log)}))
    c = await aiohttp_client(app)
    body = await (await c.post("/api/chat", json={"model": "opener", "stream": False, "options": {
        "reasoning_budget": 3}, "messages": [{"role": "user", "content": "hi"}]})).json()
    assert body["message"]["thinking"] == "plan" and body["message"]["content"] == "answer"
    sent = json.loads(log.read_text().splitlines()[-1])
    assert sent["prompt"].endswith("<think>\n")
    assert budget_of(sent) == (3, "<think>", ["</think>"], "", "<think>")



@given(st.sampled_from(["<think>", "</think>", "[THINK]", "<tool_call>", "<|channel>", "<<", "x"]),
       st.text(alphabet="<>/|[]thinkTHINKcol_ab \n", max_size=16))
def test_partial_suffix_is_the_longest_end_of_a_text_that_begins_a_tag(tag, text):
    """What a streamed parser holds back, against its definition (the quick answer for a text without the tag's
    first character near its end must not change it)."""
    want = max((k for k in range(1, min(len(tag) - 1, len(text)) + 1) if text.endswith(tag[:k])), default=0)
    assert partial_suffix(text, tag) == want
