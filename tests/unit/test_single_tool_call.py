"""One tool call when the client asks for one: OpenAI's `parallel_tool_calls: false` (chat completions, the
Responses API) and Anthropic's `tool_choice.disable_parallel_tool_use`. A model that makes two calls anyway has
the second dropped, so a client built on that promise (LangChain's `parallel_tool_calls=False`, an agent that
runs one tool a turn) gets one call; without it both go out, as before. The Responses API's answer echoes the
setting. The real app over the fake llama-server (tests/unit/conftest.py's `tools_server`), read through the
official clients."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import anthropic
import openai
import pytest

from tests.helpers.tool_calls import ANT_TOOLS, CALL, RESP_TOOLS, TOOLS

ASK = [{"role": "user", "content": "Weather in Paris and Rome?"}]
ROME = CALL.replace("Paris", "Rome")
TWO_CALLS = {"FAKE_REPLY": CALL + "|" + ROME, "FAKE_REPLY_SPLIT": "|"}


def oai(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)


def cities(arguments: list[str]) -> list[str]:
    return [json.loads(a)["city"] for a in arguments]


@pytest.mark.parametrize(("parallel", "expected"), [(False, ["Paris"]), (True, ["Paris", "Rome"]),
                                                    (None, ["Paris", "Rome"])])
async def test_chat_completions_parallel_tool_calls(tools_server: Callable[..., Any], parallel: bool | None,
                                                    expected: list[str]) -> None:
    extra = {} if parallel is None else {"parallel_tool_calls": parallel}
    reply = await oai(await tools_server(**TWO_CALLS)).chat.completions.create(
        model="tiny", messages=ASK, tools=TOOLS, **extra)
    choice = reply.choices[0]
    assert cities([c.function.arguments for c in choice.message.tool_calls or []]) == expected
    assert choice.finish_reason == "tool_calls"


async def test_chat_completions_streamed_sends_one_call(tools_server: Callable[..., Any]) -> None:
    stream = await oai(await tools_server(**TWO_CALLS)).chat.completions.create(
        model="tiny", messages=ASK, tools=TOOLS, parallel_tool_calls=False, stream=True)
    calls = [c for chunk in [c async for c in stream] for c in (chunk.choices[0].delta.tool_calls or [])
             if chunk.choices]
    assert [c.index for c in calls] == [0]
    assert cities([c.function.arguments for c in calls]) == ["Paris"]


@pytest.mark.parametrize(("parallel", "expected"), [(False, ["Paris"]), (True, ["Paris", "Rome"])])
async def test_responses_parallel_tool_calls(tools_server: Callable[..., Any], parallel: bool,
                                             expected: list[str]) -> None:
    response = await oai(await tools_server(**TWO_CALLS)).responses.create(
        model="tiny", input="Weather in Paris and Rome?", tools=RESP_TOOLS, parallel_tool_calls=parallel)
    assert cities([i.arguments for i in response.output if i.type == "function_call"]) == expected
    assert response.parallel_tool_calls is parallel


async def test_responses_streamed_sends_one_call(tools_server: Callable[..., Any]) -> None:
    client = oai(await tools_server(**TWO_CALLS))
    async with client.responses.stream(model="tiny", input="Weather in Paris and Rome?", tools=RESP_TOOLS,
                                       parallel_tool_calls=False) as stream:
        added = [e.item async for e in stream if e.type == "response.output_item.added"]
        response = await stream.get_final_response()
    assert [i.type for i in added] == ["function_call"]
    assert cities([i.arguments for i in response.output if i.type == "function_call"]) == ["Paris"]
    assert response.parallel_tool_calls is False


@pytest.mark.parametrize(("disable", "expected"), [(True, ["Paris"]), (False, ["Paris", "Rome"])])
async def test_anthropic_disable_parallel_tool_use(tools_server: Callable[..., Any], disable: bool,
                                                   expected: list[str]) -> None:
    client = anthropic.AsyncAnthropic(base_url=await tools_server(**TWO_CALLS), api_key="x", max_retries=0)
    message = await client.messages.create(model="tiny", max_tokens=64, messages=ASK, tools=ANT_TOOLS,
                                           tool_choice={"type": "auto", "disable_parallel_tool_use": disable})
    assert [b.input["city"] for b in message.content if b.type == "tool_use"] == expected
    assert message.stop_reason == "tool_use"


async def test_anthropic_streamed_sends_one_tool_use(tools_server: Callable[..., Any]) -> None:
    client = anthropic.AsyncAnthropic(base_url=await tools_server(**TWO_CALLS), api_key="x", max_retries=0)
    async with client.messages.stream(model="tiny", max_tokens=64, messages=ASK, tools=ANT_TOOLS,
                                      tool_choice={"type": "auto", "disable_parallel_tool_use": True}) as stream:
        starts = [e.content_block.type async for e in stream if e.type == "content_block_start"]
        message = await stream.get_final_message()
    assert starts == ["tool_use"]
    assert [b.input["city"] for b in message.content if b.type == "tool_use"] == ["Paris"]


async def test_anthropic_disable_parallel_tool_use_must_be_a_boolean(tools_server: Callable[..., Any]) -> None:
    client = anthropic.AsyncAnthropic(base_url=await tools_server(**TWO_CALLS), api_key="x", max_retries=0)
    with pytest.raises(anthropic.BadRequestError) as e:
        await client.messages.create(model="tiny", max_tokens=64, messages=ASK, tools=ANT_TOOLS,
                                     tool_choice={"type": "auto", "disable_parallel_tool_use": "yes"})
    assert "disable_parallel_tool_use" in str(e.value)


async def test_parallel_tool_calls_must_be_a_boolean(tools_server: Callable[..., Any]) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        await oai(await tools_server(**TWO_CALLS)).chat.completions.create(
            model="tiny", messages=ASK, tools=TOOLS, parallel_tool_calls="no")  # type: ignore[arg-type]
    assert "parallel_tool_calls" in str(e.value)
