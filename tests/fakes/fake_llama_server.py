"""A llama-server look-alike for fast, deterministic gateway tests (stdlib + aiohttp only).

Run it like the real binary: `python tests/fakes/fake_llama_server.py --model X --port N [llama-server flags]`;
`fake_command()` gives the argv prefix. Flags the gateway passes are parsed, unknown ones are skipped (with a
following non-dash value). Shapes, field names, status codes and error texts follow the llama.cpp build we pin
(llama-cpp-python 0.3.36's vendored tools/server).

Behaviour comes from the environment, so the gateway's argv stays the real one:
  FAKE_LOAD_SECONDS=F        /health answers 503 "Loading model" for F seconds, then 200 {"status":"ok"}
  FAKE_LOAD_STEPS=N          load progress reports during those F seconds (default 4; see "router child" below)
  FAKE_WARMUP_SECONDS=F      after the weights, "warming up the model" is logged and lasts F seconds (default 0)
  FAKE_LOAD_FAIL=MSG         after the load delay log MSG as an error, then llama-server's own "failed to load
                             model ... exiting due to model loading error" lines, and exit FAKE_EXIT_CODE (default 1)
  FAKE_CRASH_AFTER_TOKENS=N  die abruptly (os._exit) right after the N-th generated token of the process's life
  FAKE_CRASH_LINES=TEXT      what it writes to stderr (as is) as it crashes (default: a GGML_ASSERT line)
  FAKE_EXIT_CODE=C           exit status for the two above; a negative C kills the process with signal -C
  FAKE_IGNORE_SIGTERM=1      ignore SIGTERM (otherwise SIGTERM/SIGINT exit 0 at once)
  FAKE_TOKEN_DELAY=F         seconds before each generated token (default 0)
  FAKE_PROMPT_DELAY=F        seconds before the first generated token instead (prompt processing; default: as above)
  FAKE_CLOCK=steady          those delays on a fixed clock from the completion's start (a GPU's decode steps), not
                             counted from each token's write: a late wake-up is not added to every token after it
  FAKE_TOKENS=N              words the "model" says before its EOS token (default 8)
  FAKE_REPLY=TEXT            say TEXT (split like the tokenizer) instead of the default sentence
  FAKE_REPLY_SPLIT=SEP       split FAKE_REPLY at each SEP instead (SEP dropped): one token per part, so a test can
                             put a token boundary inside a word or a tag ("<tool|s are fun")
  FAKE_REPLY_WHEN=JSON       [[NEEDLE, TEXT], ...]: say the TEXT of the first NEEDLE found in the prompt (the
                             prompt's text), else FAKE_REPLY: a scripted agent turn -- call a tool, then answer once
                             the tool's result is in the prompt
  FAKE_CONTROL_TOKENS=JSON   ["<|channel|>", ...]: pieces the vocabulary holds as control tokens; as llama-server
                             does, a generated one adds no text unless the request's preserved_tokens names it
  FAKE_LOG_FILE=PATH         append each POSTed JSON request body as one line (exactly as received)
  FAKE_MODEL_MIB / FAKE_KV_MIB / FAKE_COMPUTE_MIB / FAKE_DEVICE   buffer sizes and device in the start-up log;
                             a GPU device (CUDA0, Vulkan0) also gets llama.cpp's host buffers of a full offload:
                             the token embeddings' CPU_Mapped model buffer and the <backend>_Host output and compute
                             buffers. FAKE_N_LAYERS=N: the model's layers as -ngl counts them (default 31)
  FAKE_EMBEDDING_DIM=N       embedding width (default 16)
  FAKE_ALLOCATE_MIB=N        each completion first allocates N MiB more (kept); when that fails (a memory limit) it
                             dies as llama-server does: "std::bad_alloc" on stderr, then SIGABRT
With --slot-save-path DIR, POST /slots/{id}?action=save|restore|erase {"filename"} save a slot's tokens to
DIR/filename (JSON), put them back, or clear them, answering as llama-server does (n_saved, n_restored, ...); a
file it cannot read is "Unable to restore slot: ..." (400).
With --reranking, /rerank (and /reranking, /v1/rerank, /v1/reranking) scores each document by the share of the
query's words it contains (rerank_score), best first, in llama-server's Jina shape.
As a llama-server router's child (LLAMA_SERVER_ROUTER_PORT set in its environment) it writes llama-server's
`cmd_child_to_router:state:{"state":"loading","payload":{"stages":["text_model"],"current":"text_model",
"value":F}}` lines to stdout while loading (0, N evenly spaced steps, 1), then `{"state":"ready",...}`; once
ready it exits when its stdin ends (status 1) or says `cmd_router_to_child:exit` (status 0).
As llama-server does, an API key from --api-key or LLAMA_API_KEY (comma-separated keys) is required on every
route but /health and /v1/health: `Authorization: Bearer KEY` (or `X-Api-Key`), else 401 "Invalid API Key".

The "model": tokens are whitespace-separated words, each carrying its leading whitespace (so detokenize
inverts tokenize); a string prompt gets one BOS token in front. It answers with the words of
GENERATED_SENTENCE (cycling, the first without a leading space) for FAKE_TOKENS tokens and then samples EOS,
which -- as in llama-server -- counts in tokens_predicted but adds no text. So with the defaults a request
without n_predict gets "The quick brown fox jumps over the lazy", tokens_predicted 9, stop_type "eos".
"model" in results is the --model path (or --alias), as llama-server reports it.
Prompt caching is simulated per slot: cache_n is the common token prefix with what the slot last held
(prompt + generated), capped so at least one prompt token is evaluated; prompt_n = tokens_evaluated - cache_n.
The slot's context, as llama-server: a prompt of n_ctx tokens or more is refused (exceed_context_size_error); an
answer that fills the slot stops there (stop_type "limit", truncated) or, with --context-shift, drops half of what
follows n_keep (the request's, else --keep; -1: the whole prompt) and goes on, reporting truncated: true.

`GET /fake/connections` (the fake's own, for tests) answers {"accepted": N, "open_peak": M}: the connections
that carried a request so far, and the most of them open at once.

Logs go to stderr in llama.cpp's format, `M.SS.mmm.uuu L message` (--no-log-prefix / --no-log-timestamps
honoured). As with the pinned build, the default verbosity shows only the server's lines ("srv  llama_server:
listening on http://HOST:PORT", slot launch/release, errors); libllama's load details -- "load_tensors:
CPU_Mapped model buffer size = ...", "llama_kv_cache: ... KV buffer size", "sched_reserve: ... compute buffer
size", "offloaded N/M layers" -- appear only with -lv 4 or higher (or -v).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import math
import mmap
import os
import re
import signal
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

GENERATED_SENTENCE = "The quick brown fox jumps over the lazy dog"
BOS_ID, EOS_ID = 1, 2
N_VOCAB = 32000  # the vocabulary size /v1/models reports; /detokenize of an id past it fails as llama-server's does
BUILD_INFO = "b1-fake"
HOST_EMBEDDINGS_MIB = 28.69  # SmolLM2-135M's token embeddings, kept in host memory on a full offload
CHATML_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' "
    "+ '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_ERROR_CODES = {"invalid_request_error": 400, "not_found_error": 404, "server_error": 500,
                "not_supported_error": 501, "unavailable_error": 503, "authentication_error": 401,
                "exceed_context_size_error": 400}


def fake_command(python: str = sys.executable) -> list[str]:
    """The argv prefix that runs this fake; llama-server flags go after it."""
    return [python, str(Path(__file__).resolve())]


# -- command line and environment ------------------------------------------------------------------------------

_VALUE_FLAGS = {
    "-m": "model", "--model": "model", "--host": "host", "--port": "port", "-c": "ctx_size", "--ctx-size": "ctx_size",
    "-np": "parallel", "--parallel": "parallel", "-a": "alias", "--alias": "alias", "--pooling": "pooling",
    "-ngl": "n_gpu_layers", "--n-gpu-layers": "n_gpu_layers", "--gpu-layers": "n_gpu_layers",
    "-t": "threads", "--threads": "threads", "--embd-normalize": "embd_normalize",
    "-lv": "verbosity", "--verbosity": "verbosity", "--log-verbosity": "verbosity",
    "-mm": "mmproj", "--mmproj": "mmproj", "--api-key": "api_key", "--slot-save-path": "slot_save_path",
    "--keep": "keep",
}
# Flags that take a value we do not use; listed so a value such as "-1" is never mistaken for a flag.
_IGNORED_VALUE_FLAGS = set(
    "-b --batch-size -ub --ubatch-size -tb --threads-batch -fa --flash-attn -ctk --cache-type-k -ctv --cache-type-v "
    "--lora --lora-scaled -mm --mmproj --rpc -ts --tensor-split -mg --main-gpu -sm --split-mode -fit --fit "
    "-fitt --fit-target -fitc --fit-ctx -n --predict --n-predict -lm --load-mode --spec-type --spec-draft-n-max "
    "--spec-draft-model -md --chat-template --chat-template-file --reasoning-format -rea --reasoning "
    "--reasoning-budget -to --timeout --threads-http -dev --device -ot --override-tensor -s --seed "
    "--temp --top-k --top-p --min-p --repeat-penalty --log-file -lv --verbosity --cache-reuse -cram "
    "--cache-ram --sleep-idle-seconds --sse-ping-interval --numa --override-kv --mmproj-url -mmu --log-colors"
    .split()
)
_BOOL_FLAGS = {
    "--embedding": "embedding", "--embeddings": "embedding", "--rerank": "rerank", "--reranking": "rerank",
    "--metrics": "metrics", "--log-disable": "log_disable",
    "-kvu": "kv_unified", "--kv-unified": "kv_unified", "--context-shift": "context_shift",
}
_NEGATED_FLAGS = {"--no-kv-unified": "kv_unified", "-no-kvu": "kv_unified", "--no-log-prefix": "log_prefix",
                  "--no-log-timestamps": "log_timestamps"}
_SWITCHES = {*_BOOL_FLAGS, *_NEGATED_FLAGS, "-v", "--verbose", "--log-verbose", "--list-devices", "--version"}
_NUMBER = re.compile(r"-?\d+(\.\d+)?$")


@dataclass(frozen=True, slots=True)
class ServerArgs:
    model: str = ""
    host: str = "127.0.0.1"
    port: int = 8080
    ctx_size: int = 0
    parallel: int = -1
    alias: str = ""
    pooling: str = "mean"
    n_gpu_layers: str = "auto"
    threads: int = -1
    embd_normalize: int = 2
    embedding: bool = False
    rerank: bool = False  # --reranking: embeddings with pooling rank, and /rerank answers
    metrics: bool = False
    log_disable: bool = False
    verbosity: int = 3  # -lv; llama-server shows libllama's load details (buffer sizes...) only from 4 up
    log_prefix: bool = True
    log_timestamps: bool = True
    kv_unified: bool = False
    context_shift: bool = False
    keep: int = 0  # --keep: tokens of the prompt a context shift keeps (-1: all)
    mmproj: str = ""  # a projector: the "model" then takes images (each becomes IMAGE_TOKENS tokens)
    list_devices: bool = False
    version: bool = False
    api_key: str = ""  # --api-key (LLAMA_API_KEY when not given)
    slot_save_path: str = ""  # --slot-save-path: POST /slots/{id}?action=save|restore works there


def parse_args(argv: list[str]) -> ServerArgs:
    """llama-server's command line, keeping what the fake uses. Unknown flags are skipped with a following value."""
    values: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        arg, inline = argv[i], None
        if arg.startswith("--") and "=" in arg:
            arg, inline = arg.split("=", 1)
        takes_value = arg in _VALUE_FLAGS or arg in _IGNORED_VALUE_FLAGS
        if not takes_value and arg not in _SWITCHES and inline is None and i + 1 < len(argv):
            nxt = argv[i + 1]
            takes_value = not nxt.startswith("-") or bool(_NUMBER.match(nxt))  # unknown flag: swallow its value
        value = inline
        if takes_value and value is None and i + 1 < len(argv):
            value, i = argv[i + 1], i + 1
        i += 1
        if arg in _VALUE_FLAGS and value is not None:
            values[_VALUE_FLAGS[arg]] = value
        elif arg in _BOOL_FLAGS:
            values[_BOOL_FLAGS[arg]] = True
        elif arg in _NEGATED_FLAGS:
            values[_NEGATED_FLAGS[arg]] = False
        elif arg in ("-v", "--verbose", "--log-verbose"):
            values["verbosity"] = 99
        elif arg == "--list-devices":
            values["list_devices"] = True
        elif arg == "--version":
            values["version"] = True
    ints = {"port", "ctx_size", "parallel", "threads", "embd_normalize", "verbosity", "keep"}
    return ServerArgs(**{k: int(v) if k in ints else v for k, v in values.items()})


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    return float(raw) if raw else default


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw else default


