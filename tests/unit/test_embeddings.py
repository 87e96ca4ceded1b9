"""/api/embed and /v1/embeddings over the fake runner: many inputs are one batch to the runner over a few
connections (issue 34: one request opened a connection per input, thousands at once), in order."""

from __future__ import annotations

import json

import aiohttp

from ollama_py.server.appkeys import SCHEDULER
from tests.helpers.loop import loop_watch


async def runner_connections(app) -> dict[str, int]:
    """What the fake runner of the one loaded model saw: {"accepted", "open_peak"}."""
    (loaded,) = app[SCHEDULER].loaded.values()
    async with aiohttp.ClientSession(headers=loaded.runner.auth_headers) as session, \
            session.get(loaded.client.base_url + "/fake/connections") as resp:
        return await resp.json()


async def embed_one(client, text: str, **body) -> list[float]:
    r = await client.post("/api/embed", json={"model": "tiny", "input": text, **body})
    assert r.status == 200, await r.text()
    return (await r.json())["embeddings"][0]


async def test_embed_of_thousands_of_short_inputs_takes_a_few_runner_connections(fake_app, aiohttp_client):
    _, app = fake_app()
    client = await aiohttp_client(app)
    inputs = [f"input number {i}" for i in range(2000)]
    async with loop_watch() as gaps:
        r = await client.post("/api/embed", json={"model": "tiny", "input": inputs})
        assert r.status == 200, await r.text()
        out = await r.json()
    assert len(out["embeddings"]) == 2000
    assert out["prompt_eval_count"] == 2000 * 4  # BOS and three words each
    seen = await runner_connections(app)
    assert seen["accepted"] <= 4, seen  # the load's own calls and the one batch; was one per input
    for i in (0, 1, 999, 1999):
        assert out["embeddings"][i] == await embed_one(client, inputs[i]), i
    assert gaps[0] < 2.0


async def test_embed_of_many_long_inputs_tokenizes_them_over_few_connections(fake_app, aiohttp_client):
    """Inputs longer than the context are tokenized first (to cut them), through the client's bounded pool of
    kept-alive connections, and each is embedded as its first num_ctx tokens."""
    _, app = fake_app()
    client = await aiohttp_client(app)
    opts = {"num_ctx": 64}
    inputs = [" ".join(f"w{i}x{j}" for j in range(40)) for i in range(300)]  # ~250 bytes, 41 tokens each
    r = await client.post("/api/embed", json={"model": "tiny", "input": inputs, "options": opts})
    assert r.status == 200, await r.text()
    out = await r.json()
    seen = await runner_connections(app)
    assert seen["open_peak"] <= 6 and seen["accepted"] <= 12, seen  # was 300, all open at once
    assert len(out["embeddings"]) == 300
    for i in (0, 150, 299):
        assert out["embeddings"][i] == await embed_one(client, inputs[i], options=opts), i


async def test_embed_refuses_a_long_input_without_truncate(fake_app, aiohttp_client):
    _, app = fake_app()
    client = await aiohttp_client(app)
    r = await client.post("/api/embed", json={"model": "tiny", "input": ["short", "word " * 100],
                                              "truncate": False, "options": {"num_ctx": 64}})
    assert r.status == 400
    assert (await r.json())["error"] == "the input length exceeds the context length"


async def test_openai_embeddings_of_many_inputs_in_order(fake_app, aiohttp_client):
    _, app = fake_app()
    client = await aiohttp_client(app)
    inputs = [f"text {i}" for i in range(500)]
    r = await client.post("/v1/embeddings", json={"model": "tiny", "input": inputs})
    assert r.status == 200, await r.text()
    data = (await r.json())["data"]
    assert [d["index"] for d in data] == list(range(500))
    assert data[7]["embedding"] == await embed_one(client, inputs[7])


async def test_embed_of_more_inputs_than_the_limit_is_refused_before_the_runner_loads(fake_app, aiohttp_client):
    """Every vector of an answer is held in memory: a 32 MiB body of one-character inputs could ask for millions."""
    from ollama_py.server.embeddings import MAX_INPUTS

    _, app = fake_app()
    client = await aiohttp_client(app)
    r = await client.post("/api/embed", json={"model": "tiny", "input": ["a"] * (MAX_INPUTS + 1)})
    assert r.status == 400
    assert (await r.json())["error"] == f"too many inputs: {MAX_INPUTS + 1}, at most {MAX_INPUTS} in one request"
    assert not app[SCHEDULER].loaded


async def test_a_big_embed_request_goes_to_the_runner_in_batches_on_one_connection(fake_app, aiohttp_client,
                                                                                    tmp_path):
    from ollama_py.server.embeddings import BATCH

    log_file = tmp_path / "bodies.jsonl"
    _, app = fake_app({"FAKE_LOG_FILE": str(log_file)})
    client = await aiohttp_client(app)
    inputs = [f"item {i}" for i in range(2 * BATCH + 3)]
    r = await client.post("/api/embed", json={"model": "tiny", "input": inputs})
    assert r.status == 200, await r.text()
    out = await r.json()
    assert len(out["embeddings"]) == len(inputs) and out["prompt_eval_count"] == 3 * len(inputs)
    assert out["embeddings"][-1] == await embed_one(client, inputs[-1])
    sizes = [len(b["input"]) for b in map(json.loads, log_file.read_text().splitlines()) if "input" in b]
    assert sizes[:3] == [BATCH, BATCH, 3]
    assert (await runner_connections(app))["accepted"] <= 4


async def test_ps_tells_a_models_embeddings_runner_from_its_generation_runner(fake_app, aiohttp_client):
    """llama-server started with --embeddings serves only embeddings: a model asked for both runs two runners,
    listed under its one name; the embeddings one says so."""
    _, app = fake_app()
    client = await aiohttp_client(app)
    r = await client.post("/api/generate", json={"model": "tiny", "prompt": "hi", "stream": False})
    assert r.status == 200, await r.text()
    await embed_one(client, "hello")
    models = (await (await client.get("/api/ps")).json())["models"]
    assert sorted((m["name"], m.get("embedding", False)) for m in models) == [
        ("tiny:latest", False), ("tiny:latest", True)]
