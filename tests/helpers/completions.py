"""final(**kw): a finished completion (server/completion.py's Final) with plausible counts, for the translation
tests that turn one into an API response."""

from __future__ import annotations

from typing import Any

from ollama_py.server.completion import Final


def final(**kw: Any) -> Final:
    """A Final that answered "hello" in 5 tokens to a 12-token prompt; `kw` replaces any field."""
    base: dict[str, Any] = dict(done_reason="stop", prompt_eval_count=12, prompt_tokens=12, prompt_eval_duration=1,
                                eval_count=5, eval_duration=1, total_duration=1, load_duration=0, text="hello")
    return Final(**{**base, **kw})
