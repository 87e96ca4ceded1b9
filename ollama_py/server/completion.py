"""The one inference path shared by the native, OpenAI and Anthropic routes.

A route builds a CompletionRequest (prompt or messages, options, format, keep-alive), and `run_completion`
yields Delta events followed by one Final. Translation to NDJSON / SSE happens at the edges (the routes).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ollama_py.api.wire import Message, Tool, ToolCall
from ollama_py.errors import BadRequest, ContextExceeded, RunnerError
from ollama_py.runner.argv import MEDIA_MARKER
from ollama_py.runner.client import UpstreamLost
from ollama_py.scheduler.scheduler import Loaded, Scheduler, SlotHold
from ollama_py.server.access_log import RequestStats, current_stats
from ollama_py.server.offload import BULKY, per_item, release
from ollama_py.server.rendering import render_gguf_chat, render_off_loop
from ollama_py.server.truncation import (
    TOO_LONG,
    Fitted,
    cut_tokens,
    drop_order,
    log_truncation,
    room_to_generate,
    without,
)
from ollama_py.template.forced_calls import ForcedCall
from ollama_py.template.gemma4 import Gemma4Parser
from ollama_py.template.harmony import FunctionNames, HarmonyParser, prefill_of, reasoning_effort
from ollama_py.template.thinking import ThinkingParser, chat_template_tags, infer_tags, think_budget
from ollama_py.template.tool_calls import ToolCallParser, gguf_tool_tag, infer_tool_tag, known_tool_tag

if TYPE_CHECKING:
    from ollama_py.server.streaming import Lane  # streaming imports Delta from here
    from ollama_py.store.models import Model

log = logging.getLogger(__name__)

# Ollama option name -> llama-server /completion field.
_SAMPLING = {
    "num_predict": "n_predict",
    "temperature": "temperature",
    "top_k": "top_k",
    "top_p": "top_p",
    "min_p": "min_p",
    "typical_p": "typical_p",
    "repeat_penalty": "repeat_penalty",
    "repeat_last_n": "repeat_last_n",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    "seed": "seed",
    "num_keep": "n_keep",
}
_STOP_REASONS = {"eos": "stop", "word": "stop", "limit": "length", "none": "stop"}
# What run_completion reads of llama-server's stop event, asked for by name (/completion's response_fields): the
# event leaves out the rest, its generation settings and the whole prompt as text, which were parsed on the loop
# at the end of every request only to be dropped (an 18 KB prompt: a 20.7 KB event, 23 us to parse on the dev
# VM; with the fields 389 bytes, 2 us; an agent's context is several times that).
STOP_FIELDS = ("content", "tokens", "stop", "tokens_predicted", "tokens_evaluated", "truncated", "stop_type",
               "stopping_word", "timings", "completion_probabilities")
# An open-ended answer (num_predict -1) still gets a finite budget, several contexts long, as Ollama gives it:
# with context shift a model that never says EOS would otherwise never stop.
OPEN_ENDED_CONTEXTS = 10


@dataclass(slots=True)
class CompletionRequest:
    model: Model
    options: dict[str, Any]
    keep_alive: float | None = None
    prompt: str | None = None  # raw prompt (already templated)
    messages: list[Message] | None = None  # chat: rendered with the model's template
    tools: list[Tool] | None = None
    format: Any = None  # "json" | JSON schema dict | None
    context: list[int] | None = None  # /api/generate's deprecated context
    want_context: bool = False
    suffix: str | None = None
    images: list[str] = field(default_factory=list)
    logprobs: int | None = None
    think: bool | str | None = None  # passed to the template; true or a level also splits off the thinking
    started: float = field(default_factory=time.perf_counter)
    lane: Lane | None = None  # the per-token fast path, for a streamed response (server/streaming.py)
    truncate: bool = True  # a prompt longer than the context is cut to fit (False: refused with a 400)
    shift: bool = True  # at the end of the context, shift it and go on (False: stop there, done_reason "length")
    progress: bool = False  # stream prompt-processing progress (Delta.progress) before the first token
    forced: ForcedCall | None = None  # the answer must call one of the tools (tool_choice): JSON under a schema
    single_call: bool = False  # at most one tool call in the answer (parallel_tool_calls: false): later ones dropped

    @property
    def thinks(self) -> bool:
        return self.think is not None and self.think is not False and "thinking" in self.model.capabilities

    @property
    def harmony(self) -> bool:
        """Its answer is read as harmony (template/harmony.py): a conversation a harmony model's template renders
        (a raw prompt's answer is what llama-server prints)."""
        return self.messages is not None and self.model.harmony

    @property
    def gemma4(self) -> bool:
        """Its answer is read as Gemma 4's (template/gemma4.py): a conversation a Gemma 4 model's template renders."""
        return self.messages is not None and self.model.gemma4


@dataclass(slots=True)
class Delta:
    text: str
    tokens: list[int] | None = None
    probs: list[dict[str, Any]] | None = None
    thinking: str = ""
    tool_calls: list[ToolCall] | None = None  # calls completed by this event's text (requests with tools)
    progress: dict[str, Any] | None = None  # llama-server's prompt_progress: {total, cache, processed, time_ms}


@dataclass(slots=True)
class Final:
    done_reason: str
    prompt_eval_count: int
    prompt_tokens: int
    prompt_eval_duration: int
    eval_count: int
    eval_duration: int
    total_duration: int
    load_duration: int
    context: list[int] | None = None
    text: str = ""
    tool_calls: list[ToolCall] | None = None
    cache_n: int = 0
    stop_word: str | None = None  # the stop sequence that ended the text (Anthropic's stop_sequence)
    thinking: str = ""
    prompt_truncated: int = 0  # prompt tokens dropped to fit the context (server/truncation.py)
    context_shifted: bool = False  # the answer reached the end of the context, which was shifted to go on


def completion_body(options: dict[str, Any], fmt: Any) -> dict[str, Any]:
    """The sampling part of a llama-server /completion request from Ollama options."""
    body: dict[str, Any] = {"cache_prompt": True}
    for key, upstream in _SAMPLING.items():
        if key in options and options[key] is not None:
            body[upstream] = options[key]
    stops = options.get("stop")
    if stops:
        body["stop"] = list(dict.fromkeys(stops))
    if fmt == "json":
        body["json_schema"] = {"type": "object"}
    elif isinstance(fmt, dict):
        body["json_schema"] = fmt
    elif fmt not in (None, ""):
        raise BadRequest(f"invalid format: {json.dumps(fmt)}: must be \"json\" or a JSON schema object")
    return body


async def build_prompt(req: CompletionRequest, loaded: Loaded) -> str | list[Any] | dict[str, Any]:
    """The prompt: raw, through the model's TEMPLATE layer, or through the GGUF's own chat template. With images,
    llama-server's multimodal form: the text with a media marker where each image goes, and the images."""
    images = list(req.images)
    messages = req.messages
    if messages and images:  # /api/generate: its images belong to its one user message
        messages = [*messages[:-1], {**messages[-1], "images": [*(messages[-1].get("images") or []), *images]}]
        images = []
    if messages is not None and any(m.get("images") for m in messages):
        messages, images = _place_images(messages)
    tools = FunctionNames(req.tools).tools() if req.harmony and req.tools else req.tools  # harmony: identifiers
    if messages is None:
        prompt: str = req.prompt or ""
        if images and prompt.count(MEDIA_MARKER) < len(images):
            prompt = MEDIA_MARKER * (len(images) - prompt.count(MEDIA_MARKER)) + prompt
    elif req.model.prompt_template:
        prompt = await render_off_loop(req.model.prompt_template, messages=messages, tools=tools, suffix=req.suffix,
                                       think=req.think)
    else:  # the GGUF's own template: in-process where that matches the runner, else its /apply-template
        # a model whose template thinks renders with enable_thinking as `think` says (on unless false), as Ollama
        # renders it; llama-server's own default is off for a template its parsers do not know
        thinking = req.think is not False if "thinking" in req.model.capabilities else None
        if req.model.gemma4:  # Gemma 4 thinks when asked to, as Ollama's renderer has it (its template's default)
            thinking = req.thinks
        effort = reasoning_effort(req.think) if req.model.harmony else None
        prompt = await render_gguf_chat(req.model, messages, tools, loaded.client, thinking=thinking, effort=effort)
    if images:
        return {"prompt_string": _apart(prompt), "multimodal_data": images}
    if req.context:
        if len(req.context) > 100_000:  # a list copy of millions of ids: off the loop, a slice at a time
            joined = await asyncio.to_thread(_joined, req.context, prompt)
            current_stats().hold(joined)
            return joined
        return [*req.context, prompt]
    return prompt


async def rendered_prompt(scheduler: Scheduler, req: CompletionRequest) -> tuple[str, int]:
    """The prompt `req` would send its runner and how many images go with it, without generating: Ollama's
    `_debug_render_only`. The model is loaded first, as Ollama does (a GGUF's own template may be rendered by it)."""
    async with scheduler.use(req.model, req.options, req.keep_alive) as loaded:
        try:
            prompt = await build_prompt(req, loaded)
        except UpstreamLost as e:
            raise RunnerError(str(e)) from None
    images = len(prompt["multimodal_data"]) if isinstance(prompt, dict) else 0
    return prompt_text(prompt), images


def _joined(ids: list[int], prompt: str) -> list[Any]:
    """[*ids, prompt], copied 64k items per step (one copy of millions holds the GIL, so the loop, ~0.1 s)."""
    out: list[Any] = _concat(ids)
    out.append(prompt)
    return out


def _concat(*lists: list[Any]) -> list[Any]:
    """The lists one after another, copied 64k items per step (see _joined)."""
    out: list[Any] = []
    for items in lists:
        for k in range(0, len(items), 1 << 16):
            out.extend(items[k:k + (1 << 16)])
    return out


def prompt_text(prompt: str | list[Any] | dict[str, Any]) -> str:
    if isinstance(prompt, dict):
        return prompt["prompt_string"]
    return prompt if isinstance(prompt, str) else prompt[-1]


def _apart(prompt: str) -> str:
    """The prompt with a newline between media markers that would touch. llama-server fails a later request on
    the same slot whose prompt leaves its cached one exactly between two adjacent media (its server_tokens::
    keep_first takes the boundary for the middle of an image: "Chunk not found", a 500), so no two media are
    ever adjacent in a prompt sent to it."""
    pair = MEDIA_MARKER + MEDIA_MARKER
    while pair in prompt:
        prompt = prompt.replace(pair, MEDIA_MARKER + "\n" + MEDIA_MARKER)
    return prompt


def _place_images(messages: list[Message]) -> tuple[list[Message], list[str]]:
    """Ollama's image tags: each image of a message takes the place of an "[img]" in its text, or goes in
    front of it; here the tag is llama-server's media marker, and the images are collected in prompt order."""
    images: list[str] = []
    out: list[Message] = []
    for m in messages:
        if not m.get("images"):
            out.append(m)
            continue
        text, prefix = m.get("content") or "", ""
        for image in m["images"]:
            images.append(image)
            if "[img]" in text:
                text = text.replace("[img]", MEDIA_MARKER, 1)
            else:
                prefix += MEDIA_MARKER
        out.append({**m, "content": prefix + text})
    return out, images


async def run_completion(scheduler: Scheduler, req: CompletionRequest) -> AsyncGenerator[Delta | Final, None]:
    """Load (or reuse) the model's runner, stream its completion, end with Final. The steps: build the prompt,
    take a place at the runner (a slot, or its own queue), stream the runner's events as Deltas (`_deltas`:
    plain, or split into thinking and tool calls; plain tokens may take the lane; the place is given back with
    the last event; a forced call's JSON is held back and goes out as the call), then the Final from what was
    collected."""
    t_wait = time.perf_counter()
    if req.forced is not None and req.thinks:  # no thoughts fit the call's schema: the template renders none
        req.think = False
    stats = current_stats()  # the request's record for the access log and /metrics
    stats.note_model(req.model)
    prepared: list[tuple[_Collected, _Split | None]] = []

    async def prepare(loaded: Loaded) -> None:  # the prompt is ready before the request queues for a slot
        collected = _Collected(await build_prompt(req, loaded))
        prepared.append((collected, await _Split.for_request(req, collected.prompt)))

    hold = SlotHold()  # given back as soon as the runner's last event is in (_deltas)
    async with scheduler.use(req.model, req.options, req.keep_alive, before_slot=prepare, hold=hold) as loaded:
        load_ns = 0
        if loaded.requests_served == 0 and loaded.runner.load_duration:
            load_ns = int(min(loaded.runner.load_duration, time.perf_counter() - t_wait) * 1e9)
        out, split = prepared[0]
        forced = req.forced
        # a split answer (thinking, tool calls) may take the lane for its plain content, unless its parsers read
        # whole messages (gpt-oss, Gemma 4) or its answer is asked for again under a format (_deltas)
        lane = req.lane if (split is None or (split.whole is None and req.format is None)) and \
            req.logprobs is None and not req.progress and forced is None else None
        ids_ahead = req.want_context  # once the first token is out (a prompt of ids needs none)

        def first_out() -> None:  # the first token is on its way to the client
            nonlocal ids_ahead
            stats.first_output()
            if ids_ahead:
                ids_ahead = False
                if not _all_ids(out.prompt):
                    out.prompt_ids = _PromptIds.start(loaded, req, out.prompt)

        def stop_now(event: dict[str, Any]) -> Final | None:  # the lane's stop event (Lane, step 5)
            context = _context_now(req, out)
            if context is False:  # the prompt's ids are not in yet: the ordinary way waits for them
                return None
            out.last_event = event
            hold.release()  # llama-server is done with the slot: the next queued request may go
            return _final_of(req, out, load_ns, context)

        if lane is not None:
            if split is None:
                lane.collect(out.text, out.tokens if req.want_context else None, first_out, stop_now)
            else:
                lane.collect(out.text, out.tokens if req.want_context else None, first_out, None, split.plain,
                             split.thought if split.thinking is not None else None, out.thinking)
        try:
            async for delta in _deltas(loaded, req, out, split, lane, stats, hold):
                if forced is None or delta.progress is not None:  # a forced call's JSON goes out as the call
                    yield delta
                if ids_ahead:
                    first_out()
            if forced is not None and (answer := _forced_answer(forced, out)) is not None:
                yield answer
            if lane is not None and lane.final is not None:  # the lane ended the body with it (Lane, step 5)
                final = lane.final
            else:
                final = await _final(req, loaded, out, load_ns)
        finally:
            if out.prompt_ids is not None:
                out.prompt_ids.drop()  # a completion that failed, or a client gone
        stats.finished(final)
        yield final


@dataclass(slots=True)
class _Collected:
    """What one completion has produced so far, for its Final."""

    prompt: str | list[Any] | dict[str, Any]  # as sent (a prompt cut to fit the context replaces it)
    text: list[str | bytes] = field(default_factory=list)  # bytes: the lane's unescaped tokens, decoded at the end
    thinking: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)  # the generated token ids (want_context)
    tool_calls: list[ToolCall] = field(default_factory=list)
    last_event: dict[str, Any] = field(default_factory=dict)  # the runner's stop event: timings, counts, reason
    fitted: Fitted | None = None
    prompt_ids: _PromptIds | None = None  # /api/generate's context: the prompt's token ids, asked for beside the decode
    earlier_tokens: int = 0  # generated by a first request whose answer was asked for again under a format

    def whole_text(self) -> str:
        return "".join(p if isinstance(p, str) else p.decode("utf-8", "replace") for p in self.text)


