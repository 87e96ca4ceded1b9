"""Protocol edges a client can reach: durations as Go parses them, a keep-alive past any clock, role names in any
case, and what the server answers to a method it does not serve."""

from __future__ import annotations

import datetime as dt

import pytest

from ollama_py.config import FOREVER, parse_duration
from tests.helpers.app import as_serve


@pytest.fixture
async def client(fake_app, aiohttp_client):
    _, app = fake_app()
    return await aiohttp_client(app)


@pytest.fixture
async def as_served(fake_app, aiohttp_server, aiohttp_client):
    """The app taking requests as serve's aiohttp does (server/serve.py PROTOCOL)."""
    _, app = fake_app()
    return await aiohttp_client(await aiohttp_server(app, **as_serve()))


async def test_a_browsers_localhost_cookies_past_8_kib_reach_the_api_and_the_console(as_served):
    """A browser sends every cookie of localhost, whatever the port, to the console and the API: a dozen local
    apps' cookies passed aiohttp's 8 KiB a header (before: a plain-text 400); Go's server takes 1 MB."""
    cookie = "; ".join(f"app{i}_session={'x' * 1500}" for i in range(14))  # ~21 KB
    for path in ("/api/version", "/api/tags", "/ui/"):
        r = await as_served.get(path, headers={"Cookie": cookie})
        assert r.status == 200, (path, await r.text())
    r = await as_served.get("/api/tags", params={"q": "y" * 30_000})  # a long request line too
    assert r.status == 200


@pytest.mark.parametrize("text,seconds", [
    ("5m", 300.0), ("1h30m", 5400.0), ("1.5h", 5400.0), (".5s", 0.5), ("5.s", 5.0), ("0", 0.0), ("-0", 0.0),
    ("+5m", 300.0), ("1µs", 1e-6), ("1μs", 1e-6), ("300", 300.0), ("2562047h", 2562047 * 3600.0),
    ("-1s", FOREVER), (-1, FOREVER), (1e12, FOREVER), (9.3e9, FOREVER), (9.2e9, 9.2e9),
], ids=["minutes", "compound", "fraction", "leading-dot", "trailing-dot", "zero", "minus-zero", "plus-sign",
        "micro-sign", "greek-mu", "numeric-string", "longest-hours", "negative", "negative-number",
        "huge-number", "just-past-longest", "just-under-longest"])
def test_durations_parse_as_go_and_ollama_read_them(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text,error", [
    ("--5m", 'time: invalid duration "--5m"'),
    ("+-5m", 'time: invalid duration "+-5m"'),
    ("-", 'time: invalid duration "-"'),
    (".s", 'time: invalid duration ".s"'),
    ("9999999999h", 'time: invalid duration "9999999999h"'),
    ("2562048h", 'time: invalid duration "2562048h"'),
    ("5x", 'time: unknown unit "x" in duration "5x"'),
    ("1h5", 'time: missing unit in duration "1h5"'),
    ("inf", 'time: invalid duration "inf"'),
], ids=["double-sign", "mixed-signs", "sign-only", "no-digits", "overflowing-hours", "just-past-int64",
        "unknown-unit", "missing-unit", "inf-word"])
def test_durations_go_refuses_are_refused(text, error):
    with pytest.raises(ValueError) as e:
        parse_duration(text)
    assert str(e.value) == error


@pytest.mark.parametrize("keep_alive", [1e12, 1e300, 9223372037], ids=["1e12", "1e300", "just-past-go-max"])
async def test_a_keep_alive_past_any_clock_is_forever_and_ps_still_answers(client, keep_alive):
    """A number of seconds beyond Go's longest duration is Ollama's forever: /api/ps shows ~292 years, not a 500."""
    r = await client.post("/api/generate", json={"model": "tiny", "keep_alive": keep_alive})
    assert r.status == 200
    ps = await client.get("/api/ps")
    assert ps.status == 200
    expires = dt.datetime.fromisoformat((await ps.json())["models"][0]["expires_at"])
    assert 292 < (expires - dt.datetime.now(dt.UTC)).days / 365.25 < 293


@pytest.mark.parametrize("keep_alive,error", [
    ("9999999999h", 'time: invalid duration "9999999999h"'),
    ("--5m", 'time: invalid duration "--5m"'),
], ids=["overflowing-string", "double-sign"])
async def test_a_keep_alive_go_refuses_is_a_400(client, keep_alive, error):
    r = await client.post("/api/generate", json={"model": "tiny", "keep_alive": keep_alive})
    assert r.status == 400 and (await r.json())["error"] == error
    ps = await client.get("/api/ps")
    assert ps.status == 200


