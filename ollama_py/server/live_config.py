"""The config file while serve runs: its model tables as they are now, reloads, and what a reload sets off.

`LiveConfig` owns the current ConfigFile. The routes ask it for aliases and a model's default options; the
scheduler for a model's runner settings and keep-alive. `watch()` stats the file every few seconds in a thread
(and SIGHUP asks at once); a changed file is read and checked in a thread, and:

1. a bad file keeps the previous settings and logs one line with the file, line and reason (a FIFO or device in
   its place is refused at once: the file is opened without waiting, read_regular_file);
2. a good one replaces them; what changed is logged, and [server] changes are logged as needing a restart;
3. each loaded runner whose model's runner settings changed is restarted once its current requests end (the
   scheduler never replaces a runner that is serving: policy.needs_reload waits for it to be idle);
4. models newly marked `preload` are loaded.

Every reload is counted by result (`ollama_config_reloads{result="ok|error"}` in /metrics).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import stat
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

from ollama_py.api.names import ModelName, parse_name
from ollama_py.api.wire import ListModelResponse
from ollama_py.config import Settings
from ollama_py.config_file import ConfigFile, ModelSettings, check_extra_args, is_glob, parse_config
from ollama_py.errors import ConfigError, OllamaError
from ollama_py.scheduler.model_settings import FINGERPRINT_KEY
from ollama_py.server.appkeys import CONFIG, SCHEDULER, SETTINGS, STORE

if TYPE_CHECKING:
    from ollama_py.scheduler.scheduler import Loaded
    from ollama_py.store.models import Model

log = logging.getLogger(__name__)

WATCH_INTERVAL = 2.0  # seconds between two stats of the file

Stamp = tuple[int, int, int] | None  # (mtime_ns, size, inode); None: no file


def _stamp(path: Path | None) -> Stamp:
    if path is None:
        return None
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


MAX_CONFIG_BYTES = 1 << 20


def read_regular_file(path: Path) -> str:
    """(Blocking, but never for long.) The file's text. Opened without waiting (O_NONBLOCK), so a FIFO or device
    put in its place is refused at once instead of blocking a thread (and the reload lock) forever; anything
    but a regular file of at most MAX_CONFIG_BYTES of UTF-8 is a ConfigError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ConfigError(str(path), 0, e.strerror or str(e)) from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(str(path), 0, "not a regular file (a FIFO, socket or device is never read)")
        if st.st_size > MAX_CONFIG_BYTES:
            raise ConfigError(str(path), 0, f"larger than {MAX_CONFIG_BYTES >> 20} MiB")
        data = f.read(MAX_CONFIG_BYTES + 1)
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(str(path), 0, f"larger than {MAX_CONFIG_BYTES >> 20} MiB")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(str(path), 0, f"not UTF-8 text ({e.reason})") from None


def alias_cycles(config: ConfigFile) -> list[str]:
    """Aliases that lead back to where they started ("a -> b -> a"): a name resolves one step only (an alias to
    its table's model), so nothing loops, but such a file is a mistake worth a log line."""
    step = config.models.aliases()
    short = {parse_name(alias).key(): parse_name(alias).short
             for section in config.models.sections for alias in section.aliases}
    found: list[str] = []
    seen_cycles: set[frozenset[Any]] = set()
    for start in step:
        path = [start]
        key = step[start].key()
        while key in step and key not in path:
            path.append(key)
            key = step[key].key()
        if key == start and frozenset(path) not in seen_cycles:
            seen_cycles.add(frozenset(path))
            found.append(" -> ".join(short.get(k, "/".join(k)) for k in [*path, start]))
    return found