@dataclass(frozen=True, slots=True)
class Behaviour:
    load_seconds: float = 0.0
    load_fail: str = ""
    exit_code: int = 1
    crash_after_tokens: int = 0
    ignore_sigterm: bool = False
    token_delay: float = 0.0
    prompt_delay: float | None = None  # before the first token; None: token_delay
    tokens: int = 8
    reply: str = ""
    reply_split: str = ""
    reply_when: tuple[tuple[str, str], ...] = ()
    control_tokens: frozenset[str] = frozenset()
    log_file: str = ""
    model_mib: float = 98.0
    kv_mib: float = 45.0
    compute_mib: float = 52.0
    device: str = "CPU"
    embedding_dim: int = 16
    load_steps: int = 4
    warmup_seconds: float = 0.0
    allocate_mib: int = 0
    steady: bool = False  # tokens on a fixed clock (a GPU's decode step), not one token_delay after the last write

    @classmethod
    def from_env(cls) -> Behaviour:
        return cls(
            load_seconds=_env_float("FAKE_LOAD_SECONDS", 0.0), load_fail=os.environ.get("FAKE_LOAD_FAIL", ""),
            exit_code=_env_int("FAKE_EXIT_CODE", 1), crash_after_tokens=_env_int("FAKE_CRASH_AFTER_TOKENS", 0),
            ignore_sigterm=os.environ.get("FAKE_IGNORE_SIGTERM", "") not in ("", "0"),
            token_delay=_env_float("FAKE_TOKEN_DELAY", 0.0), tokens=_env_int("FAKE_TOKENS", 8),
            prompt_delay=_env_float("FAKE_PROMPT_DELAY", 0.0) if os.environ.get("FAKE_PROMPT_DELAY") else None,
            reply=os.environ.get("FAKE_REPLY", ""), reply_split=os.environ.get("FAKE_REPLY_SPLIT", ""),
            reply_when=tuple((str(n), str(t)) for n, t in json.loads(os.environ.get("FAKE_REPLY_WHEN") or "[]")),
            log_file=os.environ.get("FAKE_LOG_FILE", ""),
            control_tokens=frozenset(json.loads(os.environ.get("FAKE_CONTROL_TOKENS") or "[]")),
            model_mib=_env_float("FAKE_MODEL_MIB", 98.0), kv_mib=_env_float("FAKE_KV_MIB", 45.0),
            compute_mib=_env_float("FAKE_COMPUTE_MIB", 52.0), device=os.environ.get("FAKE_DEVICE", "") or "CPU",
            embedding_dim=_env_int("FAKE_EMBEDDING_DIM", 16), load_steps=_env_int("FAKE_LOAD_STEPS", 4),
            warmup_seconds=_env_float("FAKE_WARMUP_SECONDS", 0.0), allocate_mib=_env_int("FAKE_ALLOCATE_MIB", 0),
            steady=os.environ.get("FAKE_CLOCK", "") == "steady",
        )


