"""Template work off the event loop: parsing a model's (or a request's) TEMPLATE and rendering prompts, and a
GGUF's own Jinja chat template for a model without a TEMPLATE (render_gguf_chat: in-process where it renders as
the runner's /apply-template does, else by the runner).

Both run Python for as long as a template asks (a client writes the template: a request's `template`, a created
model's TEMPLATE), bounded by the engine's limits (template/exec.py: iterations, size, 10 s). They run in their
own few threads, so a slow render neither stalls the loop nor takes the default executor's threads, which the
store's file I/O uses; and they share those threads fairly (server/fair_pool.py). A small request's render with
a template whose last render was very cheap runs on the loop under a 3 ms limit instead (FairPool's inline form:
it saves the thread hop, ~0.2 ms of every chat's first token), and goes to the threads should it pass that.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

from ollama_py.api.wire import Message, Tool
from ollama_py.errors import TemplateError
from ollama_py.server.fair_pool import INLINE_CAP, FairPool, key_of
from ollama_py.server.offload import per_item
from ollama_py.template.exec import DEFAULT_LIMITS as GO_LIMITS
from ollama_py.template.jinja_chat import (
    DEFAULT_LIMITS,
    ChatTemplate,
    JinjaUnsupported,
    Limits,
    chat_template_from_kv,
    is_compiled,
    render_chat,
)
from ollama_py.template.prompt import is_parsed, parse_prompt_template, render_prompt

if TYPE_CHECKING:
    from ollama_py.store.models import Model

log = logging.getLogger(__name__)

# Shared fairly (server/fair_pool.py): a slow template runs one render at a time and such renders leave one of
# the threads to templates known to be cheap, so a few clients with a slow template cannot hold up every chat.
_POOL = FairPool(workers=4, thread_name_prefix="template")


# A request this small may be rendered on the loop (FairPool's inline form): its text and tools bound what a
# template known to be cheap can spend on it, and the 3 ms limit bounds the rest. 64K characters: a coding agent's
# turns (Claude Code's and Codex's first requests carry 16-40K characters of instructions and tool results).
_INLINE_CHARS = 64 << 10
_INLINE_MESSAGES = 64
_INLINE_TOOLS = 16
_GO_INLINE_LIMITS = dataclasses.replace(GO_LIMITS, seconds=INLINE_CAP)


def pool_stats() -> dict[str, int]:
    """The template threads' counts (FairPool.stats), for /metrics."""
    return _POOL.stats()


