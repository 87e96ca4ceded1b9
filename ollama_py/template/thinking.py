"""Thinking models: which tags a template wraps thoughts in, and splitting streamed output at them.

Ollama's rules (thinking/parser.go): only a block at the very start of the answer is thinking; text before
the opening tag means the model is not thinking and everything is content; whitespace right after either
tag is dropped, and whitespace before the closing tag too; a tag split over several chunks is held back until
it is certain. When the prompt itself ends with the opening tag (templates that open the block for the model),
the answer starts inside it.
"""

from __future__ import annotations

import enum
import re

DEFAULT_TAGS = ("<think>", "</think>")
MISTRAL_TAGS = ("[THINK]", "[/THINK]")  # Magistral, Ministral 3 Reasoning: control tokens of their vocabulary

# Tokens of thinking a `think` level allows on a model whose template does not take the level itself (its
# template has no .ThinkLevel, so the level would otherwise mean plain `true`). "max": no budget.
LEVEL_BUDGETS: dict[str, int | None] = {"low": 1024, "medium": 4096, "high": 16384, "max": None}
_AROUND = re.compile(r"(<[^<>\s{}]+>)\s*\{\{-?\s*\.Thinking\s*-?\}\}\s*(</[^<>\s{}]+>)")


def infer_tags(template: str) -> tuple[str, str]:
    """The tags the template puts around `.Thinking` when it renders past thoughts, else <think></think>."""
    m = _AROUND.search(template or "")
    return (m.group(1), m.group(2)) if m else DEFAULT_TAGS


def chat_template_tags(source: str | None) -> tuple[str, str]:
    """The tags a GGUF chat template's model thinks in: Mistral's `[THINK]` where the template writes them (Ollama's
    ministral parser reads them), else <think></think>."""
    if source and MISTRAL_TAGS[0] in source and MISTRAL_TAGS[1] in source:
        return MISTRAL_TAGS
    return DEFAULT_TAGS


def uses_thinking(template: str | None) -> bool:
    """Ollama's thinking capability: the template refers to .Thinking (past thoughts in messages)."""
    return bool(template) and ".Thinking" in template  # type: ignore[operator]


def think_budget(think: bool | str | None, reasoning_budget: int | None, template: str | None) -> int | None:
    """The most tokens a completion may think, None for no limit. The `reasoning_budget` option (a request's,
    else the model's) wins, -1 meaning none; else a level, unless the template takes levels itself (.ThinkLevel:
    the model is told its effort in the prompt, as gpt-oss is)."""
    if think is None or think is False:
        return None
    if reasoning_budget is not None:
        return None if reasoning_budget < 0 else reasoning_budget
    if isinstance(think, str) and ".ThinkLevel" not in (template or ""):
        return LEVEL_BUDGETS.get(think)
    return None


class _State(enum.Enum):
    LOOKING = 0  # nothing but whitespace yet: is the answer opening with the tag?
    STARTED = 1  # just past the opening tag, dropping whitespace
    THINKING = 2
    ENDED = 3  # just past the closing tag, dropping whitespace
    CONTENT = 4


def partial_suffix(text: str, tag: str) -> int:
    """Length of the longest end of `text` that is a proper beginning of `tag` (what a streamed parser holds back
    until the next text says whether a tag begins there). Every streamed token of a parsed answer asks it; most
    hold no character the tag starts with, and are answered by one look at their end."""
    n = min(len(tag) - 1, len(text))
    if n <= 0 or tag[0] not in text[-n:]:
        return 0
    for k in range(n, 0, -1):
        if text.endswith(tag[:k]):
            return k
    return 0


class ThinkingParser:
    """Feed streamed text with add(); each call returns the (thinking, content) that is now certain."""

    def __init__(self, opening: str = DEFAULT_TAGS[0], closing: str = DEFAULT_TAGS[1], *,
                 inside: bool = False) -> None:
        self.opening, self.closing = opening, closing
        self.inside = inside  # the prompt opened the block
        self._state = _State.STARTED if inside else _State.LOOKING
        self._held = ""

    @property
    def markers(self) -> list[str]:
        """The tags this parser splits at: a vocabulary may hold them as control tokens, which llama-server leaves
        out of its text unless the request names them (`preserved_tokens`)."""
        return [self.opening, self.closing]

    def answer_prefix(self, raw: str) -> str | None:
        """What of `raw` (the answer as the runner wrote it) comes before the content: up to the closing tag; None
        if it has not closed."""
        at = raw.find(self.closing)
        return None if at < 0 else raw[:at + len(self.closing)]

    def plain(self, text: str) -> bool:
        """Whether add(text) would give ("", text) and change nothing: the thinking is over (or never began), so
        every text is content. (The lane asks, to write such a text itself: server/streaming.py.)"""
        return self._state is _State.CONTENT

    def thought(self, text: str) -> bool:
        """Whether add(text) would give (text, "") and change nothing: inside the thoughts, nothing held back, and
        no closing tag, the beginning of one or whitespace that may precede it at the end of `text`. (The lane
        asks, to write such a text itself.)"""
        return (self._state is _State.THINKING and not self._held and text != "" and not text[-1].isspace()
                and self.closing not in text and not partial_suffix(text, self.closing))

    def add(self, text: str) -> tuple[str, str]:
        thinking, content = [], []
        buf = self._held + text
        self._held = ""
        while buf:
            state = self._state
            if state is _State.LOOKING:
                stripped = buf.lstrip()
                if stripped.startswith(self.opening):
                    buf = stripped[len(self.opening):]
                    self._state = _State.STARTED
                elif self.opening.startswith(stripped):  # only whitespace or part of the tag so far
                    self._held = buf
                    buf = ""
                else:
                    self._state = _State.CONTENT
            elif state is _State.STARTED or state is _State.ENDED:
                stripped = buf.lstrip()
                if not stripped:
                    buf = ""
                    break
                buf = stripped
                self._state = _State.THINKING if state is _State.STARTED else _State.CONTENT
            elif state is _State.THINKING:
                end = buf.find(self.closing)
                if end >= 0:
                    thinking.append(buf[:end].rstrip())
                    buf = buf[end + len(self.closing):]
                    self._state = _State.ENDED
                    continue
                keep = partial_suffix(buf, self.closing)
                body = buf[: len(buf) - keep]
                trailing = len(body) - len(body.rstrip())  # whitespace may precede the closing tag
                keep += trailing
                thinking.append(buf[: len(buf) - keep])
                self._held = buf[len(buf) - keep:]
                buf = ""
            else:
                content.append(buf)
                buf = ""
        return "".join(thinking), "".join(content)

    def finish(self) -> tuple[str, str]:
        """The end of the answer: whatever was held back, where it belongs."""
        held, self._held = self._held, ""
        if self._state is _State.THINKING:
            return held.rstrip(), ""
        if self._state is _State.LOOKING:
            return "", held
        return "", ""
