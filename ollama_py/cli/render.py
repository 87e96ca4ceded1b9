"""Text the CLI prints, as pure functions: sizes, relative times, Go durations, the list/ps/show tables and the
--verbose timing summary, each the way Ollama's `format` package and `cmd` handlers write them.

Nothing here writes to a terminal; callers print the strings. `now` is always passed in.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

KB, MB, GB, TB = 1000, 1000**2, 1000**3, 1000**4
_PAD = "    "  # Ollama's tablewriter padding between columns


def human_bytes(n: int | float) -> str:
    """Ollama's format.HumanBytes: decimal units, no decimals from 10 up, one decimal below ("98 MB", "1.5 GB")."""
    n = int(n)
    for size, unit in ((TB, "TB"), (GB, "GB"), (MB, "MB"), (KB, "KB")):  # noqa: B007 - the unit it stops at
        if n >= size:
            value = n / size
            break
    else:
        return f"{n} B"
    if value >= 10 or value == math.trunc(value):
        return f"{int(value)} {unit}"
    return f"{value:.1f} {unit}"


def human_number(n: int) -> str:
    """Ollama's format.HumanNumber, for parameter counts: "135M", "1.5B", "7B", "812K"."""
    if n >= 1_000_000_000:
        v = n / 1_000_000_000
        return f"{v:.0f}B" if v == math.floor(v) else f"{v:.1f}B"
    if n >= 1_000_000:
        v = n / 1_000_000
        return f"{v:.0f}M" if v == math.floor(v) else f"{v:.2f}M"
    if n >= 1_000:
        return f"{n / 1000:.0f}K"
    return str(n)


def human_duration(seconds: float) -> str:
    """Ollama's humanDuration: "Less than a second", "About a minute", "4 minutes", "2 days", ..."""
    s = int(seconds)
    if s < 1:
        return "Less than a second"
    if s == 1:
        return "1 second"
    if s < 60:
        return f"{s} seconds"
    minutes = int(seconds / 60)
    if minutes == 1:
        return "About a minute"
    if minutes < 60:
        return f"{minutes} minutes"
    hours = round(seconds / 3600)
    if hours == 1:
        return "About an hour"
    if hours < 48:
        return f"{hours} hours"
    if hours < 24 * 7 * 2:
        return f"{hours // 24} days"
    if hours < 24 * 30 * 2:
        return f"{hours // 24 // 7} weeks"
    if hours < 24 * 365 * 2:
        return f"{hours // 24 // 30} months"
    return f"{hours // 24 // 365} years"


def human_time(when: dt.datetime | None, now: dt.datetime, zero: str = "Never") -> str:
    """Ollama's format.HumanTime: "2 minutes ago", "4 minutes from now", "Forever" (> 20 years ahead)."""
    if when is None:
        return zero
    delta = (now - when).total_seconds()
    if int(int(delta / 3600) / (24 * 365)) < -20:  # Go's truncating integer division
        return "Forever"
    if delta < 0:
        return human_duration(-delta) + " from now"
    return human_duration(delta) + " ago"


def parse_time(text: str | None) -> dt.datetime | None:
    """An RFC 3339 timestamp from the API; None for missing, unparsable or Go's zero time."""
    if not text:
        return None
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return None if when.year <= 1 else when


