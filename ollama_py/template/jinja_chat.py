"""GGUF chat templates (Jinja) rendered in-process, in a sandbox with limits (pure: no event loop, no server).

    chat_template_from_kv(kv, tools) -> ChatTemplate | None     a GGUF's template with its BOS/EOS tokens
    render_chat(chat, messages, tools=..., add_generation_prompt=True) -> str
    check_chat_template(chat)        JinjaLimit for a template that loops or explodes on a plain conversation
    check_gguf_chat_templates(kv)    the same for each template a GGUF carries (what /api/create runs)
    template_thinks(source)          Ollama's thinking capability of a chat template

A GGUF carries its chat template as Jinja source (`tokenizer.chat_template`). llama-server renders it with
llama.cpp's own Jinja engine (common/jinja) for /apply-template and applies it at load. Asking the runner costs
a round trip per chat (~1.7 ms); here it is rendered with jinja2's ImmutableSandboxedEnvironment set up the way
transformers and llama-server set theirs up (common/chat.cpp, common/jinja):
  - trim_blocks and lstrip_blocks on, `break`/`continue` (loopcontrols), one trailing newline of the source dropped,
    transformers' `{% generation %}` blocks rendered as plain text;
  - raise_exception(msg), strftime_now(fmt) (local time), range, and a tojson filter that takes ensure_ascii
    (default false), indent, separators (json.dumps's defaults: ", " and ": ") and sort_keys;
  - the variables llama-server passes: messages, bos_token, eos_token, add_generation_prompt, enable_thinking
    (true), tools (only when given), datetime ("%b %d %Y") and date_string ("%d %b %Y");
  - a rendered prompt that starts with bos_token loses it when the vocabulary adds BOS itself (and likewise
    EOS at the end).
Engines differ in corners (llama.cpp's normalises messages to what a template's probed capabilities want), so the
caller compares a first render of each request shape with the runner's and falls back where they differ
(server/rendering.py).

A template is code from whoever made the GGUF, so a render is bounded (Limits): loop iterations and range()
items, attribute/item/call operations and wall time share one budget; strings and lists built with `+`, `*`,
`~`, `%`, join/replace/center/... may not grow past `max_chars`; nor may the output. Passing a limit raises
JinjaLimit (a TemplateError, so a 400). Anything else the sandbox cannot render (syntax jinja2 lacks, a
raise_exception, a type error) raises JinjaUnsupported: the runner's engine may still render it.
"""

from __future__ import annotations

import collections
import functools
import json
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jinja2
import jinja2.ext
import jinja2.filters
import jinja2.nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ollama_py.errors import TemplateError


class JinjaLimit(TemplateError):
    """A chat template passed a render limit (loops, operations, time, or size)."""


class JinjaUnsupported(Exception):
    """A chat template our sandbox does not render (the runner's engine may): syntax, a raised exception, an
    error at render time."""


# What llama-server renders a model with that carries no chat template: every message as
# <|im_start|>role\ncontent<|im_end|>\n, then <|im_start|>assistant\n for the answer.
DEFAULT_CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@dataclass(frozen=True, slots=True)
class ChatTemplate:
    """A GGUF's chat template and the tokens llama-server renders it with."""

    source: str
    bos_token: str = ""
    eos_token: str = ""
    add_bos: bool = False  # the vocabulary adds BOS itself: a leading bos_token is dropped from the prompt
    add_eos: bool = False


@dataclass(frozen=True, slots=True)
class Limits:
    operations: int = 1_000_000  # loop iterations + range() items + attribute/item lookups + calls
    max_chars: int = 8 << 20  # any string or list built, and the output
    seconds: float = 2.0


DEFAULT_LIMITS = Limits()
# What /api/create and a load check with: a plain conversation needs a few hundred operations.
CHECK_LIMITS = Limits(operations=200_000, max_chars=1 << 20, seconds=1.0)


class _Budget:
    __slots__ = ("ops", "deadline", "max_chars", "seconds")

    def __init__(self, limits: Limits) -> None:
        self.ops = limits.operations
        self.seconds = limits.seconds
        self.deadline = time.monotonic() + limits.seconds
        self.max_chars = limits.max_chars


_local = threading.local()


