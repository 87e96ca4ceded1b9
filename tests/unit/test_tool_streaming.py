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
    assert _lane_tokens() - before >= 1

    before = _lane_tokens()
    stream = await oai_client(url).chat.completions.create(model="tiny", messages=ASK, tools=TOOLS, stream=True)
    got = [c async for c in stream]
    assert [c.choices[0].delta.content for c in got if c.choices[0].delta.content] == ["Sure,", " let me", " check. "]
    assert got[-1].choices[0].finish_reason == "tool_calls"
    assert _lane_tokens() - before >= 1


async def test_a_thinking_answer_s_content_goes_out_through_the_lane(tools_server: Callable[..., Any]) -> None:
    url = await tools_server(FAKE_REPLY="<think>|Let me| think.|</think>|It is| sunny| today.|" + CALL,
                             FAKE_REPLY_SPLIT="|", FAKE_TOKEN_DELAY="0.05")
    before = _lane_tokens()
    chunks = await native_chunks(url, model="thinker", think=True)
    assert [c.message.thinking for c in chunks if c.message.thinking] == ["Let me", " think."]
    assert [c.message.content for c in chunks if c.message.content] == ["It is", " sunny", " today."]
    assert [tc.function.name for c in chunks for tc in c.message.tool_calls or []] == ["get_weather"]
    assert _lane_tokens() - before >= 1
