"""Log-probabilities on the native API (/api/generate, /api/chat), as Ollama's api.Logprob / api.TokenLogprob.

Each chunk carries the entries of the tokens it carries; a whole (stream: false) answer carries all of them.
`bytes` and `top_logprobs` are left out when empty (Go's omitempty).
"""

from __future__ import annotations

from typing import TypedDict


class TokenLogprob(TypedDict, total=False):
    token: str
    logprob: float
    bytes: list[int]  # the token's UTF-8 bytes (a token may hold part of a character)


class Logprob(TokenLogprob, total=False):
    top_logprobs: list[TokenLogprob]  # the most likely tokens at this position, when top_logprobs > 0


MAX_TOP_LOGPROBS = 20  # Ollama refuses more ("top_logprobs must be between 0 and 20")