def _budget() -> _Budget:
    budget: _Budget | None = getattr(_local, "budget", None)
    if budget is None:
        # Outside a render: the compiler folding a constant expression (`'x'|center(10**9)`) at compile time,
        # where no budget holds. Impossible tells it to leave that to the (budgeted) render.
        raise jinja2.nodes.Impossible()
    return budget


def _spend(n: int = 1) -> _Budget:
    """One operation (or n) spent; the budget, for the caller's own checks."""
    b: _Budget | None = getattr(_local, "budget", None)
    if b is None:
        raise jinja2.nodes.Impossible()  # outside a render (_budget)
    before = b.ops
    b.ops -= n
    if b.ops < 0:
        raise JinjaLimit("chat template exceeds its limit of loop iterations and operations")
    if (before >> 10) != (b.ops >> 10) and time.monotonic() > b.deadline:  # the clock, every ~1k operations
        raise JinjaLimit(f"chat template took longer than {b.seconds:g} s to render")
    return b


def _size(n: int) -> None:
    if n > _budget().max_chars:
        raise JinjaLimit(f"chat template builds a value larger than {_budget().max_chars} characters")


def _length(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple)) else 0


def chat_template_from_kv(kv: dict[str, Any], tools: bool, source: str | None = None) -> ChatTemplate | None:
    """A GGUF's chat template (or `source`, as llama-server's --chat-template-file gives it) with the BOS and EOS
    tokens' text and whether the vocabulary adds them (llama.cpp's defaults by tokenizer where the GGUF is
    silent)."""
    if source is None:
        tool_use = kv.get("tokenizer.chat_template.tool_use")
        default = kv.get("tokenizer.chat_template")
        source = tool_use if tools and isinstance(tool_use, str) and tool_use else default
        if not isinstance(source, str) or not source or source == "chatml":
            # llama-server's choice for a GGUF without a template: the tool_use one, else plain ChatML
            source = tool_use if isinstance(tool_use, str) and tool_use else DEFAULT_CHATML
    if not isinstance(source, str) or not source:
        return None
    if source == "chatml":
        source = DEFAULT_CHATML
    tokens = kv.get("tokenizer.ggml.tokens")
    vocab = kv.get("tokenizer.ggml.model")

    def piece(key: str) -> str:
        i = kv.get(key)
        ok = isinstance(tokens, list) and isinstance(i, int) and 0 <= i < len(tokens)
        return str(tokens[i]) if ok else ""  # type: ignore[index]

    add_bos = kv.get("tokenizer.ggml.add_bos_token", vocab in ("llama", "bert"))
    add_eos = kv.get("tokenizer.ggml.add_eos_token", vocab == "t5")
    return ChatTemplate(source, piece("tokenizer.ggml.bos_token_id"), piece("tokenizer.ggml.eos_token_id"),
                        bool(add_bos), bool(add_eos))


# -- the sandbox -----------------------------------------------------------------------------------------------
_WIDE = re.compile(r"\d{6,}")  # a width or precision of 100,000+ in a format string


def _checked_format(fmt: Any) -> None:
    if isinstance(fmt, str):
        _size(len(fmt))
        if _WIDE.search(fmt):
            raise JinjaLimit("chat template formats a field wider than the limit")


def _guarded_str_method(s: str, name: str, method: Any) -> Any:
    """str methods that can build a huge string from small arguments, checked first."""
    def call(*args: Any, **kwargs: Any) -> Any:
        _spend()
        if name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
            hits = s.count(args[0]) if args[0] else len(s) + 1
            _size(len(s) + hits * len(args[1]))
        elif name in ("center", "ljust", "rjust", "zfill") and args and isinstance(args[0], int):
            _size(args[0])
        elif name == "expandtabs":
            _size(len(s) * max(1, int(args[0]) if args and isinstance(args[0], int) else 8))
        elif name == "join" and args:
            items = list(args[0])
            _spend(len(items))
            _size(sum(len(str(x)) for x in items) + len(s) * len(items))
            return method(items)
        return method(*args, **kwargs)
    return call


_GUARDED_STR_METHODS = frozenset({"replace", "center", "ljust", "rjust", "zfill", "expandtabs", "join"})


