"""GGUF metadata: the header, key/values and tensor table of a GGUF file, never its tensor data.

    read_gguf_info(path) -> GGUFInfo     kv map, tensor table, and the derived facts the API shows
    model_info(info, verbose) -> dict    /api/show's model_info

The reader walks the header itself over a read-only mmap, taking the type codes and names from the `gguf`
package. gguf.GGUFReader gives the same answer (the tests hold the two side by side) but builds a numpy
view per array element: 2.7 s for SmolLM2's header and 15 s for Gemma 3's 262k-token vocabulary, which
/api/create and /api/show cannot afford. Only the header pages are ever touched.

A header is untrusted input (a 120-byte upload can claim 2e7 layers or a 5,000-deep array), so nothing is
built from a count before it is checked: every count and length must fit in the bytes that remain (each
entry takes at least its fixed-size part), arrays nest at most _MAX_DEPTH deep and hold at most
_MAX_ARRAY items, every tensor's data must lie inside the file, and the key/values the estimator turns into
per-layer tables (`*.block_count`) and the shard count that /api/create lists missing shards from
(`split.count`) are bounded. Any violation is one BadRequest("invalid GGUF file: ...").
"""

from __future__ import annotations

import math
import mmap
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from ollama_py.errors import BadRequest

_MAX_KV = 1 << 20
_MAX_TENSORS = 1 << 22
_MAX_DIMS = 8
_MAX_DEPTH = 8  # real files nest arrays one level at most
_MAX_ARRAY = 1 << 24  # the largest vocabularies are ~262k tokens; merges fewer than 1M
# llama.cpp refuses more than 512 layers (LLAMA_MAX_LAYERS); a count past this is never a real model, and the
# memory estimate builds per-layer tables from it (2e7 "layers" cost seconds and hundreds of MB).
_MAX_BLOCKS = 4096
# gguf-split names shards NAME-0000N-of-0000M.gguf; real splits have tens to hundreds of shards. /api/create walks
# range(split.count) to say which are missing: 2e7 claimed shards cost 2.4 GB and a 189 MB error (issue 34).
_MAX_SPLITS = 9999
# The fewest bytes one entry can take: a key/value (key length, value type, a 1-byte value), a tensor-table
# row (name length, n_dims, type, offset), and an array element of each kind (strings: their length;
# nested arrays: their type and count).
_MIN_KV_BYTES = 8 + 4 + 1
_MIN_TENSOR_BYTES = 8 + 4 + 4 + 8
_MIN_STRING_BYTES = 8
_MIN_ARRAY_BYTES = 4 + 8

_VT = gguf.GGUFValueType
_SCALAR_FORMATS: dict[int, str] = {
    _VT.UINT8: "B", _VT.INT8: "b", _VT.UINT16: "H", _VT.INT16: "h", _VT.UINT32: "I", _VT.INT32: "i",
    _VT.FLOAT32: "f", _VT.BOOL: "?", _VT.UINT64: "Q", _VT.INT64: "q", _VT.FLOAT64: "d",
}  # fmt: skip

# The names Ollama prints for general.file_type (fs/ggml FileType.String); llama.cpp's for the rest.
_FILE_TYPE_NAMES: dict[int, str] = {
    m.value: m.name.removeprefix("MOSTLY_").removeprefix("ALL_") for m in gguf.LlamaFileType if m.value < 1024
}
_FILE_TYPE_NAMES[4] = "MXFP4"

_TENSOR_TYPE_NAMES: dict[int, str] = {m.value: m.name for m in gguf.GGMLQuantizationType}


def human_number(n: int) -> str:
    """Ollama's format.HumanNumber: 134515008 -> "134.52M", 8030261248 -> "8.0B", 7000000000 -> "7B"."""
    for unit, scale, decimals in (("B", 1_000_000_000, 1), ("M", 1_000_000, 2)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f}{unit}" if value == math.floor(value) else f"{value:.{decimals}f}{unit}"
    if n >= 1000:
        return f"{n / 1000:.0f}K"
    return str(n)


def file_type_name(file_type: int | None) -> str:
    if file_type is None:
        return "unknown"
    return _FILE_TYPE_NAMES.get(file_type, "unknown")


