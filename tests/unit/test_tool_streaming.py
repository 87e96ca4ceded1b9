"""With `tools` in the request the answer still streams, on every route: text goes out token by token and only
what may be the start of a tool call waits (issue 23: 1, 3, 5). The real app and scheduler over the fake
llama-server (the `tools_server` fixture, tests/unit/conftest.py), scripted with FAKE_REPLY; read through the
official clients where they exist."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import ollama
import openai
import pytest

from tests.helpers.tool_calls import ANT_TOOLS, CALL, RESP_TOOLS, TOOLS, WORDS

ASK = [{"role": "user", "content": "Weather in Paris?"}]


async def native_chunks(url: str, model: str = "tiny", **kw: Any) -> list[Any]:
    client = ollama.AsyncClient(host=url)
    return [c async for c in await client.chat(model=model, messages=ASK, tools=TOOLS, stream=True, **kw)]


def oai_client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)


# -- a text answer with tools bound: one chunk per token on every route ------------------------------------------

async def test_native_chat_with_tools_streams_text_token_by_token(tools_server: Callable[..., Any]) -> None:
    chunks = await native_chunks(await tools_server())
    assert [c.message.content for c in chunks if not c.done] == WORDS
    assert chunks[-1].done and not chunks[-1].message.tool_calls


async def test_openai_chat_with_tools_streams_text_token_by_token(tools_server: Callable[..., Any]) -> None:
    stream = await oai_client(await tools_server()).chat.completions.create(model="tiny", messages=ASK, tools=TOOLS,
                                                                      stream=True)
    chunks = [c async for c in stream]
    assert [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content] == WORDS
    assert chunks[-1].choices[0].finish_reason == "stop"


async def test_anthropic_messages_with_tools_stream_text_token_by_token(tools_server: Callable[..., Any]) -> None:
    client = anthropic.AsyncAnthropic(base_url=await tools_server(), api_key="x", max_retries=0)
    async with client.messages.stream(model="tiny", max_tokens=64, messages=ASK, tools=ANT_TOOLS) as stream:
        deltas = [e.delta.text async for e in stream
                  if e.type == "content_block_delta" and e.delta.type == "text_delta"]
        message = await stream.get_final_message()
    assert deltas == WORDS
    assert [b.type for b in message.content] == ["text"] and message.stop_reason == "end_turn"


async def test_responses_with_tools_stream_text_token_by_token(tools_server: Callable[..., Any]) -> None:
    client = oai_client(await tools_server())
    async with client.responses.stream(model="tiny", input="Weather in Paris?", tools=RESP_TOOLS) as stream:
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        response = await stream.get_final_response()
    assert deltas == WORDS
    assert response.output_text == "".join(WORDS)


# -- text then a call; a call only; a prefix that turns out to be text ---------------------------------------------

async def test_text_then_a_call_streams_the_text_and_keeps_it(tools_server: Callable[..., Any]) -> None:
    url = await tools_server(FAKE_REPLY="Sure,| let me| check. |" + CALL, FAKE_REPLY_SPLIT="|")
    chunks = await native_chunks(url)
    assert [c.message.content for c in chunks if c.message.content] == ["Sure,", " let me", " check. "]
    [call_chunk] = [c for c in chunks if c.message.tool_calls]
    assert not call_chunk.done
    [call] = call_chunk.message.tool_calls
    assert (call.function.name, dict(call.function.arguments)) == ("get_weather", {"city": "Paris"})
    assert chunks[-1].done_reason == "stop"

    whole = await ollama.AsyncClient(host=url).chat(model="tiny", messages=ASK, tools=TOOLS)
    assert whole.message.content == "Sure, let me check. "
    assert [c.function.name for c in whole.message.tool_calls] == ["get_weather"]


async def test_openai_streams_many_content_deltas_then_a_tool_calls_delta(tools_server: Callable[..., Any]) -> None:
    url = await tools_server(FAKE_REPLY="Sure,| let me| check. |" + CALL, FAKE_REPLY_SPLIT="|")
    stream = await oai_client(url).chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, stream=True)
    chunks = [c async for c in stream]
    kinds = ["content" if c.choices[0].delta.content else "call" if c.choices[0].delta.tool_calls else None
             for c in chunks]
    assert [k for k in kinds if k] == ["content", "content", "content", "call"]
    [call] = [tc for c in chunks for tc in c.choices[0].delta.tool_calls or []]
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Paris"})
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    whole = await oai_client(url).chat.completions.create(model="tiny", messages=ASK, tools=TOOLS)
    assert whole.choices[0].message.content == "Sure, let me check. "
    assert [c.function.name for c in whole.choices[0].message.tool_calls] == ["get_weather"]


async def test_anthropic_keeps_the_text_before_a_tool_use(tools_server: Callable[..., Any]) -> None:
    url = await tools_server(FAKE_REPLY="Sure,| let me| check. |" + CALL, FAKE_REPLY_SPLIT="|")
    client = anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0)
    async with client.messages.stream(model="tiny", max_tokens=64, messages=ASK, tools=ANT_TOOLS) as stream:
        deltas = [e.delta.text async for e in stream
                  if e.type == "content_block_delta" and e.delta.type == "text_delta"]
        streamed = await stream.get_final_message()
    assert deltas == ["Sure,", " let me", " check. "]
    whole = await client.messages.create(model="tiny", max_tokens=64, messages=ASK, tools=ANT_TOOLS)
    for message in (streamed, whole):
        assert [b.type for b in message.content] == ["text", "tool_use"]
        assert message.content[0].text == "Sure, let me check. "
        assert (message.content[1].name, message.content[1].input) == ("get_weather", {"city": "Paris"})
        assert message.stop_reason == "tool_use"


async def test_responses_keep_the_text_before_a_function_call(tools_server: Callable[..., Any]) -> None:
    url = await tools_server(FAKE_REPLY="Sure,| let me| check. |" + CALL, FAKE_REPLY_SPLIT="|")
    client = oai_client(url)
    async with client.responses.stream(model="tiny", input="Weather in Paris?", tools=RESP_TOOLS) as stream:
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        streamed = await stream.get_final_response()
    assert deltas == ["Sure,", " let me", " check. "]
    whole = await client.responses.create(model="tiny", input="Weather in Paris?", tools=RESP_TOOLS)
    for response in (streamed, whole):
        assert [o.type for o in response.output] == ["message", "function_call"]
        assert response.output_text == "Sure, let me check. "
        assert response.output[1].name == "get_weather"


async def test_a_call_only_sends_no_text(tools_server: Callable[..., Any]) -> None:
    chunks = await native_chunks(await tools_server(FAKE_REPLY=CALL))
    assert all(not c.message.content for c in chunks)
    assert [tc.function.name for c in chunks for tc in c.message.tool_calls or []] == ["get_weather"]


@pytest.mark.parametrize(("reply", "expected"), [
    ("<tool|s are fun", ["<tools are fun"]),
    ("{| is a brace,| indeed", ["{ is a brace,", " indeed"]),
    ("Use <tool|_call>| tags", ["Use ", "<tool_call> tags"]),
], ids=["tag-prefix", "brace", "tag-without-json"])
async def test_a_prefix_that_turns_out_to_be_text_is_released_as_text(tools_server: Callable[..., Any], reply: str,
                                                                       expected: list[str]) -> None:
    chunks = await native_chunks(await tools_server(FAKE_REPLY=reply, FAKE_REPLY_SPLIT="|"))
    assert [c.message.content for c in chunks if c.message.content] == expected
    assert not any(c.message.tool_calls for c in chunks)


# -- only declared tools are called ------------------------------------------------------------------------------

async def test_json_naming_an_undeclared_tool_is_text(tools_server: Callable[..., Any]) -> None:
    reply = '{"name": "launch_rockets", "arguments": {"when": "now"}}'
    url = await tools_server(FAKE_REPLY=reply)
    whole = await ollama.AsyncClient(host=url).chat(model="tiny", messages=ASK, tools=TOOLS)
    assert whole.message.content == reply and not whole.message.tool_calls
    oai = await oai_client(url).chat.completions.create(model="tiny", messages=ASK, tools=TOOLS)
    assert oai.choices[0].message.content == reply and not oai.choices[0].message.tool_calls
    assert oai.choices[0].finish_reason == "stop"


async def test_json_naming_a_declared_tool_is_a_call(tools_server: Callable[..., Any]) -> None:
    url = await tools_server(FAKE_REPLY='{"name": "get_weather", "arguments": {"city": "Paris"}}')
    whole = await ollama.AsyncClient(host=url).chat(model="tiny", messages=ASK, tools=TOOLS)
    assert whole.message.content == ""
    assert [(c.function.name, dict(c.function.arguments)) for c in whole.message.tool_calls] == [
        ("get_weather", {"city": "Paris"})]


# -- thinking keeps streaming -------------------------------------------------------------------------------------

async def test_thinking_and_text_stream_with_tools(tools_server: Callable[..., Any]) -> None:
    url = await tools_server(FAKE_REPLY="<think>|Let me| think.|</think>|It is| sunny.|" + CALL, FAKE_REPLY_SPLIT="|")
    chunks = await native_chunks(url, model="thinker", think=True)
    assert [c.message.thinking for c in chunks if c.message.thinking] == ["Let me", " think."]
    assert [c.message.content for c in chunks if c.message.content] == ["It is", " sunny."]
    assert [tc.function.name for c in chunks for tc in c.message.tool_calls or []] == ["get_weather"]


# -- the lane: an answer's plain content written from the runner's socket callback ---------------------------------

def _lane_tokens() -> int:
    from ollama_py.server.streaming import Lane

    return Lane.totals["unparsed"] + Lane.totals["parsed"]


def _lane_thoughts() -> int:
    from ollama_py.server.streaming import Lane

    return Lane.totals["thoughts"]


async def _lane_took(before: int, at_least: int = 1, count: Callable[[], int] = _lane_tokens) -> int:
    """The tokens (or thoughts) the lane wrote since `before`: a response's counts join the totals when its
    handler is done, which may be just after the client read the end of the body (waits up to 10 s for
    `at_least`)."""
    import asyncio

    for _ in range(1000):
        if count() - before >= at_least:
            break
        await asyncio.sleep(0.01)
    return count() - before


async def test_the_text_of_an_answer_parsed_for_calls_goes_out_through_the_lane(
        tools_server: Callable[..., Any]) -> None:
    """While the parsers say a token is plain content (past the answer's start, no tag or part of one), the lane
    writes it; the first token, what may be a call and the call go the ordinary way, and every chunk arrives in
    order (a token every 50 ms, so that the handler has written each ordinary one before the next comes)."""
    url = await tools_server(FAKE_REPLY="Sure,| let me| check. |" + CALL, FAKE_REPLY_SPLIT="|", FAKE_TOKEN_DELAY="0.05")
    before = _lane_tokens()
    chunks = await native_chunks(url)
    assert [c.message.content for c in chunks if c.message.content] == ["Sure,", " let me", " check. "]
    assert [tc.function.name for c in chunks for tc in c.message.tool_calls or []] == ["get_weather"]
    assert chunks[-1].done and chunks[-1].done_reason == "stop"
    assert await _lane_took(before) >= 1

    before = _lane_tokens()
    stream = await oai_client(url).chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, stream=True)
    got = [c async for c in stream]
    assert [c.choices[0].delta.content for c in got if c.choices[0].delta.content] == ["Sure,", " let me", " check. "]
    assert got[-1].choices[0].finish_reason == "tool_calls"
    assert await _lane_took(before) >= 1


async def test_a_thinking_answer_s_content_goes_out_through_the_lane(tools_server: Callable[..., Any]) -> None:
    """Thoughts past the first (which leaves the opening tag) and content past the first are the lane's; the tags
    and the call go the ordinary way; /api/chat's thinking and content, and the Final's, as they came."""
    url = await tools_server(FAKE_REPLY="<think>|Let me| think| it| over.|</think>|It is| sunny| today.|" + CALL,
                             FAKE_REPLY_SPLIT="|", FAKE_TOKEN_DELAY="0.05")
    before, thoughts = _lane_tokens(), _lane_thoughts()
    chunks = await native_chunks(url, model="thinker", think=True)
    assert [c.message.thinking for c in chunks if c.message.thinking] == ["Let me", " think", " it", " over."]
    assert [c.message.content for c in chunks if c.message.content] == ["It is", " sunny", " today."]
    assert [tc.function.name for c in chunks for tc in c.message.tool_calls or []] == ["get_weather"]
    assert await _lane_took(before) >= 1 and await _lane_took(thoughts, 2, _lane_thoughts) >= 2
    whole = await ollama.AsyncClient(host=url).chat(model="thinker", messages=ASK, tools=TOOLS, think=True)
    assert whole.message.thinking == "Let me think it over." and whole.message.content == "It is sunny today."


async def test_generate_thinking_goes_out_through_the_lane(tools_server: Callable[..., Any]) -> None:
    url = await tools_server(FAKE_REPLY="<think>|Let me| think| it| over.|</think>|It is| sunny.",
                             FAKE_REPLY_SPLIT="|", FAKE_TOKEN_DELAY="0.05")
    thoughts = _lane_thoughts()
    client = ollama.AsyncClient(host=url)
    chunks = [c async for c in await client.generate(model="thinker", prompt="Weather?", think=True, stream=True)]
    assert [c.thinking for c in chunks if c.thinking] == ["Let me", " think", " it", " over."]
    assert "".join(c.response for c in chunks) == "It is sunny." and chunks[-1].done
    assert await _lane_took(thoughts, 2, _lane_thoughts) >= 2
    whole = await client.generate(model="thinker", prompt="Weather?", think=True)
    assert whole.thinking == "Let me think it over." and whole.response == "It is sunny."


async def test_openai_reasoning_goes_out_through_the_lane(tools_server: Callable[..., Any]) -> None:
    url = await tools_server(FAKE_REPLY="<think>|Let me| think| it| over.|</think>|It is| sunny.",
                             FAKE_REPLY_SPLIT="|", FAKE_TOKEN_DELAY="0.05")
    thoughts = _lane_thoughts()
    stream = await oai_client(url).chat.completions.create(model="thinker", messages=ASK, stream=True,
                                                           reasoning_effort="high")
    got = [c async for c in stream]
    reasoning = [getattr(c.choices[0].delta, "reasoning", None) for c in got if c.choices]
    assert [r for r in reasoning if r] == ["Let me", " think", " it", " over."]
    assert "".join(c.choices[0].delta.content or "" for c in got if c.choices) == "It is sunny."
    assert await _lane_took(thoughts, 2, _lane_thoughts) >= 2


async def _anthropic_events(url: str, **body: Any) -> list[tuple[str, dict[str, Any]]]:
    """The named SSE events of a streamed /v1/messages, as the bytes came (the client's own parsing aside)."""
    import aiohttp

    async with aiohttp.ClientSession() as session, session.post(
            url + "/v1/messages", json={"model": "tiny", "max_tokens": 64, "messages": ASK, "stream": True, **body},
            headers={"x-api-key": "x", "anthropic-version": "2023-06-01"}) as resp:
        assert resp.status == 200
        raw = (await resp.read()).decode()
    events = []
    for block in raw.split("\n\n"):
        if block.strip():
            name, data = block.split("\n")
            assert name.startswith("event: ") and data.startswith("data: ")
            events.append((name[7:], json.loads(data[6:])))
    return events


def _check_blocks(events: list[tuple[str, dict[str, Any]]]) -> list[tuple[int, str, str]]:
    """Anthropic's order: message_start, ping, then each block started, its deltas, stopped (indices 0, 1, ...),
    message_delta, message_stop; each event's name is its data's type. Gives (index, kind, text) per block."""
    assert [name for name, _ in events[:2]] == ["message_start", "ping"]
    assert [name for name, _ in events[-2:]] == ["message_delta", "message_stop"]
    assert all(data["type"] == name for name, data in events)
    blocks: list[tuple[int, str, str]] = []
    open_block: int | None = None
    for name, data in events[2:-2]:
        if name == "content_block_start":
            assert open_block is None and data["index"] == len(blocks)
            open_block = data["index"]
            blocks.append((open_block, data["content_block"]["type"], ""))
        elif name == "content_block_delta":
            assert data["index"] == open_block
            index, kind, text = blocks[-1]
            delta = data["delta"]
            blocks[-1] = (index, kind, text + delta.get("text", delta.get("thinking", delta.get("partial_json", ""))))
        else:
            assert name == "content_block_stop" and data["index"] == open_block
            open_block = None
    assert open_block is None
    return blocks


async def test_anthropic_text_goes_out_through_the_lane(tools_server: Callable[..., Any]) -> None:
    """Claude Code's route: a streamed message's text deltas are written by the lane, the message's and the block's
    opening with the first and the block's and message's end with the stop event, each event in Anthropic's order
    and framing."""
    from ollama_py.server.streaming import Lane

    url = await tools_server(FAKE_TOKEN_DELAY="0.02")
    before, ended = _lane_tokens(), Lane.totals["ended"]
    events = await _anthropic_events(url)
    assert _check_blocks(events) == [(0, "text", "".join(WORDS))]
    assert [d["delta"]["text"] for n, d in events if n == "content_block_delta"] == WORDS
    assert events[-2][1]["delta"]["stop_reason"] == "end_turn"
    assert await _lane_took(before, len(WORDS)) == len(WORDS) and Lane.totals["ended"] == ended + 1


async def test_anthropic_thoughts_text_and_a_call_keep_their_blocks_through_the_lane(
        tools_server: Callable[..., Any]) -> None:
    """Thoughts (the ordinary way), then text the lane writes in the next block, then the call's block: indices
    0, 1, 2, every delta in order; the official client builds the same message."""
    url = await tools_server(FAKE_REPLY="<think>|Let me| think| it| over.|</think>|It is| sunny| today.|" + CALL,
                             FAKE_REPLY_SPLIT="|", FAKE_TOKEN_DELAY="0.05")
    before, thoughts = _lane_tokens(), _lane_thoughts()
    events = await _anthropic_events(url, model="thinker", tools=ANT_TOOLS, thinking={"type": "enabled",
                                                                                       "budget_tokens": 1024})
    assert _check_blocks(events) == [(0, "thinking", "Let me think it over."), (1, "text", "It is sunny today."),
                                     (2, "tool_use", '{"city":"Paris"}')]
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert await _lane_took(before) >= 1 and await _lane_took(thoughts, 2, _lane_thoughts) >= 2
    client = anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0)
    async with client.messages.stream(model="thinker", max_tokens=64, messages=ASK, tools=ANT_TOOLS) as stream:
        message = await stream.get_final_message()
    assert [b.type for b in message.content] == ["thinking", "text", "tool_use"]
    assert message.content[1].text == "It is sunny today."
    assert message.content[2].input == {"city": "Paris"}


async def test_responses_text_goes_out_through_the_lane(tools_server: Callable[..., Any]) -> None:
    """Codex's route: a streamed response's text deltas are written by the lane, each event numbered in order
    (sequence_number 0, 1, 2, ...) whichever way it went; the text before a call, then the call."""
    url = await tools_server(FAKE_REPLY="Sure,| let me| check. |" + CALL, FAKE_REPLY_SPLIT="|", FAKE_TOKEN_DELAY="0.05")
    before = _lane_tokens()
    client = oai_client(url)
    async with client.responses.stream(model="tiny", input="Weather in Paris?", tools=RESP_TOOLS) as stream:
        got = [e async for e in stream]
        response = await stream.get_final_response()
    assert [e.sequence_number for e in got] == list(range(len(got)))
    assert [e.delta for e in got if e.type == "response.output_text.delta"] == ["Sure,", " let me", " check. "]
    assert [o.type for o in response.output] == ["message", "function_call"]
    assert response.output_text == "Sure, let me check. "
    assert await _lane_took(before) >= 1


async def test_a_plain_response_goes_out_through_the_lane(tools_server: Callable[..., Any]) -> None:
    before = _lane_tokens()
    async with oai_client(await tools_server(FAKE_TOKEN_DELAY="0.02")).responses.stream(
            model="tiny", input="Hi") as stream:
        got = [e async for e in stream]
        response = await stream.get_final_response()
    assert [e.sequence_number for e in got] == list(range(len(got)))
    assert [e.delta for e in got if e.type == "response.output_text.delta"] == WORDS
    assert response.output_text == "".join(WORDS) and response.status == "completed"
    assert await _lane_took(before, len(WORDS)) == len(WORDS)
