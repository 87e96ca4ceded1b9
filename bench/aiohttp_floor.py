"""The least an aiohttp gateway can do between a client and llama-server: the floor under ollama-py's own cost.

    python bench/aiohttp_floor.py LISTEN_PORT UPSTREAM_PORT [API_KEY]

On uvloop, as serve runs: one route, POST /completion; the handler decodes the client's body, sends its prompt and
n_predict to llama-server's /completion over ollama-py's own runner client (runner/sse.py: its stream parser and a
spare connection opened ahead of the next request), and writes each event's text as an Ollama NDJSON chunk. No
middlewares, no model lookup, no scheduler, no options, no access log. bench/gpu_speed_fake.py runs it beside the
gateway, with bench/relay_floor.c (the same in C, blocking sockets), so that each run says how much of the gateway's
added time any aiohttp relay pays on the machine at hand, and how much any relay at all. Not part of ollama-py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import uvloop
from aiohttp import web

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ollama_py.runner.sse import Spare, stream_events  # noqa: E402


def app(upstream: int, key: str) -> web.Application:
    spare = Spare("127.0.0.1", upstream, None)
    headers = {"Authorization": f"Bearer {key}"} if key else None

    async def completion(request: web.Request) -> web.StreamResponse:
        body = json.loads(await request.read())
        runner_body = {"prompt": body["prompt"], "n_predict": body.get("n_predict", 8), "stream": True,
                       "cache_prompt": True}
        resp = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        async for event in stream_events("127.0.0.1", upstream, "/completion", runner_body, headers=headers,
                                         spare=spare):
            if not resp.prepared:
                await resp.prepare(request)
            done = bool(event.get("stop"))
            await resp.write(json.dumps({"model": "floor", "response": event.get("content", ""),
                                         "done": done}).encode() + b"\n")
        await resp.write_eof()
        return resp

    a = web.Application()
    a.router.add_post("/completion", completion)
    return a


def main() -> None:
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: aiohttp_floor.py LISTEN_PORT UPSTREAM_PORT [API_KEY]")
    port, upstream = int(sys.argv[1]), int(sys.argv[2])
    key = sys.argv[3] if len(sys.argv) == 4 else ""
    uvloop.install()
    web.run_app(app(upstream, key), host="127.0.0.1", port=port, access_log=None, print=None)


if __name__ == "__main__":
    main()