class StderrLog:
    """llama.cpp's common log: `M.SS.mmm.uuu L msg` on stderr, filtered by verbosity (-lv)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.verbosity, self.prefix, self.timestamps, self.disabled = 3, True, True, False

    def configure(self, args: ServerArgs) -> None:
        self.verbosity, self.prefix, self.timestamps = args.verbosity, args.log_prefix, args.log_timestamps
        self.disabled = args.log_disable

    def __call__(self, msg: str, level: str = "I", verbosity: int = 3) -> None:
        if self.disabled or (level == "I" and verbosity > self.verbosity):
            return
        head = ""
        if self.prefix:
            us = int((time.monotonic() - self.t0) * 1e6)
            stamp = f"{us // 60_000_000}.{us // 1_000_000 % 60:02d}.{us // 1000 % 1000:03d}.{us % 1000:03d} "
            head = (stamp if self.timestamps else "") + level + " "
        sys.stderr.write(head + msg + "\n")
        sys.stderr.flush()


_log = StderrLog()
_DETAIL = 4  # verbosity of libllama's own lines (model loader, buffer sizes)


def _die(code: int) -> None:
    """Exit at once, no cleanup: a negative code means 'killed by signal -code', like a crashed runner."""
    sys.stderr.flush()
    if code < 0:
        os.kill(os.getpid(), -code)
        time.sleep(1)
    os._exit(code if code >= 0 else 128 - code)


# -- the "model": tokenizer, generation and embeddings -----------------------------------------------------------

_PIECE = re.compile(r"\s*\S+|\s+")


class Vocab:
    """Word-piece ids handed out on first sight; the generated words are registered first so their ids are fixed."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._pieces: dict[int, str] = {BOS_ID: "<s>", EOS_ID: "</s>"}
        for i, _ in enumerate(GENERATED_SENTENCE.split() * 2):
            self.id_of(generated_piece(i, GENERATED_SENTENCE.split()))

    def id_of(self, piece: str) -> int:
        if piece not in self._ids:
            new = 100 + len(self._ids)
            self._ids[piece], self._pieces[new] = new, piece
        return self._ids[piece]

    def encode(self, text: str) -> list[int]:
        return [self.id_of(p) for p in _PIECE.findall(text)]

    def piece(self, token: int, special: bool = True) -> str:
        if token in (BOS_ID, EOS_ID) and not special:
            return ""
        return self._pieces.get(token, f" <unk{token}>")

    def decode(self, tokens: list[int], special: bool = False) -> str:
        return "".join(self.piece(t, special) for t in tokens)

    def tokenize_prompt(self, prompt: Any, add_bos: bool = True) -> list[int]:
        """A prompt as llama-server takes it: a string, token ids, or a mix; BOS when it starts with text."""
        if isinstance(prompt, str):
            return ([BOS_ID] if add_bos else []) + self.encode(prompt)
        if not isinstance(prompt, list):
            raise ValueError("\"prompt\" must be a string, or an array of strings and token ids")
        tokens = [BOS_ID] if add_bos and prompt and isinstance(prompt[0], str) else []
        for part in prompt:
            if isinstance(part, bool) or not isinstance(part, (int, str)):
                raise ValueError("\"prompt\" elements must be strings or token ids")
            tokens.extend(self.encode(part) if isinstance(part, str) else [part])
        return tokens


IMAGE_TOKENS = 4


def media_prompt(prompt: dict[str, Any], has_projector: bool) -> str:
    """{"prompt_string", "multimodal_data"} as llama-server (mtmd) takes it: one media marker
    (LLAMA_MEDIA_MARKER) per image, in order; each image stands for IMAGE_TOKENS tokens of the prompt."""
    text = prompt.get("prompt_string")
    if not isinstance(text, str):
        raise RequestError('"prompt" elements must be a string, a list of tokens, a JSON object containing a '
                           "prompt string, or a list of mixed strings & tokens.")
    images = prompt.get("multimodal_data")
    if images is None:
        return text
    if not has_projector:
        raise RequestError("Multimodal data provided, but model does not support multimodal requests.")
    marker = os.environ.get("LLAMA_MEDIA_MARKER") or "<__media__>"
    if text.count(marker) != len(images):
        raise RequestError(f"number of bitmaps ({len(images)}) does not match number of markers "
                           f"({text.count(marker)})")
    for image in images:
        try:
            base64.b64decode(image, validate=True)
        except ValueError:
            raise RequestError("Failed to load image or audio file") from None
    return text.replace(marker, " <image>" * IMAGE_TOKENS)


def generated_piece(i: int, words: list[str]) -> str:
    return ("" if i == 0 else " ") + words[i % len(words)]


def embedding_vector(text: str, dim: int) -> list[float]:
    digest = hashlib.shake_256(text.encode("utf-8")).digest(dim)
    return [round((b - 127.5) / 127.5, 6) for b in digest]


def normalize(vec: list[float], kind: int) -> list[float]:
    """common_embd_normalize: -1 none, 0 max-abs scaled to int16, 1 taxicab, 2 euclidean, >2 p-norm."""
    if kind < 0:
        return vec
    if kind == 0:
        total = max(abs(v) for v in vec) / 32760.0
    elif kind == 2:
        total = math.sqrt(sum(v * v for v in vec))
    else:
        total = sum(abs(v) ** kind for v in vec) ** (1.0 / kind)
    return [v / total if total > 0 else 0.0 for v in vec]


def render_chatml(messages: list[dict[str, Any]]) -> str:
    """ChatML, with the assistant turn opened; a trailing assistant message is continued (prefill)."""
    out = []
    for i, msg in enumerate(messages):
        content = msg.get("content") or ""
        if isinstance(content, list):
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        turn = f"<|im_start|>{msg.get('role', 'user')}\n{content}"
        prefill = i == len(messages) - 1 and msg.get("role") == "assistant"
        out.append(turn if prefill else turn + "<|im_end|>\n")
    if not messages or messages[-1].get("role") != "assistant":
        out.append("<|im_start|>assistant\n")
    return "".join(out)


# -- slots ----------------------------------------------------------------------------------------------------------

@dataclass(slots=True)
class Slot:
    id: int
    n_ctx: int
    busy: bool = False
    cache: list[int] = field(default_factory=list)  # what the KV cache holds: last prompt + generated tokens
    id_task: int = -1
    n_prompt: int = 0
    n_processed: int = 0
    n_cached: int = 0
    n_decoded: int = 0
    n_remain: int = -1
    last_used: float = 0.0


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class SlotPool:
    """-np slots; a request waits until a slot (or the one it names with id_slot) is idle."""

    def __init__(self, n_slots: int, n_ctx: int) -> None:
        self.slots = [Slot(i, n_ctx) for i in range(n_slots)]
        self.deferred = 0
        self._changed = asyncio.Condition()

    def _pick(self, tokens: list[int], id_slot: int) -> Slot | None:
        if 0 <= id_slot < len(self.slots):
            return None if self.slots[id_slot].busy else self.slots[id_slot]
        idle = [s for s in self.slots if not s.busy]
        if not idle:
            return None
        # Like llama-server: the slot whose cache shares the most with the prompt, else the least recently used.
        best = max(idle, key=lambda s: common_prefix(s.cache, tokens))
        if tokens and common_prefix(best.cache, tokens) / len(tokens) > 0.1:
            return best
        return min(idle, key=lambda s: s.last_used)

    async def acquire(self, tokens: list[int], id_slot: int = -1) -> Slot:
        async with self._changed:
            slot = self._pick(tokens, id_slot)
            if slot is None:
                self.deferred += 1
                try:
                    while (slot := self._pick(tokens, id_slot)) is None:
                        await self._changed.wait()
                finally:
                    self.deferred -= 1
            slot.busy = True
            return slot

    async def release(self, slot: Slot) -> None:
        async with self._changed:
            slot.busy = False
            slot.last_used = time.monotonic()
            self._changed.notify_all()

    @property
    def n_busy(self) -> int:
        return sum(s.busy for s in self.slots)


# -- server state -------------------------------------------------------------------------------------------------

@dataclass(slots=True)
class Metrics:
    prompt_tokens: int = 0
    prompt_cached: int = 0
    prompt_seconds: float = 0.0
    predicted_tokens: int = 0
    predicted_seconds: float = 0.0
    n_decode: int = 0
    n_tokens_max: int = 0


