"""Ollama's ed25519 request signing: the key file, the header format, a signature the public key verifies."""

from __future__ import annotations

import base64
import hashlib
import stat

from cryptography.hazmat.primitives import serialization

from ollama_py.store import signing


def test_key_is_created_once_in_openssh_format(tmp_path):
    path = tmp_path / ".ollama" / "id_ed25519"
    key = signing.load_or_create_key(path)
    assert path.read_bytes().startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    pub = (tmp_path / ".ollama" / "id_ed25519.pub").read_text()
    assert pub.startswith("ssh-ed25519 ") and pub.strip() == signing.public_key_line(key)
    again = signing.load_or_create_key(path)
    assert signing.public_key_line(again) == signing.public_key_line(key)


def test_token_request_signature_verifies_with_the_public_key(tmp_path):
    key = signing.load_or_create_key(tmp_path / "id_ed25519")
    url = "https://registry.ollama.ai/v2/token?service=ollama.com&scope=repository%3Alibrary%2Fqwen%3Apull&ts=1&nonce=n"
    header = signing.token_request_authorization(key, url)
    public_b64, signature_b64 = header.split(":")
    assert public_b64 == signing.public_key_line(key).split(" ")[1]
    public = serialization.load_ssh_public_key(f"ssh-ed25519 {public_b64}".encode())
    empty = base64.b64encode(hashlib.sha256(b"").hexdigest().encode()).decode()
    public.verify(base64.b64decode(signature_b64), f"GET,{url},{empty}".encode())  # raises if it does not verify
