"""The files of a download in progress, in Ollama's layout and format, and how a blob is cut into parts.

    blobs/sha256-<hex>-partial        the data, pre-sized (sparse); every byte lands at its own offset
    blobs/sha256-<hex>-partial-<n>    {"N", "Offset", "Size", "Completed"}: the first Completed bytes of
                                      part n are in the data file

Ollama reads and writes the same files, so either program resumes the other's interrupted download.
Pure functions and small file operations; the download itself is store/download.py.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MB = 1000 * 1000  # Ollama's format.MegaByte
_PART_FILE = re.compile(r"-partial-(\d+)\Z")


@dataclass(slots=True)
class Part:
    """One byte range of a blob: [offset, offset + size), of which the first `completed` bytes are in."""

    n: int
    offset: int
    size: int
    completed: int = 0

    def to_json(self) -> dict[str, int]:
        return {"N": self.n, "Offset": self.offset, "Size": self.size, "Completed": self.completed}

    @classmethod
    def from_json(cls, obj: object) -> Part:
        if not isinstance(obj, dict):
            raise ValueError("part state is not an object")
        values: list[Any] = [obj.get(k) for k in ("N", "Offset", "Size", "Completed")]
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
            raise ValueError(f"bad part state {obj!r}")
        n, offset, size, completed = values
        if completed > size:
            raise ValueError(f"part {n} claims {completed} of {size} bytes")
        return cls(n, offset, size, completed)


def plan_parts(total: int, *, count: int = 16, min_size: int = 100 * MB, max_size: int = 1000 * MB,
               max_parts: int | None = None) -> list[Part]:
    """Cut `total` bytes into parts of total/count bytes, clamped to [min_size, max_size]; the last is shorter.
    With `max_parts`, parts grow past max_size rather than number more than that."""
    size = min(max(total // count, min_size), max_size)
    if max_parts is not None:
        size = max(size, -(-total // max_parts))
    size = max(size, 1)
    return [Part(n, offset, min(size, total - offset)) for n, offset in enumerate(range(0, total, size))]


def check_parts(parts: list[Part], total: int) -> list[Part]:
    """The parts sorted, if they tile [0, total) exactly with numbers 0..k-1; ValueError otherwise."""
    parts = sorted(parts, key=lambda p: p.offset)
    at = 0
    for part in parts:
        if part.offset != at or part.size <= 0:
            raise ValueError(f"part {part.n} does not start where the previous one ends")
        at += part.size
    if at != total:
        raise ValueError(f"parts cover {at} bytes, the blob has {total}")
    if sorted(p.n for p in parts) != list(range(len(parts))):
        raise ValueError("part numbers are not 0..n-1")
    return parts


def human_bytes(n: int | float) -> str:
    """Decimal units as Ollama prints sizes: "20 TB", "1.5 GB", "512 B"."""
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" or abs(value) >= 10 else f"{value:.1f} {unit}"
        value /= 1000
    return f"{value:.0f} TB"  # unreachable


def part_files(data_path: Path) -> list[Path]:
    prefix = data_path.name + "-"
    try:
        names = os.listdir(data_path.parent)
    except FileNotFoundError:
        return []
    return [data_path.parent / name for name in names
            if name.startswith(prefix) and _PART_FILE.search(name) and name[len(prefix):].isdigit()]


def read_part_state(data_path: Path, total: int) -> list[Part] | None:
    """The saved parts of an interrupted download, or None when there is nothing (usable) to resume."""
    files = part_files(data_path)
    if not files:
        return None
    try:
        if data_path.stat().st_size != total:
            raise ValueError(f"{data_path.name} has the wrong size")
        return check_parts([Part.from_json(json.loads(f.read_bytes())) for f in files], total)
    except (OSError, ValueError) as e:
        log.info("not resuming %s: %s", data_path.name, e)
        return None


def write_part_state(data_path: Path, part: Part) -> None:
    path = data_path.with_name(f"{data_path.name}-{part.n}")
    tmp = path.with_name(path.name + ".tmp")  # a crash mid-write leaves the old state, never half a JSON
    tmp.write_text(json.dumps(part.to_json()) + "\n")
    os.replace(tmp, path)


def remove_partial(data_path: Path) -> None:
    for f in (*part_files(data_path), data_path):
        f.unlink(missing_ok=True)