class _CodeGen(CodeGenerator):
    def visit_Concat(self, node: jinja2.nodes.Concat, frame: Frame) -> None:
        # `a ~ b ~ c`: through environment.concat, which checks the size (str_join would not)
        self.write("environment.concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class _Generation(jinja2.ext.Extension):
    """transformers' `{% generation %}...{% endgeneration %}` (it marks the assistant's tokens for training):
    the body renders as it is, as llama.cpp's engine renders it."""

    tags = {"generation"}

    def parse(self, parser: Any) -> list[jinja2.nodes.Node]:
        next(parser.stream)
        return list(parser.parse_statements(("name:endgeneration",), drop_needle=True))


class _Sandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"+", "*", "**", "%"})
    code_generator_class = _CodeGen

    def _parse(self, source: str, name: str | None, filename: str | None) -> jinja2.nodes.Template:
        tree = super()._parse(source, name, filename)
        # every for loop iterates through loop_items, which spends one operation per item
        for loop in tree.find_all(jinja2.nodes.For):
            loop.iter = jinja2.nodes.Call(jinja2.nodes.EnvironmentAttribute("loop_items"), [loop.iter], [], None,
                                          None, lineno=loop.lineno)
        return tree

    @staticmethod
    def loop_items(items: Any) -> Iterator[Any]:
        for item in items:
            _spend()
            yield item

    @staticmethod
    def concat(parts: Iterable[Any]) -> str:
        out = "".join(map(str, parts))
        _size(len(out))
        return out

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        b = _spend()
        if operator == "+" and left.__class__ is str and right.__class__ is str:  # most of a chat's operations
            if len(left) + len(right) > b.max_chars:
                raise JinjaLimit(f"chat template builds a value larger than {b.max_chars} characters")
            return left + right
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(n, int) and not isinstance(n, bool) and _length(seq):
                    _size(_length(seq) * n)
        elif operator == "**":
            big = isinstance(right, (int, float)) and abs(right) > 256
            if big and isinstance(left, (int, float)) and abs(left) > 1:
                raise JinjaLimit("chat template raises a number to a power past the limit")
        elif operator == "+":
            if _length(left) and _length(right):
                _size(_length(left) + _length(right))
        elif operator == "%":
            _checked_format(left)
        return super().call_binop(context, operator, left, right)

    def getattr(self, obj: Any, attribute: str) -> Any:
        _spend()
        value = super().getattr(obj, attribute)
        if isinstance(obj, str) and attribute in _GUARDED_STR_METHODS and callable(value):
            return _guarded_str_method(obj, attribute, value)
        if isinstance(obj, str) and attribute in ("format", "format_map"):
            _checked_format(obj)
        return value

    def getitem(self, obj: Any, argument: Any) -> Any:
        _spend()
        value = super().getitem(obj, argument)
        if isinstance(obj, str) and argument in _GUARDED_STR_METHODS and callable(value):
            return _guarded_str_method(obj, str(argument), value)
        return value

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805 (jinja's names)
        _spend()
        return super().call(__context, __obj, *args, **kwargs)


def _raise_exception(message: Any) -> None:
    raise JinjaUnsupported(f"Jinja Exception: {message}")


def _strftime_now(fmt: str) -> str:
    _checked_format(fmt)
    return time.strftime(fmt, time.localtime())


def _range(*args: Any) -> range:
    r = range(*args)
    _spend(len(r))
    return r


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: Sequence[str] | None = None, sort_keys: bool = False) -> str:
    out = json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                     separators=tuple(separators) if separators else None, sort_keys=sort_keys)  # type: ignore[arg-type]
    _size(len(out))
    return out


def _filter(name: str, check: Any) -> Any:
    original = jinja2.filters.FILTERS[name]

    @functools.wraps(original)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _spend()
        check(*args, **kwargs)
        return original(*args, **kwargs)
    return guarded


def _check_join(*args: Any, **kwargs: Any) -> None:
    # do_join(eval_ctx, value, d="", attribute=None)
    value = args[1] if len(args) > 1 else kwargs.get("value")
    if isinstance(value, (list, tuple)):
        _spend(len(value))
        sep = args[2] if len(args) > 2 else kwargs.get("d", "")
        _size(sum(len(str(x)) for x in value) + len(str(sep)) * len(value))


def _check_replace(*args: Any, **kwargs: Any) -> None:
    # do_replace(eval_ctx, s, old, new, count=None)
    if len(args) >= 4:
        s, old, new = str(args[1]), str(args[2]), str(args[3])
        _size(len(s) + (s.count(old) if old else len(s) + 1) * len(new))


