"""Rendering a model's prompt the way Ollama does (template/template.go: Parse, Vars, Execute,
collate), on top of the Go template engine.

Ollama's rules, in the order it applies them:

1. Parse. If the template mentions neither `Messages` nor `Response`, `{{ .Response }}` is appended.
2. Collate the messages: consecutive messages of one role are merged with a blank line between
   them (tool messages excepted); all system contents, joined by blank lines, become `.System`.
3. Choose how to execute:
   * prompt and suffix both given (fill-in-the-middle): once with Prompt, Suffix, Response "".
   * the template mentions `.Messages`: once with System, Messages, Tools, Response "".
   * otherwise (legacy .System/.Prompt/.Response templates): once per finished exchange, with
     that exchange's System, Prompt and Response, and a last time with whatever is open, cut
     after the first `{{ .Response }}` so the prompt ends where the model's answer begins.
   Think, ThinkLevel and IsThinkSet are passed every time.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ollama_py.errors import TemplateError
from ollama_py.template import nodes as n
from ollama_py.template.exec import DEFAULT_LIMITS, Limits
from ollama_py.template.gotemplate import Template, parse_template

log = logging.getLogger(__name__)

_RESPONSE_ACTION = n.ActionNode(
    0,
    0,
    n.PipeNode(0, 0, False, (), (n.CommandNode(0, (n.FieldNode(0, ("Response",)),)),)),
)


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """A template as Ollama holds it: parsed, touched up, with its identifiers known."""

    template: Template
    vars: frozenset[str]  # lower-cased field and variable names it mentions (Ollama's Vars())
    legacy_last: Template | None  # the legacy path's final turn: everything after .Response cut


def identifiers(node: Any) -> list[str]:
    """Ollama's Identifiers(): field and variable names, through pipelines and branches (not
    through `(...).Field` chains, which it does not walk either)."""
    if isinstance(node, n.ListNode):
        return [name for child in node.nodes for name in identifiers(child)]
    if isinstance(node, n.ActionNode):
        return identifiers(node.pipe)
    if isinstance(node, n.TemplateNode):
        return [] if node.pipe is None else identifiers(node.pipe)
    if isinstance(node, n.BranchNode):
        names = identifiers(node.pipe) + identifiers(node.list)
        if node.else_list is not None:
            names += identifiers(node.else_list)
        return names
    if isinstance(node, n.PipeNode):
        return [name for cmd in node.cmds for arg in cmd.args for name in identifiers(arg)]
    if isinstance(node, (n.FieldNode, n.VariableNode)):
        return list(node.ident)
    return []


class _CutPanics(Exception):
    """Ollama's deleteNode panics when .Response sits in an if/with/range body that has an else."""


def cut_after_response(root: n.ListNode) -> n.ListNode:
    """Ollama's deleteNode: keep everything up to and including the first `.Response` field in an
    action (branch conditions are not searched), drop everything after it."""
    cut = False

    def gone(node: Any) -> bool:
        nonlocal cut
        if isinstance(node, n.FieldNode) and "Response" in node.ident:
            cut = True
            return False
        return cut

    def walk(node: Any) -> Any:
        if gone(node):
            return None
        if isinstance(node, n.ListNode):
            kept = [w for w in (walk(c) for c in node.nodes) if w is not None]
            return dataclasses.replace(node, nodes=tuple(kept))
        if isinstance(node, n.BranchNode):
            body = walk(node.list)
            else_list = node.else_list
            if else_list is not None:
                else_list = walk(else_list)
                if else_list is None:
                    raise _CutPanics
            return dataclasses.replace(node, list=body, else_list=else_list)
        if isinstance(node, n.ActionNode):
            pipe = walk(node.pipe)
            return None if pipe is None else dataclasses.replace(node, pipe=pipe)
        if isinstance(node, n.PipeNode):
            cmds = []
            for cmd in node.cmds:
                args = [w for w in (walk(a) for a in cmd.args) if w is not None]
                if not args:
                    return None
                cmds.append(dataclasses.replace(cmd, args=tuple(args)))
            return dataclasses.replace(node, cmds=tuple(cmds)) if cmds else None
        return node

    return walk(root)