def _all_ids(prompt: str | list[Any] | dict[str, Any]) -> bool:
    """A prompt of token ids alone (a context, or a prompt cut to fit): its ids need no /tokenize."""
    return isinstance(prompt, list) and not any(isinstance(p, str) for p in prompt)


@dataclass(slots=True)
class _PromptIds:
    """The token ids of a text prompt for /api/generate's `context`, asked of the runner's /tokenize once the
    first token is out, so the answer is in by the time the decode ends (it was one more round trip after it)."""

    prompt: str | list[Any] | dict[str, Any]  # the prompt they are for (a prompt cut to fit is another one)
    task: asyncio.Future[list[int]]

    @classmethod
    def start(cls, loaded: Loaded, req: CompletionRequest, prompt: str | list[Any] | dict[str, Any]) -> _PromptIds:
        coro = loaded.client.tokenize(prompt_text(prompt), add_special=not req.context)
        return cls(prompt, asyncio.ensure_future(coro))

    async def ids_for(self, loaded: Loaded, req: CompletionRequest,
                      prompt: str | list[Any] | dict[str, Any]) -> list[int]:
        if self.prompt is prompt:
            return await self.task
        self.drop()
        return await _PromptIds.start(loaded, req, prompt).task

    def drop(self) -> None:
        """Not wanted after all: stopped, or its error (nobody's now) taken so that it is not logged as lost."""
        if not self.task.done():
            self.task.cancel()
        elif not self.task.cancelled():
            self.task.exception()