def _check_width(*args: Any, **kwargs: Any) -> None:
    # center(value, width), indent(s, width, ...), wordwrap(env, s, width, ...), truncate(env, s, length, ...)
    for a in (*args[1:], *kwargs.values()):
        if isinstance(a, int) and not isinstance(a, bool):
            _size(a)
        if isinstance(a, str) and a is not args[0]:
            _size(len(a) * max(1, _length(args[0]) if args else 1))


def _check_format(*args: Any, **kwargs: Any) -> None:
    _checked_format(args[0] if args else None)


@functools.cache
def _environment() -> _Sandbox:
    env = _Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols, _Generation],
                   undefined=jinja2.Undefined, autoescape=False)
    env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now, range=_range)
    env.filters["tojson"] = _tojson
    env.filters["join"] = _filter("join", _check_join)
    env.filters["replace"] = _filter("replace", _check_replace)
    for name in ("center", "indent", "wordwrap", "truncate", "batch", "slice"):
        env.filters[name] = _filter(name, _check_width)
    env.filters["format"] = _filter("format", _check_format)
    return env


_COMPILED: collections.OrderedDict[str, tuple[jinja2.Template, dict[str, Any]]] = collections.OrderedDict()
_COMPILED_KEPT = 64
_compile_lock = threading.Lock()


def template_thinks(source: str) -> bool:
    """Ollama's thinking capability of a Jinja chat template (chatTemplateHasThinkingSupport): it writes <think> and
    </think> (or Mistral's [THINK] and [/THINK], which Ollama's ministral parser reads as thinking), or splits past
    answers at </think> (some Qwen and DeepSeek templates) without reasoning_content."""
    if "<think>" in source and "</think>" in source:
        return True
    if "[THINK]" in source and "[/THINK]" in source:  # Magistral, Ministral 3 Reasoning (Ollama's ministral parser)
        return True
    return (("content.split('</think>')" in source or 'content.split("</think>")' in source)
            and "reasoning_content" not in source and "<SPECIAL_12>" not in source)


def is_compiled(source: str) -> bool:
    """Whether a render of `source` finds it compiled (no compile, which can take a while, before it starts)."""
    return source in _COMPILED


def _compiled(source: str) -> tuple[jinja2.Template, dict[str, Any]]:
    """The template compiled, with its globals as one dict (the last _COMPILED_KEPT compiled are kept). jinja2
    keeps a template's globals as a ChainMap over the environment's, and copies it into each render's context:
    ~30 calls a render, done here once."""
    compiled = _COMPILED.get(source)
    if compiled is not None:
        return compiled
    try:
        template = _environment().from_string(source)
    except jinja2.TemplateError as e:
        raise JinjaUnsupported(f"chat template does not parse: {e}") from None
    except RecursionError:
        raise JinjaUnsupported("chat template nests too deeply") from None
    compiled = (template, dict(template.globals))
    with _compile_lock:
        _COMPILED[source] = compiled
        _COMPILED.move_to_end(source)
        while len(_COMPILED) > _COMPILED_KEPT:
            _COMPILED.popitem(last=False)
    return compiled


_DATES: list[Any] = [None, "", ""]  # [the second they are for, datetime, date_string]


def _dates() -> tuple[str, str]:
    """llama-server's `datetime` ("%b %d %Y") and `date_string` ("%d %b %Y") for now, local time: made once a
    second, not per render."""
    second = int(time.time())
    if _DATES[0] != second:
        now = time.localtime(second)
        _DATES[:] = [second, time.strftime("%b %d %Y", now), time.strftime("%d %b %Y", now)]
    return _DATES[1], _DATES[2]


# -- rendering ---------------------------------------------------------------------------------------------------
_PRESERVE_REASONING = {"preserve_reasoning": True, "preserve_thinking": True, "clear_thinking": False,
                       "truncate_history_thinking": False, "drop_thinking": False}


