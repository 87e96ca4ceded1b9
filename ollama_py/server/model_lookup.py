"""The stored model a request names, for the routes that run one: found (or its config-file alias) with 404 as
Ollama words it, checked for what a chat asks of it, and its options merged with the request's; and the store
itself for the routes that write it (`store_to_write`: refused at once when serve found it read-only)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ollama_py.api.media import media_needs
from ollama_py.api.names import LOCAL, ModelName, parse_ref
from ollama_py.api.options import validate_options
from ollama_py.api.wire import Message, Tool
from ollama_py.config import Settings
from ollama_py.errors import REMOTE_INFERENCE, BadRequest, CloudDisabled, ModelNotFound, OllamaError
from ollama_py.scheduler.factory import weights_shape
from ollama_py.server.access_log import current_stats
from ollama_py.server.appkeys import CONFIG, SETTINGS, STORE
from ollama_py.server.live_config import LiveConfig
from ollama_py.server.rendering import warm_template
from ollama_py.store.blobs import canonical_digest

if TYPE_CHECKING:
    from ollama_py.store.models import Model, ModelStore

log = logging.getLogger(__name__)


READ_ONLY_STORE = ("the model store is read-only: its models can be run, but none can be pulled, created, copied "
                   "or deleted (set OLLAMA_MODELS to a directory serve can write)")


def store_to_write(request: web.Request) -> ModelStore:
    """The store, for a route that writes it. One serve found unwritable at its start (store/lock.py) is refused at
    once, before any work, with what can still be done (a 500, as Ollama answers a failed write)."""
    store = request.app[STORE]
    if store.read_only:
        raise OllamaError(READ_ONLY_STORE)
    return store


async def find_model(request: web.Request, name: ModelName, raw: str, *,
                     remote: str | None = REMOTE_INFERENCE) -> Model:
    """The stored model, or 404 `model 'x' not found` with the name as the user wrote it. A stub of a remote
    model is a 403 naming `remote`, what is unavailable (None: the stub itself is wanted, to delete it), or a
    404 when the name asked for the local model (`name:local`)."""
    store = request.app[STORE]
    # unchanged since last time: no thread hop, no file reads
    model = store.peek(name) or await _load_or_alias(request, name, raw)
    if model.remote_host and remote is not None:
        if parse_ref(raw).source == LOCAL:
            raise ModelNotFound(raw.strip())
        raise CloudDisabled(remote)
    _, at, digest = raw.partition("@")
    if at and canonical_digest(digest) != canonical_digest(model.digest):
        raise ModelNotFound(raw)  # name@sha256:<digest> names one version of the model: another one is not it
    current_stats().note_model(model)  # the access log and /metrics label requests with it
    await warm_template(model.prompt_template)  # its capabilities read the parsed template on the loop
    return model


async def _load_or_alias(request: web.Request, name: ModelName, raw: str) -> Model:
    """The stored model of that name, else the one a config file's alias names, else 404."""
    store = request.app[STORE]
    try:
        return await asyncio.to_thread(load_stored, store, name)
    except ModelNotFound:
        live = request.app.get(CONFIG)
        target = live.alias_target(name) if live is not None else None
        if target is None:
            raise ModelNotFound(raw) from None
    try:
        found = store.peek(target)
        return found if found is not None else await asyncio.to_thread(load_stored, store, target)
    except ModelNotFound:
        raise ModelNotFound(raw, f"model '{raw}' not found (an alias of '{target.short}', which is not in the "
                                 "store)") from None


def load_stored(store: ModelStore, name: ModelName) -> Model:
    """(In a thread.) The stored model, with its weights' shape read into the scheduler's cache here: the load
    plan reads it on the event loop, and a large vocabulary takes most of a second to parse."""
    model = store.load(name)
    if model.model_path is not None:
        try:
            weights_shape(model)
        except Exception as exc:  # noqa: BLE001 - the plan reads it again and reports what is wrong
            log.debug("reading the shape of %s: %s", model.model_path, exc)
    return model


def check_chat_capabilities(model: Model, raw_name: str, messages: Sequence[Message],
                            tools: Sequence[Tool] | None, check_think: Callable[[], None] | None = None) -> None:
    """What /api/chat refuses of a model, in Ollama's order, asked of the OpenAI and Anthropic chat routes too (one
    check, one text). `check_think`: /api/chat's think check, which comes between tools and images (the other
    routes drop thinking a model lacks rather than refuse it)."""
    caps = model.capabilities
    if "completion" not in caps:
        raise BadRequest(f'"{raw_name}" does not support chat')
    if tools and "tools" not in caps:
        raise BadRequest(f'"{raw_name}" does not support tools')
    if check_think is not None:
        check_think()
    check_media(caps, raw_name, [item for m in messages for item in m.get("images") or ()])


def check_media(caps: Sequence[str], raw_name: str, items: list[str]) -> None:
    """Images need "vision", sounds (WAV, MP3, FLAC in `images`, as Ollama takes them) need "audio"."""
    for cap in media_needs(items) if items else ():
        if cap not in caps:
            raise BadRequest(f'"{raw_name}" does not support {cap}')


def merged_options(request: web.Request, model: Model, raw_options: Any) -> dict[str, Any]:
    """The model's PARAMETERs overlaid by the request's options (stops are merged, not replaced)."""
    opts = default_options(request.app[SETTINGS], request.app.get(CONFIG), model)
    requested = validate_options(raw_options) if raw_options is not None else {}
    model_stops = list(opts.get("stop") or [])
    opts.update(requested)
    if "stop" in requested:
        opts["stop"] = list(dict.fromkeys(model_stops + list(requested["stop"] or [])))
    return opts


def default_options(settings: Settings, live: LiveConfig | None, model: Model) -> dict[str, Any]:
    """A model's options before a request's: the default context, its PARAMETERs, then the config file's
    `options` for it (the operator's word over the Modelfile's)."""
    opts: dict[str, Any] = {"num_ctx": settings.context_length}
    opts.update(model.params or {})
    if live is not None:
        ms = live.for_model(model)
        if ms.reasoning_budget is not None:  # llama-server's flag is unseen by /completion: it goes per request
            opts["reasoning_budget"] = ms.reasoning_budget
        opts.update(ms.options)
    return opts
