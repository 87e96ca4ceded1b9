"""Short scheduler time slices for the gateway, the default for the runners it starts (Linux >= 6.12).

The gateway is a relay: a token from llama-server wakes it, it writes the token to the client and sleeps again,
some 0.2 ms of CPU. Meanwhile llama-server's compute threads keep every core busy with the next token. Linux's
EEVDF scheduler lets a waking task preempt a running one only if the waker's deadline is earlier, and a
deadline is a time slice away, so with the default slice (0.7 ms x (1 + log2 CPUs)) the relay often waits
out a compute thread's slice: a few milliseconds on the first token, some hundreds of microseconds on others.
A short slice (sched_attr.sched_runtime, the interface the kernel gives latency-sensitive tasks) puts the
relay's deadline first, so it runs as soon as its data arrives and yields as soon as it is done; it gets no
more CPU than before. Children inherit a custom slice through fork and exec, so a runner is started with the
default one back (`default_slice`).

Nothing here is required: on other systems, older kernels or any error, the calls do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import platform
import struct
import sys

log = logging.getLogger(__name__)

RELAY_SLICE_NS = 100_000  # the shortest slice the kernel accepts (0.1 ms)

_SYSCALLS = {"x86_64": (314, 315), "aarch64": (274, 275)}  # sched_setattr, sched_getattr
_ATTR = struct.Struct("=IIQiIQQQ")  # sched_attr up to sched_period (SCHED_ATTR_SIZE_VER0, 48 bytes)
_SCHED_OTHER = 0


def _syscalls() -> tuple[ctypes.CDLL, int, int] | None:
    if not sys.platform.startswith("linux") or platform.machine() not in _SYSCALLS:
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None
    setattr_nr, getattr_nr = _SYSCALLS[platform.machine()]
    return libc, setattr_nr, getattr_nr


_CALLS = _syscalls()


def _get_attr() -> tuple[int, ...] | None:
    """The calling thread's sched_attr fields (size, policy, flags, nice, priority, runtime, deadline, period)."""
    if _CALLS is None:
        return None
    libc, _, getattr_nr = _CALLS
    buf = ctypes.create_string_buffer(_ATTR.size)
    if libc.syscall(getattr_nr, 0, buf, _ATTR.size, 0) != 0:
        return None
    return _ATTR.unpack(buf.raw)


def _set_slice(ns: int) -> bool:
    """Set the calling thread's slice to `ns` (0: the default), keeping its policy and nice value."""
    attr = _get_attr()
    if attr is None:
        return False
    _, policy, _, nice, prio, runtime, _, _ = attr
    if policy != _SCHED_OTHER:  # SCHED_BATCH, SCHED_IDLE, real-time: chosen by whoever started us
        return False
    if runtime == ns:
        return True
    libc, setattr_nr, _ = _CALLS  # type: ignore[misc]  # _get_attr returned: the calls exist
    new = ctypes.create_string_buffer(_ATTR.pack(_ATTR.size, policy, 0, nice, prio, ns, 0, 0))
    return libc.syscall(setattr_nr, 0, new, 0) == 0


def current_slice_ns() -> int | None:
    """The calling thread's slice in nanoseconds, or None where it cannot be read."""
    attr = _get_attr()
    return None if attr is None else attr[5]


def relay_slices() -> bool:
    """Give the calling thread (and the threads it starts later) the relay's short slice. Call it from the
    main thread before the event loop starts."""
    ok = _set_slice(RELAY_SLICE_NS)
    log.debug("short scheduler slices %s", "on" if ok else "not available")
    return ok


def default_slice() -> None:
    """The kernel's default slice for the calling thread: worker threads (a ThreadPoolExecutor initializer)
    and, as a preexec_fn step, a forked child before it execs."""
    _set_slice(0)
