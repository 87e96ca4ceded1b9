"""Template work off the event loop: parsing a model's (or a request's) TEMPLATE and rendering prompts.

Both run Python for as long as a template asks (a client writes the template: a request's `template`, a created
model's TEMPLATE), bounded by the engine's limits (template/exec.py: iterations, size, 10 s). They run in their
own few threads, so a slow render neither stalls the loop nor takes the default executor's threads, which the
store's file I/O uses; and they share those threads fairly (server/fair_pool.py).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from ollama_py.api.wire import Message, Tool
from ollama_py.errors import TemplateError
from ollama_py.server.fair_pool import FairPool, key_of
from ollama_py.template.prompt import is_parsed, parse_prompt_template, render_prompt

# Shared fairly (server/fair_pool.py): a slow template runs one render at a time and such renders leave one of
# the threads to templates known to be cheap, so a few clients with a slow template cannot hold up every chat.
_POOL = FairPool(workers=4, thread_name_prefix="template")


async def _off_loop(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs) in the template threads; its first argument (the template) is the fairness key."""
    return await _POOL.run(key_of(args[0]) if args else 0, functools.partial(fn, *args, **kwargs))


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
    """prompt.render_prompt in a thread; raises TemplateError (a 400) for a template that fails or passes a
    limit."""
    return await _off_loop(render_prompt, template, messages=messages, tools=tools, system=None, suffix=suffix,
                           think=think)