class _Split:
    """The thinking and tool-call parsers of one completion: an event's text as (thought, content, calls)."""

    def __init__(self, thinking: ThinkingParser | None, calls: ToolCallParser | None, single: bool = False,
                 whole: HarmonyParser | Gemma4Parser | None = None) -> None:
        # `whole`: a model's own format, which says what is thought, content and a call all at once
        self.thinking, self.calls, self.whole = thinking, calls, whole
        self.room = 1 if single else -1  # calls still allowed (-1: any number)

    @classmethod
    async def for_request(cls, req: CompletionRequest, prompt: str | list[Any] | dict[str, Any]) -> _Split | None:
        """None for a plain completion (the text goes out as it comes), and for a forced call (its JSON is the
        call: no thinking or tags can come under its schema)."""
        if req.forced is not None:
            return None
        if req.harmony:  # gpt-oss: its messages' channels say what is what
            # a Go template leaves a final assistant message open for the answer to continue (a GGUF's own
            # template, as llama-server renders it, closes it and opens a new one)
            prefill = prefill_of(req.messages) if req.model.prompt_template else ""
            return cls(None, None, req.single_call, HarmonyParser(req.tools, prefill))
        if req.gemma4:
            return cls(None, None, req.single_call, Gemma4Parser(req.tools, thinking=req.thinks))
        thinking = None
        if req.thinks:
            if req.model.prompt_template:
                opening, closing = infer_tags(req.model.prompt_template)
            else:  # the GGUF's own template
                opening, closing = chat_template_tags(req.model.info.chat_template if req.model.info else None)
            thinking = ThinkingParser(opening, closing, inside=prompt_text(prompt).rstrip().endswith(opening))
        calls = None
        if req.tools:  # the tag comes from rendering the template (once per template, off the loop; then no thread)
            template = req.model.prompt_template
            if template is None:  # the GGUF's own template, which llama-server renders
                tag = gguf_tool_tag(req.model.info.chat_template if req.model.info is not None else None)
            elif (known := known_tool_tag(template)) is not None:
                tag = known
            else:
                tag = await asyncio.to_thread(infer_tool_tag, template)
            calls = ToolCallParser(req.tools, tag)
        return None if thinking is None and calls is None else cls(thinking, calls, req.single_call)

    def plain(self, content: str) -> bool:
        """Whether add(content, False) would give ("", content, []) and change no parser's state: the lane may
        write it as it writes a plain completion's token (Lane, `plain`)."""
        return (self.whole is None and (self.thinking is None or self.thinking.plain(content))
                and (self.calls is None or self.calls.plain(content)))

    def thought(self, content: str) -> bool:
        """Whether add(content, False) would give (content, "", []) and change no parser's state: the lane may
        write it as a thought (Lane, `thought`)."""
        return self.whole is None and self.thinking is not None and self.thinking.thought(content)

    def add(self, content: str, stop: bool) -> tuple[str, str, list[ToolCall]]:
        thought = ""
        calls: list[ToolCall] = []
        if self.whole is not None:
            thought, content, calls = self.whole.add(content)
            if stop:
                more_thought, more_content, more_calls = self.whole.finish()
                thought, content, calls = thought + more_thought, content + more_content, calls + more_calls
        if self.thinking is not None:
            thought, content = self.thinking.add(content)
            if stop:
                more_thought, more_content = self.thinking.finish()
                thought, content = thought + more_thought, content + more_content
        if self.calls is not None:  # only what may still be a tool call waits
            content, calls = self.calls.add(content)
            if stop:
                more_content, more_calls = self.calls.finish()
                content, calls = content + more_content, calls + more_calls
        if self.room >= 0 and calls:  # one call asked for: a model that makes more has them dropped
            calls, self.room = calls[:self.room], max(0, self.room - len(calls))
        return thought, content, calls

    def answer_prefix(self, raw: str) -> str | None:
        """What of `raw` (the answer as the runner wrote it) comes before its content, once the thinking is over:
        the prompt goes on with it when the content is asked for again under a format (_deltas); None if unknown."""
        parser = self.whole if self.whole is not None else self.thinking
        return parser.answer_prefix(raw) if parser is not None else None

    @property
    def markers(self) -> list[str]:
        """What the parsers split the answer at, for the runner to print even where the vocabulary holds it as a
        control token (Mistral's `[TOOL_CALLS]` and `[THINK]`, DeepSeek's, gpt-oss's markers): llama-server's own
        chat route names its format's markers so, and Ollama's /completion requests name its parsers'."""
        found: list[str] = []
        for parser in (self.whole, self.thinking, self.calls):
            if parser is not None:
                found += parser.markers
        return list(dict.fromkeys(found))