async def _off_loop(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) in the template threads; its first argument (the template) is the fairness key."""
    return await _POOL.run(key_of(args[0]) if args else 0, functools.partial(fn, *args, **kwargs))


def _small(messages: Sequence[Any], tools: Sequence[Any] | None) -> bool:
    if len(messages) > _INLINE_MESSAGES or len(tools or ()) > _INLINE_TOOLS:
        return False
    chars = 0
    for m in messages:
        content = m.get("content")
        chars += len(content) if isinstance(content, str) else _INLINE_CHARS
    return chars <= _INLINE_CHARS


async def parse_off_loop(template: str) -> None:
    """Parse a template in a thread unless it is parsed already, so that what reads it on the loop afterwards
    (a model's capabilities) finds it in prompt.py's cache. Raises TemplateError."""
    if not is_parsed(template):
        await _off_loop(parse_prompt_template, template)


async def warm_template(template: str | None) -> None:
    """parse_off_loop for a stored model's TEMPLATE: one that does not parse is reported when it is rendered
    (showing or listing such a model still works), so the error is not raised here."""
    if template:
        try:
            await parse_off_loop(template)
        except TemplateError:
            pass


async def render_off_loop(template: str, *, messages: Sequence[Message], tools: Sequence[Tool] | None,
                          suffix: str | None,
                          think: bool | str | None) -> str:
    """prompt.render_prompt in a thread (or on the loop: _small); raises TemplateError (a 400) for a template
    that fails or passes a limit."""
    job = functools.partial(render_prompt, template, messages=messages, tools=tools, system=None, suffix=suffix,
                            think=think)
    inline = None
    if is_parsed(template) and _small(messages, tools):
        inline = functools.partial(job, limits=_GO_INLINE_LIMITS)
    return await _POOL.run(key_of(template), job, inline=inline)


# -- a GGUF's own chat template (Jinja) ------------------------------------------------------------------------
# Rendered here (template/jinja_chat.py) once the runner's /apply-template has shown, for a request of the same
# shape, that the two engines agree; until then, and where they differ, the runner renders (and its answer is
# the prompt). One render in _RECHECK_EVERY is checked again, so a difference that the shape did not capture is
# found and ends the in-process rendering of that shape.
_RECHECK_EVERY = 256
_MAX_VERDICTS = 4096


class RunnerCalls(Protocol):
    async def post(self, path: str, body: dict[str, Any]) -> Any: ...


@dataclass(slots=True)
class _Verdict:
    enable_thinking: bool | None  # the variable's value that matched the runner; None: the runner renders
    args_as_object: bool  # tool-call arguments passed as objects (llama-server parses them for most templates)
    merge_system: bool  # a leading system message merged into the next (templates without a system role)
    uses: int = 0
    thinking_copy: bool = False  # earlier answers' reasoning also as `thinking` (llama-server's gpt-oss, LFM2)


# per runner (its client): a new runner, perhaps another build, is compared again
_verdicts: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], _Verdict]] = weakref.WeakKeyDictionary()
_templates: dict[tuple[str, bool], ChatTemplate | None] = {}


def oai_message(m: Message) -> dict[str, Any]:
    """A message as llama-server's /apply-template takes it (OpenAI's shape)."""
    out: dict[str, Any] = {"role": m.get("role", "user"), "content": m.get("content") or ""}
    if m.get("thinking"):  # an earlier answer's reasoning: the template decides whether it renders it
        out["reasoning_content"] = m["thinking"]
    if m.get("tool_calls"):
        out["tool_calls"] = [
            {"id": tc.get("id") or f"call_{i}", "type": "function",
             "function": {"name": tc["function"]["name"],
                          "arguments": json.dumps(tc["function"].get("arguments", {}))}}
            for i, tc in enumerate(m["tool_calls"])
        ]
    if m.get("role") == "tool" and (m.get("tool_call_id") or m.get("tool_name")):
        out["tool_call_id"] = m.get("tool_call_id") or m.get("tool_name")
    return out


_HARMONY = "<|channel|>"  # how llama-server picks its gpt-oss handler for a template


def _template_messages(body: list[dict[str, Any]], args_as_object: bool, merge_system: bool,
                       thinking_copy: bool = False, harmony: bool = False) -> list[dict[str, Any]]:
    """The runner-shaped messages as llama-server hands them to the template (common_chat_msg's JSON: role,
    content, reasoning_content, tool_call_id, then tool_calls as type, function {name, arguments}, id). For a
    template that has no system role, llama-server puts a leading system message's text in front of the next
    message's, or drops it when alone. Some of its handlers (gpt-oss, LFM2) give the template the reasoning as
    `thinking` too (`thinking_copy`); for gpt-oss's (`harmony`) an answer that calls a tool then has no content."""
    out = []
    if merge_system and body and body[0]["role"] == "system":
        body = [{**body[1], "content": body[0]["content"] + "\n" + body[1]["content"]}, *body[2:]] if len(body) > 1 \
            else []
    for m in body:
        msg: dict[str, Any] = {"role": m["role"], "content": m["content"]}
        if "reasoning_content" in m:
            msg["reasoning_content"] = m["reasoning_content"]
        if "tool_call_id" in m:
            msg["tool_call_id"] = m["tool_call_id"]
        if "tool_calls" in m:
            msg["tool_calls"] = [
                {"type": "function",
                 "function": {"name": tc["function"]["name"],
                              "arguments": json.loads(tc["function"]["arguments"]) if args_as_object
                              else tc["function"]["arguments"]},
                 "id": tc["id"]}
                for tc in m["tool_calls"]]
        if thinking_copy and "reasoning_content" in m:
            msg["thinking"] = m["reasoning_content"]
            if harmony and m.get("tool_calls"):
                del msg["content"]
        out.append(msg)
    return out


def gguf_chat_template(model: Model, tools: bool) -> ChatTemplate | None:
    """The model's GGUF chat template with the tokens llama-server renders it with (the `tool_use` variant for a
    request with tools, where the GGUF has one), or None without one."""
    key = (model.digest, tools)
    if key in _templates:
        return _templates[key]
    chat = chat_template_from_kv(model.info.kv, tools) if model.info is not None else None
    if len(_templates) > 256:
        _templates.clear()
    _templates[key] = chat
    return chat


# Characters of one message past which the runner renders: each step of a render here over a message this long is
# one C call of milliseconds (a concatenation of 33 MiB: ~12 ms) that holds the GIL, and a template makes several
# in a row (three `+` and the join for ChatML; twice more for the first request's comparison), which held the
# event loop ~40-110 ms. The runner renders in its own process; the request and its answer go through bigjson in
# slices. A long conversation of ordinary messages (an agent's) renders here whatever its length: its steps are
# short, and only the final join is one call over it all.
_HUGE_MESSAGE = 4 << 20


def _huge(body: list[dict[str, Any]]) -> bool:
    return any(len(m["content"]) > _HUGE_MESSAGE for m in body)


def _shape(body: list[dict[str, Any]], tools: Sequence[Tool] | None) -> tuple[Any, ...]:
    roles = [m["role"] for m in body]
    names = tuple(str((t.get("function") or {}).get("name")) for t in tools) if tools else ()
    return (roles[0] if roles else "", roles[-1] if roles else "", tuple(sorted(set(roles))),
            any("tool_calls" in m for m in body), any(not m["content"] for m in body), names,
            any("reasoning_content" in m for m in body))


