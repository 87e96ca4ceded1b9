"""Modelfiles: parse text into commands (`parse_modelfile`) and write them back (`serialize_modelfile`).

Pure: no I/O. Resolving FROM/ADAPTER/DRAFT paths and hashing files belongs to the caller (CLI `create`).
"""

from ollama_py.modelfile.parser import Command, Modelfile, decode_modelfile, parse_modelfile
from ollama_py.modelfile.serializer import build_modelfile, quote, representable, serialize_modelfile

__all__ = [
    "Command",
    "Modelfile",
    "build_modelfile",
    "decode_modelfile",
    "parse_modelfile",
    "quote",
    "representable",
    "serialize_modelfile",
]