def _runner_body(req: CompletionRequest, prompt: str | list[Any] | dict[str, Any], split: _Split | None,
                 n_ctx: int) -> dict[str, Any]:
    """llama-server's /completion request."""
    body = completion_body(req.options, req.format)
    if req.forced is not None:  # over any response format: the answer is the call's JSON
        body["json_schema"] = req.forced.schema()
    body["prompt"] = prompt
    body["n_predict"] = bounded_predict(req.options.get("num_predict"), n_ctx)
    body["stream"] = True
    body["response_fields"] = STOP_FIELDS
    if req.want_context:
        body["return_tokens"] = True
    if req.logprobs is not None:
        body["n_probs"] = max(req.logprobs, 1)
    if req.progress:
        body["return_progress"] = True
    if split is not None:
        if split.thinking is not None:
            body.update(_budget_fields(req, split.thinking))
        if markers := split.markers:
            body["preserved_tokens"] = markers
    return body


def _budget_fields(req: CompletionRequest, thinking: ThinkingParser) -> dict[str, Any]:
    """llama-server's reasoning budget for a thinking completion that has one: after that many tokens inside
    the thinking tags (the ones the completion's parser splits at) it forces the closing tag. When the prompt
    already opened the block, the opening is the `generation_prompt` the budget starts counting from (else it
    waits to see the model open it)."""
    budget = think_budget(req.think, req.options.get("reasoning_budget"), req.model.prompt_template)
    if budget is None:
        return {}
    # the message field is what arms the forcing (without it llama-server counts but never closes the block)
    fields: dict[str, Any] = {"reasoning_budget_tokens": budget, "reasoning_budget_start_tag": thinking.opening,
                              "reasoning_budget_end_tags": [thinking.closing], "reasoning_budget_message": ""}
    if thinking.inside:
        # just the tag: whitespace after it would be fed to the sampler as if generated (and counted, or with a
        # zero budget step the forced tag's tokens out of line)
        fields["generation_prompt"] = thinking.opening
    return fields


