"""ollama-py: Ollama's API in Python, over upstream llama.cpp llama-server."""

__version__ = "0.1.0"

# The Ollama release whose API this server implements: what GET /api/version reports as "version", because
# clients gate features on it (Codex's --oss needs >= 0.13.4 for /v1/responses). Our own version is the
# "ollama_py" field beside it.
OLLAMA_API_VERSION = "0.32.15"