class _ParsedTemplates:
    """The templates in use, parsed (or the TemplateError parsing gave): least recently used go first once
    there are more than `entries` or their sources pass `chars` in all. Thread-safe: prompts render in threads."""

    def __init__(self, entries: int = 256, chars: int = 16 << 20) -> None:
        self.entries, self.chars = entries, chars
        self._items: OrderedDict[str, PromptTemplate | TemplateError] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()

    def get(self, text: str) -> PromptTemplate | TemplateError | None:
        with self._lock:
            item = self._items.get(text)
            if item is not None:
                self._items.move_to_end(text)
            return item

    def put(self, text: str, item: PromptTemplate | TemplateError) -> None:
        with self._lock:
            if text in self._items:
                return
            self._items[text] = item
            self._size += len(text)
            while len(self._items) > self.entries or (self._size > self.chars and len(self._items) > 1):
                old, _ = self._items.popitem(last=False)
                self._size -= len(old)


_PARSED = _ParsedTemplates()


def is_parsed(text: str) -> bool:
    """Whether parse_prompt_template(text) answers from its cache (cheap enough for the event loop)."""
    return _PARSED.get(text) is not None


def parse_prompt_template(text: str) -> PromptTemplate:
    """Parse as Ollama's template.Parse does; raises TemplateError. Remembers the answer either way."""
    item = _PARSED.get(text)
    if item is None:
        try:
            item = _parse_prompt_template(text)
        except TemplateError as exc:
            item = exc
        _PARSED.put(text, item)
    if isinstance(item, TemplateError):
        raise TemplateError(str(item))
    return item


def _parse_prompt_template(text: str) -> PromptTemplate:
    tmpl = parse_template(text)
    root = tmpl.root
    # Ollama's Vars() walks every template of the set, the named ones too.
    names = frozenset(name.lower() for tree in (root, *tmpl.named.values()) for name in identifiers(tree))
    if "messages" not in names and "response" not in names:
        root = dataclasses.replace(root, nodes=root.nodes + (_RESPONSE_ACTION,))
        names |= {"response"}
    touched = Template(text, root, tmpl.named)
    try:
        # Ollama runs the cut tree in a new template set with nothing else in it, so there a {{template}} before
        # .Response fails ('template "x" not defined'); keeping the named templates lets such templates work.
        last: Template | None = Template(text, cut_after_response(root), tmpl.named)
    except _CutPanics:
        last = None
    return PromptTemplate(touched, names, last)


def template_vars(template_text: str) -> list[str]:
    """Ollama's Vars(): sorted, lower-cased identifiers (after Response was appended)."""
    return sorted(parse_prompt_template(template_text).vars)


def template_uses(template_text: str, name: str) -> bool:
    """Whether the template mentions `name` (".Tools", "Tools" and "tools" alike), as Ollama's
    capability checks do: `tools` gives the tools capability, `suffix` the insert capability.

    A template we cannot parse falls back to a text search, so that listing or showing such a
    model still works; rendering it is what reports the TemplateError."""
    field = name.lstrip(".").lower()
    try:
        return field in parse_prompt_template(template_text).vars
    except TemplateError as exc:
        log.debug("capability check on a template we cannot parse (%s): searching its text", exc)
        return re.search(r"\.\s*" + re.escape(field) + r"\b", template_text, re.IGNORECASE) is not None