def bounded_predict(num_predict: Any, n_ctx: int) -> int:
    """n_predict for llama-server: num_predict, or OPEN_ENDED_CONTEXTS contexts when it is open-ended (negative)
    or asks for more than that (Ollama's boundedNumPredict)."""
    limit = OPEN_ENDED_CONTEXTS * n_ctx
    if not isinstance(num_predict, int) or num_predict < 0 or num_predict > limit:
        return limit
    return num_predict


async def _stop_at_context_end(req: CompletionRequest, loaded: Loaded, prompt: str | list[Any] | dict[str, Any],
                               body: dict[str, Any]) -> None:
    """shift: false -- the runners shift the context when an answer reaches its end (llama-server's
    --context-shift, on for every runner as Ollama starts them); a request that asks not to is stopped there
    instead, with done_reason "length", by asking for no more tokens than the context has room for: llama-server
    without context shift stops once prompt + answer fill the slot's n_ctx. A multimodal prompt is left as it is
    (llama-server never shifts with a projector loaded)."""
    if isinstance(prompt, dict):
        return
    ids = [p for p in prompt if isinstance(p, int)] if isinstance(prompt, list) else []
    text = "".join(p for p in prompt if isinstance(p, str)) if isinstance(prompt, list) else prompt
    n_prompt = len(ids) + (len(await loaded.client.tokenize(text, add_special=not ids)) if text else 0)
    room = loaded.plan.spec.num_ctx - n_prompt
    if room <= 0:
        raise BadRequest(TOO_LONG)
    body["n_predict"] = min(body["n_predict"], room)


