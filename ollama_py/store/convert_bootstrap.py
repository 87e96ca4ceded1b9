"""The converter child's first code: fence it in, then run llama.cpp's converter script in this process.

    python -E -P -u -B convert_bootstrap.py --workspace DIR --scripts DIR [--deny DIR]... [--limit NAME=N]...
        -- SCRIPT ARGS...

Run as a file by store/convert_sandbox.py, never imported by the server; standard library only, so it runs before
anything the model directory could influence. In order:

1. Resource limits on this process (--limit as=..., fsize=..., nofile=..., cpu=...; core dumps off).
2. No network: a network namespace of its own where the kernel allows one (root, or an unprivileged user
   namespace), and in any case sockets that refuse to connect or send anywhere but an AF_UNIX peer.
3. No model code: transformers' remote code is off whatever the converter asks (its `resolve_trust_remote_code`
   answers as for trust_remote_code=False, `get_class_from_dynamic_module` refuses), and no Python module, compiled
   module or extension is loaded from the workspace (the staged model), a temp directory or the
   transformers_modules cache unless it lies in the converter's own tree or this Python's installation.
4. The script runs as __main__ with sys.path[0] its own directory, as `python SCRIPT` would.
"""

from __future__ import annotations

import errno
import importlib.abc
import importlib.machinery
import os
import resource
import runpy
import socket
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

_LIMITS = {"as": resource.RLIMIT_AS, "fsize": resource.RLIMIT_FSIZE, "nofile": resource.RLIMIT_NOFILE,
           "cpu": resource.RLIMIT_CPU}
_CLONE_NEWUSER, _CLONE_NEWNET = 0x10000000, 0x40000000
REFUSED = "refused to load model code"


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


class _Fence:
    """Where code may not come from (`deny`), and the trees inside them that are ours (`allow`)."""

    def __init__(self, workspace: str, deny: Sequence[str], allow: Sequence[str]) -> None:
        self.workspace = os.path.realpath(workspace)
        self.deny = [os.path.realpath(d) for d in deny]
        self.allow = [os.path.realpath(a) for a in allow]

    def refuses(self, filename: object) -> bool:
        if not isinstance(filename, str | bytes | os.PathLike):
            return False
        path = os.path.realpath(os.fsdecode(filename))
        if _under(path, [self.workspace]):  # the staged model: never, whatever else holds it
            return True
        return _under(path, self.deny) and not _under(path, self.allow)

    def check(self, filename: object, name: str) -> None:
        if self.refuses(filename):
            raise ImportError(f"{REFUSED}: {name} ({os.fsdecode(filename)})", name=name)  # type: ignore[arg-type]


def set_limits(limits: dict[str, int]) -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    for name, value in limits.items():
        _soft, hard = resource.getrlimit(_LIMITS[name])
        value = value if hard == resource.RLIM_INFINITY else min(value, hard)
        resource.setrlimit(_LIMITS[name], (value, value))