@pytest.mark.parametrize("role", ["USER", "User", "uSeR"])
async def test_native_chat_takes_a_role_in_any_case(client, role):
    r = await client.post("/api/chat", json={"model": "tiny", "stream": False, "options": {"num_predict": 2},
                                             "messages": [{"role": "System", "content": "be brief"},
                                                          {"role": role, "content": "hi"}]})
    assert r.status == 200
    assert (await r.json())["message"] == {"role": "assistant", "content": "The quick"}


async def test_native_chat_takes_a_tool_role_in_any_case(client):
    messages = [{"role": "user", "content": "weather?"},
                {"role": "ASSISTANT", "content": "", "tool_calls": [{"function": {"name": "w", "arguments": {}}}]},
                {"role": "TOOl", "content": "sunny", "tool_name": "w"}]
    r = await client.post("/api/chat", json={"model": "tiny", "stream": False, "options": {"num_predict": 1},
                                             "messages": messages})
    assert r.status == 200 and (await r.json())["message"]["content"] == "The"


async def test_native_chat_still_refuses_an_unknown_role(client):
    r = await client.post("/api/chat", json={"model": "tiny", "messages": [{"role": "Banana", "content": "hi"}]})
    assert r.status == 400
    assert (await r.json())["error"] == ("invalid role 'Banana' in messages[0]: "
                                         "must be one of system, user, assistant, tool")


async def test_openai_chat_takes_a_role_in_any_case(client):
    r = await client.post("/v1/chat/completions", json={
        "model": "tiny", "max_tokens": 2,
        "messages": [{"role": "SYSTEM", "content": "be brief"}, {"role": "User", "content": "hi"}]})
    assert r.status == 200
    assert (await r.json())["choices"][0]["message"]["content"] == "The quick"


async def test_responses_take_a_role_in_any_case(client):
    r = await client.post("/v1/responses", json={"model": "tiny", "max_output_tokens": 2,
                                                 "input": [{"role": "Developer", "content": "be brief"},
                                                           {"role": "USER", "content": "hi"}]})
    assert r.status == 200
    assert (await r.json())["output"][0]["content"][0]["text"] == "The quick"


async def test_anthropic_messages_take_a_role_in_any_case(client):
    r = await client.post("/v1/messages", json={"model": "tiny", "max_tokens": 2,
                                                "messages": [{"role": "USER", "content": "hi"},
                                                             {"role": "Assistant", "content": "hello"},
                                                             {"role": "user", "content": "again"}]})
    assert r.status == 200
    assert (await r.json())["content"] == [{"type": "text", "text": "The quick"}]


@pytest.mark.parametrize("method,path,body,allow", [
    ("GET", "/api/generate", None, "POST"), ("PUT", "/api/tags", b"{}", "GET, HEAD"),
    ("DELETE", "/api/chat", None, "POST"), ("GET", "/api/delete", None, "DELETE"),
    ("POST", "/api/delete", b'{"model": "tiny"}', "DELETE"), ("POST", "/api/version", None, "GET, HEAD"),
    ("POST", "/api/ps", None, "GET, HEAD"), ("GET", "/api/create", None, "POST"),
    ("GET", "/api/blobs/sha256:" + "a" * 64, None, "HEAD, POST"), ("PATCH", "/v1/chat/completions", b"{}", "POST"),
    ("GET", "/v1/messages", None, "POST"), ("POST", "/v1/models", b"{}", "GET, HEAD"),
], ids=["get-generate", "put-tags", "delete-chat", "get-delete", "post-delete", "post-version", "post-ps",
        "get-create", "get-blob", "patch-oai-chat", "get-anthropic", "post-oai-models"])
async def test_a_method_a_path_does_not_take_is_ollamas_plain_405(client, method, path, body, allow):
    """Ollama's gin router (HandleMethodNotAllowed, since Ollama 0.7) answers 405 "405 method not allowed" as
    text/plain, with an Allow header naming the methods the path takes."""
    r = await client.request(method, path, data=body, headers={"Content-Type": "application/json"})
    assert r.status == 405
    assert r.content_type == "text/plain" and await r.text() == "405 method not allowed"
    assert r.headers["Allow"] == allow


@pytest.mark.parametrize("method,path", [("GET", "/api/nope"), ("POST", "/v1/nope"), ("POST", "/api/generate/x")])
async def test_a_path_nothing_serves_is_ollamas_plain_404(client, method, path):
    """gin's answer for a path no route has: 404 "404 page not found" as text/plain, no Allow header."""
    r = await client.request(method, path, data=b"{}", headers={"Content-Type": "application/json"})
    assert r.status == 404
    assert r.content_type == "text/plain" and await r.text() == "404 page not found"
    assert "Allow" not in r.headers


async def test_a_cors_preflight_still_gets_its_answer(client):
    r = await client.options("/api/chat", headers={"Origin": "http://localhost:3000",
                                                   "Access-Control-Request-Method": "POST"})
    assert r.status == 204 and r.headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
