"""The fake llama-server behaves like the real one where gateway tests rely on it."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.fakes.fake_llama_server import ServerArgs, fake_command, parse_args

SENTENCE = "The quick brown fox jumps over the lazy"  # what the fake says with FAKE_TOKENS=8
DEADLINE = 15.0  # a guard against hanging, not a timing assertion


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def fake(tmp_path: Path, *flags: str, wait: bool = True, **env: str) -> Iterator[tuple[subprocess.Popen, str]]:
    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF")
    port = _free_port()
    stderr = open(tmp_path / "stderr.log", "wb")  # noqa: SIM115 - a file, so a chatty child never blocks on a pipe
    proc = subprocess.Popen([*fake_command(), "--model", str(model), "--port", str(port), *flags],
                            stderr=stderr, env={**os.environ, **env})
    url = f"http://127.0.0.1:{port}"
    try:
        if wait:
            until(lambda: _status(url + "/health") == 200)
        yield proc, url
    finally:
        proc.kill()
        proc.wait()
        stderr.close()


def until(predicate, deadline: float = DEADLINE) -> None:
    end = time.monotonic() + deadline
    while not predicate():
        assert time.monotonic() < end, "condition never became true"
        time.sleep(0.02)


def _status(url: str) -> int:
    try:
        return requests.get(url, timeout=2).status_code
    except requests.ConnectionError:
        return 0


def events(resp: requests.Response) -> list[dict]:
    return [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith(b"data: {")]


@pytest.mark.parametrize(("argv", "expected"), [
    (["--model", "/m", "--port", "9", "-c", "8192", "-np", "2"], ServerArgs(model="/m", port=9, ctx_size=8192,
                                                                            parallel=2)),
    (["-m", "/m", "--keep", "-1", "--flash-attn", "on", "--no-webui", "--metrics"], ServerArgs(model="/m",
                                                                                               metrics=True, keep=-1)),
    (["--model=/m", "--some-new-flag", "v", "--embeddings", "--pooling", "none"],
     ServerArgs(model="/m", embedding=True, pooling="none")),
    (["--model", "/m", "--unknown-switch", "--jinja", "-ngl", "99"], ServerArgs(model="/m", n_gpu_layers="99")),
], ids=["ollama-core", "ignored-values-and-switches", "unknown-flag-with-value", "unknown-switch"])
def test_parse_args(argv: list[str], expected: ServerArgs) -> None:
    assert parse_args(argv) == expected


def test_health_is_503_while_loading_then_200(tmp_path: Path) -> None:
    with fake(tmp_path, wait=False, FAKE_LOAD_SECONDS="1.5") as (_, url):
        until(lambda: _status(url + "/health") != 0)
        first = requests.get(url + "/health")
        assert first.status_code == 503
        assert first.json() == {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
        until(lambda: _status(url + "/health") == 200)
        assert requests.get(url + "/health").json() == {"status": "ok"}


def test_streamed_completion_sends_each_token_then_a_final_event(tmp_path: Path) -> None:
    with fake(tmp_path) as (_, url):
        got = events(requests.post(url + "/completion", json={"prompt": "Say hello", "stream": True}, stream=True))
    *tokens, final = got
    assert "".join(e["content"] for e in tokens) == SENTENCE
    assert all(e["stop"] is False and len(e["tokens"]) == 1 for e in tokens)
    assert final["stop"] is True and final["stop_type"] == "eos" and final["content"] == ""
    assert final["tokens_predicted"] == 9  # 8 words and the EOS token, as llama-server counts them
    assert final["tokens_evaluated"] == 3  # BOS + two words
    assert final["timings"]["predicted_n"] == 9 and final["timings"]["prompt_n"] == 3


def test_n_predict_stops_by_limit_and_prompt_prefix_is_cached(tmp_path: Path) -> None:
    bodies = [{"prompt": "one two three", "n_predict": 2}, {"prompt": "one two four", "n_predict": 2}]
    with fake(tmp_path, FAKE_LOG_FILE=str(tmp_path / "bodies.jsonl")) as (_, url):
        first, second = (requests.post(url + "/completion", json=b).json() for b in bodies)
    assert (first["content"], first["stop_type"], first["tokens_predicted"]) == ("The quick", "limit", 2)
    assert first["timings"]["cache_n"] == 0
    assert second["timings"]["cache_n"] == 3 and second["timings"]["prompt_n"] == 1
    assert [json.loads(line) for line in (tmp_path / "bodies.jsonl").read_text().splitlines()] == bodies


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_stop_word_cuts_the_text_and_is_never_sent(tmp_path: Path, stream: bool) -> None:
    body = {"prompt": "go", "stop": ["fox jumps"], "stream": stream}
    with fake(tmp_path) as (_, url):
        resp = requests.post(url + "/completion", json=body, stream=stream)
        got = events(resp) if stream else [resp.json()]
    assert "".join(e["content"] for e in got) == "The quick brown "
    assert got[-1]["stop_type"] == "word" and got[-1]["stopping_word"] == "fox jumps"


def test_reply_when_answers_by_what_the_prompt_holds(tmp_path: Path) -> None:
    rules = json.dumps([["tool result: 42", "The answer is 42."], ["weather", "<tool_call>{}</tool_call>"]])
    with fake(tmp_path, FAKE_REPLY_WHEN=rules, FAKE_REPLY="Hello there.") as (_, url):
        said = [requests.post(url + "/completion", json={"prompt": p}).json()["content"]
                for p in ("What is the weather?", "What is the weather? tool result: 42", "Hi")]
    assert said == ["<tool_call>{}</tool_call>", "The answer is 42.", "Hello there."]


def test_tokenize_and_detokenize_round_trip(tmp_path: Path) -> None:
    with fake(tmp_path) as (_, url):
        plain = requests.post(url + "/tokenize", json={"content": "Hello  big\nworld"}).json()["tokens"]
        special = requests.post(url + "/tokenize", json={"content": "Hello", "add_special": True}).json()["tokens"]
        text = requests.post(url + "/detokenize", json={"tokens": plain}).json()["content"]
    assert len(plain) == 3 and len(special) == 2 and special[1] == plain[0]
    assert text == "Hello  big\nworld"


def test_chat_completion_uses_chatml_and_openai_shapes(tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "hi"}]
    with fake(tmp_path) as (_, url):
        prompt = requests.post(url + "/apply-template", json={"messages": messages}).json()["prompt"]
        reply = requests.post(url + "/v1/chat/completions", json={"messages": messages, "max_tokens": 3}).json()
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert reply["choices"][0]["message"] == {"role": "assistant", "content": "The quick brown"}
    assert reply["choices"][0]["finish_reason"] == "length" and reply["usage"]["completion_tokens"] == 3


def test_embeddings_need_the_flag(tmp_path: Path) -> None:
    with fake(tmp_path) as (_, url):
        refused = requests.post(url + "/embedding", json={"content": "x"})
    assert refused.status_code == 501
    assert refused.json()["error"]["message"] == "This server does not support embeddings. Start it with `--embeddings`"
    with fake(tmp_path, "--embeddings") as (_, url):
        native = requests.post(url + "/embedding", json={"content": "x"}).json()
        oai = requests.post(url + "/v1/embeddings", json={"input": ["x", "y"]}).json()
    assert len(native) == 1 and len(native[0]["embedding"]) == 1 and len(native[0]["embedding"][0]) == 16
    assert [d["embedding"] for d in oai["data"]][0] == native[0]["embedding"][0]
    assert oai["usage"]["prompt_tokens"] == 4


def test_client_that_goes_away_frees_its_slot(tmp_path: Path) -> None:
    with fake(tmp_path, "-np", "1", FAKE_TOKEN_DELAY="0.05", FAKE_TOKENS="1000") as (_, url):
        resp = requests.post(url + "/completion", json={"prompt": "x", "stream": True}, stream=True)
        lines = resp.iter_lines()  # keep it: a dropped generator closes the connection
        next(lines)
        assert requests.get(url + "/slots").json()[0]["is_processing"] is True
        resp.close()
        until(lambda: requests.get(url + "/slots").json()[0]["is_processing"] is False)
        again = requests.post(url + "/completion", json={"prompt": "x", "n_predict": 1}).json()
    assert again["content"] == "The"


def test_a_request_waits_while_every_slot_is_busy(tmp_path: Path) -> None:
    with fake(tmp_path, "-np", "1", "--metrics", FAKE_TOKEN_DELAY="0.02", FAKE_TOKENS="1000") as (_, url):
        holder = requests.post(url + "/completion", json={"prompt": "a", "stream": True}, stream=True)
        lines = holder.iter_lines()  # keep it: a dropped generator closes the connection
        next(lines)
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            waiter = pool.submit(requests.post, url + "/completion", json={"prompt": "b", "n_predict": 1})
            until(lambda: "llamacpp:requests_deferred 1" in requests.get(url + "/metrics").text)
            assert not waiter.done()
            holder.close()
            assert waiter.result(timeout=DEADLINE).json()["content"] == "The"


def test_load_details_are_logged_from_verbosity_4(tmp_path: Path) -> None:
    with fake(tmp_path, "-lv", "4"):
        pass
    verbose = (tmp_path / "stderr.log").read_text()
    with fake(tmp_path):
        pass
    default = (tmp_path / "stderr.log").read_text()
    line = "I load_tensors:   CPU_Mapped model buffer size =    98.00 MiB"
    assert line in verbose and line not in default
    assert "I srv  llama_server: listening on http://127.0.0.1:" in default


def test_crash_after_n_tokens_breaks_the_stream_and_exits(tmp_path: Path) -> None:
    with fake(tmp_path, FAKE_CRASH_AFTER_TOKENS="3", FAKE_EXIT_CODE="7") as (proc, url):
        resp = requests.post(url + "/completion", json={"prompt": "x", "stream": True}, stream=True)
        got = []
        with pytest.raises(requests.exceptions.ChunkedEncodingError):
            for line in resp.iter_lines():
                if line.startswith(b"data: "):
                    got.append(json.loads(line[6:]))
        assert proc.wait(timeout=DEADLINE) == 7
    assert [e["content"] for e in got] == ["The", " quick", " brown"]
    assert "GGML_ASSERT" in (tmp_path / "stderr.log").read_text()


def test_load_failure_prints_the_message_and_exits(tmp_path: Path) -> None:
    with fake(tmp_path, wait=False, FAKE_LOAD_FAIL="llama_model_load: error loading model: bad magic") as (proc, _):
        assert proc.wait(timeout=DEADLINE) == 1
    assert "llama_model_load: error loading model: bad magic" in (tmp_path / "stderr.log").read_text()


def test_missing_model_file_exits_1(tmp_path: Path) -> None:
    proc = subprocess.run([*fake_command(), "--model", str(tmp_path / "nope.gguf"), "--port", str(_free_port())],
                          capture_output=True, text=True, timeout=DEADLINE)
    assert proc.returncode == 1
    assert "error loading model" in proc.stderr


def test_sigterm_exits_0(tmp_path: Path) -> None:
    with fake(tmp_path) as (proc, _):
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 0


def test_sigterm_can_be_ignored(tmp_path: Path) -> None:
    with fake(tmp_path, FAKE_IGNORE_SIGTERM="1") as (proc, url):
        proc.send_signal(signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=0.5)
        assert _status(url + "/health") == 200
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=DEADLINE) == -signal.SIGKILL
