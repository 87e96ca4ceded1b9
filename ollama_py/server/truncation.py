"""Fitting a prompt into a slot's context when llama-server refuses it as too long (it never cuts a prompt itself:
it answers 400 exceed_context_size_error with the prompt's and the slot's sizes).

With `truncate` (Ollama's default) the prompt is cut as Ollama cuts it, and the answer says so
(`prompt_truncated` in the final chunk, a WARNING line in the server log with the sizes):
  1. a conversation loses its oldest messages first, keeping every system message and the latest message (as
     few as make it fit, found by a binary search: about log2(n) renders and tokenizations for n messages);
  2. what still does not fit (one long message, a raw prompt) keeps its first `num_keep` tokens and its end.
Either way the prompt leaves room to generate: `num_predict` tokens when that is set and at most half the
context, else an eighth of the context. With `truncate: false` the request is refused with Ollama's 400
"the input length exceeds the context length", as /api/embed refuses.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ollama_py.api.names import ModelName
from ollama_py.api.wire import Message

log = logging.getLogger(__name__)

TOO_LONG = "the input length exceeds the context length"


@dataclass(frozen=True, slots=True)
class Fitted:
    prompt: str | list[Any]  # the new prompt for /completion: rendered text, or token ids
    messages: list[Message] | None  # the messages kept, when messages were dropped
    tokens_before: int
    tokens_after: int


def room_to_generate(n_ctx: int, num_predict: Any) -> int:
    """Tokens of the context left free for the answer."""
    if isinstance(num_predict, int) and 0 < num_predict <= n_ctx // 2:
        return num_predict
    return max(1, n_ctx // 8)


def cut_tokens(tokens: list[int], limit: int, num_keep: int) -> list[int]:
    """The first num_keep tokens (at most half the limit) and the last ones, limit in all."""
    if len(tokens) <= limit:
        return tokens
    keep = max(0, min(num_keep, limit // 2))
    return tokens[:keep] + tokens[len(tokens) - (limit - keep):]


def drop_order(messages: Sequence[Message]) -> list[int]:
    """Indices of the messages that may go, oldest first: every one but the system messages and the latest."""
    return [i for i, m in enumerate(messages[:-1]) if m.get("role") != "system"]


def without(messages: Sequence[Message], dropped: Sequence[int]) -> list[Message]:
    gone = set(dropped)
    return [m for i, m in enumerate(messages) if i not in gone]


def droppable(messages: Sequence[Message]) -> int | None:
    """Index of the oldest message that may go: not a system message, not the latest message."""
    for i, m in enumerate(messages[:-1]):
        if m.get("role") != "system":
            return i
    return None


def log_truncation(model: ModelName, fitted: Fitted, n_ctx: int) -> None:
    log.warning("prompt truncated to fit the context: model=%s n_ctx=%d tokens %d -> %d (%d dropped%s)",
                str(model), n_ctx, fitted.tokens_before, fitted.tokens_after,
                fitted.tokens_before - fitted.tokens_after,
                f", {len(fitted.messages)} messages kept" if fitted.messages is not None else "")
