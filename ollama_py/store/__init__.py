"""The model store, byte-compatible with Ollama's OLLAMA_MODELS directory.

    blobs.py       BlobStore: content-addressed files, written atomically, digests checked on lookup
    manifests.py   Layer, Manifest, ManifestStore: names -> Docker v2 manifests
    gguf_meta.py   GGUFInfo, read_gguf_info, model_info: a GGUF's header, never its tensors
    models.py      Model, ModelStore: load / list / copy / delete / prune
    create.py      create_model: /api/create as progress objects
    quantize.py    quantize with llama.cpp's llama-quantize
    lock.py        StoreLock: one serve per store (an flock held for serve's life)

Plain blocking code: no event loop in here; the server calls it through asyncio.to_thread.
"""