async def _deltas(loaded: Loaded, req: CompletionRequest, out: _Collected, split: _Split | None,
                  lane: Lane | None, stats: RequestStats, hold: SlotHold) -> AsyncGenerator[Delta, None]:
    """The runner's events as Deltas, up to its stop event (kept in `out`; the slot is given back with it). A
    prompt too long for the context is fitted once (fit_prompt) and sent again; a runner that dies under the
    request becomes its error."""
    body = _runner_body(req, out.prompt, split, loaded.plan.spec.num_ctx)
    if not req.shift:
        await _stop_at_context_end(req, loaded, out.prompt, body)
    # A format and thinking: the model thinks unconstrained and its answer is asked for again under the format once
    # the thinking is over (Ollama's structured outputs of a thinking model); the grammar would forbid the thoughts
    schema = body.pop("json_schema") if split is not None and req.thinks and "json_schema" in body else None
    raw: list[str] = []  # the answer as the runner wrote it, while the format waits
    while True:  # at most twice
        try:
            async with contextlib.aclosing(loaded.client.stream(
                    "/completion", body, lane.tap if lane is not None else None)) as events:
                async for event in events:
                    stop = bool(event.get("stop"))
                    if schema is not None and not stop:
                        raw.append(event.get("content", ""))
                    delta = _event_delta(event, stop, req, out, split, stats, hold)
                    if delta is None:
                        continue
                    if schema is not None and delta.text.strip() and not stop:
                        # the content begins: after thoughts, the prompt goes on with them; without, it is asked
                        # for again from the start, so that the format holds either way
                        thought = "".join(out.thinking).strip()
                        prefix = split.answer_prefix("".join(raw)) if thought and split is not None else ""
                        if prefix is not None:
                            out.text.clear()
                            if delta.thinking:
                                yield Delta("", thinking=delta.thinking)
                            break
                    yield delta
                    if lane is not None:  # resumed: that chunk is written, the headers are out (Lane, step 4)
                        lane.divert()
                    if stop:
                        return
                else:
                    return
        except ContextExceeded as e:
            if out.fitted is not None or out.text or out.last_event:
                raise
            out.fitted = await fit_prompt(req, loaded, out.prompt, e)
            body["prompt"] = out.prompt = out.fitted.prompt
            if not req.shift:
                await _stop_at_context_end(req, loaded, out.prompt, body)
            continue
        except UpstreamLost as e:
            raise await _runner_death(loaded, e) from None
        break
    out.earlier_tokens = len(raw)  # the first request's tokens (one an event: its stop event never came)
    answer = {key: value for key, value in body.items() if not key.startswith("reasoning_budget")
              and key not in ("generation_prompt", "preserved_tokens")}
    answer |= {"prompt": _continued(out.prompt, prefix), "json_schema": schema}
    try:
        async with contextlib.aclosing(loaded.client.stream("/completion", answer)) as events:
            async for event in events:
                stop = bool(event.get("stop"))
                if stop:
                    out.last_event = event
                    hold.release()
                if req.want_context and event.get("tokens") and not stop:
                    out.tokens.extend(event["tokens"])
                delta = _plain_delta(event, stop, out)
                if delta is not None:
                    yield delta
                if stop:
                    return
    except UpstreamLost as e:
        raise await _runner_death(loaded, e) from None


