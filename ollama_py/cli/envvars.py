"""The environment variables each command's --help lists (Ollama's envconfig.Usage annotations)."""

from __future__ import annotations

DESCRIPTIONS: dict[str, str] = {
    "OLLAMA_DEBUG": "Show additional debug information (e.g. OLLAMA_DEBUG=1)",
    "OLLAMA_HOST": "IP Address for the ollama-py server (default 127.0.0.1:11434)",
    "OLLAMA_CONTEXT_LENGTH": "Context length to use unless otherwise specified (default: 4096)",
    "OLLAMA_KEEP_ALIVE": 'The duration that models stay loaded in memory (default "5m")',
    "OLLAMA_MAX_LOADED_MODELS": "Maximum number of loaded models per GPU",
    "OLLAMA_MAX_QUEUE": "Maximum number of queued requests",
    "OLLAMA_MODELS": "The path to the models directory",
    "OLLAMA_NUM_PARALLEL": "Maximum number of parallel requests",
    "OLLAMA_NOPRUNE": "Do not prune model blobs on startup",
    "OLLAMA_NO_CLOUD": "Disable Ollama cloud features (always off in ollama-py; /api/status reports it)",
    "OLLAMA_ORIGINS": "A comma separated list of allowed origins",
    "OLLAMA_SCHED_SPREAD": "Always schedule model across all GPUs",
    "OLLAMA_FLASH_ATTENTION": "Enabled flash attention",
    "OLLAMA_KV_CACHE_TYPE": "Quantization type for the K/V cache (default: f16)",
    "OLLAMA_LLM_LIBRARY": "Set LLM library to bypass autodetection",
    "OLLAMA_GPU_OVERHEAD": "Reserve a portion of VRAM per GPU (bytes)",
    "OLLAMA_LOAD_TIMEOUT": 'How long to allow model loads to stall before giving up (default "5m")',
    "OLLAMA_REQUEST_TIMEOUT": 'How long a runner may send nothing mid-request before it is replaced (default "10m")',
    "OLLAMA_RUNNERS_DIR": "Directory holding the llama-server builds (default: runners/ in the source tree)",
    "OLLAMA_API_KEYS": "Comma separated keys clients must send as Bearer tokens (default: none required)",
    "OLLAMA_API_KEY": "The key this client sends to a server that asks for one (OLLAMA_API_KEYS)",
    "OLLAMA_RPC_SERVERS": "Comma separated llama.cpp RPC servers (host:port) to offload layers to",
    "OLLAMA_PY_DATA_DIR": "Directory for server.log and the REPL history (default: the user data dir)",
    "OLLAMA_NOHISTORY": "Do not preserve readline history",
}

SERVE_VARS = (
    "OLLAMA_DEBUG", "OLLAMA_HOST", "OLLAMA_CONTEXT_LENGTH", "OLLAMA_KEEP_ALIVE", "OLLAMA_MAX_LOADED_MODELS",
    "OLLAMA_MAX_QUEUE", "OLLAMA_MODELS", "OLLAMA_NUM_PARALLEL", "OLLAMA_NOPRUNE", "OLLAMA_NO_CLOUD",
    "OLLAMA_ORIGINS", "OLLAMA_SCHED_SPREAD", "OLLAMA_FLASH_ATTENTION", "OLLAMA_KV_CACHE_TYPE", "OLLAMA_LLM_LIBRARY",
    "OLLAMA_GPU_OVERHEAD", "OLLAMA_LOAD_TIMEOUT", "OLLAMA_REQUEST_TIMEOUT", "OLLAMA_RUNNERS_DIR", "OLLAMA_API_KEYS",
    "OLLAMA_RPC_SERVERS",
    "OLLAMA_PY_DATA_DIR",
)  # fmt: skip


def epilog(*names: str) -> str:
    """An "Environment Variables:" block for a click epilog (\\b keeps click from rewrapping it)."""
    width = max(len(n) for n in names) + 3
    lines = [f"    {name.ljust(width)}{DESCRIPTIONS[name]}" for name in names]
    return "\b\nEnvironment Variables:\n" + "\n".join(lines)