def render_chat(chat: ChatTemplate, messages: Sequence[Mapping[str, Any]], *,
                tools: Sequence[Mapping[str, Any]] | None = None, add_generation_prompt: bool = True,
                enable_thinking: bool = True, limits: Limits = DEFAULT_LIMITS,
                extra: Mapping[str, Any] | None = None) -> str:
    """The prompt for `messages` (OpenAI-shaped, as llama-server's /apply-template takes them). llama-server
    passes enable_thinking true unless its analysis of the template finds no thinking block. Raises JinjaLimit
    past a limit, JinjaUnsupported for what the sandbox cannot render."""
    template, template_globals = _compiled(chat.source)
    datetime, date_string = _dates()
    variables: dict[str, Any] = {
        **template_globals,
        "messages": [dict(m) for m in messages],
        "bos_token": chat.bos_token,
        "eos_token": chat.eos_token,
        "enable_thinking": enable_thinking,
        "datetime": datetime,
        "date_string": date_string,
    }
    # llama-server keeps earlier answers' reasoning (its preserve_reasoning default): the flags templates read for it
    variables.update(_PRESERVE_REASONING)
    if extra:  # the request's own template variables (chat_template_kwargs: gpt-oss's reasoning_effort)
        variables.update(extra)
        if "reasoning_effort" in extra:  # llama-server binds both names to the level
            variables["reasoning_strength"] = extra["reasoning_effort"]
    if tools:
        variables["tools"] = [dict(t) for t in tools]
    if add_generation_prompt:
        variables["add_generation_prompt"] = True
    budget = _Budget(limits)
    _local.budget = budget
    try:
        parts: list[str] = []
        size = 0
        env = template.environment  # Template.generate's context, made from the globals' one dict
        context = env.context_class(env, variables, template.name, template.blocks, globals=template_globals)
        for piece in template.root_render_func(context):
            size += len(piece)
            if size > limits.max_chars:
                raise JinjaLimit(f"chat template renders more than {limits.max_chars} characters")
            parts.append(piece)
        out = "".join(parts)
    except (JinjaLimit, JinjaUnsupported):
        raise
    except jinja2.exceptions.SecurityError as e:
        raise JinjaUnsupported(f"chat template does something the sandbox forbids: {e}") from None
    except RecursionError:
        raise JinjaLimit("chat template recurses too deeply") from None
    except MemoryError:
        raise JinjaLimit("chat template builds a value too large to hold") from None
    except Exception as e:  # a template error, a type error in the template's own expressions
        raise JinjaUnsupported(f"chat template failed: {type(e).__name__}: {e}") from None
    finally:
        _local.budget = None
    if chat.add_bos and chat.bos_token and out.startswith(chat.bos_token):
        out = out[len(chat.bos_token):]
    if chat.add_eos and chat.eos_token and out.endswith(chat.eos_token):
        out = out[: len(out) - len(chat.eos_token)]
    return out


_PROBE_MESSAGES = (
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi there"},
    {"role": "user", "content": "What is the weather in Paris?"},
)
_PROBE_TOOLS = (
    {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                      "parameters": {"type": "object", "required": ["city"],
                                                     "properties": {"city": {"type": "string"}}}}},
)


def check_chat_template(chat: ChatTemplate, limits: Limits = CHECK_LIMITS) -> bool:
    """Render a plain conversation (and one with a tool) as a load would: raises JinjaLimit when the template
    loops or explodes on it. True when both rendered, False when the sandbox cannot judge the template (its
    syntax, or it raised an exception of its own on these inputs)."""
    judged = True
    for messages, tools in ((_PROBE_MESSAGES[1:2], None), (_PROBE_MESSAGES, None), (_PROBE_MESSAGES, _PROBE_TOOLS)):
        try:
            render_chat(chat, messages, tools=tools, limits=limits)
        except JinjaUnsupported:
            judged = False
    return judged


def check_gguf_chat_templates(kv: Mapping[str, Any]) -> None:
    """Refuse a GGUF whose chat template (or its tool_use variant, which llama-server also applies at load) loops
    or explodes on a plain conversation: JinjaLimit, a 400 naming the limit. A template the sandbox cannot judge
    passes (llama-server's engine may render what jinja2 does not)."""
    for key in ("tokenizer.chat_template", "tokenizer.chat_template.tool_use"):
        source = kv.get(key)
        if isinstance(source, str) and source:
            chat = chat_template_from_kv(dict(kv), False, source)
            if chat is not None:
                try:
                    check_chat_template(chat)
                except JinjaLimit as e:
                    raise JinjaLimit(f"the model's chat template ({key}) cannot be used: {e}") from None
