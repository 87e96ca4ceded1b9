"""One table from exceptions to HTTP: every handler raises, this middleware answers.

Native routes answer Ollama's {"error": "..."}; /v1 routes answer OpenAI's envelope
{"error": {"message", "type", "param", "code"}}, and /v1/messages Anthropic's
{"type": "error", "error": {"type", "message"}}, with the error types those protocols name for each status.
Once a stream has started, handlers write a final error line themselves (see server/streaming.py).

A full queue (ServerBusy) carries Retry-After on every route, so clients wait and retry: native routes keep
Ollama's 503; /v1 routes answer 429, the status the OpenAI and Anthropic SDKs (and the agents built on them)
retry after the Retry-After delay, as llama-swap answers it (Anthropic's type: rate_limit_error).
"""

from __future__ import annotations

import errno
import json
import logging
import re

from aiohttp import web

from ollama_py.errors import CloudDisabled, OllamaError, ServerBusy
from ollama_py.server.appkeys import SETTINGS

log = logging.getLogger(__name__)

_OPENAI_TYPES = {400: "invalid_request_error", 404: "not_found_error", 415: "invalid_request_error",
                 429: "rate_limit_error"}
_OPENAI_CODES = {429: "rate_limit_exceeded"}
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 415: "invalid_request_error",
                    429: "rate_limit_error",
                    503: "overloaded_error", 529: "overloaded_error"}

RETRY_AFTER_S = 1  # a queue frees a place as soon as one request ends: ask for a prompt retry


def error_body(path: str, status: int, message: str) -> dict:
    if path.startswith("/v1/messages"):
        return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}
    if path.startswith("/v1/"):
        return {"error": {"message": message, "type": _OPENAI_TYPES.get(status, "api_error"),
                          "param": None, "code": _OPENAI_CODES.get(status)}}
    return {"error": message}


def busy_response(request: web.Request, e: ServerBusy) -> web.Response:
    """A full queue: 429 on /v1 (what the OpenAI and Anthropic clients retry), Ollama's 503 on the native API;
    Retry-After on both."""
    status = 429 if request.path.startswith("/v1/") else e.status
    return error_response(request, status, str(e), headers={"Retry-After": str(RETRY_AFTER_S)})


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


# An absolute path of two or more parts (not the path of a URL: no ":" or "/" right before it).
_ABS_PATH = re.compile(r"(?<![\w/.:~-])/(?:[^\s'\"/:,;()\[\]]+/)+([^\s'\"/:,;()\[\]]*)")


def scrub_paths(message: str) -> str:
    """A server-side error's text without the server's directories: /root/.ollama/models/blobs/sha256-ab...
    becomes sha256-ab... (which file, never where the store or the runners live)."""
    return _ABS_PATH.sub(lambda m: m.group(1) or "/", message)


def describe(exc: Exception) -> tuple[int, str]:
    """Status and message for an exception that is not an OllamaError: a full disk is the client's to know
    about (507, as WebDAV answers it); anything else is our bug, answered 500 with its text, never a traceback."""
    if isinstance(exc, OSError) and exc.errno in _NO_SPACE:
        return 507, "no space left on device"
    return 500, str(exc) or type(exc).__name__


def error_response(request: web.Request, status: int, message: str,
                   headers: dict[str, str] | None = None) -> web.Response:
    if status >= 500:
        message = scrub_paths(message)
    return web.json_response(error_body(request.path, status, message), status=status, headers=headers,
                             dumps=lambda o: json.dumps(o, ensure_ascii=False))


def no_route(miss: web.HTTPException) -> web.Response:
    """What Ollama's router (gin, with HandleMethodNotAllowed since Ollama 0.7) answers when no route matches, in
    plain text whatever the prefix (no JSON envelope): a method the path does not take is 405 "405 method not
    allowed" with an Allow header naming those it does; a path it does not serve is 404 "404 page not found"."""
    if isinstance(miss, web.HTTPMethodNotAllowed):
        return web.Response(status=405, text="405 method not allowed", content_type="text/plain",
                            headers={"Allow": ", ".join(sorted(miss.allowed_methods))})
    return web.Response(status=404, text="404 page not found", content_type="text/plain")


@web.middleware
async def error_middleware(request: web.Request, handler):
    miss = request.match_info.http_exception
    if miss is not None and request.method != "OPTIONS":  # CORS preflights pass
        return no_route(miss)  # an unknown path, or a method the path does not take
    try:
        return await handler(request)
    except ServerBusy as e:
        log.warning("%s %s -> busy: %s", request.method, request.path, e)
        return busy_response(request, e)
    except OllamaError as e:
        if isinstance(e, CloudDisabled) and e.bare:  # refused before any protocol's translation, as Ollama does
            return web.json_response({"error": str(e)}, status=e.status)
        if e.status >= 500:
            log.warning("%s %s -> %d: %s", request.method, request.path, e.status, e)
        return error_response(request, e.status, str(e))
    except web.HTTPRequestEntityTooLarge as e:
        limit = request.app[SETTINGS].max_body_bytes if SETTINGS in request.app else 0
        return error_response(request, 413, f"request body too large: the limit is {limit} bytes "
                                            "(OLLAMA_PY_MAX_BODY)" if limit else e.reason)
    except web.HTTPException as e:
        if e.status < 400:
            raise
        message = "404 page not found" if e.status == 404 else e.reason
        return error_response(request, e.status, message)
    except json.JSONDecodeError as e:
        return error_response(request, 400, f"invalid JSON: {e}")
    except ConnectionResetError:
        raise  # the client is gone: nobody to answer
    except Exception as e:
        status, message = describe(e)
        if status == 500:
            log.exception("%s %s failed", request.method, request.path)
        else:
            log.warning("%s %s -> %d: %s", request.method, request.path, status, e)
        return error_response(request, status, message)
