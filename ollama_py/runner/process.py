"""One llama-server child process: start, readiness, stderr tail, stop, reap.

States (RunnerState): starting -> ready -> stopping -> stopped, or starting/ready -> failed when the child
exits on its own. `ensure_ready()` is the only way to start a runner; every settled transition wakes every
waiter. The child dies with us: it gets PR_SET_PDEATHSIG (Linux) and its own process group, which stop()
signals as a whole. It is started as a llama-server router's child (runner/load_progress.py): it reports its
load progress on stdout (`load_report`, `watch_load()`) and ends when the stdin pipe we hold closes, so it
cannot outlive us even where PR_SET_PDEATHSIG does not exist. Each child requires its own random API key
(`api_key`, given in its environment, where other users cannot read it, not on its command line): its port is in
the process list, and without the key a local user could bypass the gateway's OLLAMA_API_KEYS by calling it
directly.

A runner may carry `slots` (runner/slot_cache.RunnerSlots): its saved slots are restored once it answers /health,
before it is ready (so no request runs before them), and `save_slots()` saves them before a stop the scheduler
chose. A runner may carry a `memory_limit` (bytes of address space, RLIMIT_AS in the child): a runner that dies
of it fails with "model 'x' exceeded its memory limit of N" rather than a bare exit status.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import ctypes.util
import enum
import logging
import os
import re
import resource
import secrets
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence

import aiohttp

from ollama_py import timeslice
from ollama_py.errors import RunnerError, RunnerLoadError
from ollama_py.runner import load_progress
from ollama_py.runner.load_progress import LoadReport, LoadStage
from ollama_py.runner.slot_cache import RunnerSlots

log = logging.getLogger(__name__)

STDERR_TAIL_LINES = 200
STOP_GRACE_SECONDS = 5.0
_HEALTH_POLL_SECONDS = 0.05
_LOG_BATCH_SECONDS = 0.05  # a ready runner's stderr is read at most this often


def exit_text(returncode: int | None) -> str:
    """How a process ended, as Go's exec.ExitError says it (Ollama's runner errors quote it): "exit status 1", or
    for a signal "signal: aborted", "signal: segmentation fault", "signal: killed" -- not a negative status."""
    if returncode is not None and returncode < 0:
        try:
            name = signal.strsignal(-returncode)
        except ValueError:
            name = None
        return f"signal: {name.lower() if name else -returncode}"
    return f"exit status {returncode}"


class RunnerState(enum.StrEnum):
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def free_port() -> int:
    """A free loopback port picked by the kernel (unpredictable to other users)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pdeathsig_preexec() -> Callable[[], None] | None:
    """A preexec_fn that makes the child get SIGKILL when its parent dies (Linux), resolved before fork. It
    also gives the child the kernel's default time slice back (the gateway's short one is inherited)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        prctl = libc.prctl
    except OSError:
        return None
    pr_set_pdeathsig, sigkill = 1, int(signal.SIGKILL)

    def preexec() -> None:
        prctl(pr_set_pdeathsig, sigkill, 0, 0, 0)
        timeslice.default_slice()

    return preexec


pdeathsig_preexec = _pdeathsig_preexec()


def _limited_preexec(limit: int | None) -> Callable[[], None] | None:
    """pdeathsig_preexec, then an address-space limit of `limit` bytes (none when None)."""
    if limit is None:
        return pdeathsig_preexec
    base = pdeathsig_preexec

    def preexec() -> None:
        if base is not None:
            base()
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return preexec


GiB = 1 << 30


def address_space_limit(planned: int, cores: int) -> int:
    """RLIMIT_AS for a CPU runner whose plan says `planned` bytes: address space is more than memory used (the
    mapped model file, a stack per thread, malloc's per-thread arenas of 64 MiB), so twice the plan, plus 2 GiB,
    plus 0.5 GiB per core. Generous for a model that behaves; a runaway (a chat template looping in its Jinja,
    a leak) stops there instead of taking the host."""
    return 2 * planned + 2 * GiB + max(cores, 1) * GiB // 2


# What a process that ran out of its memory limit leaves in its stderr (C++'s bad_alloc, ggml, the kernel)
_OUT_OF_MEMORY = ("bad_alloc", "memoryerror", "out of memory", "failed to allocate", "cannot allocate memory",
                  "unable to allocate")


def exceeded_limit(returncode: int | None, lines: Iterable[str]) -> bool:
    """Whether a dead runner looks killed by its memory limit: an allocation failure in its last lines (RLIMIT_AS
    makes allocations fail; it never sends a signal). A SIGKILL is not taken for it: that comes from the system's
    OOM killer or from someone's `kill -9`, and the limit was not what ended the runner."""
    return any(marker in line.lower() for line in list(lines)[-40:] for marker in _OUT_OF_MEMORY)


def _size(n: int) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB else f"{n / 2**20:.0f} MiB"


# llama.cpp's log prefix: "M.SS.mmm.uuu L " (timestamp, then the level: I, W, E or D); either part may be off.
_LOG_PREFIX = re.compile(r"^(?:\d+\.\d{2}\.\d{3}\.\d{3} )?(?:([IWED]) )?")
# What names a cause outright, wherever it is logged (ggml's aborts and C++ exceptions come unprefixed).
_CAUSES = ("error loading model", "out of memory", "unable to allocate", "failed to load", "illegal instruction",
           "remote rpc server", "ggml_assert", "terminate called", "what():", "segmentation fault", "abort")
_TROUBLE = re.compile(r"\b(?:error|failed|failure|fatal|exception|cannot|could not)\b", re.IGNORECASE)


def cause_of(lines: Iterable[str]) -> str:
    """The most relevant of a dead llama-server's stderr lines, without llama.cpp's log prefix:

    1. the first line naming a cause outright (error loading model, out of memory, GGML_ASSERT, abort, ...),
       other than an info or debug line (those can quote anything: a chat template, a file name);
    2. else the first error-level line (the cause comes before llama-server's generic "exiting due to ...");
    3. else the last warning or unprefixed line that speaks of an error or a failure;
    4. else the last line.
    """
    parsed = []
    for raw in lines:
        m = _LOG_PREFIX.match(raw)  # always matches (both parts are optional)
        text = raw[m.end():].strip() if m else raw.strip()
        if text:
            parsed.append(((m.group(1) if m else "") or "", text))
    quiet = ("I", "D")
    for level, text in parsed:
        if level not in quiet and any(c in text.lower() for c in _CAUSES):
            return text
    for level, text in parsed:
        if level == "E":
            return text
    for level, text in reversed(parsed):
        if level not in quiet and _TROUBLE.search(text):
            return text
    return parsed[-1][1] if parsed else ""


class RunnerProcess:
    """A llama-server child on a free loopback port.

    argv_for_port builds the command line once the port is known (runner/argv.build_argv).
    on_exit is called once, with this runner, when the child exits for any reason.
    """

    def __init__(
        self,
        argv_for_port: Callable[[int], Sequence[str]],
        *,
        name: str = "",
        env: dict[str, str] | None = None,
        load_timeout: float = 300.0,
        on_exit: Callable[[RunnerProcess], None] | None = None,
        slots: RunnerSlots | None = None,
        memory_limit: int | None = None,
    ) -> None:
        self.name = name
        self.slots = slots
        self.memory_limit = memory_limit
        self.api_key = secrets.token_urlsafe(32)  # never logged; LLAMA_API_KEY in the child's environment
        self._argv_for_port = argv_for_port
        self._env = env
        self._load_timeout = load_timeout
        self._on_exit = on_exit
        self.port = 0
        self.state = RunnerState.STOPPED
        self.returncode: int | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self.log_lines: list[str] = []  # start-up lines up to "listening", for the memory report
        self.load_duration = 0.0
        self.started_at = 0.0
        self._proc: asyncio.subprocess.Process | None = None
        self._changed = asyncio.Condition()
        self._tasks: list[asyncio.Task] = []
        self._stopping: asyncio.Task | None = None  # the stop a stalled load started
        self._start_task: asyncio.Task | None = None
        self._last_progress = 0.0
        self._failure = ""
        self._stdin = -1  # our end of the child's stdin: closing it ends the child
        self.load_report = LoadReport()
        self._report_changed = asyncio.Event()  # set (and replaced) at each change of load_report or state

    # -- state ---------------------------------------------------------------------------------------------
    async def _set_state(self, new: RunnerState) -> None:
        if new == self.state:
            return
        log.debug("runner %s (pid %s): %s -> %s", self.name, self.pid, self.state, new)
        self.state = new
        if new == RunnerState.READY:
            self.load_report = LoadReport(LoadStage.READY, self.load_report.parts, self.load_report.parts[-1], 1.0)
        self._bump()
        async with self._changed:
            self._changed.notify_all()

    def _bump(self) -> None:
        event, self._report_changed = self._report_changed, asyncio.Event()
        event.set()

    def _report(self, report: LoadReport) -> None:
        if report != self.load_report:
            self.load_report = report
            self._last_progress = time.monotonic()
            self._bump()

    async def watch_load(self) -> AsyncIterator[LoadReport]:
        """The load report now, then at each change, until the runner is ready or has failed or stopped after
        starting; the caller may also just stop iterating."""
        last: LoadReport | None = None
        started = False
        while True:
            changed = self._report_changed
            if self.load_report != last:
                last = self.load_report
                yield last
            started = started or self.state == RunnerState.STARTING
            if self.state in (RunnerState.READY, RunnerState.FAILED) or (
                    started and self.state in (RunnerState.STOPPING, RunnerState.STOPPED)):
                return
            await changed.wait()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def auth_headers(self) -> dict[str, str]:
        """What every request to the child carries (llama-server answers 401 without it; /health is public)."""
        return {"Authorization": f"Bearer {self.api_key}"}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.state in (RunnerState.STARTING, RunnerState.READY)

    def failure_message(self) -> str:
        """The child's stderr line that best says why it failed (see `cause_of`)."""
        return cause_of(self.stderr_tail)

    def reset(self) -> None:
        """Forget a finished child so ensure_ready() starts a new one (e.g. with another variant)."""
        if self._proc is not None and self._proc.returncode is None:
            raise RuntimeError("runner still running")
        self._proc = None
        self._failure = ""
        self.returncode = None
        self.stderr_tail.clear()
        self.log_lines.clear()
        self.load_report = LoadReport()
        self.state = RunnerState.STOPPED

    # -- start ---------------------------------------------------------------------------------------------
    async def ensure_ready(self) -> None:
        """Start the child if it is not running and wait until it answers /health with 200.

        The wait is bounded by the load timeout on its own, whatever the start does: a start that makes no
        progress (no stderr line, no answer from /health) for load_timeout seconds is given up here."""
        if self.state == RunnerState.READY:  # every request to a loaded model: no lock to take
            return
        if self.state in (RunnerState.STOPPED, RunnerState.FAILED) and self._proc is None:
            # STARTING before the task runs, so this waiter (and any other) waits for the outcome.
            log.debug("runner %s: %s -> %s", self.name, self.state, RunnerState.STARTING)
            self.state = RunnerState.STARTING
            self._failure = ""
            self.started_at = self._last_progress = time.monotonic()
            self._start_task = asyncio.create_task(self._start())
        while True:
            async with self._changed:
                if self.state != RunnerState.STARTING:
                    break
                remaining = self._last_progress + self._load_timeout - time.monotonic()
                if remaining > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), remaining + _HEALTH_POLL_SECONDS)
                    continue
            await self._give_up(f"timed out waiting for llama runner to start - progress stalled "
                                f"after {self._load_timeout:g}s: {self.failure_message()}".rstrip(": "))
        if self.state != RunnerState.READY:
            raise RunnerLoadError(self._failure or f"llama runner process has terminated: {self.failure_message()}")

    async def _give_up(self, reason: str) -> None:
        """Fail a start that is still starting: stop the child if there is one, else settle as failed."""
        if self.state != RunnerState.STARTING:
            return
        self._failure = self._failure or reason
        log.warning("runner %s: %s", self.name, self._failure)
        task = self._start_task
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()
        if self._proc is not None and self._proc.returncode is None:
            await self.stop()
        else:
            await self._set_state(RunnerState.FAILED)

    async def _start(self) -> None:
        """Spawn the child and wait for /health. Every way out of here settles the state (waiters wake)."""
        try:
            await self._spawn()
            if self._proc is not None:
                await self._wait_healthy()
        except asyncio.CancelledError:
            if self.state == RunnerState.STARTING:  # cancelled by nobody who settles it: settle it here
                self._failure = self._failure or "llama runner start was cancelled"
                await self._settle_failed_start()
            raise
        except Exception as e:  # any failure must fail the start, never leave it "starting"
            log.error("runner %s: starting llama-server failed: %s", self.name, e, exc_info=not isinstance(e, OSError))
            self._failure = self._failure or f"error starting llama-server: {e}"
            await self._settle_failed_start()

    async def _settle_failed_start(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            await self.stop()  # -> stopping -> stopped (by _wait_exit); the waiters get self._failure
        elif self.state == RunnerState.STARTING:
            await self._set_state(RunnerState.FAILED)

    async def _spawn(self) -> None:
        self.port = free_port()
        argv = list(self._argv_for_port(self.port))
        log.info("starting llama-server %s: %s", self.name, " ".join(argv))
        self.started_at = time.monotonic()
        self._last_progress = self.started_at
        # Pipes are created non-inheritable: another runner started later must not hold this one's stdin open.
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        try:
            for fd in (stdout_r, stderr_r, stdin_w):
                os.set_blocking(fd, False)
            self._proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=stdin_r,
                stdout=stdout_w,
                stderr=stderr_w,
                env={**(os.environ if self._env is None else self._env), **load_progress.ROUTER_ENV,
                     "LLAMA_API_KEY": self.api_key},
                start_new_session=True,
                preexec_fn=_limited_preexec(self.memory_limit),
            )
        except BaseException:
            for fd in (stdout_r, stderr_r, stdin_w):
                os.close(fd)
            raise
        finally:
            for fd in (stdin_r, stdout_w, stderr_w):
                os.close(fd)
        self._stdin = stdin_w
        self._tasks = [asyncio.create_task(self._read_stderr(stderr_r)),
                       asyncio.create_task(self._read_stdout(stdout_r)), asyncio.create_task(self._wait_exit())]

    def _close_stdin(self) -> None:
        """Tell the child to exit, and close its stdin (a child left waiting on it would never exit)."""
        if self._stdin < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self._stdin, load_progress.EXIT_COMMAND)
        os.close(self._stdin)
        self._stdin = -1

    async def _read_stderr(self, fd: int) -> None:
        """The child's stderr, line by line into the tail (and the start-up lines, for the memory report).

        Once llama-server listens, the pipe is read at most every _LOG_BATCH_SECONDS: at the verbosity the
        memory report needs it logs a dozen lines per request, and a read per line would wake the event loop
        that often, in the middle of the request, on a machine whose cores llama-server is using."""
        listening = False

        def on_line(line: str) -> None:
            nonlocal listening
            self.stderr_tail.append(line)
            if not listening:
                self.log_lines.append(line)
                listening = "listening on http" in line
                self._report(load_progress.on_log_line(self.load_report, line))
            log.debug("[%s] %s", self.name, line)

        await self._read_lines(fd, on_line, lambda: listening)

    async def _read_stdout(self, fd: int) -> None:
        """The child's stdout: its load progress reports (runner/load_progress.py); anything else is a log line."""

        def on_line(line: str) -> None:
            if line.startswith(load_progress.STATE_PREFIX):
                self._report(load_progress.on_state_line(self.load_report, line))
            elif line:
                self.stderr_tail.append(line)
                log.debug("[%s] %s", self.name, line)

        await self._read_lines(fd, on_line, lambda: self.state == RunnerState.READY)

    async def _read_lines(self, fd: int, on_line: Callable[[str], None], batch: Callable[[], bool]) -> None:
        """Each line of a pipe from the child to on_line, until EOF; once batch() is true, reads come at most
        every _LOG_BATCH_SECONDS. Closes fd."""
        loop = asyncio.get_running_loop()
        pending, eof = b"", False
        try:
            while not eof:
                readable = loop.create_future()
                loop.add_reader(fd, _wake, readable)
                try:
                    await readable
                finally:
                    loop.remove_reader(fd)
                data = bytearray()
                while True:
                    try:
                        chunk = os.read(fd, 1 << 16)
                    except BlockingIOError:
                        break
                    if not chunk:
                        eof = True
                        break
                    data += chunk
                *lines, pending = (pending + bytes(data)).split(b"\n")
                if eof and pending:
                    lines.append(pending)
                for raw in lines:
                    on_line(raw.decode("utf-8", "replace").rstrip("\r"))
                if lines:
                    self._last_progress = time.monotonic()
                if batch() and not eof:
                    await asyncio.sleep(_LOG_BATCH_SECONDS)
        finally:
            os.close(fd)

    async def _wait_exit(self) -> None:
        assert self._proc
        self.returncode = await self._proc.wait()
        self._close_stdin()
        for task in self._tasks:
            if task is not asyncio.current_task():
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(task), 1.0)
        if self.state == RunnerState.STOPPING:
            await self._set_state(RunnerState.STOPPED)
        else:
            if not self._failure:
                detail = self.failure_message()
                if self.memory_limit is not None and exceeded_limit(self.returncode, self.stderr_tail):
                    self._failure = (f"model '{self.name}' exceeded its memory limit of {_size(self.memory_limit)}"
                                     + (f": {detail}" if detail else ""))
                else:
                    self._failure = (f"llama runner process has terminated: {exit_text(self.returncode)}"
                                     + (f": {detail}" if detail else ""))
            log.warning("runner %s exited unexpectedly (%s)", self.name, self._failure)
            await self._set_state(RunnerState.FAILED)
        if self._on_exit:
            self._on_exit(self)

    async def _wait_healthy(self) -> None:
        timeout = aiohttp.ClientTimeout(total=2)
        async with aiohttp.ClientSession(timeout=timeout, headers=self.auth_headers) as session:
            while self.state == RunnerState.STARTING:
                try:
                    async with session.get(f"{self.base_url}/health") as resp:
                        if resp.status == 200:
                            if self.slots is not None:  # before ready: no request may take a slot first
                                await self.slots.restore(self.base_url, self.auth_headers)
                                if self.state != RunnerState.STARTING:  # stopped meanwhile
                                    return
                            self.load_duration = time.monotonic() - self.started_at
                            log.info("runner %s ready in %.2fs on port %d", self.name, self.load_duration, self.port)
                            await self._set_state(RunnerState.READY)
                            return
                        self._last_progress = max(self._last_progress, time.monotonic() - 1.0)
                except (TimeoutError, aiohttp.ClientError):
                    pass
                if time.monotonic() - self._last_progress > self._load_timeout:
                    self._failure = (f"timed out waiting for llama runner to start - progress stalled "
                                     f"after {self._load_timeout:g}s: {self.failure_message()}")
                    log.warning("runner %s: %s", self.name, self._failure)
                    self._stopping = asyncio.create_task(self.stop())  # held: the loop keeps only weak references
                    async with self._changed:
                        await self._changed.wait_for(lambda: self.state != RunnerState.STARTING)
                    return
                await asyncio.sleep(_HEALTH_POLL_SECONDS)

    async def save_slots(self) -> None:
        """Save the slots (when it has a place for them and is ready) before a stop; never raises."""
        if self.slots is not None and self.state == RunnerState.READY:
            await self.slots.save(self.base_url, self.auth_headers)

    # -- stop ----------------------------------------------------------------------------------------------
    async def stop(self, grace: float = STOP_GRACE_SECONDS) -> None:
        """Stop the child and reap it:

        1. mark the runner stopping (waiters of ensure_ready wake and fail);
        2. write the router's exit command to the child's stdin and close it (a ready child waits for its stdin
           to end before it exits, even after SIGTERM);
        3. SIGTERM the child's process group, then SIGCONT it (a stopped child could not act on SIGTERM);
        4. wait up to `grace` seconds for it to exit;
        5. SIGKILL the process group;
        6. reap: wait for the exit and the pipe readers.
        """
        proc = self._proc
        if proc is None or proc.returncode is not None:
            if self.state in (RunnerState.STARTING, RunnerState.READY):
                await self._set_state(RunnerState.STOPPED)
            return
        if self.state != RunnerState.STOPPING:
            if not self._failure:  # what requests still waiting on it or streaming from it are told
                self._failure = ("llama runner was stopped while loading" if self.state == RunnerState.STARTING
                                 else "llama runner was stopped")
            await self._set_state(RunnerState.STOPPING)
        self._close_stdin()
        self._signal_group(proc.pid, signal.SIGTERM)
        self._signal_group(proc.pid, signal.SIGCONT)
        try:
            await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
        except TimeoutError:
            log.warning("runner %s ignored SIGTERM for %.1fs, sending SIGKILL", self.name, grace)
            self._signal_group(proc.pid, signal.SIGKILL)
        await proc.wait()
        async with self._changed:
            await self._changed.wait_for(lambda: self.state in (RunnerState.STOPPED, RunnerState.FAILED))

    def kill_now(self) -> None:
        """Last-resort synchronous SIGKILL of the group (interpreter exit)."""
        if self._proc and self._proc.returncode is None:
            self._signal_group(self._proc.pid, signal.SIGKILL)

    @staticmethod
    def _signal_group(pid: int, sig: signal.Signals) -> None:
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def error(self, context: str = "") -> RunnerError:
        """An error for requests that were in flight when the child died, carrying its stderr tail."""
        msg = self._failure or f"llama runner process no longer running: {self.returncode}"
        return RunnerError(f"{context}{msg}")
