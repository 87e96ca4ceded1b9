"""What a message's media item is: an image or a sound. Ollama's API carries both in `images` (base64) and tells
them apart by their first bytes (its llm/media.go); llama-server's multimodal input does the same (mtmd: WAV, MP3,
FLAC are audio, anything else goes to the image decoder)."""

from __future__ import annotations

import base64
import binascii


def media_kind(data: str) -> str:
    """"audio" or "image" for one base64 item (already checked as base64), from its first 12 bytes."""
    head = data[:16]
    try:
        raw = base64.b64decode(head + "=" * (-len(head) % 4))
    except (binascii.Error, ValueError):
        return "image"
    if raw[:4] == b"RIFF" and raw[8:12] == b"WAVE":
        return "audio"
    if raw[:3] == b"ID3" or raw[:4] == b"fLaC":
        return "audio"
    if len(raw) >= 2 and raw[0] == 0xFF and raw[1] & 0xE0 == 0xE0:  # an MPEG audio frame's sync word
        return "audio"
    return "image"


def media_needs(items: list[str]) -> list[str]:
    """The capabilities `items` need, in Ollama's order of checking: "vision" for images, "audio" for sounds."""
    kinds = {media_kind(item) for item in items}
    return [cap for kind, cap in (("image", "vision"), ("audio", "audio")) if kind in kinds]
