"""tool_choice that forces a call (OpenAI "required" or a named function, Anthropic "any" or a named tool, the
Responses API's "required" or named function): the answer is generated under the call's JSON schema and comes
back as that call on every route, streamed or not; a name the request does not offer is a 400; JSON cut short is
returned as the text it is. The real app and scheduler over the fake llama-server (tools_server), read through
the official clients; the schema the runner was asked for read from the fake's request log."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from ollama_py.errors import BadRequest
from ollama_py.template.forced_calls import ForcedCall, forced

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                           "required": ["city"]}}}
TIME = {"type": "function", "function": {"name": "get_time", "description": "The time now"}}
TOOLS = [WEATHER, TIME]
RESP_WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city",
                "parameters": WEATHER["function"]["parameters"]}
ASK = [{"role": "user", "content": "Weather in Paris?"}]


# -- the pure part ---------------------------------------------------------------------------------------------------

def test_one_tool_is_generated_as_its_arguments_several_as_name_and_arguments() -> None:
    one = forced(TOOLS, "get_weather")
    assert one is not None and one.schema() == WEATHER["function"]["parameters"]
    call = one.call('{"city": "Paris"}')
    assert call is not None and call["function"]["name"] == "get_weather"
    assert call["function"]["arguments"] == {"city": "Paris"} and call["id"].startswith("call_")
    any_of = forced(TOOLS, None)
    assert any_of is not None
    assert [alt["properties"]["name"] for alt in any_of.schema()["anyOf"]] == [{"const": "get_weather"},
                                                                               {"const": "get_time"}]
    assert any_of.schema()["anyOf"][1]["properties"]["arguments"] == {"type": "object", "properties": {}}
    time_call = any_of.call('{"name": "get_time", "arguments": {}}')
    assert time_call is not None and time_call["function"]["name"] == "get_time"


def test_what_is_no_call_is_none() -> None:
    assert ForcedCall((WEATHER,)).call('{"city": "Par') is None  # cut short by the token limit
    assert ForcedCall((WEATHER,)).call('["Paris"]') is None
    assert forced(TOOLS, None).call('{"name": "rm_rf", "arguments": {}}') is None  # type: ignore[union-attr]
    assert forced(None, None) is None and forced([], "get_weather") is None
    with pytest.raises(BadRequest, match="rm_rf"):
        forced(TOOLS, "rm_rf")


# -- through the routes ----------------------------------------------------------------------------------------------

def oai_client(url: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=url + "/v1", api_key="x", max_retries=0)


def schemas_asked(log: Path) -> list[Any]:
    return [json.loads(line).get("json_schema") for line in log.read_text().splitlines()
            if "prompt" in json.loads(line)]


async def test_openai_named_function_comes_back_as_that_call(tools_server: Callable[..., Any],
                                                             tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    url = await tools_server(FAKE_REPLY='{"city": "Paris"}', FAKE_LOG_FILE=str(log))
    answer = await oai_client(url).chat.completions.create(
        model="tiny", messages=ASK, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    [call] = choice.message.tool_calls or []
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    assert schemas_asked(log) == [WEATHER["function"]["parameters"]]


async def test_openai_required_streams_the_call_the_model_picked(tools_server: Callable[..., Any],
                                                                 tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    url = await tools_server(FAKE_REPLY='{"name": "get_time", "arguments": {}}', FAKE_LOG_FILE=str(log))
    stream = await oai_client(url).chat.completions.create(model="tiny", messages=ASK, tools=TOOLS,
                                                           tool_choice="required", stream=True)
    chunks = [c async for c in stream]
    calls = [tc for c in chunks for tc in c.choices[0].delta.tool_calls or []]
    assert [(tc.function.name, tc.function.arguments) for tc in calls] == [("get_time", "{}")]
    assert not "".join(c.choices[0].delta.content or "" for c in chunks)  # the JSON is the call, not content
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert [a["properties"]["name"]["const"] for a in schemas_asked(log)[0]["anyOf"]] == ["get_weather", "get_time"]


async def test_a_function_not_offered_is_refused(tools_server: Callable[..., Any]) -> None:
    with pytest.raises(openai.BadRequestError, match="rm_rf"):
        await oai_client(await tools_server()).chat.completions.create(
            model="tiny", messages=ASK, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "rm_rf"}})


async def test_json_cut_short_is_returned_as_text(tools_server: Callable[..., Any]) -> None:
    url = await tools_server(FAKE_REPLY='{"city": "Par')
    stream = await oai_client(url).chat.completions.create(model="tiny", messages=ASK, tools=TOOLS,
                                                           tool_choice="required", stream=True)
    chunks = [c async for c in stream]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == '{"city": "Par'
    assert not any(c.choices[0].delta.tool_calls for c in chunks)


async def test_auto_leaves_the_answer_free(tools_server: Callable[..., Any], tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    url = await tools_server(FAKE_LOG_FILE=str(log))
    answer = await oai_client(url).chat.completions.create(model="tiny", messages=ASK, tools=TOOLS,
                                                           tool_choice="auto")
    assert answer.choices[0].message.content and answer.choices[0].finish_reason == "stop"
    assert schemas_asked(log) == [None]


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_named_tool_is_a_tool_use_block(tools_server: Callable[..., Any], stream: bool) -> None:
    client = anthropic.AsyncAnthropic(base_url=await tools_server(FAKE_REPLY='{"city": "Paris"}'), api_key="x",
                                      max_retries=0)
    ant_tools: Any = [{"name": "get_weather", "description": "The weather in a city",
                       "input_schema": WEATHER["function"]["parameters"]},
                      {"name": "get_time", "description": "The time now", "input_schema": {"type": "object"}}]
    choice: Any = {"type": "tool", "name": "get_weather"}
    if stream:
        async with client.messages.stream(model="tiny", max_tokens=64, messages=ASK, tools=ant_tools,
                                          tool_choice=choice) as events:
            message = await events.get_final_message()
    else:
        message = await client.messages.create(model="tiny", max_tokens=64, messages=ASK, tools=ant_tools,
                                               tool_choice=choice)
    assert [b.type for b in message.content] == ["tool_use"] and message.stop_reason == "tool_use"
    block: Any = message.content[0]
    assert block.name == "get_weather" and block.input == {"city": "Paris"}


async def test_responses_required_is_a_function_call_item(tools_server: Callable[..., Any]) -> None:
    url = await tools_server(FAKE_REPLY='{"city": "Paris"}')
    resp_tools: Any = [RESP_WEATHER]
    response = await oai_client(url).responses.create(model="tiny", input="Weather in Paris?", tools=resp_tools,
                                                      tool_choice="required")
    [item] = [o for o in response.output if o.type == "function_call"]
    assert item.name == "get_weather" and json.loads(item.arguments) == {"city": "Paris"}
    assert response.tool_choice == "required"


async def test_a_thinking_model_answers_a_forced_call_without_thoughts(tools_server: Callable[..., Any]) -> None:
    """No thinking fits the call's schema: the thinker's JSON is the call, not split into thought and content."""
    url = await tools_server(FAKE_REPLY='{"name": "get_weather", "arguments": {"city": "Paris"}}')
    answer = await oai_client(url).chat.completions.create(model="thinker", messages=ASK, tools=TOOLS,
                                                           tool_choice="required", reasoning_effort="high")
    message: Any = answer.choices[0].message
    assert not getattr(message, "reasoning", None) and not message.content
    assert [c.function.name for c in message.tool_calls] == ["get_weather"]


async def test_responses_named_custom_tool_is_a_custom_tool_call(tools_server: Callable[..., Any]) -> None:
    """Codex-style: a custom (freeform) tool named in tool_choice comes back as a custom_tool_call whose input is
    the text generated for it."""
    url = await tools_server(FAKE_REPLY='{"input": "*** Begin Patch"}')
    tools: Any = [{"type": "custom", "name": "apply_patch", "description": "Edit files."}, RESP_WEATHER]
    response = await oai_client(url).responses.create(model="tiny", input="Fix it", tools=tools,
                                                      tool_choice={"type": "custom", "name": "apply_patch"})
    [item] = [o for o in response.output if o.type == "custom_tool_call"]
    assert item.name == "apply_patch" and item.input == "*** Begin Patch"


async def test_anthropic_any_is_a_call_of_the_tool_the_model_picked(tools_server: Callable[..., Any]) -> None:
    url = await tools_server(FAKE_REPLY='{"name": "get_time", "arguments": {}}')
    client = anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0)
    ant_tools: Any = [{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]},
                      {"name": "get_time", "input_schema": {"type": "object"}}]
    message = await client.messages.create(model="tiny", max_tokens=64, messages=ASK, tools=ant_tools,
                                           tool_choice={"type": "any"})
    block: Any = message.content[0]
    assert (block.type, block.name, block.input) == ("tool_use", "get_time", {})
    with pytest.raises(anthropic.BadRequestError, match="rm_rf"):
        await client.messages.create(model="tiny", max_tokens=64, messages=ASK, tools=ant_tools,
                                     tool_choice={"type": "tool", "name": "rm_rf"})


# -- allowed_tools: the tools a request may use, a call among them forced in "required" mode -------------------------

def test_allowed_tools_offer_only_the_listed_tools() -> None:
    from ollama_py.server import openai_translate as oai
    from ollama_py.server import responses_translate as rt

    chat = {"messages": ASK, "tools": TOOLS}
    auto = oai.parse_chat({**chat, "tool_choice": {"type": "allowed_tools", "allowed_tools": {
        "mode": "auto", "tools": [{"type": "function", "function": {"name": "get_time"}}]}}})
    assert [t["function"]["name"] for t in auto.tools or []] == ["get_time"] and auto.forced is None
    required = oai.parse_chat({**chat, "tool_choice": {"type": "allowed_tools", "allowed_tools": {
        "mode": "required", "tools": [{"type": "function", "function": {"name": "get_weather"}}]}}})
    assert required.forced is not None and required.forced.tools == (WEATHER,)
    responses = rt.parse_responses({"input": "Hi", "tools": [RESP_WEATHER], "tool_choice": {
        "type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "get_weather"}]}})
    assert responses.forced is not None and [t["function"]["name"] for t in responses.forced.tools] == ["get_weather"]
    with pytest.raises(BadRequest, match="mode"):
        oai.parse_chat({**chat, "tool_choice": {"type": "allowed_tools", "allowed_tools": {"tools": []}}})
    # "none" offers nothing; a hosted tool's choice (not ours to run) leaves the tools as they are
    assert oai.parse_chat({**chat, "tool_choice": "none"}).tools is None
    assert oai.parse_chat({**chat, "tool_choice": {"type": "web_search_preview"}}).tools == TOOLS


async def test_allowed_tools_required_is_a_call_of_one_of_them(tools_server: Callable[..., Any],
                                                               tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    url = await tools_server(FAKE_REPLY="{}", FAKE_LOG_FILE=str(log))
    answer = await oai_client(url).chat.completions.create(
        model="tiny", messages=ASK, tools=TOOLS,
        tool_choice={"type": "allowed_tools", "allowed_tools": {
            "mode": "required", "tools": [{"type": "function", "function": {"name": "get_time"}}]}})
    [call] = answer.choices[0].message.tool_calls or []
    assert call.function.name == "get_time" and json.loads(call.function.arguments) == {}
    assert schemas_asked(log) == [{"type": "object", "properties": {}}]
