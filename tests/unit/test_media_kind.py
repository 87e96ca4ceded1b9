"""Sounds and images in Ollama's `images` told apart by their first bytes, as Ollama and llama-server do."""

from __future__ import annotations

import base64

import pytest

from ollama_py.api.media import media_kind, media_needs


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(("data", "kind"), [
    (b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(8), "audio"),
    (b"ID3\x04\x00\x00\x00\x00\x00\x00", "audio"),
    (b"\xff\xfb\x90\x64" + bytes(8), "audio"),  # an MPEG-1 layer III frame
    (b"fLaC\x00\x00\x00\x22", "audio"),
    (b"\x89PNG\r\n\x1a\n" + bytes(8), "image"),
    (b"\xff\xd8\xff\xe0" + bytes(8), "image"),  # JPEG: 0xFF then 0xD8 is no frame sync
    (b"RIFF\x24\x00\x00\x00WEBPVP8 ", "image"),
    (b"cat", "image"),
    (b"", "image"),
])
def test_media_kind(data: bytes, kind: str) -> None:
    assert media_kind(b64(data)) == kind


def test_needs_in_ollamas_order() -> None:
    wav, png = b64(b"RIFF\x00\x00\x00\x00WAVE"), b64(b"\x89PNG\r\n\x1a\n")
    assert media_needs([wav, png]) == ["vision", "audio"]
    assert media_needs([wav]) == ["audio"] and media_needs([png, png]) == ["vision"] and media_needs([]) == []
