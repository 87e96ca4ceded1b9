"""One table from exceptions to HTTP: every handler raises, this middleware answers.

Native routes answer Ollama's {"error": "..."}; /v1 routes answer OpenAI's envelope
{"error": {"message", "type", "param", "code"}} (Anthropic's for /v1/messages).
Once a stream has started, handlers write a final error line themselves (see server/streaming.py).
"""

from __future__ import annotations

import errno
import json
import logging
import re

from aiohttp import web

from ollama_py.errors import OllamaError

log = logging.getLogger(__name__)

_OPENAI_TYPES = {400: "invalid_request_error", 404: "not_found_error"}
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 404: "not_found_error",
                    503: "overloaded_error"}


def error_body(path: str, status: int, message: str) -> dict:
    if path.startswith("/v1/messages"):
        return {"type": "error", "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}
    if path.startswith("/v1/"):
        return {"error": {"message": message, "type": _OPENAI_TYPES.get(status, "api_error"),
                          "param": None, "code": None}}
    return {"error": message}


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


def error_response(request: web.Request, status: int, message: str) -> web.Response:
    if status >= 500:
        message = scrub_paths(message)
    return web.json_response(error_body(request.path, status, message), status=status,
                             dumps=lambda o: json.dumps(o, ensure_ascii=False))


def not_found(request: web.Request) -> web.Response:
    """What Ollama's router (gin) answers for a path it does not serve, or a method a path does not take:
    404 with a plain-text body, whatever the prefix (no Allow header, no JSON envelope)."""
    return web.Response(status=404, text="404 page not found", content_type="text/plain")


@web.middleware
async def error_middleware(request: web.Request, handler):
    if request.match_info.http_exception is not None and request.method != "OPTIONS":  # CORS preflights pass
        return not_found(request)  # no route: an unknown path or an unsupported method
    try:
        return await handler(request)
    except OllamaError as e:
        if e.status >= 500:
            log.warning("%s %s -> %d: %s", request.method, request.path, e.status, e)
        return error_response(request, e.status, str(e))
    except web.HTTPRequestEntityTooLarge:
        return error_response(request, 413, "request body too large")
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