POOLING_RANK = 4  # llama.h's LLAMA_POOLING_TYPE_RANK: a classification head scores (query, document) pairs


@dataclass(frozen=True, slots=True)
class GGUFInfo:
    kv: dict[str, object]
    tensor_table: tuple[tuple[str, str, tuple[int, ...]], ...] = ()

    def _arch(self, key: str) -> object:
        return self.kv.get(f"{self.architecture}.{key}")

    def _arch_int(self, key: str) -> int | None:
        value = self._arch(key)
        if isinstance(value, list):  # per-layer values (OpenELM's head counts): the largest bounds memory
            value = max((v for v in value if isinstance(v, int)), default=None)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def architecture(self) -> str:
        value = self.kv.get("general.architecture")
        return value if isinstance(value, str) else ""

    @property
    def family(self) -> str:
        return self.architecture

    @property
    def kind(self) -> str:
        """general.type: "model", "adapter", "projector"/"mmproj", or "" when absent."""
        value = self.kv.get("general.type")
        return value if isinstance(value, str) else ""

    @property
    def parameter_count(self) -> int:
        value = self.kv.get("general.parameter_count")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
        return sum(math.prod(shape) for _name, _type, shape in self.tensor_table)

    @property
    def parameter_size(self) -> str:
        return human_number(self.parameter_count)

    @property
    def file_type(self) -> int | None:
        value = self.kv.get("general.file_type")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def quantization_level(self) -> str:
        return file_type_name(self.file_type)

    @property
    def context_length(self) -> int | None:
        return self._arch_int("context_length")

    @property
    def embedding_length(self) -> int | None:
        return self._arch_int("embedding_length")

    @property
    def block_count(self) -> int | None:
        return self._arch_int("block_count")

    @property
    def head_count(self) -> int | None:
        return self._arch_int("attention.head_count")

    @property
    def head_count_kv(self) -> int | None:
        value = self._arch_int("attention.head_count_kv")
        return value if value is not None else self.head_count

    @property
    def chat_template(self) -> str | None:
        value = self.kv.get("tokenizer.chat_template")
        return value if isinstance(value, str) else None

    @property
    def is_embedding(self) -> bool:
        """An embedding model: a pooling type is set, or attention is not causal (bert, nomic-bert)."""
        return self._arch("pooling_type") is not None or self._arch("attention.causal") is False

    @property
    def is_reranker(self) -> bool:
        """A reranker (cross-encoder), by the signals llama.cpp's converter leaves: pooling type RANK (4; Qwen3
        rerankers, sentence-transformers cross-encoders), a `rerank` prompt template (tokenizer.chat_template.rerank,
        which llama-server fills with the query and document), or a classification head (`cls.output.weight`:
        bge-reranker and other XLM-RoBERTa/BERT ...ForSequenceClassification models, converted without a pooling
        type and run with --reranking)."""
        if self._arch("pooling_type") == POOLING_RANK or "tokenizer.chat_template.rerank" in self.kv:
            return True
        return any(name == "cls.output.weight" for name, _type, _shape in self.tensor_table)

    @property
    def projector_media(self) -> frozenset[str]:
        """What a projector (mmproj) file encodes: "vision", "audio" or both, as llama.cpp writes it
        (clip.has_vision_encoder / clip.has_audio_encoder); a projector from before those keys is a vision one."""
        vision, audio = self.kv.get("clip.has_vision_encoder"), self.kv.get("clip.has_audio_encoder")
        if vision is None and audio is None:
            return frozenset({"vision"})
        return frozenset(kind for kind, said in (("vision", vision), ("audio", audio)) if said is True)

    @property
    def is_projector(self) -> bool:
        """A standalone vision/audio projector (an mmproj file) rather than a language model."""
        if self.kind in ("projector", "mmproj"):
            return True
        if not self.block_count and self._arch("vision.block_count"):
            return True
        return self.architecture == "clip" and not self.block_count

    @property
    def is_adapter(self) -> bool:
        return self.kind == "adapter"

    @property
    def split(self) -> tuple[int, int] | None:
        """(shard index from 0, shard count) of a split GGUF (llama.cpp's gguf-split: model-00001-of-00003.gguf
        and so on; the first holds every key/value, each its share of the tensors); None for a whole file."""
        no, count = self.kv.get("split.no"), self.kv.get("split.count")
        if not isinstance(no, int) or not isinstance(count, int) or isinstance(no, bool) or count < 2:
            return None
        return (no, count) if 0 <= no < count else None

    def with_shards(self, others: Sequence[GGUFInfo]) -> GGUFInfo:
        """The whole model of a split GGUF: this (the first shard's) key/values, every shard's tensors."""
        table = self.tensor_table + tuple(row for other in others for row in other.tensor_table)
        return GGUFInfo(self.kv, table)

    @property
    def tensors(self) -> list[tuple[str, str, list[int]]]:
        """(name, type name, shape) per tensor, shape in GGUF order (innermost dimension first)."""
        return [(name, type_name, list(shape)) for name, type_name, shape in self.tensor_table]