class LiveConfig:
    def __init__(self, settings: Settings, config: ConfigFile | None = None,
                 known_flags: Callable[[], frozenset[str] | None] = lambda: None) -> None:
        self.settings = settings
        self.path = settings.config_file
        self.config = config if config is not None else ConfigFile(self.path)
        self.loaded = config is not None or self.path is None
        self._known_flags = known_flags  # the runner's --help flags (blocking): extra_args are checked against them
        self._stamp: Stamp = None
        self._lock = asyncio.Lock()
        # Called after a good reload with (old, new); awaited in order, errors logged.
        self.on_change: list[Callable[[ConfigFile, ConfigFile], Awaitable[None]]] = []
        self.on_reload: list[Callable[[str], None]] = []  # with "ok" | "error"

    # -- what the server asks ------------------------------------------------------------------------------
    def for_model(self, model: Model | ModelName) -> ModelSettings:
        """The settings of a stored model (or a name)."""
        name = model if isinstance(model, ModelName) else getattr(model, "name", None)
        if not isinstance(name, ModelName):
            return ModelSettings()
        return self.config.models.for_name(name)

    def keep_alive(self, model: Model | ModelName) -> float | None:
        return self.for_model(model).keep_alive

    def may_stay(self, loading: Model, loaded: Model) -> bool:
        """Whether a loaded model may stay loaded while `loading` loads (the file's exclusive groups, as now)."""
        a, b = getattr(loading, "name", None), getattr(loaded, "name", None)
        if not isinstance(a, ModelName) or not isinstance(b, ModelName):
            return True
        return self.config.groups.may_stay(a, b)

    def alias_target(self, name: ModelName) -> ModelName | None:
        return self.config.models.aliases().get(name.key())

    def with_aliases(self, entries: list[ListModelResponse]) -> list[ListModelResponse]:
        """/api/tags entries plus one per alias, a copy of its model's entry under the alias's name (as Ollama
        lists a copy made by `ollama cp`). A stored model of the alias's name shadows the alias."""
        by_key = {parse_name(e["name"]).key(): e for e in entries}
        out = list(entries)
        for section in self.config.models.sections:
            entry = by_key.get(parse_name(section.pattern).key()) if section.aliases else None
            if entry is None:
                continue
            for alias in section.aliases:
                name = parse_name(alias)
                if name.key() not in by_key:
                    out.append({**entry, "name": name.short, "model": name.short})
        return out

    # -- loading and reloading -----------------------------------------------------------------------------------
    def read(self) -> ConfigFile:
        """(Blocking.) Read and check the file: its syntax and values, and extra_args against the runner."""
        assert self.path is not None
        stamp = _stamp(self.path)
        config = parse_config(read_regular_file(self.path), str(self.path))
        known = self._known_flags()
        if known is not None:
            check_extra_args(config, known)
        for cycle in alias_cycles(config):
            log.warning("config %s: the aliases %s go round in a circle: each name stands for its table's model "
                        "only, one step", self.path, cycle)
        self._stamp = stamp
        return config

    async def load(self) -> None:
        """The first read, at start (a bad file stops serve: the CLI has already said why)."""
        if self.loaded:
            self._stamp = await asyncio.to_thread(_stamp, self.path)
            return
        self.config = await asyncio.to_thread(self.read)
        self.loaded = True

    async def reload(self, why: str = "changed") -> bool:
        """Re-read the file. False (and the old settings kept) when it is bad."""
        if self.path is None:
            return False
        async with self._lock:
            old = self.config
            try:
                new = await asyncio.to_thread(self.read)
            except ConfigError as e:
                self._stamp = await asyncio.to_thread(_stamp, self.path)  # one line per bad edit, not per stat
                log.error("config reload failed, keeping the previous settings: %s", e)
                self._count("error")
                return False
            self.config = new
            log.info("config reloaded (%s): %s", why, describe_changes(old, new))
            self._count("ok")
        for callback in self.on_change:
            try:
                await callback(old, new)
            except Exception:  # one listener's failure must not stop the others
                log.exception("applying the reloaded config failed")
        return True

    async def check(self) -> bool:
        """Reload when the file's stat changed since it was last read."""
        if self.path is None:
            return False
        stamp = await asyncio.to_thread(_stamp, self.path)
        if stamp == self._stamp:
            return False
        if stamp is None:  # gone (an editor's rename dance, or deleted): keep what we have until it is back
            return False
        return await self.reload("file changed")

    async def watch(self, interval: float = WATCH_INTERVAL) -> None:
        """Until cancelled: a cheap stat every `interval`, and at once on SIGHUP."""
        wake = asyncio.Event()
        loop = asyncio.get_running_loop()
        hup = False
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):  # not the main thread, Windows
            loop.add_signal_handler(signal.SIGHUP, wake.set)
            hup = True
        try:
            while True:
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(wake.wait(), interval)
                if wake.is_set():
                    wake.clear()
                    await self.reload("SIGHUP")
                else:
                    await self.check()
        finally:
            if hup:
                loop.remove_signal_handler(signal.SIGHUP)

    def _count(self, result: str) -> None:
        for callback in self.on_reload:
            with contextlib.suppress(Exception):
                callback(result)