def _event_delta(event: dict[str, Any], stop: bool, req: CompletionRequest, out: _Collected,
                 split: _Split | None, stats: RequestStats, hold: SlotHold) -> Delta | None:
    """One runner event as the Delta it makes (None for a prompt's progress report the client did not ask for, or
    text held back); its stop event is kept in `out` and the slot given back with it."""
    if not stop and req.progress and "prompt_progress" in event and not event.get("content"):
        return Delta("", progress=event["prompt_progress"])
    stats.first_output()
    if stop:
        out.last_event = event
        hold.release()  # llama-server is done with the slot: the next queued request may go
    if req.want_context and event.get("tokens") and not stop:
        out.tokens.extend(event["tokens"])
    return _plain_delta(event, stop, out) if split is None else _split_delta(event, stop, out, split)


def _continued(prompt: str | list[Any] | dict[str, Any], more: str) -> str | list[Any] | dict[str, Any]:
    """The prompt with `more` text after it (a multimodal prompt's text, a prompt of ids and text)."""
    if isinstance(prompt, str):
        return prompt + more
    if isinstance(prompt, dict):
        return {**prompt, "prompt_string": prompt["prompt_string"] + more}
    return [*prompt, more]


def _plain_delta(event: dict[str, Any], stop: bool, out: _Collected) -> Delta | None:
    content = event.get("content", "")
    probs = None if stop else event.get("completion_probabilities")
    if not content and not probs:
        return None
    out.text.append(content)
    return Delta(content, event.get("tokens"), probs)


def _split_delta(event: dict[str, Any], stop: bool, out: _Collected, split: _Split) -> Delta | None:
    thought, content, calls = split.add(event.get("content", ""), stop)
    out.tool_calls += calls
    probs = None if stop else event.get("completion_probabilities")
    if not (thought or content or probs or calls):  # a tag's token still has its log-probability
        return None
    out.thinking.append(thought)
    out.text.append(content)
    return Delta(content, event.get("tokens"), probs, thought, calls or None)


def _forced_answer(forced: ForcedCall, out: _Collected) -> Delta | None:
    """A forced call's answer, once its JSON is complete: the call (kept for the Final, the text dropped), or the
    text as it came when it is no call (cut short by the token limit), so nothing generated is lost."""
    text = out.whole_text()
    call = forced.call(text)
    if call is None:
        return Delta(text) if text else None
    out.text, out.tool_calls = [], [call]
    return Delta("", tool_calls=[call])


def _context_now(req: CompletionRequest, out: _Collected) -> list[int] | None | Literal[False]:
    """/api/generate's context where it can be made at once (None: not asked for); False where it cannot: the
    prompt's ids are not in yet (or failed), or there are so many that they are joined off the loop (_final)."""
    if not req.want_context:
        return None
    prompt = out.prompt
    if _all_ids(prompt):
        ids: list[int] = prompt  # type: ignore[assignment]
    else:
        task = out.prompt_ids.task if out.prompt_ids is not None and out.prompt_ids.prompt is prompt else None
        if task is None or not task.done() or task.cancelled() or task.exception() is not None:
            return False
        ids = [*(req.context or []), *task.result()]
    if len(ids) > 100_000:
        return False
    if out.prompt_ids is not None:
        out.prompt_ids = None  # taken
    return [*ids, *out.tokens]


async def _final(req: CompletionRequest, loaded: Loaded, out: _Collected, load_ns: int) -> Final:
    """The Final: the runner's counts and timings, the whole text, and /api/generate's context if asked for."""
    prompt = out.prompt
    context = None
    if req.want_context and _all_ids(prompt):
        context = [*prompt, *out.tokens]  # a prompt cut to fit, as token ids
    elif req.want_context:
        ids = out.prompt_ids or _PromptIds.start(loaded, req, prompt)
        out.prompt_ids = None  # taken
        prompt_tokens = await ids.ids_for(loaded, req, prompt)
        if len(req.context or ()) + len(prompt_tokens) > 100_000:  # millions of ids: copied a slice at a time
            context = await asyncio.to_thread(_concat, req.context or [], prompt_tokens, out.tokens)
            current_stats().hold(context)
            await release([prompt_tokens])  # copied into context: emptied off the loop, not freed on it
        else:
            context = [*(req.context or []), *prompt_tokens, *out.tokens]
    return _final_of(req, out, load_ns, context)