class FakeServer:
    """Everything one fake llama-server process knows: its flags, behaviour, vocabulary, slots and counters."""

    def __init__(self, args: ServerArgs, behaviour: Behaviour) -> None:
        self.args, self.behaviour = args, behaviour
        self.ready = False
        self.vocab = Vocab()
        self.n_parallel = args.parallel if args.parallel > 0 else 4
        self.unified = unified = args.kv_unified or args.parallel <= 0  # -np auto: 4 slots sharing one KV cache
        # llama.cpp pads the context, and each slot's share of it, up to a multiple of 256.
        self.n_ctx = _pad256(args.ctx_size if args.ctx_size > 0 else 4096)
        per_slot = self.n_ctx if unified else _pad256(self.n_ctx // self.n_parallel)
        self.slots = SlotPool(self.n_parallel, per_slot)
        self.metrics = Metrics()
        self.model_name = args.alias or args.model  # what llama-server reports as "model" without --alias
        self.tokens_generated = 0  # over the process's life, for FAKE_CRASH_AFTER_TOKENS
        self.connections: dict[int, asyncio.BaseTransport] = {}  # id -> open connections that carried a request
        self.accepted = self.open_peak = 0
        self.next_task = -1
        self.t_start = int(time.time())

    def reply_for(self, prompt: list[int]) -> str:
        """What the model says to this prompt: FAKE_REPLY_WHEN's first match, else FAKE_REPLY."""
        text = self.vocab.decode(prompt)
        return next((reply for needle, reply in self.behaviour.reply_when if needle in text), self.behaviour.reply)

    def reply_piece(self, i: int, reply: str | None = None) -> str | None:
        """The i-th generated piece of `reply` (FAKE_REPLY when not given), or None where the model samples EOS."""
        reply = self.behaviour.reply if reply is None else reply
        if reply:
            split = self.behaviour.reply_split
            pieces = reply.split(split) if split else _PIECE.findall(reply)
            return pieces[i] if i < len(pieces) else None
        return generated_piece(i, GENERATED_SENTENCE.split()) if i < self.behaviour.tokens else None

    def token_generated(self) -> None:
        """Count a token leaving the process; crash right after the configured one."""
        self.tokens_generated += 1
        n = self.behaviour.crash_after_tokens
        if n and self.tokens_generated >= n:
            sys.stderr.write(os.environ.get("FAKE_CRASH_LINES")
                             or f"ggml/src/ggml.c:1: GGML_ASSERT(fake crash after {n} tokens) failed\n")
            _die(self.behaviour.exit_code)

    def count_connection(self, transport: asyncio.BaseTransport | None) -> None:
        """For GET /fake/connections: a request's connection, counted once however many requests it carries."""
        if transport is None or self.connections.get(id(transport)) is transport:
            return
        self.connections = {k: t for k, t in self.connections.items() if not t.is_closing()}
        self.connections[id(transport)] = transport
        self.accepted += 1
        self.open_peak = max(self.open_peak, len(self.connections))

    def record_body(self, body: Any) -> None:
        if self.behaviour.log_file:
            with open(self.behaviour.log_file, "a", encoding="utf-8") as f:
                f.write(json.dumps(body, ensure_ascii=False) + "\n")


def _pad256(n: int) -> int:
    return -(-n // 256) * 256


STATE = web.AppKey("state", FakeServer)
API_KEYS = web.AppKey("api_keys", frozenset)
PUBLIC_PATHS = frozenset({"/health", "/v1/health"})


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def error_response(message: str, type_: str, **extra: Any) -> web.Response:
    code = _ERROR_CODES[type_]
    body = {"error": {"code": code, "message": message, "type": type_, **extra}}
    return web.Response(status=code, text=_dumps(body), content_type="application/json", charset="utf-8")


def json_ok(obj: Any) -> web.Response:
    return web.Response(text=_dumps(obj), content_type="application/json", charset="utf-8")


class RequestError(Exception):
    def __init__(self, message: str, type_: str = "invalid_request_error", **extra: Any) -> None:
        super().__init__(message)
        self.type, self.extra = type_, extra


@web.middleware
async def _middleware(request: web.Request, handler: Callable) -> web.StreamResponse:
    state = request.app[STATE]
    state.count_connection(request.transport)
    if not state.ready:
        return error_response("Loading model", "unavailable_error")
    keys = request.app[API_KEYS]
    if keys and request.path not in PUBLIC_PATHS:
        given = request.headers.get("Authorization") or request.headers.get("X-Api-Key", "")
        if given.removeprefix("Bearer ") not in keys:
            return error_response("Invalid API Key", "authentication_error")
    try:
        return await handler(request)
    except RequestError as e:
        return error_response(str(e), e.type, **e.extra)
    except web.HTTPNotFound:
        return error_response("File Not Found", "not_found_error")


async def read_body(request: web.Request) -> dict[str, Any]:
    raw = await request.text()
    try:
        body = json.loads(raw)
    except ValueError as e:
        raise RequestError(f"[json.exception.parse_error.101] parse error: {e}", "server_error") from None
    request.app[STATE].record_body(body)
    if not isinstance(body, dict):
        raise RequestError("[json.exception.type_error.305] cannot use operator[] with a string argument",
                           "server_error")
    return body


def client_gone(request: web.Request) -> bool:
    return request.transport is None or request.transport.is_closing()


# -- completions ------------------------------------------------------------------------------------------------------

@dataclass(slots=True)
class Step:
    text: str  # what this token adds to the visible text (held back while it may start a stop word)
    token: int
    n_decoded: int


@dataclass(slots=True)
class Completion:
    """One generation on one slot; the engine fills it while it runs, formatters read it."""

    server: FakeServer
    slot: Slot
    prompt: list[int]
    body: dict[str, Any]
    n_predict: int
    stops: list[str]
    stream: bool
    cache_n: int = 0
    text: str = ""
    sent: int = 0
    tokens: list[int] = field(default_factory=list)
    n_decoded: int = 0
    stop_type: str = "none"
    stopping_word: str = ""
    truncated: bool = False
    discarded: int = 0  # tokens context shifts dropped from the slot
    aborted: bool = False
    t_start: float = 0.0
    t_prompt: float = 0.0
    t_end: float = 0.0
    id: str = ""
    reply: str | None = None  # what the model says (FAKE_REPLY_WHEN / FAKE_REPLY); None: FAKE_REPLY

    def _scan(self, is_eos: bool) -> str:
        """llama-server's stop-word handling: cut at a full match, hold back a possible partial one."""
        tail = self.text[self.sent:]
        hits = [(tail.find(w), w) for w in self.stops if w and w in tail]
        if hits:
            pos, word = min(hits)
            self.text = self.text[: self.sent + pos]
            self.stop_type, self.stopping_word = "word", word
        elif not is_eos and any(tail.endswith(w[:k]) for w in self.stops for k in range(1, len(w))):
            return ""
        out = self.text[self.sent:]
        self.sent += len(out)
        return out

    async def run(self, request: web.Request) -> AsyncIterator[Step]:
        b = self.server.behaviour
        self.t_start = self.t_prompt = time.monotonic()
        ignore_eos = bool(self.body.get("ignore_eos", False))
        due = self.t_start
        while self.stop_type == "none":
            if self.n_predict >= 0 and self.n_decoded >= self.n_predict:
                self.stop_type = "limit"
                break
            if len(self.prompt) + self.n_decoded - self.discarded >= self.slot.n_ctx:
                if not self.server.args.context_shift:
                    self.stop_type, self.truncated = "limit", True
                    break
                self._shift()
            delay = b.prompt_delay if self.n_decoded == 0 and b.prompt_delay is not None else b.token_delay
            if b.steady:
                # The next step is due one delay after the last was due; a writer or a wake-up that ran late does
                # not push the clock back, and a stall longer than a step is not made up in a burst.
                now = time.monotonic()
                due = max(due + delay, now)
                delay = due - now
            if await self._wait(request, delay):
                self.aborted = True
                return
            if self.n_decoded == 0:
                self.t_prompt = time.monotonic()  # the first token comes out of prompt processing
            piece = self.server.reply_piece(self.n_decoded, self.reply)
            if piece is None and ignore_eos:
                piece = generated_piece(self.n_decoded, GENERATED_SENTENCE.split())
            token = EOS_ID if piece is None else self.server.vocab.id_of(piece)
            self.n_decoded += 1
            self.slot.n_decoded = self.n_decoded
            self.tokens.append(token)
            if piece in b.control_tokens and piece not in (self.body.get("preserved_tokens") or ()):
                piece = ""  # a control token: sampled, not printed
            self.text += piece or ""
            if piece is None:
                self.stop_type = "eos"
            yield Step(self._scan(piece is None), token, self.n_decoded)
        self.t_end = time.monotonic()

    def _shift(self) -> None:
        """llama-server's context shift (--context-shift): keep n_keep tokens (-1: the whole prompt; +1 for BOS,
        at most n_ctx - 4), drop half of the rest, go on; the answer says `truncated`."""
        n_keep = int(self.body.get("n_keep", self.server.args.keep))
        n_keep = min(self.slot.n_ctx - 4, (len(self.prompt) if n_keep < 0 else n_keep) + 1)
        n_left = len(self.prompt) + self.n_decoded - self.discarded - n_keep
        n_discard = max(0, min(n_left // 2, n_left - 1))
        self.discarded += n_discard
        self.truncated = True
        _log(f"slot update_slots: id {self.slot.id:2d} | task {self.slot.id_task} | slot context shift, "
             f"n_keep = {n_keep}, n_left = {n_left}, n_discard = {n_discard}", "W")

    @staticmethod
    async def _wait(request: web.Request, delay: float) -> bool:
        """Sleep before a token, noticing a client that went away meanwhile (its slot is freed at once)."""
        deadline = time.monotonic() + delay
        while True:
            if client_gone(request):
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await asyncio.sleep(min(left, 0.02))

    # -- result pieces shared by the formatters --
    def timings(self) -> dict[str, Any]:
        prompt_ms = max((self.t_prompt - self.t_start) * 1e3, 1e-3)
        predicted_ms = max(((self.t_end or time.monotonic()) - self.t_prompt) * 1e3, 1e-3)
        prompt_n, predicted_n = len(self.prompt) - self.cache_n, self.n_decoded
        return {
            "cache_n": self.cache_n, "prompt_n": prompt_n, "prompt_ms": prompt_ms,
            "prompt_per_token_ms": prompt_ms / max(prompt_n, 1), "prompt_per_second": 1e3 * prompt_n / prompt_ms,
            "predicted_n": predicted_n, "predicted_ms": predicted_ms,
            "predicted_per_token_ms": predicted_ms / max(predicted_n, 1),
            "predicted_per_second": 1e3 * predicted_n / predicted_ms,
        }

    def usage(self) -> dict[str, Any]:
        n_prompt = len(self.prompt)
        return {"completion_tokens": self.n_decoded, "prompt_tokens": n_prompt,
                "total_tokens": self.n_decoded + n_prompt, "prompt_tokens_details": {"cached_tokens": self.cache_n}}

    @property
    def n_probs(self) -> int:
        n = self.body.get("n_probs", 0)
        return n if isinstance(n, int) and not isinstance(n, bool) else 0

    def finish_reason(self) -> str:
        return "stop" if self.stop_type in ("eos", "word") else "length"

    def generation_settings(self) -> dict[str, Any]:
        b = self.body
        return {
            "n_predict": self.n_predict, "seed": b.get("seed", 4294967295), "temperature": b.get("temperature", 0.8),
            "top_k": b.get("top_k", 40), "top_p": b.get("top_p", 0.95), "min_p": b.get("min_p", 0.05),
            "repeat_penalty": b.get("repeat_penalty", 1.0), "stop": self.stops, "max_tokens": self.n_predict,
            "n_keep": b.get("n_keep", 0), "ignore_eos": b.get("ignore_eos", False), "stream": self.stream,
            "n_probs": b.get("n_probs", 0), "samplers": ["penalties", "dry", "top_k", "typ_p", "top_p", "min_p",
                                                          "xtc", "temperature"],
        }


def token_probability(c: Completion, token: int, n_decoded: int) -> dict[str, Any]:
    """llama-server's completion_probabilities entry for a generated token, asked for with `n_probs`: the token
    (text, UTF-8 bytes, logprob) and the n_probs most likely candidates, here the token itself first and then
    " alt1", " alt2", ... with made-up, deterministic, descending log-probabilities (all <= 0)."""
    vocab = c.server.vocab

    def entry(tok: int, logprob: float) -> dict[str, Any]:
        text = vocab.piece(tok, special=False)
        return {"id": tok, "token": text, "bytes": list(text.encode()), "logprob": logprob}

    chosen = -0.05 * (1 + n_decoded % 4)
    tops = [entry(token, chosen)] + [entry(vocab.id_of(f" alt{k}"), chosen - k) for k in range(1, c.n_probs)]
    return {**entry(token, chosen), "top_logprobs": tops}


def native_partial(c: Completion, step: Step) -> list[dict[str, Any]]:
    # The pinned llama-server leaves id_slot at -1 in partial results; only the final one names the slot.
    event = {"index": 0, "content": step.text, "tokens": [step.token], "stop": False, "id_slot": -1,
             "tokens_predicted": step.n_decoded, "tokens_evaluated": len(c.prompt)}
    if c.n_probs > 0:
        event["completion_probabilities"] = [token_probability(c, step.token, step.n_decoded)]
    return [event]


def native_final(c: Completion) -> dict[str, Any]:
    """The stop event; with `response_fields`, only those (llama-server applies them to this event alone, and
    leaves out a field it does not have)."""
    event = _native_final(c)
    fields = c.body.get("response_fields")
    return {k: event[k] for k in fields if k in event} if fields else event


def _native_final(c: Completion) -> dict[str, Any]:
    return_tokens = bool(c.body.get("return_tokens", False))
    return {
        "index": 0, "content": "" if c.stream else c.text,
        "tokens": [] if c.stream or not return_tokens else c.tokens, "id_slot": c.slot.id, "stop": True,
        "model": c.server.model_name, "tokens_predicted": c.n_decoded, "tokens_evaluated": len(c.prompt),
        "generation_settings": c.generation_settings(), "prompt": c.server.vocab.decode(c.prompt, special=True),
        "has_new_line": "\n" in c.text, "truncated": c.truncated, "stop_type": c.stop_type,
        "stopping_word": c.stopping_word, "tokens_cached": len(c.prompt) + c.n_decoded, "timings": c.timings(),
        # llama-server sends each token's probabilities with its partial when streaming, all of them here otherwise
        **({"completion_probabilities": [token_probability(c, t, i + 1) for i, t in enumerate(c.tokens)]}
           if c.n_probs > 0 and not c.stream else {}),
    }


def _oai_envelope(c: Completion, obj: str) -> dict[str, Any]:
    return {"created": int(time.time()), "model": c.server.model_name, "system_fingerprint": BUILD_INFO,
            "object": obj, "id": c.id}


def oai_cmpl_partial(c: Completion, step: Step) -> list[dict[str, Any]]:
    choice = {"text": step.text, "index": 0, "logprobs": None, "finish_reason": None}
    return [{"choices": [choice], **_oai_envelope(c, "text_completion")}]


def oai_cmpl_final(c: Completion) -> dict[str, Any]:
    choice = {"text": "" if c.stream else c.text, "index": 0, "logprobs": None, "finish_reason": c.finish_reason()}
    return {"choices": [choice], **_oai_envelope(c, "text_completion"), "usage": c.usage(), "timings": c.timings()}


def oai_chat_partial(c: Completion, step: Step) -> list[dict[str, Any]]:
    deltas: list[dict[str, Any]] = []
    if step.n_decoded == 1:
        deltas.append({"role": "assistant", "content": None})  # OpenAI opens the stream with the role
    if step.text:
        deltas.append({"content": step.text})
    return [{"choices": [{"finish_reason": None, "index": 0, "delta": d}], **_oai_envelope(c, "chat.completion.chunk")}
            for d in deltas]


def oai_chat_final(c: Completion) -> list[dict[str, Any]] | dict[str, Any]:
    if not c.stream:
        choice = {"finish_reason": c.finish_reason(), "index": 0,
                  "message": {"role": "assistant", "content": c.text}}
        return {"choices": [choice], **_oai_envelope(c, "chat.completion"), "usage": c.usage(),
                "timings": c.timings()}
    events = [{"choices": [{"finish_reason": c.finish_reason(), "index": 0, "delta": {}}],
               **_oai_envelope(c, "chat.completion.chunk")}]
    if (c.body.get("stream_options") or {}).get("include_usage"):
        events.append({"choices": [], **_oai_envelope(c, "chat.completion.chunk"), "usage": c.usage()})
    events[-1]["timings"] = c.timings()
    return events


@dataclass(frozen=True, slots=True)
class Flavour:
    partial: Callable[[Completion, Step], list[dict[str, Any]]]
    final: Callable[[Completion], Any]
    done_marker: bool  # OpenAI streams end with "data: [DONE]"


NATIVE = Flavour(native_partial, native_final, False)
OAI_CMPL = Flavour(oai_cmpl_partial, oai_cmpl_final, True)
OAI_CHAT = Flavour(oai_chat_partial, oai_chat_final, True)


def _stop_words(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


_HELD: list[mmap.mmap] = []  # FAKE_ALLOCATE_MIB's allocations, kept like a leak


def _allocate(state: FakeServer, mib: int) -> None:
    try:
        _HELD.append(mmap.mmap(-1, mib << 20))  # address space, never written: costs no memory without a limit
    except (MemoryError, OSError):
        _log("terminate called after throwing an instance of 'std::bad_alloc'", "E")
        _log("  what():  std::bad_alloc", "E")
        _die(-signal.SIGABRT)


async def serve_completion(request: web.Request, body: dict[str, Any], prompt: Any, flavour: Flavour,
                           ) -> web.StreamResponse:
    state = request.app[STATE]
    if state.behaviour.allocate_mib:
        _allocate(state, state.behaviour.allocate_mib)
    if isinstance(prompt, dict):
        prompt = media_prompt(prompt, bool(state.args.mmproj))
    try:
        tokens = state.vocab.tokenize_prompt(prompt)
    except ValueError as e:
        raise RequestError(str(e)) from None
    n_ctx = state.slots.slots[0].n_ctx
    if len(tokens) >= n_ctx:  # with or without --context-shift: it shifts answers, never prompts
        raise RequestError(f"request ({len(tokens)} tokens) exceeds the available context size ({n_ctx} tokens), "
                           "try increasing it", "exceed_context_size_error", n_prompt_tokens=len(tokens), n_ctx=n_ctx)
    n_predict = body.get("n_predict", body.get("max_completion_tokens", body.get("max_tokens", -1)))
    stream = bool(body.get("stream", False))
    id_slot = body.get("id_slot")
    slot = await state.slots.acquire(tokens, id_slot if isinstance(id_slot, int) else -1)
    c = Completion(state, slot, tokens, body, int(n_predict if n_predict is not None else -1),
                   _stop_words(body.get("stop")), stream)
    if state.behaviour.reply_when:
        c.reply = state.reply_for(tokens)
    try:
        state.next_task += 1
        slot.id_task, slot.n_prompt, slot.n_decoded, slot.n_remain = state.next_task, len(tokens), 0, c.n_predict
        c.id = "chatcmpl-" + hashlib.sha1(f"{os.getpid()}-{state.next_task}".encode()).hexdigest()[:32]
        if body.get("cache_prompt", True):
            c.cache_n = min(common_prefix(slot.cache, tokens), len(tokens) - 1)
        slot.n_cached, slot.n_processed = c.cache_n, len(tokens) - c.cache_n
        slot.cache = list(tokens)
        _log(f"slot launch_slot_: id {slot.id:2d} | task {slot.id_task} | processing task, is_child = 0")
        resp: web.StreamResponse | None = None
        if stream:
            # llama-server sends the headers when the slot starts, before the first token.
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Accel-Buffering": "no"})
            await resp.prepare(request)
            if body.get("return_progress") and flavour is NATIVE:
                await _write_progress(resp, c, slot.id, body)
        async for step in c.run(request):
            slot.cache.append(step.token)
            if resp is not None:
                try:
                    for event in flavour.partial(c, step):
                        await resp.write(f"data: {_dumps(event)}\n\n".encode())
                except ConnectionError:
                    c.aborted = True
                    break
            state.token_generated()
        if c.aborted:
            return resp or web.Response(status=499)
        _account(state, c)
        if resp is None:
            return json_ok(flavour.final(c))
        final = flavour.final(c)
        payload = "".join(f"data: {_dumps(e)}\n\n" for e in (final if isinstance(final, list) else [final]))
        if flavour.done_marker:
            payload += "data: [DONE]\n\n"
        try:
            await resp.write(payload.encode())
            await resp.write_eof()
        except ConnectionError:
            pass
        return resp
    finally:
        _log(f"slot      release: id {slot.id:2d} | task {slot.id_task} | stop processing: "
             f"n_tokens = {len(slot.cache)}, truncated = {int(c.truncated)}")
        await state.slots.release(slot)


async def _write_progress(resp: web.StreamResponse, c: Completion, id_slot: int, body: dict[str, Any]) -> None:
    """/completion's return_progress: a 0 % event when the slot starts, then one per batch of n_batch tokens
    (default 512) of the prompt past the cached prefix, each with content "" (as llama-server sends them)."""
    total, cache = len(c.prompt), c.cache_n
    batch = int(body.get("n_batch") or 512)
    marks = [cache, *range(min(cache + batch, total), total, batch), total]
    for processed in dict.fromkeys(marks):
        event = {"index": 0, "content": "", "tokens": [], "stop": False, "id_slot": id_slot,
                 "tokens_predicted": 0, "tokens_evaluated": total,
                 "prompt_progress": {"total": total, "cache": cache, "processed": processed, "time_ms": 0.0}}
        await resp.write(f"data: {_dumps(event)}\n\n".encode())


def _account(state: FakeServer, c: Completion) -> None:
    m = state.metrics
    m.prompt_tokens += len(c.prompt) - c.cache_n
    m.prompt_cached += c.cache_n
    m.prompt_seconds += c.t_prompt - c.t_start
    m.predicted_tokens += c.n_decoded
    m.predicted_seconds += c.t_end - c.t_prompt
    m.n_decode += 1 + c.n_decoded
    m.n_tokens_max = max(m.n_tokens_max, len(c.prompt) + c.n_decoded)


async def handle_completion(request: web.Request) -> web.StreamResponse:
    body = await read_body(request)
    if "prompt" not in body:
        raise RequestError("[json.exception.out_of_range.403] key 'prompt' not found")
    return await serve_completion(request, body, body["prompt"], NATIVE)


async def handle_oai_completion(request: web.Request) -> web.StreamResponse:
    body = await read_body(request)
    if "prompt" not in body:
        raise RequestError("\"prompt\" is required")
    return await serve_completion(request, body, body["prompt"], OAI_CMPL)


async def handle_chat_completion(request: web.Request) -> web.StreamResponse:
    body = await read_body(request)
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise RequestError("'messages' is required")
    return await serve_completion(request, body, render_chatml(messages), OAI_CHAT)


# -- everything else ----------------------------------------------------------------------------------------------

async def handle_health(request: web.Request) -> web.Response:
    return json_ok({"status": "ok"})


async def handle_connections(request: web.Request) -> web.Response:
    state = request.app[STATE]
    return json_ok({"accepted": state.accepted, "open_peak": state.open_peak})


async def handle_props(request: web.Request) -> web.Response:
    state = request.app[STATE]
    params = {"n_predict": -1, "seed": 4294967295, "temperature": 0.8, "top_k": 40, "top_p": 0.95, "min_p": 0.05,
              "max_tokens": -1, "n_keep": 0, "ignore_eos": False, "stream": True, "n_probs": 0}
    return json_ok({
        "default_generation_settings": {"params": params, "n_ctx": state.slots.slots[0].n_ctx},
        "total_slots": state.n_parallel, "model_alias": state.model_name, "model_path": state.args.model,
        "modalities": {"vision": False, "video": False, "audio": False}, "endpoint_slots": True,
        "endpoint_props": False, "endpoint_metrics": state.args.metrics, "chat_template": CHATML_TEMPLATE,
        "chat_template_caps": {}, "bos_token": "<s>", "eos_token": "</s>", "build_info": BUILD_INFO,
        "is_sleeping": False,
    })


async def handle_slots(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if request.query.get("fail_on_no_slot") and state.slots.n_busy == len(state.slots.slots):
        raise RequestError("no slot available", "unavailable_error")
    out = []
    for s in state.slots.slots:
        item: dict[str, Any] = {"id": s.id, "n_ctx": s.n_ctx, "speculative": False, "is_processing": s.busy}
        if s.id_task >= 0:
            item.update(id_task=s.id_task, n_prompt_tokens=s.n_prompt, n_prompt_tokens_processed=s.n_processed,
                        n_prompt_tokens_cache=s.n_cached, next_token=[{
                "has_next_token": s.busy, "has_new_line": False, "n_remain": s.n_remain, "n_decoded": s.n_decoded}])
        out.append(item)
    return json_ok(out)


async def handle_slot_action(request: web.Request) -> web.Response:
    """llama-server's slot save / restore / erase (the file holds the slot's tokens, as JSON)."""
    state = request.app[STATE]
    if not state.args.slot_save_path:
        raise RequestError("This server does not support slots action. Start it with `--slot-save-path`",
                           "not_supported_error")
    try:
        slot = state.slots.slots[int(request.match_info["id_slot"]) % len(state.slots.slots)]
    except ValueError:
        raise RequestError("Invalid slot ID") from None
    action = request.query.get("action", "")
    if action == "erase":
        n, slot.cache = len(slot.cache), []
        return json_ok({"id_slot": slot.id, "n_erased": n})
    if action not in ("save", "restore"):
        raise RequestError("Invalid action")
    filename = (await request.json()).get("filename", "")
    if not filename or "/" in filename or filename.startswith("."):
        raise RequestError("Invalid filename")
    path = Path(state.args.slot_save_path) / filename
    if action == "save":
        data = _dumps({"tokens": slot.cache})
        path.write_text(data)
        return json_ok({"id_slot": slot.id, "filename": filename, "n_saved": len(slot.cache),
                        "n_written": len(data), "timings": {"save_ms": 0.1}})
    try:
        tokens = json.loads(path.read_text())["tokens"]
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise ValueError("tokens")
    except (OSError, ValueError, KeyError, TypeError):
        raise RequestError("Unable to restore slot: No available space in KV cache or invalid slot save file") \
            from None
    if len(tokens) > slot.n_ctx:
        raise RequestError("Unable to restore slot: Restored prompt does not fit in the slot context")
    slot.cache = tokens
    return json_ok({"id_slot": slot.id, "filename": filename, "n_restored": len(tokens),
                    "n_read": path.stat().st_size, "timings": {"restore_ms": 0.1}})


async def handle_metrics(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if not state.args.metrics:
        raise RequestError("This server does not support metrics endpoint. Start it with `--metrics`",
                           "not_supported_error")
    m = state.metrics
    counters = [
        ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens", m.prompt_tokens),
        ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache", m.prompt_cached),
        ("prompt_seconds_total", "Total time spent processing prompts", m.prompt_seconds),
        ("tokens_predicted_total", "Number of generation tokens processed", m.predicted_tokens),
        ("tokens_predicted_seconds_total", "Total time spent generating tokens", m.predicted_seconds),
        ("n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding and multimodal "
                           "decoding", m.n_decode),
        ("n_tokens_max", "Largest observed sequence length (prompt + generation)", m.n_tokens_max),
    ]
    gauges = [
        ("prompt_tokens_seconds", "Average prompt throughput in tokens/s",
         m.prompt_tokens / m.prompt_seconds if m.prompt_seconds else 0),
        ("predicted_tokens_seconds", "Average generation throughput in tokens/s",
         m.predicted_tokens / m.predicted_seconds if m.predicted_seconds else 0),
        ("requests_processing", "Number of requests processing", state.slots.n_busy),
        ("requests_deferred", "Number of requests deferred", state.slots.deferred),
    ]
    lines = []
    for kind, items in (("counter", counters), ("gauge", gauges)):
        for name, help_, value in items:
            lines += [f"# HELP llamacpp:{name} {help_}", f"# TYPE llamacpp:{name} {kind}", f"llamacpp:{name} {value:g}"]
    return web.Response(text="\n".join(lines) + "\n", content_type="text/plain",
                        headers={"Process-Start-Time-Unix": str(state.t_start)})


async def handle_tokenize(request: web.Request) -> web.Response:
    state = request.app[STATE]
    body = await read_body(request)
    if "content" not in body:
        return json_ok({"tokens": []})
    try:
        tokens = state.vocab.tokenize_prompt(body["content"], add_bos=bool(body.get("add_special", False)))
    except ValueError as e:
        raise RequestError(str(e)) from None
    if body.get("with_pieces"):
        return json_ok({"tokens": [{"id": t, "piece": state.vocab.piece(t)} for t in tokens]})
    return json_ok({"tokens": tokens})


async def handle_detokenize(request: web.Request) -> web.Response:
    body = await read_body(request)
    tokens = list(body.get("tokens") or [])
    for t in tokens:
        if isinstance(t, int) and not 0 <= t < N_VOCAB:  # llama_vocab's id_to_token.at() throws; a 500
            raise RequestError(f"vector::_M_range_check: __n (which is {t}) >= this->size() (which is {N_VOCAB})",
                               "server_error")
    return json_ok({"content": request.app[STATE].vocab.decode(tokens)})


async def handle_apply_template(request: web.Request) -> web.Response:
    body = await read_body(request)
    if not isinstance(body.get("messages"), list):
        raise RequestError("'messages' is required")
    return json_ok({"prompt": render_chatml(body["messages"])})


async def handle_models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    info = {"id": state.model_name, "object": "model", "created": state.t_start, "owned_by": "llamacpp",
            "meta": {"vocab_type": 2, "n_vocab": N_VOCAB, "n_ctx_train": 4096, "n_embd": state.behaviour.embedding_dim,
                     "n_params": 135000000, "size": int(state.behaviour.model_mib * 1048576)}}
    return json_ok({"models": [{"name": state.model_name, "model": state.model_name}], "object": "list",
                    "data": [info]})


async def _embeddings(request: web.Request, oai: bool) -> web.Response:
    state = request.app[STATE]
    if not state.args.embedding:
        raise RequestError("This server does not support embeddings. Start it with `--embeddings`",
                           "not_supported_error")
    pooling_none = state.args.pooling == "none"
    if oai and pooling_none:
        raise RequestError("Pooling type 'none' is not OAI compatible. Please use a different pooling type")
    body = await read_body(request)
    if "input" in body:
        inputs = body["input"]
    elif "content" in body:
        inputs, oai = body["content"], False  # "content" is the non-OAI spelling, answered in the non-OAI shape
    else:
        raise RequestError("\"input\" or \"content\" must be provided")
    token_list = isinstance(inputs, list) and any(isinstance(t, int) for t in inputs)  # one prompt given as ids
    prompts = inputs if isinstance(inputs, list) and not token_list else [inputs]
    if not prompts:
        raise RequestError("\"input\" must not be empty")
    kind = int(body.get("embd_normalize", state.args.embd_normalize))
    dim, results = state.behaviour.embedding_dim, []
    for i, p in enumerate(prompts):
        try:
            tokens = state.vocab.tokenize_prompt(p)
        except ValueError as e:
            raise RequestError(str(e)) from None
        if not tokens:
            raise RequestError("Input content cannot be empty")
        if pooling_none:  # one unnormalized vector per token
            vectors = [embedding_vector(state.vocab.piece(t), dim) for t in tokens]
        else:
            vectors = [normalize(embedding_vector(state.vocab.decode(tokens), dim), kind)]
        results.append({"index": i, "embedding": vectors, "tokens_evaluated": len(tokens)})
    if not oai:
        return json_ok([{"index": r["index"], "embedding": r["embedding"]} for r in results])
    n_tokens = sum(r["tokens_evaluated"] for r in results)
    data = [{"embedding": r["embedding"][0], "index": r["index"], "object": "embedding"} for r in results]
    return json_ok({"model": body.get("model", state.model_name), "object": "list",
                    "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens}, "data": data})


async def handle_embedding(request: web.Request) -> web.Response:
    return await _embeddings(request, oai=False)


async def handle_oai_embedding(request: web.Request) -> web.Response:
    return await _embeddings(request, oai=True)


def rerank_score(query: str, document: str) -> float:
    """The "reranker": the share of the query's words found in the document, a little less for a longer
    document, so a document repeating the query ranks first and one sharing nothing scores 0."""
    words = {w.strip(".,;:!?").lower() for w in query.split()} - {""}
    doc = {w.strip(".,;:!?").lower() for w in document.split()}
    if not words:
        return 0.0
    return round(len(words & doc) / len(words) / (1 + 0.001 * len(document.split())), 6)


async def handle_rerank(request: web.Request) -> web.Response:
    """llama-server's /rerank in its Jina shape (TEI's `texts` shape is not faked): one pair's prompt is
    [BOS] query [EOS] document [EOS], refused past a slot's context as the real one does."""
    state = request.app[STATE]
    if not state.args.rerank:
        raise RequestError("This server does not support reranking. Start it with `--reranking`",
                           "not_supported_error")
    body = await read_body(request)
    query = body.get("query")
    if not isinstance(query, str):
        raise RequestError('"query" must be provided' if query is None else '"query" must be a string')
    documents = body.get("documents")
    if not isinstance(documents, list) or not documents or not all(isinstance(d, str) for d in documents):
        raise RequestError('"documents" must be a non-empty string array')
    n_ctx, results, n_tokens = state.slots.slots[0].n_ctx, [], 0
    for i, doc in enumerate(documents):
        tokens = len(state.vocab.encode(query)) + len(state.vocab.encode(doc)) + 3
        if tokens > n_ctx:
            raise RequestError(f"request ({tokens} tokens) exceeds the available context size ({n_ctx} tokens), "
                               "try increasing it", "exceed_context_size_error", n_prompt_tokens=tokens, n_ctx=n_ctx)
        n_tokens += tokens
        results.append({"index": i, "relevance_score": rerank_score(query, doc)})
    results.sort(key=lambda r: -r["relevance_score"])
    top_n = body.get("top_n", len(documents))
    return json_ok({"model": body.get("model", state.model_name), "object": "list",
                    "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
                    "results": results[:max(int(top_n), 0)]})


def build_app(state: FakeServer) -> web.Application:
    app = web.Application(middlewares=[_middleware], client_max_size=64 * 1024 * 1024)
    app[STATE] = state
    app[API_KEYS] = frozenset(k for k in (state.args.api_key or os.environ.get("LLAMA_API_KEY", "")).split(",") if k)
    for path in ("/health", "/v1/health"):
        app.router.add_get(path, handle_health)
    app.router.add_get("/props", handle_props)
    app.router.add_get("/fake/connections", handle_connections)
    app.router.add_get("/slots", handle_slots)
    app.router.add_post("/slots/{id_slot}", handle_slot_action)
    app.router.add_get("/metrics", handle_metrics)
    for path in ("/models", "/v1/models"):
        app.router.add_get(path, handle_models)
    for path in ("/completion", "/completions"):
        app.router.add_post(path, handle_completion)
    app.router.add_post("/v1/completions", handle_oai_completion)
    for path in ("/chat/completions", "/v1/chat/completions"):
        app.router.add_post(path, handle_chat_completion)
    app.router.add_post("/tokenize", handle_tokenize)
    app.router.add_post("/detokenize", handle_detokenize)
    app.router.add_post("/apply-template", handle_apply_template)
    for path in ("/embedding", "/embeddings"):
        app.router.add_post(path, handle_embedding)
    app.router.add_post("/v1/embeddings", handle_oai_embedding)
    for path in ("/rerank", "/reranking", "/v1/rerank", "/v1/reranking"):
        app.router.add_post(path, handle_rerank)
    return app


# -- process life -------------------------------------------------------------------------------------------------

def _terminate() -> None:
    _log("srv    operator(): operator(): cleaning up before exit...")
    _die(0)


def _load_failed(model: str, *first_lines: str) -> None:
    """The error lines llama-server prints when the model does not load, then exit 1 (or FAKE_EXIT_CODE)."""
    for line in (*first_lines, "llama_model_load_from_file_impl: failed to load model",
                 f"cmn  common_init_: failed to load model '{model}'",
                 f"srv    load_model: failed to load model, '{model}'"):
        _log(line, "E")
    _log("srv    operator(): operator(): cleaning up before exit...")
    _log("srv  llama_server: exiting due to model loading error", "E")


def _load_details(state: FakeServer) -> None:
    """libllama's load lines a gateway may parse (shown from -lv 4 up), in llama.cpp's wording and widths."""
    b, a = state.behaviour, state.args
    n_layer = _env_int("FAKE_N_LAYERS", 31)  # blocks + the output layer, as llama.cpp counts them for -ngl
    # As in llama-server, "offloaded" reports -ngl (auto: all layers) even on a CPU-only build.
    ngl = n_layer if a.n_gpu_layers in ("auto", "all") or int(a.n_gpu_layers) < 0 else int(a.n_gpu_layers)
    buffer = "CPU_Mapped" if b.device == "CPU" else b.device
    # On a GPU llama.cpp keeps the input layer (token embeddings) mapped in host memory and stages the output and
    # part of the compute graph in pinned host buffers, however many layers are offloaded.
    host = f"{b.device.rstrip('0123456789')}_Host"
    on_gpu = b.device != "CPU"
    host_model = (f"load_tensors: {'CPU_Mapped':>12s} model buffer size = {HOST_EMBEDDINGS_MIB:8.2f} MiB",) * on_gpu
    host_compute = (f"sched_reserve: {host:>10s} compute buffer size = {4.26:8.2f} MiB",) * on_gpu
    for line in (
        f"llama_model_loader: loaded meta data with 33 key-value pairs and 272 tensors from {a.model} "
        "(version GGUF V3 (latest))",
        f"print_info: file size   = {b.model_mib:.2f} MiB (4.50 BPW) ",
        "load_tensors: loading model tensors, this can take a while... (load_mode = mmap)",
        f"load_tensors: offloaded {min(ngl, n_layer)}/{n_layer} layers to GPU",
        *host_model,
        f"load_tensors: {buffer:>12s} model buffer size = {b.model_mib:8.2f} MiB",
        f"llama_context: n_seq_max             = {state.n_parallel}",
        f"llama_context: n_ctx                 = {state.n_ctx}",
        f"llama_context: n_ctx_seq             = {state.slots.slots[0].n_ctx}",
        f"llama_context: {b.device if b.device == 'CPU' else host:>10s}  output buffer size = {0.38:8.2f} MiB",
        f"llama_kv_cache: {b.device:>10s} KV buffer size = {b.kv_mib:8.2f} MiB",
        f"sched_reserve: {b.device:>10s} compute buffer size = {b.compute_mib:8.2f} MiB",
        *host_compute,
    ):
        _log(line, verbosity=_DETAIL)


async def serve(args: ServerArgs, behaviour: Behaviour) -> None:
    loop = asyncio.get_running_loop()
    if not behaviour.ignore_sigterm:
        loop.add_signal_handler(signal.SIGTERM, _terminate)
    loop.add_signal_handler(signal.SIGINT, _terminate)
    state = FakeServer(args, behaviour)
    _log("srv  llama_server: initializing ...")
    _log(f"cmn  common_param: common_params_print_info: build 1 (fake) with Python {sys.version.split()[0]} "
         f"for {sys.platform}", verbosity=_DETAIL)
    _log(f"cmn  common_param: common_params_print_info: verbosity = {min(args.verbosity, 5)} "
         "(adjust with the `-lv N` CLI arg)")
    if not (args.api_key or os.environ.get("LLAMA_API_KEY")):
        _log("srv  llama_server: security: no API key is set and CORS allows all origins "
             "(see https://github.com/ggml-org/llama.cpp/pull/25655)", "W")
    runner = web.AppRunner(build_app(state), access_log=None, handle_signals=False)
    await runner.setup()
    host = args.host.split(",")[0]
    try:
        await web.TCPSite(runner, host, args.port).start()
    except OSError as e:
        _log(f"srv  start_listen: couldn't start HTTP listener on {host}:{args.port}: {e}", "E")
        _log("srv  llama_server: exiting due to HTTP server error", "E")
        _die(1)
    port = runner.addresses[0][1]
    _log(f"srv    load_model: loading model '{args.model}'")
    if not os.path.isfile(args.model):  # noqa: ASYNC240 - one stat at start-up, before anything is served
        _load_failed(args.model,
                     f"gguf_init_from_file: failed to open GGUF file '{args.model}' (No such file or directory)",
                     f"llama_model_load: error loading model: llama_model_loader: failed to load model from "
                     f"{args.model}")
        _die(1)
    child = bool(os.environ.get("LLAMA_SERVER_ROUTER_PORT"))
    steps = max(behaviour.load_steps, 0) if child else 0
    _to_router(child, "loading", {"stages": ["text_model"], "current": "text_model", "value": 0.0})
    for i in range(1, steps + 1):
        await asyncio.sleep(behaviour.load_seconds / (steps + 1))
        _to_router(child, "loading", {"stages": ["text_model"], "current": "text_model", "value": i / (steps + 1)})
    await asyncio.sleep(behaviour.load_seconds / (steps + 1))
    if behaviour.load_fail:
        _load_failed(args.model, behaviour.load_fail)
        _die(behaviour.exit_code)
    _to_router(child, "loading", {"stages": ["text_model"], "current": "text_model", "value": 1.0})
    _load_details(state)
    _log("cmn  common_init_: warming up the model with an empty run - please wait ... (--no-warmup to disable)")
    await asyncio.sleep(behaviour.warmup_seconds)
    _log(f"cmn          init: llama threadpool init, n_threads = {args.threads if args.threads > 0 else 4}")
    _log(f"srv    load_model: initializing, n_slots = {state.n_parallel}, n_ctx_slot = {state.slots.slots[0].n_ctx}, "
         f"kv_unified = '{str(state.unified).lower()}'")
    for slot in state.slots.slots:
        _log(f"slot   load_model: id {slot.id:2d} | task -1 | new slot, n_ctx = {slot.n_ctx}", verbosity=_DETAIL)
    state.ready = True
    _log("srv  llama_server: model loaded")
    _log(f"srv  llama_server: listening on http://{host}:{port}")
    if child:
        _to_router(child, "ready", {"id": args.alias or args.model, "object": "model"})
        loop.add_reader(0, _router_command)
    await asyncio.Event().wait()


def _to_router(child: bool, state: str, payload: dict[str, Any]) -> None:
    """llama-server's report to the router that started it (stdout; a newline first, as it writes)."""
    if child:
        sys.stdout.write("\ncmd_child_to_router:state:" + json.dumps({"state": state, "payload": payload},
                                                                      separators=(",", ":")) + "\n")
        sys.stdout.flush()


def _router_command() -> None:
    """A ready child's stdin: the router's exit command stops it, its end (the router gone) too, with status 1."""
    data = os.read(0, 4096)
    if b"cmd_router_to_child:exit" in data:
        _log("srv    operator(): exit command received, exiting...")
        _terminate()
    if not data:
        _log("srv    operator(): EOF on stdin detected, forcing shutdown...")
        _die(1)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.version:
        sys.stderr.write("version: 1 (fake)\nbuilt with Python for fake\n")
        return
    if args.list_devices:
        print("Available devices:\n  (none)", flush=True)
        return
    behaviour = Behaviour.from_env()
    _log.configure(args)
    if behaviour.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    asyncio.run(serve(args, behaviour))


if __name__ == "__main__":
    main()
