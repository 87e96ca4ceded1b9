"""Split a real GGUF into shards as llama.cpp's gguf-split does (NAME-00001-of-0000N.gguf, split.* metadata, the
first shard holding every key/value), with the gguf package's own writer: no llama-gguf-split in our runner build."""

from __future__ import annotations

from pathlib import Path

import gguf


def split_gguf(src: Path, out_dir: Path, prefix: str, max_tensors: int) -> list[Path]:
    """Write `src` as shards of at most `max_tensors` tensors each; returns their paths in order."""
    reader = gguf.GGUFReader(src)
    arch = str(reader.fields["general.architecture"].contents())
    out_dir.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(out_dir / f"{prefix}.gguf", arch, split_max_tensors=max_tensors)
    for name, f in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        vtype = f.types[0]
        sub = f.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(name, f.contents(), vtype, sub_type=sub)
    for t in reader.tensors:
        writer.add_tensor(t.name, t.data, raw_dtype=t.tensor_type)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return sorted(out_dir.glob(f"{prefix}-*-of-*.gguf"))
