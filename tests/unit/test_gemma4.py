"""Gemma 4's answers (template/gemma4.py): thinking on `<|channel>thought ... <channel|>`, tool calls as
`<|tool_call>call:NAME{key:<|"|>text<|"|>,n:1}<tool_call|>`, its markers control tokens the runner prints only
when named; which models answer so, and what the routes make of it over the fake runner. Before, a Gemma 4 model's
calls and thoughts came back as content, without their markers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ollama_py.template.gemma4 import MARKERS, Gemma4Parser, arguments_of, gemma4_thinks, is_gemma4
from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model

Q = '<|"|>'
TOOLS = [{"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": {}}}}
         for name in ("get_weather", "search", "plan", "bash")]


def parse(text: str, *, thinking: bool = True, cuts: tuple[int, ...] = ()) -> tuple[str, str, list[Any]]:
    parser = Gemma4Parser(TOOLS, thinking=thinking)
    thought, content, calls = "", "", []
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(text)), len(text)]
    for start, end in zip(bounds, bounds[1:], strict=False):
        t, c, k = parser.add(text[start:end])
        thought, content, calls = thought + t, content + c, calls + k
    t, c, k = parser.finish()
    return thought + t, content + c, [(x["function"]["index"], x["function"]["name"], x["function"]["arguments"])
                                      for x in calls + k]


CASES = [
    ("Hello!", "", "Hello!", []),
    ("<|channel>thought\nThe user greets.\n<channel|>\n\nHello!", "The user greets.", "Hello!", []),
    ("<|channel>thought\nFirst.<channel|>Between.<|channel>thought\nSecond.<channel|>Done.", "First.Second.",
     "Between.Done.", []),
    (f"<|tool_call>call:get_weather{{city:{Q}Paris{Q},days:3,metric:true,note:null}}<tool_call|>", "", "",
     [(0, "get_weather", {"city": "Paris", "days": 3, "metric": True, "note": None})]),
    (f"<|channel>thought\nUse the tool.<channel|><|tool_call>call:get_weather{{city:{Q}Paris{Q}}}<tool_call|>"
     "<|tool_response>", "Use the tool.", "", [(0, "get_weather", {"city": "Paris"})]),
    (f"Checking. <|tool_call>call:search{{query:{Q}a{Q}}}<tool_call|><tool_call|>"
     f"<|tool_call>call:bash{{command:{Q}date\n{Q}}}<tool_call|>", "", "Checking.",
     [(0, "search", {"query": "a"}), (1, "bash", {"command": "date\n"})]),
    # a string's text is its own: quotes, backslashes, structure characters
    (f'<|tool_call>call:search{{query:{Q}say "hi", then \\"bye\\" {{a:[b]}} C:\\users{Q}}}<tool_call|>', "", "",
     [(0, "search", {"query": 'say "hi", then \\"bye\\" {a:[b]} C:\\users'})]),
    # nested objects and lists, JSON's own strings beside Gemma's
    (f'<|tool_call>call:plan{{steps:[{{title:{Q}one{Q},done:false}},{{ title:"two \\"2\\"", done:true}}],'
     f'tags:[{Q}x{Q},"y"]}}<tool_call|>', "", "",
     [(0, "plan", {"steps": [{"title": "one", "done": False}, {"title": 'two "2"', "done": True}],
                   "tags": ["x", "y"]})]),
    # the answer ends inside a call: read as far as it goes
    (f"<|tool_call>call:search{{query:{Q}cut sho", "", "", [(0, "search", {"query": "cut sho"})]),
    # not calls: an undeclared function, arguments that do not read, no `call:`: the text as written
    ("<|tool_call>call:delete_all{}<tool_call|> then", "", "<|tool_call>call:delete_all{}<tool_call|> then", []),
    ("<|tool_call>call:search{query:[1,}<tool_call|>", "", "<|tool_call>call:search{query:[1,}<tool_call|>", []),
    ("<|tool_call>search(query=1)<tool_call|>", "", "<|tool_call>search(query=1)<tool_call|>", []),
]


@pytest.mark.parametrize(("text", "thought", "content", "calls"), CASES)
def test_an_answer_comes_apart(text: str, thought: str, content: str, calls: list[Any]) -> None:
    assert parse(text) == (thought, content, calls)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(CASES), st.lists(st.integers(min_value=1, max_value=200), max_size=12))
def test_any_split_gives_the_same_answer(case: tuple[str, str, str, list[Any]], cuts: list[int]) -> None:
    text, thought, content, calls = case
    got_thought, got_content, got_calls = parse(text, cuts=tuple(cuts))
    # content streamed before a tag may keep its trailing whitespace (it went out before the tag came)
    assert (got_thought, got_content.rstrip(), got_calls) == (thought, content.rstrip(), calls)


def test_thoughts_not_asked_for_are_dropped() -> None:
    assert parse("<|channel>thought\nHmm.<channel|>Hello!", thinking=False) == ("", "Hello!", [])


def test_arguments_cut_short_are_closed_and_junk_is_none() -> None:
    assert arguments_of(f"{{a:{Q}x{Q},b:{Q}y") == {"a": "x", "b": "y"}
    assert arguments_of(f"{{a:{Q}x{Q}") == {"a": "x"}
    assert arguments_of("[1, 2]") is None and arguments_of("{a:}") is None and arguments_of("") is None


# Gemma 4's template in brief (llama.cpp's copy of the real one is checked in tests/integration/test_template_tags.py):
# its system turn says <|think|> when told enable_thinking, else the answer's channel is closed empty in the prompt
TEMPLATE = ("{{ bos_token }}{% if enable_thinking or tools %}<|turn>system\n{% if enable_thinking %}<|think|>\n"
            "{% endif %}{% for t in tools or [] %}<|tool>{{ t.function.name }}<tool|>{% endfor %}<turn|>\n{% endif %}"
            "{% for m in messages %}<|turn>{{ m.role }}\n{% for c in m.tool_calls or [] %}<|tool_call>call:"
            "{{ c.function.name }}{}<tool_call|>{% endfor %}{{ m.content }}<turn|>\n{% endfor %}<|turn>model\n"
            "{% if not enable_thinking %}<|channel>thought\n<channel|>{% endif %}")


def test_which_models_answer_so() -> None:
    assert is_gemma4(TEMPLATE) and gemma4_thinks(TEMPLATE)
    assert is_gemma4(None, "gemma4") and gemma4_thinks(None, "gemma4")
    assert is_gemma4(None, "gemma4-no-thinking") and not gemma4_thinks(TEMPLATE, "gemma4-no-thinking")
    assert not is_gemma4("<start_of_turn>{{ m.content }}<end_of_turn>") and not is_gemma4(None, "qwen3")


# -- the routes, over the fake runner -------------------------------------------------------------------------

WEATHER = [{"type": "function", "function": {"name": "get_weather", "description": "the weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}}}}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]
SEP = "\u00a7"
ANSWER = SEP.join(["<|channel>", "thought\nUse the tool.", "<channel|>", "<|tool_call>", "call:get_weather{city:", Q,
                   "Paris", Q, ",days:2}", "<tool_call|>"])


@pytest.fixture
def gemma4_app(fake_app, tmp_path: Path):
    def build(reply: str = ANSWER) -> tuple[Any, Path]:
        log = tmp_path / "runner.jsonl"
        settings_, app = fake_app({"FAKE_REPLY": reply, "FAKE_REPLY_SPLIT": SEP,
                                   "FAKE_CONTROL_TOKENS": json.dumps(list(MARKERS)), "FAKE_LOG_FILE": str(log)})
        create_tiny_model(settings_, write_tiny_gguf(tmp_path / "gemma4.gguf", chat_template=TEMPLATE),
                          name="gemma4:tiny")
        return app, log
    return build


def _bodies(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


async def test_show_says_tools_and_thinking(gemma4_app, aiohttp_client) -> None:
    app, _ = gemma4_app()
    client = await aiohttp_client(app)
    show = await (await client.post("/api/show", json={"model": "gemma4:tiny"})).json()
    assert {"tools", "thinking"} <= set(show["capabilities"])


async def test_native_chat_gives_thinking_and_a_call(gemma4_app, aiohttp_client) -> None:
    app, log = gemma4_app()
    client = await aiohttp_client(app)
    r = await client.post("/api/chat", json={"model": "gemma4:tiny", "messages": ASK, "tools": WEATHER,
                                             "think": True, "stream": False})
    message = (await r.json())["message"]
    assert r.status == 200, message
    assert message["thinking"] == "Use the tool." and message["content"] == ""
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]] == [
        ("get_weather", {"city": "Paris", "days": 2})]
    completion = [b for b in _bodies(log) if "n_predict" in b][-1]
    assert set(MARKERS) <= set(completion["preserved_tokens"])
    render = [b for b in _bodies(log) if "messages" in b][-1]
    assert render["chat_template_kwargs"]["enable_thinking"] is True  # the template was told to think


async def test_it_thinks_unless_told_not_to_as_ollama_has_it(gemma4_app, aiohttp_client) -> None:
    app, log = gemma4_app(SEP.join(["<|channel>", "thought\nHmm.", "<channel|>", "Hello!"]))
    client = await aiohttp_client(app)
    r = await client.post("/api/chat", json={"model": "gemma4:tiny", "messages": ASK, "stream": False})
    message = (await r.json())["message"]
    assert (message["content"], message["thinking"]) == ("Hello!", "Hmm.")
    assert [b for b in _bodies(log) if "messages" in b][-1]["chat_template_kwargs"]["enable_thinking"] is True


async def test_think_false_tells_the_template_and_drops_stray_thoughts(gemma4_app, aiohttp_client) -> None:
    app, log = gemma4_app(SEP.join(["<|channel>", "thought\nHmm.", "<channel|>", "Hello!"]))
    client = await aiohttp_client(app)
    r = await client.post("/api/chat", json={"model": "gemma4:tiny", "messages": ASK, "stream": False,
                                             "think": False})
    message = (await r.json())["message"]
    assert (message["content"], message.get("thinking", "")) == ("Hello!", "")
    assert [b for b in _bodies(log) if "messages" in b][-1]["chat_template_kwargs"]["enable_thinking"] is False


async def test_openai_streams_the_call(gemma4_app, aiohttp_client) -> None:
    app, _ = gemma4_app()
    client = await aiohttp_client(app)
    r = await client.post("/v1/chat/completions", json={"model": "gemma4:tiny", "messages": ASK, "tools": WEATHER,
                                                        "stream": True, "reasoning_effort": "high"})
    chunks = [json.loads(line[6:]) for line in (await r.text()).splitlines()
              if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning", "") or d.get("reasoning_content", "") or "" for d in deltas) == "Use the tool."
    calls = [tc for d in deltas for tc in d.get("tool_calls") or []]
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("get_weather", {"city": "Paris", "days": 2})]
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
