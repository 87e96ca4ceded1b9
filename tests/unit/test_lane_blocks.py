"""The lane's writer for the block translators (server/streaming.py _block_putters): what it writes for a run of
thoughts and texts, through the steady deltas' layouts or the events made whole, is byte for byte what the
translator gives the ordinary way (Anthropic's MessageStream, the Responses API's ResponseStream), and leaves the
translator in the same state (its finish events equal)."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ollama_py.server.anthropic_translate import MessageStream
from ollama_py.server.completion import Final
from ollama_py.server.responses_translate import ResponseStream, parse_responses
from ollama_py.server.streaming import _block_putters, _Outlet, sse_event


class _Transport:
    """What the lane writes to: asyncio's transport, as far as the lane uses it."""

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.frames.append(data)

    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0


class _Writer:
    output_size = 0


def _putters(stream: Any, kind: str, encode: Any, transport: _Transport) -> Any:
    writer = _Writer()
    return _block_putters(stream, kind, encode, transport, writer, _Outlet(transport, writer))  # type: ignore[arg-type]


def _unframed(frames: list[bytes]) -> bytes:
    """The chunked frames' data, each frame checked: its length as hex, CRLF, the data, CRLF."""
    out = []
    for frame in frames:
        head, _, rest = frame.partition(b"\r\n")
        assert rest.endswith(b"\r\n") and int(head, 16) == len(rest) - 2 > 0, frame
        out.append(rest[:-2])
    return b"".join(out)


def _untimed(data: bytes) -> bytes:
    """The events with the Responses API's clock readings (its response's created_at and completed_at, whole
    seconds when each side made it) set aside: the two sides may make theirs on either side of a second."""
    return re.sub(rb'"(created_at|completed_at)": ?\d+', rb'"\1": 0', data)


def _streams(which: str, show_thinking: bool) -> tuple[Any, Any]:
    if which == "anthropic":
        return (MessageStream("msg_1", "m", 7, show_thinking), MessageStream("msg_1", "m", 7, show_thinking))
    echo = parse_responses({"model": "m", "input": "hi", "stream": True}).echo
    return ResponseStream("r1", "i1", "m", echo), ResponseStream("r1", "i1", "m", echo)


FINAL = Final(done_reason="stop", prompt_eval_count=3, prompt_tokens=3, prompt_eval_duration=1, eval_count=9,
              eval_duration=2, total_duration=3, load_duration=0, context=None, text="", tool_calls=None, cache_n=0,
              stop_word=None, thinking="", prompt_truncated=False, context_shifted=False)
TEXTS = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=6) | st.sampled_from(
    ['"', "\\", "%", "%d", "%s", "\n", " word", "\u00e9t\u00e9", "\U0001f600", "\u2028"])


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["anthropic", "responses"]), st.booleans(), st.lists(TEXTS, max_size=6),
       st.lists(TEXTS, min_size=1, max_size=10), st.lists(st.booleans(), max_size=16))
def test_the_lane_writes_what_the_translator_makes(which: str, show_thinking: bool, thoughts: list[str],
                                                    texts: list[str], as_raw: list[bool]) -> None:
    """Thoughts then texts, each written by the lane (as a raw token's bytes where it has no character JSON
    escapes, else as a parsed event's text) or made by the translator the ordinary way: the same bytes, and the
    same finish."""
    lane_stream, ordinary = _streams(which, show_thinking)
    transport = _Transport()
    put, write = _putters(lane_stream, "text", sse_event, transport)
    put_thought, write_thought = _putters(lane_stream, "thinking", sse_event, transport)
    expected = []
    for i, (kind, text) in enumerate([*(("thinking", t) for t in thoughts), *(("text", t) for t in texts)]):
        raw = i < len(as_raw) and as_raw[i] and not any(c in text for c in '"\\') and text.isprintable()
        if kind == "thinking":
            assert put_thought(text.encode()) if raw else write_thought(text)
            expected += ordinary.thinking(text)
        else:
            assert put(text.encode()) if raw else write(text)
            expected += ordinary.text(text)
    assert _untimed(_unframed(transport.frames)) == _untimed(b"".join(map(sse_event, expected)))
    finish = (b"".join(map(sse_event, stream.finish(FINAL))) for stream in (lane_stream, ordinary))
    assert _untimed(next(finish)) == _untimed(next(finish))


def _counting(encoded: list[Any]) -> Any:
    def encode(event: Any) -> bytes:
        encoded.append(event)
        return sse_event(event)

    return encode


def test_past_the_opening_each_delta_is_formatted_not_encoded() -> None:
    """The first text opens the message (or response) and its block (or item): those events are encoded; each
    text after it is one delta, formatted into the layout made once (one encoding more, of the markers)."""
    for stream, opening in ((MessageStream("msg_1", "m", 7), 4), (ResponseStream("r1", "i1", "m", parse_responses(
            {"model": "m", "input": "hi", "stream": True}).echo), 5)):
        encoded: list[Any] = []
        transport = _Transport()
        _, write = _putters(stream, "text", _counting(encoded), transport)
        for text in ("Hello", " there", ' "quoted"', " 100%", " done"):
            assert write(text)
        assert len(encoded) == opening + 1, [e[0] for e in encoded]
        assert len(transport.frames) == 5
