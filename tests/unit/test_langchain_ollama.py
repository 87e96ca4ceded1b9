"""langchain-ollama's ChatOllama, unchanged, over the real app and the fake runner: tools bound, called, streamed
(what its own integration tests check of a tool-calling model, issue 23)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, AIMessageChunk, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_ollama import ChatOllama

from tests.helpers.tool_calls import CALL, WORDS


@tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}"


def chat(url: str, model: str = "tiny", **kw: Any) -> Any:
    return ChatOllama(model=model, base_url=url, **kw).bind_tools([get_weather])


async def test_bound_tool_is_called(tools_server: Callable[..., Any]) -> None:
    url = await tools_server(FAKE_REPLY=CALL)
    message = await chat(url).ainvoke("What is the weather in Paris?")
    assert isinstance(message, AIMessage)
    assert [(c["name"], c["args"]) for c in message.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert message.tool_calls[0]["id"]
    # The agent loop's next turn: the call and its result go back, and the model answers in text.
    follow_up = await chat(url).ainvoke([HumanMessage("What is the weather in Paris?"), message,
                                         ToolMessage("Sunny in Paris", tool_call_id=message.tool_calls[0]["id"])])
    assert isinstance(follow_up, AIMessage)


async def test_text_streams_token_by_token_with_a_tool_bound(tools_server: Callable[..., Any]) -> None:
    chunks = [c async for c in chat(await tools_server()).astream("Hello")]
    assert all(isinstance(c, AIMessageChunk) for c in chunks)
    assert [c.content for c in chunks if c.content] == WORDS
    assert not any(c.tool_calls for c in chunks)


async def test_a_streamed_tool_call_after_text(tools_server: Callable[..., Any]) -> None:
    url = await tools_server(FAKE_REPLY="Let me| check. |" + CALL, FAKE_REPLY_SPLIT="|")
    chunks = [c async for c in chat(url).astream("What is the weather in Paris?")]
    assert [c.content for c in chunks if c.content] == ["Let me", " check. "]
    whole = chunks[0]
    for c in chunks[1:]:
        whole += c
    assert whole.content == "Let me check. "
    assert [(c["name"], c["args"]) for c in whole.tool_calls] == [("get_weather", {"city": "Paris"})]


async def test_thinking_streams_as_reasoning_with_a_tool_bound(tools_server: Callable[..., Any]) -> None:
    url = await tools_server(FAKE_REPLY="<think>|Hmm,| Paris.|</think>|" + CALL, FAKE_REPLY_SPLIT="|")
    chunks = [c async for c in chat(url, model="thinker", reasoning=True).astream("What is the weather in Paris?")]
    reasoning = [c.additional_kwargs.get("reasoning_content") for c in chunks]
    assert [r for r in reasoning if r] == ["Hmm,", " Paris."]
    assert [tc["name"] for c in chunks for tc in c.tool_calls] == ["get_weather"]