def _limits(body: list[dict[str, Any]], tools: Sequence[Tool] | None) -> Limits:
    """Render limits that grow with the request: a long conversation or many tools are not a runaway template."""
    n_tools = len(tools or ())
    chars = sum(len(m["content"]) for m in body)
    return Limits(operations=DEFAULT_LIMITS.operations + 1000 * (len(body) + n_tools),
                  max_chars=DEFAULT_LIMITS.max_chars + 8 * chars + (64 << 10) * n_tools,
                  seconds=DEFAULT_LIMITS.seconds * 5)


def _candidates(chat: ChatTemplate, body: list[dict[str, Any]], tools: Sequence[Tool] | None,
                extra: dict[str, Any]) -> list[tuple[_Verdict, str]]:
    """Each way llama-server may have set up the render (its choices follow its analysis of the template), with
    the prompt it gives."""
    out = []
    with_calls = any("tool_calls" in m for m in body)
    with_system = bool(body) and body[0]["role"] == "system"
    with_reasoning = any("reasoning_content" in m for m in body)
    harmony = _HARMONY in chat.source
    for merge_system in ((False, True) if with_system else (False,)):
        for args_as_object in ((True, False) if with_calls else (True,)):
            for copy in ((False, True) if with_reasoning else (False,)):
                messages = _template_messages(body, args_as_object, merge_system, copy, harmony)
                for thinking in (True, False):
                    try:
                        prompt = render_chat(chat, messages, tools=cast("Any", tools), enable_thinking=thinking,
                                             limits=_limits(body, tools), extra=extra)
                    except (JinjaUnsupported, TemplateError):
                        continue
                    out.append((_Verdict(thinking, args_as_object, merge_system, 1, copy), prompt))
    return out


def _prepared(messages: Sequence[Message], tools: Sequence[Tool] | None,
              ) -> tuple[list[dict[str, Any]], tuple[Any, ...], Limits, bool]:
    """The messages as the runner takes them, their shape, the render limits, and whether any has images."""
    body = [oai_message(m) for m in messages]
    return body, _shape(body, tools), _limits(body, tools), any(m.get("images") for m in messages)


def _render_as(chat: ChatTemplate, body: list[dict[str, Any]], tools: Sequence[Tool] | None, verdict: _Verdict,
               extra: dict[str, Any], limits: Limits) -> str:
    """render_chat set up as the runner was found to render this shape of request."""
    messages_in = _template_messages(body, verdict.args_as_object, verdict.merge_system, verdict.thinking_copy,
                                     _HARMONY in chat.source)
    return render_chat(chat, messages_in, tools=cast("Any", tools), enable_thinking=bool(verdict.enable_thinking),
                       limits=limits, extra=extra)


async def render_gguf_chat(model: Model, messages: Sequence[Message], tools: Sequence[Tool] | None,
                           runner: RunnerCalls, *, thinking: bool | None = None, effort: str | None = None) -> str:
    """The prompt from the model's GGUF chat template: rendered here where that is known to match the runner,
    else by the runner's /apply-template. A template that passes a render limit here is a 400 (JinjaLimit): the
    runner's engine has no such limits. `thinking`: enable_thinking as given (None: the runner's default);
    `effort`: gpt-oss's reasoning_effort (None: the template's default)."""
    chat = gguf_chat_template(model, bool(tools))
    body, shape, limits, images = await per_item(len(messages), _prepared, messages, tools)
    request: dict[str, Any] = {"messages": body}
    if tools:
        request["tools"] = tools
    extra: dict[str, Any] = {"reasoning_effort": effort} if effort else {}
    if thinking is not None or extra:
        request["chat_template_kwargs"] = {**({"enable_thinking": thinking} if thinking is not None else {}), **extra}
        shape = (*shape, thinking, effort)  # a verdict of its own: the runner renders it with thinking as told
    if chat is None or images or _huge(body):
        return (await runner.post("/apply-template", request))["prompt"]
    verdicts = _verdicts.setdefault(runner, {})
    key = (chat, shape)
    verdict = verdicts.get(key)
    if verdict is not None and verdict.enable_thinking is not None:
        verdict.uses += 1
        if verdict.uses % _RECHECK_EVERY:
            try:
                job = functools.partial(_render_as, chat, body, tools, verdict, extra, limits=limits)
                inline = None
                if is_compiled(chat.source) and _small(body, tools):
                    inline = functools.partial(job, limits=Limits(limits.operations, limits.max_chars, INLINE_CAP))
                return await _POOL.run(key_of(chat), job, inline=inline)
            except JinjaUnsupported:
                pass  # this request's content: the runner renders it
    prompt: str = (await runner.post("/apply-template", request))["prompt"]
    if verdict is None or verdict.enable_thinking is not None:
        candidates = await _off_loop(_candidates, chat, body, tools, extra)
        match = next((v for v, p in candidates if p == prompt), None)
        if match is None and verdict is not None:
            log.warning("chat template of %s renders differently here than in the runner: the runner renders it",
                        model.name)
        if len(verdicts) > _MAX_VERDICTS:
            verdicts.clear()
        verdicts[key] = match or _Verdict(None, False, False)
    return prompt