def leave_network() -> bool:
    """A network namespace of our own (no interfaces but a loopback that is down). False where not allowed."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return False
    return any(libc.unshare(flags) == 0 for flags in (_CLONE_NEWNET, _CLONE_NEWUSER | _CLONE_NEWNET))


def guard_sockets() -> None:
    """Sockets that connect or send only to AF_UNIX peers (the second fence, where no namespace could be had)."""
    base = socket.socket

    def refuse(self: socket.socket, *args: Any) -> Any:
        raise OSError(errno.ENETUNREACH, "the converter has no network")

    def only_unix(method: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(self: socket.socket, *args: Any, **kwargs: Any) -> Any:
            if self.family != socket.AF_UNIX:
                return refuse(self)
            return method(self, *args, **kwargs)
        return guarded

    for name in ("connect", "connect_ex", "sendto", "sendmsg"):
        setattr(base, name, only_unix(getattr(base, name)))


def _resolve_without_remote_code(original: Callable[..., Any]) -> Callable[..., Any]:
    def resolve(trust_remote_code: Any, model_name: Any, has_local_code: Any, has_remote_code: Any,
                *args: Any, **kwargs: Any) -> Any:
        return original(False, model_name, has_local_code, has_remote_code, *args, **kwargs)
    return resolve


def _no_dynamic_module(*args: Any, **kwargs: Any) -> Any:
    raise ValueError(f"{REFUSED}: this model needs its own Python code (an auto_map entry), which the converter "
                     "never runs")


def disable_remote_code(module: ModuleType) -> None:
    """transformers.dynamic_module_utils as if every caller passed trust_remote_code=False."""
    names: Any = module  # its attributes are transformers', unknown to the type checker
    names.resolve_trust_remote_code = _resolve_without_remote_code(names.resolve_trust_remote_code)
    names.get_class_from_dynamic_module = _no_dynamic_module


class _ImportFence(importlib.abc.MetaPathFinder):
    """First on sys.meta_path: refuses transformers' dynamic modules by name, refuses any module whose file the
    fence refuses, and patches transformers.dynamic_module_utils as it is imported (see disable_remote_code)."""

    def __init__(self, fence: _Fence) -> None:
        self.fence = fence

    def find_spec(self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None) -> Any:
        if fullname == "transformers_modules" or fullname.startswith("transformers_modules."):
            raise ImportError(f"{REFUSED}: {fullname}", name=fullname)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None:
            return None  # the other finders (built-ins, frozen modules) decide
        self.fence.check(spec.origin, fullname)
        if fullname == "transformers.dynamic_module_utils" and spec.loader is not None:
            loader = spec.loader
            exec_module = loader.exec_module

            def exec_and_patch(module: ModuleType) -> None:
                exec_module(module)
                disable_remote_code(module)

            loader.exec_module = exec_and_patch  # type: ignore[method-assign]
        return spec


def fence_imports(fence: _Fence) -> None:
    """The import fence, on sys.meta_path and on the loaders themselves (transformers loads a dynamic module with
    spec_from_file_location + exec_module, which no finder sees)."""
    sys.meta_path.insert(0, _ImportFence(fence))

    def fenced(method: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(self: Any, module: ModuleType) -> Any:
            fence.check(getattr(self, "path", None), getattr(module, "__name__", "?"))
            return method(self, module)
        return guarded

    loaders: list[type] = [importlib.machinery.SourceFileLoader, importlib.machinery.SourcelessFileLoader,
                           importlib.machinery.ExtensionFileLoader]
    for loader in loaders:
        loader.exec_module = fenced(loader.exec_module)  # type: ignore[attr-defined]
    ext = importlib.machinery.ExtensionFileLoader
    ext.create_module = fenced(ext.create_module)  # type: ignore[method-assign]


def _parse(argv: list[str]) -> tuple[str, str, list[str], dict[str, int], list[str]]:
    workspace = scripts = ""
    deny: list[str] = []
    limits: dict[str, int] = {}
    i = 0
    while i < len(argv) and argv[i] != "--":
        flag, value = argv[i], argv[i + 1]
        if flag == "--workspace":
            workspace = value
        elif flag == "--scripts":
            scripts = value
        elif flag == "--deny":
            deny.append(value)
        elif flag == "--limit":
            name, _, number = value.partition("=")
            limits[name] = int(number)
        else:
            raise SystemExit(f"convert_bootstrap: unknown option {flag}")
        i += 2
    rest = argv[i + 1:]
    if not (workspace and scripts and rest):
        raise SystemExit("convert_bootstrap: --workspace, --scripts and a script are required")
    return workspace, scripts, deny, limits, rest


def main(argv: list[str]) -> None:
    workspace, scripts, deny, limits, rest = _parse(argv)
    set_limits(limits)
    if not leave_network():
        print("convert_bootstrap: no network namespace here; sockets are guarded instead", file=sys.stderr)
    guard_sockets()
    allow = [scripts, sys.prefix, sys.base_prefix, sys.exec_prefix]
    fence_imports(_Fence(workspace, deny, allow))
    script = os.path.abspath(rest[0])
    sys.argv = rest
    sys.path.insert(0, os.path.dirname(script))  # run with -P: nothing of ours was there
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