def go_duration(ns: int) -> str:
    """A duration in nanoseconds as Go's time.Duration.String() writes it: "1.5s", "845.1µs", "2m3.25s"."""
    if ns == 0:
        return "0s"
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    if ns < 1000:
        return f"{sign}{ns}ns"
    if ns < 1_000_000:
        return f"{sign}{_fraction(ns, 1000)}µs"
    if ns < 1_000_000_000:
        return f"{sign}{_fraction(ns, 1_000_000)}ms"
    hours, rest = divmod(ns, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    seconds = _fraction(rest, 10**9)
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{sign}{minutes}m{seconds}s"
    return f"{sign}{seconds}s"


def _fraction(value: int, unit: int) -> str:
    whole, frac = divmod(value, unit)
    if not frac:
        return str(whole)
    digits = len(str(unit)) - 1
    return f"{whole}.{frac:0{digits}d}".rstrip("0")


def processor(size: int, size_vram: int) -> str:
    """The PROCESSOR column of `ps`: "100% CPU", "100% GPU", "48%/52% CPU/GPU"."""
    if size_vram == 0:
        return "100% CPU"
    if size_vram == size:
        return "100% GPU"
    if size_vram > size or size == 0:
        return "Unknown"
    cpu = round((size - size_vram) / size * 100)
    return f"{cpu}%/{100 - cpu}% CPU/GPU"


def device_split(devices: Mapping[str, int] | None) -> str | None:
    """PROCESSOR for a model spread over RPC workers: "12%/88% CPU/RPC" (GPU too when one holds a part);
    None when no RPC worker holds any of it (the plain CPU/GPU column applies)."""
    if not devices:
        return None
    parts = {"CPU": 0, "GPU": 0, "RPC": 0}
    for name, size in devices.items():
        kind = "CPU" if name == "CPU" else "RPC" if name.startswith("RPC") else "GPU"
        parts[kind] += max(int(size), 0)
    total = sum(parts.values())
    if not parts["RPC"] or not total:
        return None
    shown = [(k, v) for k, v in parts.items() if v]
    percents = [round(v / total * 100) for _, v in shown]
    percents[-1] = 100 - sum(percents[:-1])
    return "/".join(f"{p}%" for p in percents) + " " + "/".join(k for k, _ in shown)


def until(expires_at: dt.datetime | None, now: dt.datetime) -> str:
    """The UNTIL column of `ps`: "4 minutes from now", "Forever", "Stopping..." once the time has passed."""
    if expires_at is not None and expires_at < now:
        return "Stopping..."
    return human_time(expires_at, now, "Never")


def table(headers: Sequence[str] | None, rows: Iterable[Sequence[str]], indent: str = "") -> str:
    """Left-aligned columns separated by four spaces, no borders (Ollama's tablewriter settings)."""
    all_rows = ([list(headers)] if headers else []) + [list(r) for r in rows]
    if not all_rows:
        return ""
    ncols = max(len(r) for r in all_rows)
    widths = [max((len(r[i]) for r in all_rows if i < len(r)), default=0) for i in range(ncols)]
    lines = []
    for r in all_rows:
        cells = [c.ljust(widths[i]) for i, c in enumerate(r)]
        lines.append((indent + _PAD.join(cells)).rstrip())
    return "\n".join(lines) + "\n"


def _short_id(digest: str) -> str:
    return digest.removeprefix("sha256:")[:12]


def list_table(models: Sequence[Mapping[str, Any]], now: dt.datetime, prefix: str = "") -> str:
    rows = [
        [m.get("name", ""), _short_id(m.get("digest", "")),
         "-" if m.get("remote_model") else human_bytes(m.get("size", 0)),  # a stub of a remote model: no weights
         human_time(parse_time(m.get("modified_at")), now)]
        for m in models if m.get("name", "").startswith(prefix)
    ]
    return table(["NAME", "ID", "SIZE", "MODIFIED"], rows)


def ps_table(models: Sequence[Mapping[str, Any]], now: dt.datetime, prefix: str = "") -> str:
    rows = [
        [m.get("name", ""), _short_id(m.get("digest", "")), human_bytes(m.get("size", 0)),
         (device_split(m.get("devices")) or processor(m.get("size", 0), m.get("size_vram", 0)))
         + (" (embeddings)" if m.get("embedding") else ""),
         str(m.get("context_length", 0)),
         until(parse_time(m.get("expires_at")), now)]
        for m in models if m.get("model", m.get("name", "")).startswith(prefix)
    ]
    return table(["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "UNTIL"], rows)


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _head(text: str, n: int) -> list[list[str]]:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    rows = [["", line] for line in lines[:n]]
    if len(lines) > n:
        rows.append(["", "..."])
    return rows


def _metadata_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        shown, width = [], 1
        for i, item in enumerate(value):
            w = len(str(item)) + (2 if i else 0)
            if width + w > 10 and i:
                break
            width += w
            shown.append(str(item))
        body = " ".join(shown)
        return f"[{body} ...+{len(value) - len(shown)} more]" if len(shown) < len(value) else f"[{body}]"
    return _number(value)


def show_info(resp: Mapping[str, Any], verbose: bool = False) -> str:
    """`ollama show MODEL` without flags: the Model, Capabilities, Parameters, (Metadata, Tensors), System and
    License sections."""
    details = resp.get("details") or {}
    info = resp.get("model_info") or {}
    out: list[str] = []

    def section(title: str, rows: list[list[str]]) -> None:
        out.append(f"  {title}\n")
        out.append(table(None, rows))
        out.append("\n")

    rows: list[list[str]] = []
    if resp.get("remote_host"):
        rows += [["", "Remote model", str(resp.get("remote_model", ""))],
                 ["", "Remote URL", str(resp["remote_host"])]]
    if info:
        arch = str(info.get("general.architecture", ""))
        if arch:
            rows.append(["", "architecture", arch])
        params = details.get("parameter_size") or (
            human_number(int(info["general.parameter_count"])) if "general.parameter_count" in info else "")
        if params:
            rows.append(["", "parameters", params])
        for key, label in (("context_length", "context length"), ("embedding_length", "embedding length")):
            if f"{arch}.{key}" in info:
                rows.append(["", label, _number(info[f"{arch}.{key}"])])
    else:
        rows += [["", "architecture", str(details.get("family", ""))],
                 ["", "parameters", str(details.get("parameter_size", ""))]]
    rows.append(["", "quantization", str(details.get("quantization_level", ""))])
    if resp.get("requires"):
        rows.append(["", "requires", str(resp["requires"])])
    section("Model", rows)

    if resp.get("capabilities"):
        section("Capabilities", [["", str(c)] for c in resp["capabilities"]])
    projector = resp.get("projector_info")
    if projector:
        prow = []
        if projector.get("general.architecture"):
            prow.append(["", "architecture", str(projector["general.architecture"])])
        if "general.parameter_count" in projector:
            prow.append(["", "parameters", human_number(int(projector["general.parameter_count"]))])
        section("Projector", prow)
    if resp.get("parameters"):
        section("Parameters", [["", *line.split()] for line in str(resp["parameters"]).splitlines() if line])
    if info and verbose:
        section("Metadata", [["", k, _metadata_value(info[k])] for k in sorted(info)])
    if resp.get("tensors") and verbose:
        section("Tensors", [["", str(t.get("name", "")), str(t.get("type", "")),
                             "[" + " ".join(str(d) for d in t.get("shape", [])) + "]"] for t in resp["tensors"]])
    if resp.get("system"):
        section("System", _head(str(resp["system"]), 2))
    if resp.get("license"):
        section("License", _head(str(resp["license"]), 2))
    return "".join(out)


def metrics_summary(final: Mapping[str, Any]) -> str:
    """api.Metrics.Summary: the --verbose timing lines, each only when its value is above zero."""
    lines = []
    total, load = int(final.get("total_duration") or 0), int(final.get("load_duration") or 0)
    p_count, p_dur = int(final.get("prompt_eval_count") or 0), int(final.get("prompt_eval_duration") or 0)
    e_count, e_dur = int(final.get("eval_count") or 0), int(final.get("eval_duration") or 0)
    if total > 0:
        lines.append(f"total duration:       {go_duration(total)}")
    if load > 0:
        lines.append(f"load duration:        {go_duration(load)}")
    if p_count > 0:
        lines.append(f"prompt eval count:    {p_count} token(s)")
    if p_dur > 0:
        lines.append(f"prompt eval duration: {go_duration(p_dur)}")
        lines.append(f"prompt eval rate:     {p_count / (p_dur / 1e9):.2f} tokens/s")
    if e_count > 0:
        lines.append(f"eval count:           {e_count} token(s)")
    if e_dur > 0:
        lines.append(f"eval duration:        {go_duration(e_dur)}")
        lines.append(f"eval rate:            {e_count / (e_dur / 1e9):.2f} tokens/s")
    return "".join(line + "\n" for line in lines)
