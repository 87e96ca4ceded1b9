"""Quantizing a GGUF with llama.cpp's own `llama-quantize` (runners/<variant>/llama-quantize).

    normalize_qtype("q4_k_m") -> "Q4_K_M"           BadRequest("unsupported quantization type X") otherwise
    quantize(src, dst_dir, qtype, llama_quantize, progress) -> Path
    make_quantizer(llama_quantize) -> Quantizer      what create_model takes

The tool runs as a child process (an argv list, no shell). Its `[  12/ 272] blk.1.attn_q.weight ...` lines
become progress(done, total) calls. The output goes to a temp file named like the blob store's temp files
(sha256-tmp-quantize-*), so an interrupted run leaves nothing a start-up prune would not remove; the caller
moves the finished file into the store. A progress callback that raises stops the child.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import subprocess
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

from ollama_py.errors import BadRequest, OllamaError

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]
Quantizer = Callable[[Path, Path, str, Progress], Path]

SUPPORTED_TYPES: tuple[str, ...] = (
    "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
    "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K",
    "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q2_K",
)  # fmt: skip
_BY_LOWER = {t.lower(): t for t in SUPPORTED_TYPES}
_PROGRESS_LINE = re.compile(r"\[\s*(\d+)\s*/\s*(\d+)\s*\]")
_TAIL_LINES = 20


def normalize_qtype(qtype: str) -> str:
    """The canonical llama.cpp name of a quantization type, whatever its case."""
    canonical = _BY_LOWER.get(qtype.strip().lower()) if isinstance(qtype, str) else None
    if canonical is None:
        raise BadRequest(f"unsupported quantization type {qtype}")
    return canonical


def quantize(src: Path, dst_dir: Path, qtype: str, llama_quantize: Path, progress: Progress) -> Path:
    """Quantize `src` to `qtype`; returns the output file, a temp file in `dst_dir` the caller now owns."""
    canonical = normalize_qtype(qtype)
    tool = Path(llama_quantize)
    if not (tool.is_file() and os.access(tool, os.X_OK)):
        raise OllamaError(f"quantization is not available: {tool} is not an executable llama-quantize")
    Path(dst_dir).mkdir(parents=True, exist_ok=True)
    fd, out_name = tempfile.mkstemp(prefix="sha256-tmp-quantize-", dir=dst_dir)
    os.close(fd)
    out = Path(out_name)
    argv = [str(tool), str(src), str(out), canonical]
    log.info("quantizing %s to %s: %s", src, canonical, argv)
    tail: collections.deque[str] = collections.deque(maxlen=_TAIL_LINES)
    proc = subprocess.Popen(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, errors="replace", start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            m = _PROGRESS_LINE.search(line)
            if m is None:
                tail.append(line.rstrip())  # the tool's own words, for an error message
            else:
                done, total = int(m.group(1)), int(m.group(2))
                if total > 0:
                    progress(min(done, total), total)
        rc = proc.wait()
        if rc != 0:
            detail = "; ".join(line for line in list(tail)[-5:] if line)
            raise OllamaError(f"llama-quantize failed (exit status {rc}): {detail[-2000:]}")
        return out
    except BaseException:
        out.unlink(missing_ok=True)
        raise
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def make_quantizer(llama_quantize: Path) -> Quantizer:
    """A Quantizer for create_model that runs this llama-quantize binary."""
    return partial(_run, Path(llama_quantize))


def _run(llama_quantize: Path, src: Path, dst_dir: Path, qtype: str, progress: Progress) -> Path:
    return quantize(src, dst_dir, qtype, llama_quantize, progress)
