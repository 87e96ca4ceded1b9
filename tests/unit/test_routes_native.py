"""Native routes over the fake runner: request checks and response shapes a client sees."""

from __future__ import annotations

import json
import re

import pytest


@pytest.fixture
async def client(fake_app, aiohttp_client):
    _, app = fake_app()
    return await aiohttp_client(app)


async def test_generate_stream_shapes(client):
    r = await client.post("/api/generate",
                          json={"model": "tiny", "prompt": "hello there", "options": {"num_predict": 3}})
    assert r.status == 200 and r.headers["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(x) for x in (await r.text()).splitlines()]
    assert "".join(x["response"] for x in lines) == "The quick brown"
    assert lines[-1]["done"] is True and lines[-1]["done_reason"] == "length" and lines[-1]["eval_count"] == 3
    assert isinstance(lines[-1]["context"], list)


async def test_chat_non_stream(client):
    r = await client.post("/api/chat", json={"model": "tiny", "stream": False,
                                              "messages": [{"role": "user", "content": "hi"}]})
    body = await r.json()
    assert body["message"] == {"role": "assistant", "content": "The quick brown fox jumps over the lazy"}
    assert body["done_reason"] == "stop"


@pytest.mark.parametrize("body,status,error", [
    ({"model": "tiny", "prompt": "x", "think": True}, 400, '"tiny" does not support thinking'),
    ({"model": "tiny", "prompt": "x", "think": "loud"}, 400,
     'think must be a boolean or one of "low", "medium", "high", "max"'),
    ({"model": "tiny", "prompt": "x", "raw": True, "system": "s"}, 400,
     "raw mode does not support template, system, or context"),
    ({"model": "tiny", "prompt": "x", "keep_alive": "soon"}, 400, 'time: invalid duration "soon"'),
    ({"model": "tiny", "prompt": "x", "options": {"temperature": "hot"}}, 400, None),
    ({"model": "nope", "prompt": "x"}, 404, "model 'nope' not found"),
    ({"prompt": "x"}, 400, "model is required"),
], ids=["think-unsupported", "think-bad-level", "raw-with-system", "bad-keep-alive", "bad-option-type",
        "unknown-model", "no-model"])
async def test_generate_refuses_bad_requests(client, body, status, error):
    r = await client.post("/api/generate", json=body)
    assert r.status == status
    got = (await r.json())["error"]
    if error is not None:
        assert got == error
    else:
        assert got.startswith('option "temperature" must be of type')


async def test_chat_think_false_is_fine(client):
    r = await client.post("/api/chat", json={"model": "tiny", "stream": False, "think": False,
                                              "messages": [{"role": "user", "content": "hi"}],
                                              "options": {"num_predict": 1}})
    assert r.status == 200 and (await r.json())["message"]["content"] == "The"


async def test_load_and_unload_with_empty_prompt(client):
    load = await (await client.post("/api/generate", json={"model": "tiny"})).json()
    assert load["done_reason"] == "load" and load["response"] == ""
    ps = await (await client.get("/api/ps")).json()
    assert [m["name"] for m in ps["models"]] == ["tiny:latest"]
    unload = await (await client.post("/api/chat", json={"model": "tiny", "keep_alive": 0})).json()
    assert unload["done_reason"] == "unload" and unload["message"] == {"role": "assistant", "content": ""}


async def test_a_model_kept_forever_expires_as_ollama_shows_it(client):
    """keep_alive -1: Ollama's expires_at is now plus the longest Go duration (~292 years ahead)."""
    import datetime as dt

    await client.post("/api/generate", json={"model": "tiny", "keep_alive": -1})
    ps = await (await client.get("/api/ps")).json()
    expires = dt.datetime.fromisoformat(ps["models"][0]["expires_at"].replace("Z", "+00:00"))
    years = (expires - dt.datetime.now(dt.UTC)).days / 365.25
    assert 292 < years < 293
    await client.post("/api/generate", json={"model": "tiny", "keep_alive": "1m"})
    ps = await (await client.get("/api/ps")).json()
    expires = dt.datetime.fromisoformat(ps["models"][0]["expires_at"].replace("Z", "+00:00"))
    assert 0 < (expires - dt.datetime.now(dt.UTC)).total_seconds() <= 60


async def test_an_http_1_0_client_gets_the_whole_stream_unchunked(fake_app, aiohttp_server):
    """HTTP/1.0 has no chunked encoding: the stream is the body up to the close (no direct chunk writes)."""
    import asyncio

    _, app = fake_app(fake_env={"FAKE_TOKEN_DELAY": "0.005"})
    server = await aiohttp_server(app)
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    body = json.dumps({"model": "tiny", "prompt": "hello", "options": {"num_predict": 6}}).encode()
    writer.write(b"POST /api/generate HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                 % (len(body), body))
    raw = await reader.read()
    writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and b"chunked" not in head.lower()
    lines = [json.loads(x) for x in payload.splitlines()]
    assert "".join(x["response"] for x in lines) == "The quick brown fox jumps over"
    assert lines[-1]["done"] is True


def _dechunk(raw: bytes) -> list[bytes]:
    """An HTTP/1.1 chunked body -> its chunks (asserting the framing), up to the terminating zero chunk."""
    chunks, pos = [], 0
    while True:
        eol = raw.index(b"\r\n", pos)
        size = int(raw[pos:eol], 16)
        if size == 0:
            assert raw[eol:] == b"\r\n\r\n"
            return chunks
        chunks.append(raw[eol + 2 : eol + 2 + size])
        assert raw[eol + 2 + size : eol + 4 + size] == b"\r\n"
        pos = eol + 4 + size


async def _raw_stream(port: int, body: dict, rcvbuf: int | None = None, pause: float = 0.0) -> tuple[bytes, bytes]:
    import asyncio
    import socket

    sock = socket.socket()
    if rcvbuf:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.connect(("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock)
    data = json.dumps(body).encode()
    writer.write(b"POST /api/chat HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Connection: close\r\nContent-Length: %d\r\n\r\n%s" % (len(data), data))
    await asyncio.sleep(pause)  # a client that does not read for a while
    raw = await reader.read()
    writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    return head, payload


async def test_a_streamed_chat_is_one_ndjson_line_per_chunk(fake_app, aiohttp_server):
    """Tokens after the first are written from the runner stream's callback: still one well-formed chunk each."""
    _, app = fake_app(fake_env={"FAKE_TOKEN_DELAY": "0.002", "FAKE_TOKENS": "40"})
    server = await aiohttp_server(app)
    head, payload = await _raw_stream(server.port, {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
    assert head.startswith(b"HTTP/1.1 200") and b"transfer-encoding: chunked" in head.lower()
    chunks = _dechunk(payload)
    assert all(c.endswith(b"\n") and c.count(b"\n") == 1 for c in chunks)
    lines = [json.loads(c) for c in chunks]
    assert [x["done"] for x in lines] == [False] * 40 + [True]
    assert all(x["model"] == "tiny" and x["message"]["role"] == "assistant" for x in lines)
    assert "".join(x["message"]["content"] for x in lines).startswith("The quick brown fox jumps over the lazy dog")
    assert lines[-1]["done_reason"] == "stop"


async def test_a_client_that_reads_slowly_still_gets_every_chunk_in_order(fake_app, aiohttp_server):
    """A client that reads nothing for a second, through a small receive buffer: every chunk, in order."""
    _, app = fake_app(fake_env={"FAKE_TOKEN_DELAY": "0", "FAKE_TOKENS": "1500"})
    server = await aiohttp_server(app)
    head, payload = await _raw_stream(server.port, {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]},
                                    rcvbuf=4096, pause=1.0)
    lines = [json.loads(c) for c in _dechunk(payload)]
    assert len(lines) == 1501 and lines[-1]["done"] is True and lines[-1]["done_reason"] == "stop"
    words = "".join(x["message"]["content"] for x in lines[:-1]).split()
    assert len(words) == 1500


def test_a_lane_frames_chunks_and_stands_down_for_a_slow_or_gone_client():
    from types import SimpleNamespace

    from ollama_py.server.streaming import Lane, ndjson_line

    class Transport:
        def __init__(self) -> None:
            self.sent, self.buffered, self.closing = [], 0, False

        def write(self, data: bytes) -> None:
            self.sent.append(data)

        def get_write_buffer_size(self) -> int:
            return self.buffered

        def is_closing(self) -> bool:
            return self.closing

    lane = Lane(lambda text, _at: ndjson_line({"response": text}))
    assert not lane.ready()  # not bound yet
    transport, writer = Transport(), SimpleNamespace(output_size=100)
    request = SimpleNamespace(transport=transport, writer=writer)
    lane.bind(request, SimpleNamespace(headers={"Transfer-Encoding": "chunked"}, compression=False))
    assert lane.ready()
    lane.write("hé")
    line = '{"response":"hé"}\n'.encode()
    assert transport.sent == [b"%x\r\n%s\r\n" % (len(line), line)]
    assert writer.output_size == 100 + len(transport.sent[0])
    transport.buffered = 1 << 20
    assert not lane.ready()  # a slow client: the ordinary path, which waits for it
    assert lane.write("more") is False and lane.put(b"more") is False and len(transport.sent) == 1
    transport.buffered, transport.closing = 0, True
    assert not lane.ready()  # a client that hung up
    assert lane.write("more") is False and len(transport.sent) == 1
    unchunked = Lane(lambda text, _at: b'{"response":"%s"}' % text.encode())
    unchunked.bind(request, SimpleNamespace(headers={}, compression=False))  # HTTP/1.0: no chunked framing
    assert not unchunked.ready()


TRICKY_TEXTS = ["", " world", 'say "hi"\\n', "tab\there\nnew line", "\x00\x1f\x7f", "héllo 日本 🐉", "\u2028\u2029",
                "</script>&<>", "\ue000text\ue000", "\\u0041"]


@pytest.mark.parametrize("text", TRICKY_TEXTS, ids=repr)
def test_a_chunk_filled_in_per_token_is_the_chunk_the_route_renders(text: str) -> None:
    """The lane's writer fills a chunk rendered once with markers; what it frames must be what the route's own
    encoding (a dict through fastjson) gives, for any text, wherever created_at sits."""
    from types import SimpleNamespace

    from ollama_py.server.streaming import Lane, escaped, ndjson_line, sse_event

    renders = {
        "time before the text": lambda t, at: ndjson_line({"model": "m:latest", "created_at": at, "response": t,
                                                           "done": False}),
        "time after the text": lambda t, at: ndjson_line({"message": {"role": "assistant", "content": t},
                                                          "created_at": at}),
        "no time": lambda t, at: sse_event({"id": "chatcmpl-1", "choices": [{"delta": {"content": t}}]}),
    }
    for name, render in renders.items():
        lane, sent = Lane(render), []
        transport = SimpleNamespace(write=sent.append, get_write_buffer_size=lambda: 0, is_closing=lambda: False)
        lane.bind(SimpleNamespace(transport=transport, writer=SimpleNamespace(output_size=0)),
                  SimpleNamespace(headers={"Transfer-Encoding": "chunked"}, compression=False))
        assert lane.put(escaped(text)) is True
        size, _, rest = sent[0].partition(b"\r\n")
        chunk = rest.removesuffix(b"\r\n")
        assert int(size, 16) == len(chunk) and rest.endswith(b"\r\n"), name
        stamp = json.loads(chunk.decode().removeprefix("data: ")).get("created_at", "")
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", stamp) or "no time" in name, name
        assert chunk == render(text, stamp), name
        assert json.loads(chunk.decode().removeprefix("data: ")) == json.loads(render(text, stamp).decode()
                                                                              .removeprefix("data: "))


async def test_a_streamed_generate_gives_the_same_context_as_a_whole_one(fake_app, aiohttp_client):
    """The tokens of chunks written through the lane still make up the final `context`."""
    _, app = fake_app(fake_env={"FAKE_TOKEN_DELAY": "0.002", "FAKE_TOKENS": "30"})
    client = await aiohttp_client(app)
    body = {"model": "tiny", "prompt": "hello there"}
    whole = await (await client.post("/api/generate", json={**body, "stream": False})).json()
    lines = [json.loads(x) for x in (await (await client.post("/api/generate", json=body)).text()).splitlines()]
    assert "".join(x["response"] for x in lines) == whole["response"]
    assert lines[-1]["context"] == whole["context"] and len(whole["context"]) > 30


async def test_the_prompts_ids_for_context_are_asked_for_while_the_answer_streams(fake_app, aiohttp_client,
                                                                                    tmp_path):
    """A non-raw /api/generate's `context` needs the prompt's token ids: the runner's /tokenize is asked once the
    first token is out, beside the decode, not after the last one; the context is the same as before."""
    log = tmp_path / "bodies.jsonl"
    _, app = fake_app(fake_env={"FAKE_TOKEN_DELAY": "0.05", "FAKE_TOKENS": "12", "FAKE_LOG_FILE": str(log)})
    client = await aiohttp_client(app)
    body = {"model": "tiny", "prompt": "tell me about ids", "options": {"num_predict": 12}}

    def tokenize_calls() -> int:
        return sum(1 for line in log.read_text().splitlines() if '"add_special"' in line and "n_predict" not in line)

    resp = await client.post("/api/generate", json=body)
    lines, asked_mid_stream = [], None
    async for raw in resp.content:
        lines.append(json.loads(raw))
        if len(lines) == 4:  # three tokens later (50 ms each): the stream is far from its end
            asked_mid_stream = tokenize_calls()
    assert asked_mid_stream == 1 and not lines[3]["done"] and lines[-1]["done"]
    assert tokenize_calls() == 1  # asked once, used at the end
    final = lines[-1]  # the first request: the runner evaluated the whole prompt, the context holds all of it
    assert len(final["context"]) == final["prompt_eval_count"] + final["eval_count"] and final["eval_count"] == 12
    whole = await (await client.post("/api/generate", json={**body, "stream": False})).json()
    assert whole["context"] == final["context"]


async def test_a_prompt_with_emoji_and_cjk_reaches_the_runner_as_written(fake_app, aiohttp_client, tmp_path):
    """The runner's request carries non-ASCII text escaped (\\uXXXX: fastjson.dumps_ascii, the quick encoding of an
    agent's prompt); what the runner reads is the prompt as the client wrote it, emoji and all."""
    log = tmp_path / "bodies.jsonl"
    _, app = fake_app(fake_env={"FAKE_LOG_FILE": str(log)})
    client = await aiohttp_client(app)
    prompt = 'Réponds → "oui" 🐉 日本語\n\\ done'
    resp = await client.post("/api/generate", json={"model": "tiny", "prompt": prompt, "raw": True, "stream": False})
    assert resp.status == 200 and (await resp.json())["done"]
    sent = [line for line in log.read_text().splitlines() if "n_predict" in line]
    assert len(sent) == 1 and json.loads(sent[0])["prompt"] == prompt


@pytest.mark.parametrize("path", ["/api/generate", "/api/chat"])
async def test_a_streamed_reply_with_quotes_newlines_and_unicode_is_the_whole_reply(path, fake_app, aiohttp_client):
    """Tokens with nothing to escape are spliced into chunks as llama-server's bytes, the others re-encoded: the
    client's text is the same either way, and the same as the unstreamed reply."""
    reply = 'Voilà: "quoted" text,\nback\\slash, tab\there, 日本語 and 🐉 done'
    _, app = fake_app(fake_env={"FAKE_TOKEN_DELAY": "0.002", "FAKE_REPLY": reply, "FAKE_TOKENS": "40"})
    client = await aiohttp_client(app)
    body = {"model": "tiny", "prompt": "go"} if path == "/api/generate" else \
        {"model": "tiny", "messages": [{"role": "user", "content": "go"}]}

    def text(x: dict) -> str:
        return x["response"] if path == "/api/generate" else x["message"]["content"]

    whole = await (await client.post(path, json={**body, "stream": False})).json()
    lines = [json.loads(x) for x in (await (await client.post(path, json=body)).text()).splitlines()]
    assert len(lines) > 10 and lines[-1]["done"] is True
    assert "".join(text(x) for x in lines) == text(whole)
    assert text(whole).startswith(reply)
