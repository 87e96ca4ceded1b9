"""Pure scheduling decisions: which runner to evict, whether a request needs a reload, how many may load.

No event loop and no logging here: callers pass the state in and act on the answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_MODELS_PER_GPU = 3


@dataclass(frozen=True, slots=True)
class Resident:
    """What the policy needs to know about one loaded runner."""

    key: str
    name: str
    busy: bool
    session_duration: float
    size: int = 0


def max_runners(setting: int, gpu_count: int) -> int:
    """OLLAMA_MAX_LOADED_MODELS, or 3 per GPU (3 on CPU) when unset (0)."""
    return setting if setting > 0 else DEFAULT_MODELS_PER_GPU * max(gpu_count, 1)


def choose_victim(loaded: Sequence[Resident]) -> Resident | None:
    """The idle runner with the shortest keep-alive (then by name); None when every runner is busy."""
    idle = [r for r in loaded if not r.busy]
    if not idle:
        return None
    return min(idle, key=lambda r: (r.session_duration, r.name))


def must_evict(loaded: Sequence[Resident], limit: int, need_bytes: int, free_bytes: int | None) -> bool:
    """Whether one more runner of need_bytes does not fit next to the loaded ones."""
    if not loaded:
        return False
    if len(loaded) >= limit:
        return True
    return free_bytes is not None and need_bytes > free_bytes


def needs_reload(current: dict[str, object], wanted: dict[str, object]) -> bool:
    """Load-time options differ (num_ctx, num_batch, num_gpu, ...); sampling options never reload.

    A wanted num_gpu of -1 (auto) accepts whatever is loaded, as Ollama does.
    """
    for key in set(current) | set(wanted):
        a, b = current.get(key), wanted.get(key)
        if key == "num_gpu" and b in (None, -1):
            continue
        if a != b:
            return True
    return False


def expiry(now: float, duration: float) -> float:
    """When an idle runner expires; inf for forever."""
    return math.inf if math.isinf(duration) else now + duration
