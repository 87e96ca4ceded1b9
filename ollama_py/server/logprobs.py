"""Log-probabilities: what a native request asks for, and llama-server's answer as the entries clients read.

llama-server is asked with `n_probs` (completion.run_completion) and answers, per generated token, with a
`completion_probabilities` entry: `{id, token, bytes, logprob, top_logprobs: [{id, token, bytes, logprob}]}`.
Ollama's native entries (api.logprobs) and OpenAI's chat `logprobs.content` entries are that without the ids,
top_logprobs cut to what was asked; Ollama's leave out an empty `bytes` / `top_logprobs`, OpenAI's keep them.
"""

from __future__ import annotations

from typing import Any

from ollama_py.api.logprobs import MAX_TOP_LOGPROBS, Logprob
from ollama_py.errors import BadRequest
from ollama_py.server.bodies import field


def requested(body: dict[str, Any]) -> int | None:
    """A native request's `logprobs` / `top_logprobs`: None when no log-probabilities are wanted, else how many
    alternatives per token (0..20). Out of range is Ollama's 400; `top_logprobs` without `logprobs: true` asks
    for nothing, as in Ollama (it is passed on and unused there)."""
    top = field(body, "top_logprobs", int, 0)
    if not 0 <= top <= MAX_TOP_LOGPROBS:
        raise BadRequest(f"top_logprobs must be between 0 and {MAX_TOP_LOGPROBS}")
    return top if field(body, "logprobs", bool, False) else None


def entries(probs: list[dict[str, Any]], top: int, *, omit_empty: bool = True) -> list[Logprob]:
    """llama-server completion_probabilities -> log-probability entries, `top` alternatives each."""

    def one(p: dict[str, Any]) -> dict[str, Any]:
        out = {"token": p.get("token", ""), "logprob": p.get("logprob", 0.0), "bytes": p.get("bytes")}
        if omit_empty and not out["bytes"]:
            del out["bytes"]
        return out

    result = []
    for p in probs:
        entry = one(p)
        tops = [one(t) for t in (p.get("top_logprobs") or [])[:top]]
        if tops or not omit_empty:
            entry["top_logprobs"] = tops
        result.append(entry)
    return result  # type: ignore[return-value]
