"""The coding agents' real first requests (tests/data/agents/, recorded from Claude Code and Codex CLI) replayed
against the gateway over the fake runner: each is accepted and answered in its client's protocol, and a tool
round trip on each protocol completes, streamed (issue 37)."""

from __future__ import annotations

import gzip
import json
import sys
import zlib
from pathlib import Path
from typing import Any

import pytest

from ollama_py import OLLAMA_API_VERSION
from tests.helpers.app import as_serve, create_tiny_model, fake_scheduler, make_settings

if sys.version_info >= (3, 14):
    from compression import zstd
else:
    from backports import zstd

AGENTS = Path(__file__).parent.parent / "data" / "agents"
# Messages in order, past calls as <tool_call> JSON, and the tools listed: the model can call tools.
TEMPLATE = ('{{- range .Messages }}<|{{ .Role }}|>{{ .Content }}{{ range .ToolCalls }}<tool_call>{"name": '
            '"{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}</tool_call>{{ end }}\n{{ end }}'
            '{{ if .Tools }}<tools>{{ range .Tools }}{{ .Function.Name }} {{ end }}</tools>{{ end }}<|assistant|>')
HELLO = "Hi there!"
SECRET = "ZEBRA-7731"  # what the tool returns: in the prompt only once the client sent the tool's result
ANSWER = f"The note says {SECRET}."
_NOT_REPLAYED = {"host", "content-length", "authorization", "x-api-key", "accept-encoding", "connection"}


def recorded(name: str) -> Any:
    return json.loads((AGENTS / name).read_text())


def tool_call(name: str, arguments: dict[str, Any]) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.fixture
def gateway(tmp_path: Path, tiny_gguf: Path, aiohttp_server, aiohttp_client):
    """start(reply): the gateway with the model `smollm2` (the name the recordings use) saying `reply`, or ANSWER
    once SECRET is in its prompt. client.prompts(): the prompts the runner got; client.bodies(): its requests."""
    from ollama_py.server.app import create_app

    async def start(reply: str = HELLO):
        settings = make_settings(tmp_path)
        create_tiny_model(settings, tiny_gguf, "smollm2", template=TEMPLATE)
        log = tmp_path / "runner.jsonl"
        env = {"FAKE_REPLY": reply, "FAKE_REPLY_WHEN": json.dumps([[SECRET, ANSWER]]), "FAKE_LOG_FILE": str(log)}
        app = create_app(settings, scheduler=fake_scheduler(settings, env))
        client = await aiohttp_client(await aiohttp_server(app, **as_serve()))
        client.bodies = lambda: [b for line in log.read_text().splitlines()  # type: ignore[attr-defined]
                                 if "prompt" in (b := json.loads(line))]
        return client

    return start


async def replay(client: Any, req: dict[str, Any], body: Any = None) -> Any:
    headers = {k: v for k, v in req["headers"].items() if k.lower() not in _NOT_REPLAYED}
    return await client.request(req["method"], req["path"], params=req.get("query") or None, headers=headers,
                                json=req["body"] if body is None else body)


