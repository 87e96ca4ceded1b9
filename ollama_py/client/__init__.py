"""HTTP client for the ollama-py REST API (used by the CLI, usable as a library)."""

from ollama_py.client.client import Client, ServerUnreachable, Stream, error_for_status, file_digest

__all__ = ["Client", "ServerUnreachable", "Stream", "error_for_status", "file_digest"]
