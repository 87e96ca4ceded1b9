"""Ollama's ed25519 request signing (~/.ollama/id_ed25519), for registries that hand out tokens only to a
signed token request (registry.ollama.ai, hf.co).

The signed text is "GET,<token url>,<base64 of the hex sha256 of the empty body>"; the header value is
"<base64 SSH public key>:<base64 signature>", as Ollama's auth.Sign produces. The key is the same OpenSSH
file Ollama uses, created (atomically, 0600) on first need when there is none.
"""

from __future__ import annotations

import base64
import hashlib
import os
import tempfile
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

DEFAULT_KEY = Path("~/.ollama/id_ed25519")
_EMPTY_BODY_DIGEST = base64.b64encode(hashlib.sha256(b"").hexdigest().encode()).decode()


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_or_create_key(path: Path = DEFAULT_KEY) -> Ed25519PrivateKey:
    path = path.expanduser()
    if path.exists():
        key = serialization.load_ssh_private_key(path.read_bytes(), password=None)
        if not isinstance(key, Ed25519PrivateKey):
            raise ValueError(f"{path} is not an ed25519 key")
        return key
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = Ed25519PrivateKey.generate()
    _write_atomic(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                          serialization.NoEncryption()), 0o600)
    _write_atomic(path.with_name(path.name + ".pub"), public_key_line(key).encode() + b"\n", 0o644)
    return key


def public_key_line(key: Ed25519PrivateKey) -> str:
    """"ssh-ed25519 AAAA..." as in id_ed25519.pub."""
    return key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()


def sign(key: Ed25519PrivateKey, data: bytes) -> str:
    """"<base64 public key>:<base64 signature>"."""
    public = public_key_line(key).split(" ")[1]
    return f"{public}:{base64.b64encode(key.sign(data)).decode()}"


def token_request_authorization(key: Ed25519PrivateKey, url: str) -> str:
    """The Authorization value for a signed GET of a token URL (which carries ts and nonce)."""
    return sign(key, f"GET,{url},{_EMPTY_BODY_DIGEST}".encode())
