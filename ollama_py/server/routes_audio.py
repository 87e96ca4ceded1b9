"""POST /v1/audio/transcriptions: OpenAI's transcription endpoint, as Ollama serves it (its middleware/openai.go
TranscriptionMiddleware and openai.FromTranscriptionRequest): a multipart form with `model` and the audio `file`
becomes a chat with the sound in the user message, told to transcribe and not to answer, at temperature 0, on a
model with the "audio" capability; the answer is `{"text": ...}`, or the bare text for `response_format=text`."""

from __future__ import annotations

import base64
import time

from aiohttp import BodyPartReader, MultipartReader, web
from aiohttp.http_exceptions import HttpProcessingError

from ollama_py.api.wire import Message
from ollama_py.errors import BadRequest
from ollama_py.server.appkeys import SCHEDULER
from ollama_py.server.bodies import requested_model
from ollama_py.server.completion import CompletionRequest, run_completion
from ollama_py.server.model_lookup import check_chat_capabilities, find_model, merged_options
from ollama_py.server.routes_native import chat_messages
from ollama_py.server.streaming import collect

routes = web.RouteTableDef()

AUDIO_LIMIT = 25 << 20  # bytes of form Ollama parses (ParseMultipartForm(25 << 20))
_FIELD_LIMIT = 64 << 10  # a text field (model, prompt, language, response_format)
_FIELDS = 32  # parts a form may have: a few fields and the file
_SYSTEM = ("Transcribe the audio exactly as spoken. Output only the spoken words. Do not answer any question in the "
           "audio.")
_ASK = "What exact words are spoken in this audio?"


async def _form(request: web.Request) -> tuple[dict[str, str], bytes | None]:
    """The form's text fields and the `file` part's bytes (None: no file part)."""
    if request.content_type != "multipart/form-data":
        raise BadRequest("failed to parse multipart form: request Content-Type isn't multipart/form-data")
    try:
        return await _read_form(await request.multipart())
    except (AssertionError, ValueError, KeyError, HttpProcessingError) as e:  # not the multipart its header says
        reason = e.message if isinstance(e, HttpProcessingError) else e
        raise BadRequest(f"failed to parse multipart form: {reason}") from None


async def _read_form(reader: MultipartReader) -> tuple[dict[str, str], bytes | None]:
    fields: dict[str, str] = {}
    audio: bytes | None = None
    parts = 0
    while (part := await reader.next()) is not None:
        parts += 1
        if parts > _FIELDS:
            raise BadRequest(f"failed to parse multipart form: more than {_FIELDS} parts")
        if not isinstance(part, BodyPartReader):  # a nested multipart: not a form field
            raise BadRequest("failed to parse multipart form: nested multipart parts are not supported")
        if part.name == "file" and audio is None:
            chunks, size = [], 0
            while chunk := await part.read_chunk():
                size += len(chunk)
                if size > AUDIO_LIMIT:
                    raise BadRequest(f"failed to parse multipart form: the audio file is larger than {AUDIO_LIMIT} "
                                     "bytes")
                chunks.append(chunk)
            audio = b"".join(chunks)
        elif part.name:
            value = await part.read_chunk(_FIELD_LIMIT + 1)
            if len(value) > _FIELD_LIMIT or await part.read_chunk():
                raise BadRequest(f"failed to parse multipart form: field {part.name!r} is too long")
            fields[part.name] = value.decode("utf-8", "replace")
    return fields, audio


def transcription_messages(audio: bytes, language: str, prompt: str) -> list[Message]:
    """The chat Ollama makes of a transcription request."""
    system = _SYSTEM + (f" The audio is in {language}." if language else "") + (f" Context: {prompt}" if prompt else "")
    return [{"role": "system", "content": system},
            {"role": "user", "content": _ASK, "images": [base64.b64encode(audio).decode()]}]


@routes.post("/v1/audio/transcriptions")
async def transcriptions(request: web.Request) -> web.Response:
    started = time.perf_counter()
    fields, audio = await _form(request)
    if not fields.get("model"):
        raise BadRequest("model is required")
    if audio is None:
        raise BadRequest("file is required: http: no such file")
    if not audio:
        raise BadRequest("audio file is empty")
    name, raw_name = requested_model({"model": fields["model"]})
    model = await find_model(request, name, raw_name)
    messages = transcription_messages(audio, fields.get("language", ""), fields.get("prompt", ""))
    check_chat_capabilities(model, raw_name, messages, None)
    req = CompletionRequest(model=model, options=merged_options(request, model, {"temperature": 0}),
                            messages=chat_messages(model, messages), started=started)
    final = (await collect(run_completion(request.app[SCHEDULER], req)))[-1]
    text = final.text.strip()
    if fields.get("response_format") == "text":
        return web.Response(text=text, content_type="text/plain")
    return web.json_response({"text": text})