def describe_changes(old: ConfigFile, new: ConfigFile) -> str:
    """One line: which [server] settings and which model tables changed."""
    parts = []
    server = sorted(k for k in set(old.server) | set(new.server)
                    if (old.server.get(k) or (None,))[0] != (new.server.get(k) or (None,))[0])
    if server:
        parts.append(f"[server] {', '.join(server)} (take effect at the next start)")
    before = {s.pattern: s for s in old.models.sections}
    after = {s.pattern: s for s in new.models.sections}
    for pattern in sorted(set(before) | set(after)):
        a, b = before.get(pattern), after.get(pattern)
        if a is None:
            parts.append(f'[models."{pattern}"] added')
        elif b is None:
            parts.append(f'[models."{pattern}"] removed')
        elif a != b:
            parts.append(f'[models."{pattern}"] changed')
    if old.groups != new.groups:
        parts.append("[groups] changed (applies to the next load)")
    return "; ".join(parts) or "no changes"


# -- what a reload sets off (wired by the app) ----------------------------------------------------------------------
async def preload(live: LiveConfig, find: Callable[[ModelName], Awaitable[Model]],
                  load: Callable[[Model, ModelSettings], Awaitable[None]],
                  local_names: Callable[[], Awaitable[list[ModelName]]]) -> None:
    """Load every model a `preload = true` table names (a glob: every local model it matches). A model that
    cannot be loaded is logged and skipped: serve goes on."""
    names: list[ModelName] = []
    sections = live.config.models.preloads()
    if any(is_glob(s.pattern) for s in sections):
        local = await local_names()
    for section in sections:
        if is_glob(section.pattern):
            names += [n for n in local if live.for_model(n).preload]
        else:
            names.append(parse_name(section.pattern))
    for name in dict.fromkeys(names):
        try:
            model = await find(name)
            await load(model, live.for_model(model))
            log.info("preloaded %s", name.short)
        except (OllamaError, OSError) as e:
            log.error("preloading %s failed: %s", name.short, e)


async def while_serving(app: web.Application) -> AsyncIterator[None]:
    """cleanup_ctx (after the scheduler's): preload, then watch the file until serve stops."""
    from ollama_py.server.model_lookup import default_options, load_stored

    live, sched, store, settings = app[CONFIG], app[SCHEDULER], app[STORE], app[SETTINGS]
    tasks: set[asyncio.Task[Any]] = set()

    async def find(name: ModelName) -> Model:
        return await asyncio.to_thread(load_stored, store, name)

    async def load(model: Model, ms: ModelSettings) -> None:
        embedding = "completion" not in model.capabilities  # an embedding model or a reranker
        await sched.load(model, default_options(settings, live, model), None, embedding=embedding)

    async def local_names() -> list[ModelName]:
        return [parse_name(e["name"]) for e in await asyncio.to_thread(store.list_models)]

    def spawn(coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def restart(loaded: Loaded) -> None:
        try:
            await sched.load(loaded.model, carried_options(loaded.plan.load_options), None,
                             embedding=loaded.plan.spec.embedding)
        except (OllamaError, OSError) as e:
            log.error("restarting %s with its new settings failed: %s", loaded.name, e)

    async def apply(old: ConfigFile, new: ConfigFile) -> None:
        for loaded in list(sched.loaded.values()):
            if loaded.unloading:
                continue
            wanted = live.for_model(loaded.model).runner_fingerprint()
            if loaded.plan.load_options.get(FINGERPRINT_KEY) == wanted:
                continue
            log.info("runner settings of %s changed: restarting it %s", loaded.name,
                     "now" if loaded.refcount == 0 else "when its current requests end")
            spawn(restart(loaded))
        spawn(preload(live, find, load, local_names))

    live.on_change.append(apply)
    await preload(live, find, load, local_names)
    watcher = asyncio.ensure_future(live.watch()) if live.path is not None else None
    try:
        yield
    finally:
        live.on_change.remove(apply)
        for task in [*tasks, *([watcher] if watcher else [])]:
            task.cancel()
        await asyncio.gather(*tasks, *([watcher] if watcher else []), return_exceptions=True)


def carried_options(load_options: dict[str, Any]) -> dict[str, Any]:
    """A runner's load options to start its replacement with: what its requests chose (context, batch, GPU
    layers), without what the config file's settings put there (they are applied afresh)."""
    return {k: v for k, v in load_options.items()
            if v is not None and k not in (FINGERPRINT_KEY, "num_thread", "main_gpu")}