def _final_of(req: CompletionRequest, out: _Collected, load_ns: int, context: list[int] | None) -> Final:
    """The Final from what was collected (the runner's stop event in `out.last_event`) and the context made."""
    last = out.last_event
    timings = last.get("timings", {})
    text = out.whole_text()
    fitted = out.fitted
    return Final(
        done_reason="stop" if out.tool_calls else _STOP_REASONS.get(last.get("stop_type", "eos"), "stop"),
        # Native prompt_eval_count is what the runner evaluated (timings.prompt_n: the cached prefix is
        # left out, so a follow-up turn shows its new tokens); usage for OpenAI/Anthropic is the whole
        # prompt (tokens_evaluated), so a repeated request reports the same usage.
        prompt_eval_count=int(timings.get("prompt_n", last.get("tokens_evaluated", 0)) or 0),
        prompt_tokens=int(last.get("tokens_evaluated") or timings.get("prompt_n", 0) or 0),
        prompt_eval_duration=int(float(timings.get("prompt_ms", 0)) * 1e6),
        eval_count=int(timings.get("predicted_n", last.get("tokens_predicted", 0)) or 0) + out.earlier_tokens,
        eval_duration=int(float(timings.get("predicted_ms", 0)) * 1e6),
        total_duration=int((time.perf_counter() - req.started) * 1e9),
        load_duration=load_ns,
        context=context,
        text=text,
        tool_calls=out.tool_calls or None,
        cache_n=int(timings.get("cache_n", 0) or 0),
        stop_word=(last.get("stopping_word") or None) if last.get("stop_type") == "word" else None,
        thinking="".join(out.thinking),
        prompt_truncated=fitted.tokens_before - fitted.tokens_after if fitted is not None else 0,
        # llama-server's `truncated`: the context was shifted under the answer (with shift: false it stops instead)
        context_shifted=bool(last.get("truncated")) and req.shift,
    )


async def fit_prompt(req: CompletionRequest, loaded: Loaded, prompt: str | list[Any] | dict[str, Any],
                     error: ContextExceeded) -> Fitted:
    """The prompt cut to fit a slot's context (server/truncation.py), or the 400 that truncate: false asks for
    (and shift: false, as Ollama: a runner that may not shift does not cut a prompt either)."""
    if not req.truncate or not req.shift:
        raise BadRequest(TOO_LONG) from None
    if isinstance(prompt, dict):  # a multimodal prompt is not cut: its images' tokens are the runner's business
        raise error
    n_ctx = error.n_ctx or loaded.plan.spec.num_ctx
    limit = n_ctx - room_to_generate(n_ctx, req.options.get("num_predict"))
    before = error.n_prompt_tokens
    add_special = not req.context
    messages = list(req.messages or [])
    order = drop_order(messages)

    async def attempt(k: int) -> tuple[list[Message], str | list[Any], list[int]]:
        """The prompt without the k oldest droppable messages, and its tokens."""
        kept = await per_item(len(messages), without, messages, order[:k])
        attempt_prompt = await build_prompt(dataclasses.replace(req, messages=kept), loaded)
        if isinstance(attempt_prompt, dict):
            raise error
        return kept, attempt_prompt, await loaded.client.tokenize(prompt_text(attempt_prompt),
                                                                  add_special=add_special)

    # The fewest oldest messages to drop: a binary search (the prompt only shrinks as more go), so a conversation
    # of n messages is rendered and tokenized about log2(n) times, where dropping one at a time took n.
    lo, hi = 1, len(order)
    best: tuple[list[Message], str | list[Any], list[int]] | None = None
    all_dropped = None
    while lo <= hi:
        mid = (lo + hi) // 2
        got = await attempt(mid)
        if mid == len(order):
            all_dropped = got
        if len(got[2]) <= limit:
            best, hi = got, mid - 1
        else:
            lo = mid + 1
    if best is not None:
        fitted = Fitted(best[1], best[0], before, len(best[2]))
        log_truncation(req.model.name, fitted, n_ctx)
        return fitted
    kept: list[Message] | None = None
    if order:  # every droppable message gone and still too long: its tokens are cut
        kept, prompt, tokens = all_dropped or await attempt(len(order))
    else:
        tokens = await loaded.client.tokenize(prompt_text(prompt), add_special=add_special)
    num_keep = req.options.get("num_keep")
    keep = num_keep if isinstance(num_keep, int) and num_keep >= 0 else 4

    def cut() -> tuple[list[int], int]:
        ids = _concat(req.context, tokens) if req.context else tokens  # slices: one copy of 20M ids holds the GIL
        return cut_tokens(ids, limit, keep), len(ids)

    n = len(tokens) + len(req.context or ())
    ids_cut, n_ids = await asyncio.to_thread(cut) if n > 100_000 else cut()  # millions of ids: off the loop
    if len(tokens) > BULKY and ids_cut is not tokens:  # millions of ints freed here would hold the loop ~50 ms
        await release([tokens])
    fitted = Fitted(ids_cut, kept, before or n_ids, len(ids_cut))
    log_truncation(req.model.name, fitted, n_ctx)
    return fitted


async def _runner_death(loaded: Loaded, cause: Exception) -> RunnerError:
    """The error for a request whose runner died under it: wait briefly for the exit, carry the stderr tail."""
    error = RunnerError(str(cause))
    for _ in range(40):
        if not loaded.runner.alive:
            error = loaded.runner.error()
            break
        await asyncio.sleep(0.025)
    if loaded.plan.spec.rpc_servers:
        from ollama_py.runner.rpc import reachable

        _, down = await asyncio.to_thread(reachable, loaded.plan.spec.rpc_servers, 0.5)
        if down:
            error = RunnerError(f"lost RPC worker {', '.join(down)}: {error}")
    return error
