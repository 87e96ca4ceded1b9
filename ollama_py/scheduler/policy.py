"""Pure scheduling decisions: which runner to evict, whether a request needs a reload, how many may load.

No event loop and no logging here: callers pass the state in and act on the answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

DEFAULT_MODELS_PER_GPU = 3
DEFAULT_PARALLEL = 4  # slots per model when OLLAMA_NUM_PARALLEL is unset and memory allows (Ollama <= 0.5)
# Architectures Ollama always runs with one slot: recurrent or hybrid state per sequence, or vision models whose
# runner cannot batch sequences.
ONE_SLOT_ARCHITECTURES = frozenset({
    "mllama", "qwen3vl", "qwen3vlmoe", "qwen35", "qwen35moe", "qwen3next", "lfm2", "lfm2moe", "nemotron_h",
    "nemotron_h_moe", "nemotron_h_omni",
})


@dataclass(frozen=True, slots=True)
class Resident:
    """What the policy needs to know about one loaded runner."""

    key: str
    name: str
    busy: bool
    session_duration: float
    size: int = 0
    size_vram: int = 0

    def held(self, vram: bool) -> int:
        """What it holds of GPU memory (vram) or else of host memory."""
        return self.size_vram if vram else max(self.size - self.size_vram, 0)


def max_runners(setting: int, gpu_count: int) -> int:
    """OLLAMA_MAX_LOADED_MODELS, or 3 per GPU (3 on CPU) when unset (0)."""
    return setting if setting > 0 else DEFAULT_MODELS_PER_GPU * max(gpu_count, 1)


def choose_parallel(setting: int, *, embedding: bool, architecture: str, fits: Callable[[int], bool]) -> int:
    """Slots for a new runner: OLLAMA_NUM_PARALLEL when set (> 0); else 4 when a load with 4 slots `fits`
    (all layers on the GPUs, or in free RAM on the CPU), else 1. Embedding runners and ONE_SLOT_ARCHITECTURES
    always get one, as in Ollama."""
    if embedding or architecture in ONE_SLOT_ARCHITECTURES:
        return 1
    if setting > 0:
        return setting
    return DEFAULT_PARALLEL if fits(DEFAULT_PARALLEL) else 1


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


def never_fits(loaded: Sequence[Resident], need_bytes: int, free_bytes: int | None, *, vram: bool) -> bool:
    """Whether need_bytes does not fit even with every loaded runner gone: free now plus all they hold (the busy
    ones too: they become idle in time, so only a load that needs more than that can never happen)."""
    if free_bytes is None:
        return False
    return need_bytes > free_bytes + sum(r.held(vram) for r in loaded)


def cpu_threads(cores: int, cpu_runners: int) -> int:
    """Threads for a runner on the CPU when cpu_runners (itself included) will be loaded: an equal share of the
    cores, at least one. One runner gets every core (Ollama: the physical cores); llama-server's threads spin
    while they wait for work, so two runners that each take every core slow each other down many times over."""
    return max(1, cores // max(cpu_runners, 1))


SHUTDOWN_SAVE_SECONDS = 5.0  # how long serve's stop waits for idle runners to save their slots (then they stop unsaved)
MEMORY_RECOVERY_SECONDS = 5.0  # how long an evicted runner's memory may take to show as free once it has exited
MEMORY_RECOVERED = 0.75  # ... and the share of it that counts as back


def runner_queue(parallel: int) -> int:
    """Requests a runner is given beyond its slots, to wait in llama-server's own queue: one per slot. When a slot
    frees, llama-server starts its next queued task in the same step; a request still waiting here has to be sent
    and read first, while the other slots decode (up to a decode step with that slot idle, per queued request),
    and when a wave of streams ends together, every slot of it waits so. 16 clients on 4 slots, against the same
    runner reached directly: the CPU runner 0.96-0.99 with none, 0.99-1.02 with one; the fake at GPU pace
    0.942-0.945 with one, 0.952 with one a slot; an H200 0.984-1.003 either way (bench/results/overhead.md)."""
    return parallel


def needs_reload(current: dict[str, object], wanted: dict[str, object]) -> bool:
    """Load-time options differ (num_ctx, num_batch, num_gpu, ...); sampling options never reload.

    A wanted num_gpu of -1 (auto) accepts whatever is loaded, as Ollama does.
    """
    if current == wanted:  # every request for a loaded model asks: the usual answer, in one comparison
        return False
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
