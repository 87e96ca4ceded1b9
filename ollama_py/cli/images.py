"""Image and sound paths in a prompt for a multimodal model, as Ollama's CLI finds them: `describe ./cat.png`
or `transcribe ./talk.wav` attaches the file and drops its path from the text."""

from __future__ import annotations

import base64
import re
from pathlib import Path

from ollama_py.errors import OllamaError

MAX_IMAGE_BYTES = 100 * 1024 * 1024
# A path that starts with ./, / or \ (or a drive letter) and ends in an image or .wav extension; "\ " escapes a
# space.
_PATH = re.compile(r"(?:[a-zA-Z]:)?(?:\./|/|\\)[\S\\ ]+?\.(?i:jpg|jpeg|png|webp|wav)\b")


def image_type(head: bytes) -> str | None:
    """The content type from the first bytes, for the types a multimodal model takes (Go's DetectContentType
    names a WAV "audio/wave", as Ollama's CLI checks it)."""
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return "audio/wave"
    return None


def _describe(head: bytes) -> str:
    if not head:
        return "empty file"
    try:
        head.decode("utf-8")
        return "text/plain"
    except UnicodeDecodeError:
        return "application/octet-stream"


def added(path: Path) -> str:
    """What the CLI says of an attached file, as Ollama's does (by its extension)."""
    return f"Added {'audio' if path.suffix.lower() == '.wav' else 'image'} '{path}'"


def extract_images(prompt: str) -> tuple[str, list[str], list[Path]]:
    """(prompt without the file paths, the files as base64, their paths). Paths that do not exist are left in
    the text; a file that is not a JPEG, PNG or WebP image or a WAV sound, or is too big, is an error naming it."""
    images: list[str] = []
    paths: list[Path] = []
    for found in _PATH.findall(prompt):
        unescaped = found.replace("\\ ", " ")
        path = Path(unescaped)
        try:
            size = path.stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as e:
            raise OllamaError(f"couldn't read {unescaped}: {e.strerror}") from None
        if size > MAX_IMAGE_BYTES:
            raise OllamaError(f"{unescaped}: file size exceeds maximum limit (100MB)")
        data = path.read_bytes()
        if image_type(data[:512]) is None:
            raise OllamaError(f"{unescaped}: invalid image type: {_describe(data[:512])}")
        images.append(base64.b64encode(data).decode())
        paths.append(path)
        for text in (f"'{unescaped}'", f"'{found}'", found):
            prompt = prompt.replace(text, "")
    return prompt.strip() if paths else prompt, images, paths


def multimodal(capabilities: list[str] | None) -> bool:
    """Whether a model takes files in its prompts (Ollama's CLI: vision or audio)."""
    return bool({"vision", "audio"} & set(capabilities or ()))
