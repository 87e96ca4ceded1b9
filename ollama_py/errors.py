"""The exception tree of ollama-py. Handlers raise; one table in server/errors.py maps to HTTP. Every class is
drawn, with the module it lives in where that is not this one (they subclass from here, so the mapping holds).

    OllamaError(message)                      status 500 unless a subclass says otherwise
    ├── BadRequest                            400  {"error": "..."}
    │   ├── InvalidModelName                  400  "invalid model name"
    │   ├── InvalidOption                     400  option "x" must be of type ...
    │   ├── DigestMismatch                    400  digest mismatch, expected ..., got ...
    │   ├── ModelfileError(line, msg)         400  "(line N): msg"
    │   ├── ContextExceeded(n_prompt, n_ctx)  400  the runner's "request (N tokens) exceeds the available context"
    │   └── TemplateError                     400  a template we cannot render, naming the construct
    ├── Forbidden                             403
    │   └── CloudDisabled(operation)          403  ollama cloud is disabled: remote model is unavailable
    ├── NotFound                              404
    │   └── ModelNotFound(name)               404  model 'x' not found
    ├── RequestCanceled                       499  request canceled
    ├── ServerBusy                            503  server busy, please try again.  maximum pending requests exceeded
    │                                              (429 on /v1; Retry-After on both: server/errors.py)
    ├── InsufficientMemory                    500  model requires more system memory (X) than is available (Y)
    ├── ConfigError(path, line, msg)          500  "path:line: msg" (the config file; the CLI prints it)
    ├── StoreLocked           store/lock.py   500  another serve holds this model store
    ├── InvalidManifest       store/manifests.py  500  a manifest file we cannot read (the store is wrong)
    ├── ServerUnreachable     client/client.py    (client side, also a ConnectionError) nothing answers at the host
    ├── RunnerError                           500  the runner failed (carries the stderr tail)
    │   ├── RunnerLoadError                   500  error loading model ...
    │   ├── UpstreamLost      runner/sse.py   500  the connection to llama-server broke mid-request
    │   └── RunnerStalled     runner/sse.py   500  llama-server sent nothing for read_timeout mid-request
    └── RegistryError                         500  a registry said no (Unauthorized is 401)
        ├── Unauthorized                      401  unauthorized: access denied
        ├── TransportError    store/registry.py   the registry could not be reached (retried)
        └── RegistryStatusError(msg, code)  store/registry.py   the registry answered with an error status
"""

from __future__ import annotations


class OllamaError(Exception):
    status = 500

    def __init__(self, message: str = "", *, status: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status

    def __str__(self) -> str:
        return self.message


class BadRequest(OllamaError):
    status = 400


class InvalidModelName(BadRequest):
    def __init__(self, message: str = "invalid model name") -> None:
        super().__init__(message)


class InvalidOption(BadRequest):
    pass


class DigestMismatch(BadRequest):
    pass


class ModelfileError(BadRequest):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"(line {line}): {message}" if line else message)
        self.line = line
        self.reason = message


class TemplateError(BadRequest):
    pass


class ContextExceeded(BadRequest):
    """llama-server refused a prompt longer than a slot's context; the gateway truncates and retries, or refuses."""

    def __init__(self, message: str, n_prompt_tokens: int, n_ctx: int) -> None:
        super().__init__(message)
        self.n_prompt_tokens = n_prompt_tokens
        self.n_ctx = n_ctx


class Forbidden(OllamaError):
    status = 403


class CloudDisabled(Forbidden):
    """A cloud model (`name:cloud`, or a stored stub that points at a remote host): ollama-py runs models here
    only, and answers as an Ollama whose cloud is disabled does. `operation` is what is unavailable. `bare`: the
    name itself asked for the cloud, which Ollama refuses before any protocol's translation, so the answer is its
    plain {"error": "..."} on the OpenAI and Anthropic routes too (a stub is found later, and answered in the
    route's envelope)."""

    def __init__(self, operation: str, *, bare: bool = False) -> None:
        super().__init__(f"ollama cloud is disabled: {operation}")
        self.bare = bare


REMOTE_INFERENCE = "remote model is unavailable"  # Ollama's operations, in its 403s
REMOTE_DETAILS = "remote model details are unavailable"


class NotFound(OllamaError):
    status = 404


class ModelNotFound(NotFound):
    def __init__(self, name: str, message: str | None = None) -> None:
        super().__init__(message or f"model '{name}' not found")
        self.name = name


class RequestCanceled(OllamaError):
    status = 499

    def __init__(self, message: str = "request canceled") -> None:
        super().__init__(message)


class ServerBusy(OllamaError):
    status = 503

    def __init__(self, message: str = "server busy, please try again.  maximum pending requests exceeded") -> None:
        super().__init__(message)


class ConfigError(OllamaError):
    """A mistake in the config file (or a `--set` flag): names the file and the line of the offending key."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")
        self.path = path
        self.line = line
        self.reason = message


class InsufficientMemory(OllamaError):
    """A model that does not fit even with every other runner unloaded (Ollama's wording and status)."""


class RunnerError(OllamaError):
    status = 500


class RunnerLoadError(RunnerError):
    pass


class RegistryError(OllamaError):
    status = 500


class Unauthorized(RegistryError):
    status = 401

    def __init__(self, message: str = "unauthorized: access denied") -> None:
        super().__init__(message)