def model_info(info: GGUFInfo, verbose: bool) -> dict[str, object]:
    """/api/show's model_info: the key/values less general.name and the chat template; arrays longer than
    five are emptied unless verbose; general.parameter_count is always present."""
    out: dict[str, object] = {}
    for key, value in info.kv.items():
        if key in ("general.name", "tokenizer.chat_template"):
            continue
        if isinstance(value, list) and len(value) > 5 and not verbose:
            value = []
        out[key] = value
    out["general.parameter_count"] = info.parameter_count
    return dict(sorted(out.items()))


def read_gguf_info(path: Path) -> GGUFInfo:
    """Read a GGUF file's header. BadRequest with a clear reason when the file is not a GGUF we can read."""
    try:
        with open(path, "rb") as f:
            if f.read(4) != b"GGUF":
                raise BadRequest("invalid file magic: not a GGUF file")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                info = _Header(mm).read()
    except (struct.error, IndexError, ValueError, OverflowError) as e:
        raise BadRequest(f"invalid GGUF file: {e}") from None
    check_bounds(info)
    return info


def check_bounds(info: GGUFInfo) -> None:
    """Refuse key/values that would make us build something huge from a small file (see the module doc)."""
    for key, value in info.kv.items():
        if not key.endswith("block_count"):
            continue
        # an array where a count belongs is read as its largest item (per-layer values elsewhere): bounded alike
        for count in (value if isinstance(value, list) else [value]):
            if isinstance(count, int) and not isinstance(count, bool) and not 0 <= count <= _MAX_BLOCKS:
                raise _invalid(f"{key} is {count} (at most {_MAX_BLOCKS})")
    count = info.kv.get("split.count")
    if isinstance(count, int) and not isinstance(count, bool) and not 0 <= count <= _MAX_SPLITS:
        raise _invalid(f"split.count is {count} (at most {_MAX_SPLITS})")