def sse_events(text: str) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) of each SSE event."""
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        events.append((lines.get("event", ""), json.loads(lines["data"])))
    return events


def anthropic_answer(events: list[tuple[str, dict[str, Any]]]) -> tuple[str, list[dict[str, Any]], str]:
    """The text, the tool_use blocks and the stop_reason of a streamed message, checking the event grammar."""
    names = [n for n, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    assert all(data["type"] == name for name, data in events)
    text = "".join(d["delta"].get("text", "") for n, d in events if n == "content_block_delta")
    tools = [d["content_block"] for n, d in events
             if n == "content_block_start" and d["content_block"]["type"] == "tool_use"]
    for block in tools:
        block["input"] = json.loads("".join(d["delta"]["partial_json"] for n, d in events if n == "content_block_delta"
                                            and d["delta"]["type"] == "input_json_delta"))
    starts = sum(n == "content_block_start" for n in names)
    assert starts == sum(n == "content_block_stop" for n in names)
    return text, tools, events[-2][1]["delta"]["stop_reason"]


def responses_answer(events: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """The completed response of a streamed /v1/responses answer, checking the event grammar."""
    names = [n for n, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"] and names[-1] == "response.completed"
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    return events[-1][1]["response"]


# -- the recorded first requests ------------------------------------------------------------------------------------

async def test_claude_codes_first_request_is_answered(gateway):
    client = await gateway()
    req = recorded("claude_code_first_request.json")
    r = await replay(client, req)
    assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(await r.text())
    assert anthropic_answer(events) == (HELLO, [], "end_turn")
    # message_start's estimate, before the prompt is evaluated: 4 characters a token of the request as it came
    sent = len(json.dumps(req["body"]).encode())  # what the client's json= sent
    assert events[0][1]["message"]["usage"]["input_tokens"] == sent // 4
    prompt = client.bodies()[-1]["prompt"]
    # its mid-conversation system message is rendered where it stands: after the first user message
    system_at = [m for m in req["body"]["messages"] if m["role"] == "system"][0]["content"][0]["text"]
    assert prompt.index("<|user|>") < prompt.index("<|system|>" + system_at[:40])
    assert prompt.startswith("<|system|>x-anthropic-billing-header")  # the list-shaped `system` comes first
    assert "<tools>Agent Bash Edit" in prompt

    whole = await replay(client, req, {**req["body"], "stream": False})
    assert whole.status == 200
    message = await whole.json()
    assert (message["type"], message["role"], message["content"], message["stop_reason"]) == (
        "message", "assistant", [{"type": "text", "text": HELLO}], "end_turn")


async def test_codexs_first_request_is_answered(gateway):
    client = await gateway()
    req = recorded("codex_first_request.json")
    r = await replay(client, req)
    assert r.status == 200
    response = responses_answer(sse_events(await r.text()))
    assert response["status"] == "completed"
    assert [(o["type"], o["content"][0]["text"]) for o in response["output"]] == [("message", HELLO)]
    assert response["tools"] == req["body"]["tools"]  # its own declarations, echoed
    tools = client.bodies()[-1]["prompt"].split("<tools>")[1]
    assert "multi_agent_v1.spawn_agent " in tools and "exec_command " in tools and "web_search" not in tools


@pytest.mark.parametrize("coding", ["zstd", "gzip", "deflate"])
async def test_codexs_request_compressed_as_codex_sends_it_is_answered_as_the_plain_one(gateway, coding: str):
    """Codex CLI zstd-compresses its /v1/responses bodies on its ChatGPT-login path (level 3): the same answer,
    the same prompt at the runner. (Before: aiohttp decoded gzip inline on the loop, unbounded, and zstd not at
    all -- a 500.)"""
    client = await gateway(tool_call("exec_command", {"cmd": "cat note.txt"}))
    req = recorded("codex_function_call_output_request.json")
    plain = json.dumps(req["body"]).encode()
    packed = {"zstd": lambda b: zstd.compress(b, 3), "gzip": gzip.compress, "deflate": zlib.compress}[coding](plain)
    headers = {k: v for k, v in req["headers"].items() if k.lower() not in _NOT_REPLAYED}
    r = await client.post(req["path"], data=packed, headers={**headers, "Content-Type": "application/json",
                                                              "Content-Encoding": coding})
    assert r.status == 200, await r.text()
    response = responses_answer(sse_events(await r.text()))
    assert [(o["type"], o["content"][0]["text"]) for o in response["output"]] == [("message", ANSWER)]
    compressed_prompt = client.bodies()[-1]["prompt"]
    assert (await replay(client, req)).status == 200
    assert client.bodies()[-1]["prompt"] == compressed_prompt


async def test_a_body_in_a_coding_serve_cannot_decode_is_refused_in_the_clients_protocol(gateway):
    client = await gateway()
    req = recorded("codex_first_request.json")
    r = await client.post(req["path"], data=b"\x0b\x01\x80" + json.dumps(req["body"]).encode(),
                          headers={"Content-Type": "application/json", "Content-Encoding": "br"})
    assert r.status == 415
    assert await r.json() == {"error": {
        "message": "unsupported Content-Encoding 'br': send the body as plain JSON, or encoded with gzip, deflate, "
                   "zstd", "type": "invalid_request_error", "param": None, "code": None}}


async def test_codex_oss_starts_and_is_answered(gateway):
    client = await gateway()
    for req in recorded("codex_oss_requests.json"):
        if req["path"] == "/api/pull":
            continue  # Codex pulls a name /api/tags lists as smollm2:latest; a pull needs a registry
        r = await replay(client, req, req["body"])
        assert r.status == 200, (req["path"], await r.text())
        if req["path"] == "/api/version":
            version = (await r.json())["version"]
            assert version == OLLAMA_API_VERSION and tuple(map(int, version.split("."))) >= (0, 13, 4)
        if req["path"] == "/v1/responses":
            assert responses_answer(sse_events(await r.text()))["output"][0]["content"][0]["text"] == HELLO


# -- a tool round trip on each protocol, streamed ------------------------------------------------------------------

async def test_claude_code_tool_round_trip(gateway):
    client = await gateway(tool_call("Read", {"file_path": "/work/note.txt"}))
    req = recorded("claude_code_first_request.json")
    first = await replay(client, req)
    text, tools, reason = anthropic_answer(sse_events(await first.text()))
    assert (text, reason) == ("", "tool_use")
    assert [(t["name"], t["input"]) for t in tools] == [("Read", {"file_path": "/work/note.txt"})]
    turn = {**req["body"], "messages": [
        *req["body"]["messages"],
        {"role": "assistant", "content": [{"type": "tool_use", "id": tools[0]["id"], "name": "Read",
                                           "input": tools[0]["input"]}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tools[0]["id"],
                                      "content": [{"type": "text", "text": f"1\t{SECRET}"}]}]}]}
    second = await replay(client, req, turn)
    assert anthropic_answer(sse_events(await second.text())) == (ANSWER, [], "end_turn")


async def test_codex_tool_round_trip_with_a_namespaced_tool(gateway):
    client = await gateway(tool_call("multi_agent_v1.spawn_agent", {"message": "read note.txt"}))
    req = recorded("codex_first_request.json")
    first = responses_answer(sse_events(await (await replay(client, req)).text()))
    calls = [o for o in first["output"] if o["type"] == "function_call"]
    assert [(c["namespace"], c["name"], json.loads(c["arguments"])) for c in calls] == [
        ("multi_agent_v1", "spawn_agent", {"message": "read note.txt"})]
    turn = {**req["body"], "input": [
        *req["body"]["input"],
        {"type": "function_call", "namespace": "multi_agent_v1", "name": "spawn_agent",
         "arguments": calls[0]["arguments"], "call_id": calls[0]["call_id"]},
        {"type": "function_call_output", "call_id": calls[0]["call_id"], "output": SECRET}]}
    second = responses_answer(sse_events(await (await replay(client, req, turn)).text()))
    assert [(o["type"], o["content"][0]["text"]) for o in second["output"]] == [("message", ANSWER)]
    assert '<tool_call>{"name": "multi_agent_v1.spawn_agent"' in client.bodies()[-1]["prompt"]


# -- the recorded second requests of a tool round trip ---------------------------------------------------------------

async def test_claude_codes_tool_result_request_is_answered_from_the_result(gateway):
    client = await gateway(tool_call("Read", {"file_path": "note.txt"}))  # what it says until it has the result
    req = recorded("claude_code_tool_result_request.json")
    r = await replay(client, req)
    assert r.status == 200
    assert anthropic_answer(sse_events(await r.text())) == (ANSWER, [], "end_turn")
    prompt = client.bodies()[-1]["prompt"]
    # the past call and its result, in order, after the mid-conversation system message (a plain string here)
    assert (prompt.index("<|system|># Environment") < prompt.index('<tool_call>{"name": "Read"')
            < prompt.index(f"<|tool|>1\t{SECRET}"))


async def test_codexs_function_call_output_request_is_answered_from_the_output(gateway):
    client = await gateway(tool_call("exec_command", {"cmd": "cat note.txt"}))
    req = recorded("codex_function_call_output_request.json")
    r = await replay(client, req)
    assert r.status == 200
    response = responses_answer(sse_events(await r.text()))
    assert [(o["type"], o["content"][0]["text"]) for o in response["output"]] == [("message", ANSWER)]
    prompt = client.bodies()[-1]["prompt"]
    assert prompt.index('<tool_call>{"name": "exec_command"') < prompt.index(f"Output:\n{SECRET}")


def every_recorded_request() -> list[Any]:
    """Each request of every recording in tests/data/agents (a file holds one request or a list of them), but a
    pull: it needs a registry, the one thing the gateway cannot answer here."""
    out = []
    for path in sorted(AGENTS.glob("*.json")):
        data = json.loads(path.read_text())
        for i, req in enumerate(data if isinstance(data, list) else [data]):
            if req["path"] != "/api/pull":
                out.append(pytest.param(req, id=f"{path.stem}[{i}]{req['method']} {req['path']}"))
    return out


@pytest.mark.parametrize("req", every_recorded_request())
async def test_every_recorded_request_is_accepted(gateway, req: dict[str, Any]):
    """A recording added later is checked too: answered 200, in its client's protocol."""
    client = await gateway()
    r = await replay(client, req, req["body"])
    assert r.status == 200, await r.text()
    streamed = isinstance(req["body"], dict) and req["body"].get("stream")
    if req["path"].startswith("/v1/messages"):
        if streamed:
            assert anthropic_answer(sse_events(await r.text()))[2] in ("end_turn", "tool_use", "max_tokens")
        else:
            assert (await r.json())["type"] == "message"
    elif req["path"] == "/v1/responses":
        if streamed:
            assert responses_answer(sse_events(await r.text()))["status"] == "completed"
        else:
            assert (await r.json())["status"] == "completed"