def collate(messages: Sequence[Mapping[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """Ollama's collate: every system content (joined by blank lines) and the messages with
    consecutive same-role ones merged (tool messages stay apart; the first keeps its other fields)."""
    system: list[str] = []
    collated: list[dict[str, Any]] = []
    for msg in messages:
        role = msg.get("role", "")
        content = msg.get("content") or ""
        if role == "system":
            system.append(content)
        if collated and collated[-1].get("role", "") == role and role != "tool":
            collated[-1]["content"] = (collated[-1].get("content") or "") + "\n\n" + content
        else:
            collated.append(dict(msg))
    return "\n\n".join(system), collated


def _think_values(think: bool | str | None) -> dict[str, Any]:
    if isinstance(think, str):
        # A level ("low", "medium", "high"...) means thinking is on at that level.
        return {"Think": True, "ThinkLevel": think, "IsThinkSet": True}
    return {"Think": bool(think), "ThinkLevel": "", "IsThinkSet": think is not None}


def render_prompt(
    template_text: str,
    *,
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Mapping[str, Any]] | None = None,
    system: str | None = None,
    suffix: str | None = None,
    think: bool | str | None = None,
    generate_response: str = "",
    limits: Limits = DEFAULT_LIMITS,
) -> str:
    """The prompt Ollama would send to the model.

    messages: Ollama's wire shape ({"role", "content", "images"?, "tool_calls"?, "tool_name"?,
      "tool_call_id"?, "thinking"?}); images should already be what the runner expects.
    system: a system prompt put first unless the messages already start with a system message
      (the model's SYSTEM for /api/chat, request-or-model system for /api/generate).
    suffix: fill-in-the-middle text. With a suffix, the last user message is the prompt and the
      template runs with .Prompt/.Suffix only; with a suffix but no prompt it runs with no
      messages at all. Both as Ollama's generate does.
    think: None (not set), a bool, or a level string ("high"...), which also sets .ThinkLevel.
    generate_response: the .Response of the open turn. Ollama always renders with "", so the
      prompt ends where the answer starts; pass text to render a finished turn instead.
    limits: what each execution of the template may spend (exec.Limits).
    """
    pt = parse_prompt_template(template_text)
    msgs = [dict(m) for m in messages]
    if system and not (msgs and msgs[0].get("role") == "system"):
        msgs.insert(0, {"role": "system", "content": system})
    thinking = _think_values(think)

    if suffix:
        prompt = next((m.get("content") or "" for m in reversed(msgs) if m.get("role") == "user"), "")
        if prompt:
            log.debug("rendering fill-in-the-middle prompt")
            return pt.template.execute({"Prompt": prompt, "Suffix": suffix, "Response": generate_response, **thinking},
                                       limits)
        # Ollama's generate passes no messages at all when a suffix is set.
        msgs = []

    system_text, collated = collate(msgs)
    if "messages" in pt.vars:
        log.debug("rendering %d messages with a .Messages template", len(collated))
        data = {
            "System": system_text,
            "Messages": collated,
            "Tools": None if tools is None else list(tools),
            "Response": generate_response,
            **thinking,
        }
        return pt.template.execute(data, limits)
    log.debug("rendering %d messages with a legacy .Prompt/.Response template", len(collated))
    return _render_legacy(pt, collated, thinking, generate_response, limits)


def _render_legacy(
    pt: PromptTemplate, collated: list[dict[str, Any]], thinking: dict[str, Any], generate_response: str,
    limits: Limits,
) -> str:
    """One execution per finished exchange, then the open one with everything after .Response cut."""
    parts: list[str] = []
    turn = {"System": "", "Prompt": "", "Response": ""}

    def flush() -> None:
        parts.append(pt.template.execute({**turn, **thinking}, limits))
        turn.update(System="", Prompt="", Response="")

    for msg in collated:
        role, content = msg.get("role"), msg.get("content") or ""
        if role == "system":
            if turn["Prompt"] or turn["Response"]:
                flush()
            turn["System"] = content
        elif role == "user":
            if turn["Response"]:
                flush()
            turn["Prompt"] = content
        elif role == "assistant":
            turn["Response"] = content
        # other roles (tool) have no place in a legacy template; Ollama skips them too
    if pt.legacy_last is None:
        raise TemplateError("template: cannot cut this template after {{ .Response }}: "
                            "it sits in a block with an {{else}}")
    if not turn["Response"]:
        turn["Response"] = generate_response
    parts.append(pt.legacy_last.execute({**turn, **thinking}, limits))
    return "".join(parts)