class _Header:
    """A cursor over the header bytes."""

    def __init__(self, buf: mmap.mmap) -> None:
        self.buf = buf
        self.pos = 4
        self.end = len(buf)
        self.e = "<"

    def read(self) -> GGUFInfo:
        (version,) = struct.unpack_from("<I", self.buf, self.pos)
        if version & 0xFFFF == 0:  # written on a big-endian machine
            self.e = ">"
            (version,) = struct.unpack_from(">I", self.buf, self.pos)
        self.pos += 4
        if version not in (2, 3):
            raise BadRequest(f"unsupported GGUF version {version}")
        n_tensors, n_kv = self._unpack("QQ")
        if n_kv > _MAX_KV or n_tensors > _MAX_TENSORS:
            raise _invalid("implausible key/value or tensor count")
        self._fits(n_kv * _MIN_KV_BYTES + n_tensors * _MIN_TENSOR_BYTES, "the key/values and tensor table")
        kv: dict[str, object] = {}
        for _ in range(n_kv):
            key = self._string()
            (vtype,) = self._unpack("I")
            kv[key] = self._value(vtype, 0)
        self._fits(n_tensors * _MIN_TENSOR_BYTES, "the tensor table")
        tensors: list[tuple[str, str, tuple[int, ...]]] = []
        extents: list[tuple[str, int, int]] = []
        for _ in range(n_tensors):
            name = self._string()
            (n_dims,) = self._unpack("I")
            if n_dims > _MAX_DIMS:
                raise _invalid(f"tensor {name} has {n_dims} dimensions")
            shape = self._unpack("Q" * n_dims)
            ttype, offset = self._unpack("IQ")
            tensors.append((name, _TENSOR_TYPE_NAMES.get(ttype, f"type{ttype}"), tuple(shape)))
            extents.append((name, offset, _tensor_bytes(ttype, shape)))
        alignment = kv.get("general.alignment", 32)
        if not isinstance(alignment, int) or isinstance(alignment, bool) or not 0 < alignment <= 1 << 20:
            raise _invalid(f"general.alignment is {alignment!r}")
        data_start = -(-self.pos // alignment) * alignment
        for name, offset, size in extents:
            if data_start + offset + size > self.end:
                raise _invalid(f"tensor {name} lies past the end of the file")
        return GGUFInfo(kv, tuple(tensors))

    def _fits(self, need: int, what: str) -> None:
        if need > self.end - self.pos:
            raise _invalid(f"{what} cannot fit in the file ({need} bytes needed, {self.end - self.pos} left)")

    def _unpack(self, fmt: str) -> tuple:
        values = struct.unpack_from(self.e + fmt, self.buf, self.pos)
        self.pos += struct.calcsize(self.e + fmt)
        return values

    def _string(self) -> str:
        (n,) = self._unpack("Q")
        if n > self.end - self.pos:
            raise _invalid("string runs past the end of the file")
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        return raw.decode("utf-8", errors="replace")

    def _value(self, vtype: int, depth: int) -> object:
        if vtype == _VT.STRING:
            return self._string()
        if vtype == _VT.ARRAY:
            return self._array(depth + 1)
        fmt = _SCALAR_FORMATS.get(vtype)
        if fmt is None:
            raise _invalid(f"unknown value type {vtype}")
        (value,) = self._unpack(fmt)
        return _float32(value) if vtype == _VT.FLOAT32 else value

    def _array(self, depth: int) -> list[object]:
        if depth > _MAX_DEPTH:
            raise _invalid(f"arrays nested more than {_MAX_DEPTH} deep")
        vtype, n = self._unpack("IQ")
        if n > _MAX_ARRAY:
            raise _invalid(f"an array of {n} items (at most {_MAX_ARRAY})")
        if vtype == _VT.STRING:
            self._fits(n * _MIN_STRING_BYTES, "an array")
            return [self._string() for _ in range(n)]
        if vtype == _VT.ARRAY:
            self._fits(n * _MIN_ARRAY_BYTES, "an array")
            return [self._array(depth + 1) for _ in range(n)]
        fmt = _SCALAR_FORMATS.get(vtype)
        if fmt is None:
            raise _invalid(f"unknown array type {vtype}")
        size = struct.calcsize(fmt)
        if n * size > self.end - self.pos:
            raise _invalid("array runs past the end of the file")
        values = np.frombuffer(self.buf, dtype=np.dtype(self.e + fmt), count=n, offset=self.pos).tolist()
        self.pos += n * size
        return [_float32(v) for v in values] if vtype == _VT.FLOAT32 else values


def _invalid(reason: str) -> BadRequest:
    # a reason may quote the file (a key name): never megabytes of it in an error (issue 34)
    return BadRequest(f"invalid GGUF file: {reason if len(reason) <= 300 else reason[:300] + '...'}")


def _tensor_bytes(ttype: int, shape: tuple[int, ...]) -> int:
    """A tensor's data size from its GGML type and shape; 0 for a type newer than our gguf package (its
    size is then unknown, and only the known ones are checked against the file)."""
    try:
        block, type_size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType(ttype)]
    except (ValueError, KeyError):
        return 0
    return math.prod(shape) // block * type_size


def _float32(value: float) -> float:
    # The shortest decimal that round-trips as float32, as Go prints a float32 (1e-05, not 9.99999974e-06).
    return float(str(np.float32(value)))
