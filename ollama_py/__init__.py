"""ollama-py: Ollama's API in Python, over upstream llama.cpp llama-server."""

__version__ = "0.1.0"
