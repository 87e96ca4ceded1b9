"""Memory estimates (pure, from GGUF metadata) and the GPU / system-memory probes they are placed against.

    gpus.py     GpuInfo, SystemMemory; probe_nvidia, probe_metal, probe_gpus, probe_system_memory (injected seams)
    memory.py   ModelShape, shape_from_gguf; estimate -> Estimate; place -> Placement; parse_llama_server_buffers
"""
