"""`create MODEL -f Modelfile`: turn a parsed Modelfile into an /api/create request, uploading local files first.

Like Ollama's parser.CreateRequest + cmd.CreateHandler: a FROM or ADAPTER argument that names an existing file
(or directory of model files) is uploaded as a blob and sent in `files`/`adapters` as {name: digest}; any other
FROM is a model name sent as `from`. Paths are relative to the Modelfile's directory, `~` is the home directory.
Blobs the server already has (HEAD /api/blobs/<digest> is 200) are not sent again.
"""

from __future__ import annotations

import functools
import logging
import pwd
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ollama_py.api.names import shard_set
from ollama_py.cli.progress import ProgressView
from ollama_py.client import Client, file_digest
from ollama_py.client.model_files import gather_model_files
from ollama_py.errors import OllamaError
from ollama_py.modelfile import Modelfile

log = logging.getLogger(__name__)

_PATH_HINTS = ("/", "./", "../", "~")
_MODEL_SUFFIXES = (".gguf", ".safetensors", ".bin")


@dataclass(frozen=True, slots=True)
class LocalFile:
    name: str  # the key in the request's files/adapters map
    path: Path


@dataclass
class CreatePlan:
    """The request fields and the local files still to hash and upload."""

    fields: dict[str, Any] = field(default_factory=dict)
    files: list[LocalFile] = field(default_factory=list)
    adapters: list[LocalFile] = field(default_factory=list)
    draft_files: list[LocalFile] = field(default_factory=list)


def expand_path(arg: str, base_dir: Path, home: Path) -> Path:
    """A Modelfile path argument made absolute: `~` is `home`, `~user` that user's home directory (an unknown
    user is an error, in Ollama's words), relative paths start at `base_dir`."""
    if arg == "~":
        return home
    if arg.startswith("~/"):
        return home / arg[2:]
    if arg.startswith("~"):
        user, _, rest = arg[1:].partition("/")
        try:
            user_home = Path(pwd.getpwnam(user).pw_dir)
        except KeyError:
            raise OllamaError(f"failed to find user '{user}': user: unknown user {user}") from None
        return user_home / rest if rest else user_home
    path = Path(arg)
    return path if path.is_absolute() else base_dir / path


def _model_files(path: Path) -> list[LocalFile]:
    if path.is_file():  # one shard of a split GGUF named: every shard beside it
        names = shard_set(path.name) or [path.name]
        return [LocalFile(n, path.with_name(n)) for n in names if path.with_name(n).is_file()]
    return [LocalFile(name, p) for name, p in gather_model_files(path)]


def _looks_like_path(arg: str) -> bool:
    return arg.startswith(_PATH_HINTS) or arg.lower().endswith(_MODEL_SUFFIXES)


def plan_create(mf: Modelfile, base_dir: Path, home: Path, quantize: str | None = None,
                draft_quantize: str | None = None) -> CreatePlan:
    """The /api/create request for a Modelfile, minus the digests of local files (see `upload`)."""
    plan = CreatePlan()
    for arg in mf.froms:
        path = expand_path(arg, base_dir, home)
        if path.exists():
            plan.files += _model_files(path)
        elif _looks_like_path(arg):
            raise OllamaError(f"FROM {arg}: no such file or directory")
        else:
            plan.fields["from"] = arg
    for arg in mf.adapters:
        path = expand_path(arg, base_dir, home)
        if not path.exists():
            raise OllamaError(f"ADAPTER {arg}: no such file or directory")
        plan.adapters += _model_files(path)
    if draft_quantize and not mf.draft:
        raise OllamaError("--draft-quantize requires a DRAFT model")
    if mf.draft:
        path = expand_path(mf.draft, base_dir, home)
        if path.exists() and any(path.resolve() == expand_path(arg, base_dir, home).resolve() for arg in mf.froms):
            raise OllamaError("DRAFT must not reference the same local path as FROM")
        if path.exists():
            plan.draft_files += _model_files(path)
        else:
            plan.fields["draft"] = mf.draft
    optional = {
        "template": mf.template, "system": mf.system, "parameters": mf.parameters or None,
        "messages": mf.messages or None, "license": mf.licenses or None, "requires": mf.requires,
        "renderer": mf.renderer, "parser": mf.parser, "quantize": quantize or None,
        "draft_quantize": draft_quantize or None,
    }
    plan.fields.update({k: v for k, v in optional.items() if v is not None})
    return plan


def upload(client: Client, files: list[LocalFile], view: ProgressView) -> dict[str, str]:
    """Hash and upload each file the server lacks, with a byte bar per file; returns {name: digest}."""
    out: dict[str, str] = {}
    for f in files:
        digest = file_digest(f.path)
        size = f.path.stat().st_size
        key = f"upload:{digest}"
        view.bar(key, f"copying file {digest.removeprefix('sha256:')[:12]}", size)
        if client.blob_exists(digest):
            log.debug("blob %s already on the server", digest)
            view.bar(key, "", size, size)
        else:
            client.create_blob(digest, f.path, progress=functools.partial(view.advance, key))
            view.bar(key, "", size, size)
        out[f.name] = digest
    return out


def create_model(client: Client, model: str, plan: CreatePlan, view: ProgressView) -> None:
    """Upload the plan's files, then POST /api/create and show its status lines."""
    fields = dict(plan.fields)
    for key, files in (("files", plan.files), ("adapters", plan.adapters), ("draft_files", plan.draft_files)):
        if files:
            fields[key] = upload(client, files, view)
    stream = client.create(model, **fields)
    try:
        for resp in stream:
            view.handle(resp)
    finally:
        stream.close()
