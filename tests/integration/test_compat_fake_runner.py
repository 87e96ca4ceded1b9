"""The OpenAI and Anthropic APIs over the fake llama-server: tool calls and mid-stream failures, which SmolLM2
cannot be made to produce on demand. The real app and scheduler; only the child process is the fake."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from ollama_py.runner.argv import LaunchSpec
from ollama_py.scheduler.scheduler import LoadPlan, Scheduler
from ollama_py.server.app import create_app
from tests.fakes.gguf_files import write_tiny_gguf
from tests.helpers.app import create_tiny_model, fake_runner_factory, make_settings

TOOL_REPLY = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
OAI_TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                               "parameters": {"type": "object",
                                                              "properties": {"city": {"type": "string"}}}}}]
ANT_TOOLS = [{"name": "get_weather", "description": "The weather in a city",
              "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
ASK = [{"role": "user", "content": "Weather in Paris?"}]
TOOLS_GO_TEMPLATE = ("{{ if .Tools }}{{ json .Tools }}{{ end }}{{ range .Messages }}{{ .Content }}"
                     '{{ range .ToolCalls }}<tool_call>{"name": "{{ .Function.Name }}", '
                     '"arguments": {{ json .Function.Arguments }}}</tool_call>{{ end }}{{ end }}')
# A GGUF chat template that mentions tools gives the model the "tools" capability.
TOOLS_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if tools %}{{ tools }}{% endif %}"


@pytest.fixture(scope="module")
def tools_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("gguf") / "tools.gguf", chat_template=TOOLS_TEMPLATE)


@pytest.fixture
def base_url(tmp_path: Path, tools_gguf: Path, aiohttp_server: Any) -> Callable[..., Any]:
    """Start the app whose runners are the fake llama-server with these FAKE_* settings; gives its URL."""

    async def start(**fake_env: str) -> str:
        settings = make_settings(tmp_path)
        create_tiny_model(settings, tools_gguf, "tiny")

        def plan(model: Any, options: dict[str, Any], embedding: bool) -> LoadPlan:
            spec = LaunchSpec(model=model.model_path, num_ctx=2048, embedding=embedding)
            return LoadPlan(key=f"{model.digest}:{embedding}", spec=spec, load_options={})

        scheduler = Scheduler(settings, plan=plan, runner_factory=fake_runner_factory(settings, fake_env))
        server = await aiohttp_server(create_app(settings, scheduler=scheduler))
        return str(server.make_url(""))

    return start


async def _drain(stream: AsyncIterator[Any]) -> list[Any]:
    return [item async for item in stream]


async def test_openai_tool_call(base_url: Callable[..., Any]) -> None:
    client = openai.AsyncOpenAI(base_url=await base_url(FAKE_REPLY=TOOL_REPLY) + "/v1", api_key="x", max_retries=0)
    resp = await client.chat.completions.create(model="tiny", messages=ASK, tools=OAI_TOOLS)
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


async def test_openai_tool_call_streamed(base_url: Callable[..., Any]) -> None:
    client = openai.AsyncOpenAI(base_url=await base_url(FAKE_REPLY=TOOL_REPLY) + "/v1", api_key="x", max_retries=0)
    chunks = await _drain(await client.chat.completions.create(model="tiny", messages=ASK, tools=OAI_TOOLS,
                                                               stream=True))
    calls = [tc for c in chunks for tc in c.choices[0].delta.tool_calls or []]
    assert [(tc.function.name, json.loads(tc.function.arguments)) for tc in calls] == [
        ("get_weather", {"city": "Paris"})]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ""


async def test_tools_without_a_call_answer_text(base_url: Callable[..., Any]) -> None:
    client = openai.AsyncOpenAI(base_url=await base_url(FAKE_REPLY="It is sunny.") + "/v1", api_key="x",
                                max_retries=0)
    resp = await client.chat.completions.create(model="tiny", messages=ASK, tools=OAI_TOOLS)
    assert (resp.choices[0].message.content, resp.choices[0].finish_reason) == ("It is sunny.", "stop")
    assert not resp.choices[0].message.tool_calls


async def test_anthropic_tool_use(base_url: Callable[..., Any]) -> None:
    client = anthropic.AsyncAnthropic(base_url=await base_url(FAKE_REPLY=TOOL_REPLY), api_key="x", max_retries=0)
    msg = await client.messages.create(model="tiny", max_tokens=64, messages=ASK, tools=ANT_TOOLS)
    assert msg.stop_reason == "tool_use"
    [block] = msg.content
    assert (block.type, block.name, block.input) == ("tool_use", "get_weather", {"city": "Paris"})
    async with client.messages.stream(model="tiny", max_tokens=64, messages=ASK, tools=ANT_TOOLS) as stream:
        streamed = await stream.get_final_message()
    assert streamed.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in streamed.content] == [("tool_use", "get_weather", {"city": "Paris"})]


async def test_anthropic_text_editor_tool_declared_without_a_schema_is_called(base_url: Callable[..., Any],
                                                                             tmp_path: Path) -> None:
    """The SDK's text editor tool ({"type": "text_editor_20250728", "name": ...}, no input_schema): the model is
    offered its documented input and its call comes back as a tool_use the SDK's tool runner can execute."""
    log = tmp_path / "requests.jsonl"
    call = {"name": "str_replace_based_edit_tool", "arguments": {"command": "view", "path": "/repo/main.py"}}
    url = await base_url(FAKE_REPLY=f"<tool_call>{json.dumps(call)}</tool_call>", FAKE_LOG_FILE=str(log))
    create = {"model": "tools", "from": "tiny", "stream": False, "template": TOOLS_GO_TEMPLATE}
    async with aiohttp.ClientSession() as session, session.post(url + "/api/create", json=create) as resp:
        assert resp.status == 200, await resp.text()  # a model whose template shows the model its tools
    client = anthropic.AsyncAnthropic(base_url=url, api_key="x", max_retries=0)
    msg = await client.messages.create(model="tools", max_tokens=64, messages=ASK, tools=[
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"}])
    [block] = msg.content
    assert (block.type, block.name, block.input) == ("tool_use", "str_replace_based_edit_tool",
                                                     {"command": "view", "path": "/repo/main.py"})
    assert "insert_line" in json.loads(log.read_text().splitlines()[-1])["prompt"]  # its input reached the model


async def test_runner_crash_mid_stream_reaches_the_openai_client(base_url: Callable[..., Any]) -> None:
    client = openai.AsyncOpenAI(base_url=await base_url(FAKE_CRASH_AFTER_TOKENS="3") + "/v1", api_key="x",
                                max_retries=0)
    stream = await client.chat.completions.create(model="tiny", messages=ASK, stream=True)
    with pytest.raises(openai.APIError):
        await _drain(stream)


async def test_runner_crash_mid_stream_reaches_the_anthropic_client(base_url: Callable[..., Any]) -> None:
    client = anthropic.AsyncAnthropic(base_url=await base_url(FAKE_CRASH_AFTER_TOKENS="3"), api_key="x",
                                      max_retries=0)
    stream = await client.messages.create(model="tiny", max_tokens=64, messages=ASK, stream=True)  # 200: tokens came
    with pytest.raises(anthropic.APIStatusError) as e:
        await _drain(stream)
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "api_error"


RESP_TOOLS = [{"type": "function", "name": "get_weather", "description": "The weather in a city",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]


async def test_responses_text_stream_and_not(base_url: Callable[..., Any]) -> None:
    client = openai.AsyncOpenAI(base_url=await base_url(FAKE_REPLY="It is sunny in Paris.") + "/v1", api_key="x",
                                max_retries=0)
    resp = await client.responses.create(model="tiny", input="Weather in Paris?", instructions="Be brief.")
    assert resp.id.startswith("resp_") and resp.object == "response" and resp.status == "completed"
    assert resp.output_text == "It is sunny in Paris."
    assert resp.instructions == "Be brief."
    assert resp.usage.output_tokens > 0 and resp.usage.input_tokens > 0
    assert resp.usage.total_tokens == resp.usage.input_tokens + resp.usage.output_tokens

    async with client.responses.stream(model="tiny", input=[{"role": "user", "content": "Weather?"}]) as stream:
        deltas = [ev.delta async for ev in stream if ev.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(deltas) == "It is sunny in Paris." and len(deltas) > 1
    assert final.output_text == "It is sunny in Paris." and final.status == "completed"


async def test_responses_event_order(base_url: Callable[..., Any]) -> None:
    client = openai.AsyncOpenAI(base_url=await base_url(FAKE_REPLY="Hi there") + "/v1", api_key="x", max_retries=0)
    events = await _drain(await client.responses.create(model="tiny", input="Hi", stream=True))
    kinds = [e.type for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress", "response.output_item.added",
                         "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                          "response.completed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))


async def test_responses_function_call_and_its_output(base_url: Callable[..., Any], tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    client = openai.AsyncOpenAI(base_url=await base_url(FAKE_REPLY=TOOL_REPLY, FAKE_LOG_FILE=str(log)) + "/v1",
                                api_key="x", max_retries=0)
    resp = await client.responses.create(model="tiny", input="Weather in Paris?", tools=RESP_TOOLS)
    [call] = resp.output
    assert (call.type, call.name, json.loads(call.arguments)) == ("function_call", "get_weather", {"city": "Paris"})
    async with client.responses.stream(model="tiny", input="Weather in Paris?", tools=RESP_TOOLS) as stream:
        streamed = await stream.get_final_response()
    assert [(o.type, o.name) for o in streamed.output] == [("function_call", "get_weather")]

    # The call and its result sent back as input reach the model as an assistant tool call and a tool message.
    await client.responses.create(model="tiny", tools=RESP_TOOLS, input=[
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "function_call", "call_id": call.call_id, "name": "get_weather", "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "22 degrees and sunny"}])
    last = json.loads(log.read_text().splitlines()[-1])
    assert "22 degrees and sunny" in json.dumps(last)


PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch"
CUSTOM_TOOLS = [{"type": "custom", "name": "apply_patch", "description": "Edit files with a patch",
                 "format": {"type": "grammar", "syntax": "lark", "definition": 'start: "*** Begin Patch" LF'}}]


async def test_responses_custom_tool_call_and_its_output(base_url: Callable[..., Any], tmp_path: Path) -> None:
    """A custom (freeform) tool, as Codex offers apply_patch to GPT-5 models: the client gets a custom_tool_call
    whose input is the text itself -- streamed with the custom_tool_call_input events -- and can send it back in
    the history."""
    log = tmp_path / "requests.jsonl"
    reply = "<tool_call>" + json.dumps({"name": "apply_patch", "arguments": {"input": PATCH}}) + "</tool_call>"
    client = openai.AsyncOpenAI(base_url=await base_url(FAKE_REPLY=reply, FAKE_LOG_FILE=str(log)) + "/v1",
                                api_key="x", max_retries=0)
    resp = await client.responses.create(model="tiny", input="Add hello.txt", tools=CUSTOM_TOOLS)
    [call] = resp.output
    assert (call.type, call.name, call.input) == ("custom_tool_call", "apply_patch", PATCH)

    async with client.responses.stream(model="tiny", input="Add hello.txt", tools=CUSTOM_TOOLS) as stream:
        kinds = [event.type async for event in stream]
        streamed = await stream.get_final_response()
    assert kinds[-4:] == ["response.custom_tool_call_input.delta", "response.custom_tool_call_input.done",
                          "response.output_item.done", "response.completed"]
    assert [(o.type, o.name, o.input) for o in streamed.output] == [("custom_tool_call", "apply_patch", PATCH)]

    await client.responses.create(model="tiny", tools=CUSTOM_TOOLS, input=[
        {"role": "user", "content": "Add hello.txt"},
        {"type": "custom_tool_call", "call_id": call.call_id, "name": "apply_patch", "input": call.input},
        {"type": "custom_tool_call_output", "call_id": call.call_id, "output": "Done! A hello.txt"}])
    assert "Done! A hello.txt" in json.loads(log.read_text().splitlines()[-1])["prompt"]


async def test_responses_bad_input_is_an_openai_400(base_url: Callable[..., Any]) -> None:
    client = openai.AsyncOpenAI(base_url=await base_url() + "/v1", api_key="x", max_retries=0)
    with pytest.raises(openai.BadRequestError, match="unknown input item type"):
        await client.responses.create(model="tiny", input=[{"type": "telepathy"}])
    with pytest.raises(openai.BadRequestError, match="not supported"):
        await client.responses.create(model="tiny", input="Hi", previous_response_id="resp_123")
    with pytest.raises(openai.NotFoundError):
        await client.responses.create(model="no-such-model", input="Hi")


async def test_openai_long_stream_equals_the_whole_answer(base_url: Callable[..., Any]) -> None:
    """Tokens after the first are written from the runner stream's callback: the client still reads one
    well-formed chunk per token, ending with the finish reason and [DONE]."""
    client = openai.AsyncOpenAI(base_url=await base_url(FAKE_TOKENS="60", FAKE_TOKEN_DELAY="0.002") + "/v1",
                                api_key="x", max_retries=0)
    whole = await client.chat.completions.create(model="tiny", messages=ASK)
    chunks = await _drain(await client.chat.completions.create(model="tiny", messages=ASK, stream=True))
    assert len(chunks) == 61 and all(c.id == chunks[0].id for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks] == [None] * 60 + ["stop"]
