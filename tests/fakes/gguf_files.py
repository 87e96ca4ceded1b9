"""Tiny GGUF files for tests, written with the `gguf` package's GGUFWriter.

    write_tiny_gguf(path, ...)    the suite's tiny model (the `tiny_gguf` fixture): a llama model with a small
                                  vocabulary and random weights, for the fake runner and the real llama-server
    write_llama_gguf(path, ...)   a one-block llama-architecture model (a few KB of F16/F32 tensors) with
                                  the tensor names llama.cpp expects, so llama-quantize accepts it
    write_gguf(path, arch, kv, tensors)   anything else: any architecture's key/values, chosen tensors
    write_qwen3_reranker_gguf(path)       a one-block Qwen3 reranker (random weights) llama-server scores
    write_sized_llama_gguf(path, ...)     a llama model of any shape (no tokenizer), with each part's byte count,
                                          for the memory estimate's tests
    write_sized_moe_gguf(path, ...)       the same for a mixture-of-experts model (expert bytes per block too)
    rewrite_gguf(src, dst, ...)           a copy of a GGUF (a real model too) with key/values dropped, renamed or
                                          added and tensors added: a file as another converter would have written it
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np

N_EMBD = 64
N_FF = 128
N_VOCAB = 32
CHAT_TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"


def write_gguf(path: Path, arch: str, kv: dict[str, object] | None = None,
               tensors: dict[str, np.ndarray] | None = None, *, general_type: str | None = "model") -> Path:
    """Write `kv` (typed by Python type: str, bool, int as uint32, float as float32, list) and `tensors`."""
    writer = gguf.GGUFWriter(str(path), arch)
    if general_type is not None:
        writer.add_type(general_type)
    for key, value in (kv or {}).items():
        if isinstance(value, bool):
            writer.add_bool(key, value)
        elif isinstance(value, int):
            if value < 0:
                writer.add_int32(key, value)
            elif value >= 1 << 32:
                writer.add_uint64(key, value)
            else:
                writer.add_uint32(key, value)
        elif isinstance(value, float):
            writer.add_float32(key, value)
        elif isinstance(value, str):
            writer.add_string(key, value)
        elif isinstance(value, list):
            writer.add_array(key, value)
        else:
            raise TypeError(f"{key}: {type(value)}")
    return _finish(writer, tensors or {}, path)


def llama_tensors(dtype: type = np.float16, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(dtype)

    def norm() -> np.ndarray:
        return np.ones(N_EMBD, dtype=np.float32)

    return {
        "token_embd.weight": w(N_VOCAB, N_EMBD),
        "blk.0.attn_norm.weight": norm(),
        "blk.0.attn_q.weight": w(N_EMBD, N_EMBD),
        "blk.0.attn_k.weight": w(N_EMBD, N_EMBD),
        "blk.0.attn_v.weight": w(N_EMBD, N_EMBD),
        "blk.0.attn_output.weight": w(N_EMBD, N_EMBD),
        "blk.0.ffn_norm.weight": norm(),
        "blk.0.ffn_gate.weight": w(N_FF, N_EMBD),
        "blk.0.ffn_up.weight": w(N_FF, N_EMBD),
        "blk.0.ffn_down.weight": w(N_EMBD, N_FF),
        "output_norm.weight": norm(),
        "output.weight": w(N_VOCAB, N_EMBD),
    }


def write_llama_gguf(path: Path, *, file_type: int = 1, dtype: type = np.float16, seed: int = 0,
                     chat_template: str | None = CHAT_TEMPLATE, extra_kv: dict[str, object] | None = None,
                     general_type: str | None = "model") -> Path:
    """A one-block llama model: F16 weights (file_type 1) unless told otherwise. `seed` varies the bytes."""
    kv: dict[str, object] = {
        "general.name": "tiny-llama",
        "general.file_type": file_type,
        "llama.context_length": 256,
        "llama.embedding_length": N_EMBD,
        "llama.block_count": 1,
        "llama.feed_forward_length": N_FF,
        "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 2,
        "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "llama.rope.freq_base": 10000.0,
        "llama.vocab_size": N_VOCAB,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": [f"t{i}" for i in range(N_VOCAB)],
        "tokenizer.ggml.token_type": [1] * N_VOCAB,
        "tokenizer.ggml.merges": ["t 1"],
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
    }
    if chat_template is not None:
        kv["tokenizer.chat_template"] = chat_template
    kv.update(extra_kv or {})
    return write_gguf(path, "llama", kv, llama_tensors(dtype, seed), general_type=general_type)


def write_tiny_gguf(path: Path, *, arch: str = "llama", blocks: int = 2, embd: int = 64, vocab: int = 32,
                    ctx: int = 2048, chat_template: str | None = None, dtype: Any = np.float32,
                    scores: bool = False) -> Path:
    """The test suite's tiny model: a llama-architecture GGUF of `blocks` blocks with a GPT-2 style vocabulary of
    `vocab` tokens (t0, t1, ...; BOS 1, EOS 2), random weights, and a chat template when given."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny")
    w.add_context_length(ctx)
    w.add_embedding_length(embd)
    w.add_block_count(blocks)
    w.add_feed_forward_length(embd * 2)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0 if dtype == np.float32 else 1)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(vocab)])
    if scores:  # as real vocabularies have them: a float per token
        w.add_token_scores([-i / 7 for i in range(vocab)])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    if chat_template:
        w.add_chat_template(chat_template)
    rng = np.random.default_rng(0)
    w.add_tensor("token_embd.weight", rng.standard_normal((vocab, embd)).astype(dtype))
    for i in range(blocks):
        for name, shape in (("attn_q", (embd, embd)), ("attn_k", (embd // 2, embd)), ("attn_v", (embd // 2, embd)),
                            ("attn_output", (embd, embd)), ("ffn_gate", (embd * 2, embd)),
                            ("ffn_up", (embd * 2, embd)), ("ffn_down", (embd, embd * 2))):
            w.add_tensor(f"blk.{i}.{name}.weight", rng.standard_normal(shape).astype(dtype))
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(embd, dtype=np.float32))
    w.add_tensor("output_norm.weight", np.ones(embd, dtype=np.float32))
    w.add_tensor("output.weight", rng.standard_normal((vocab, embd)).astype(dtype))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# -- llama models of any shape, with the byte counts the memory estimate should find ------------------------------
F32, F16, Q8_0 = gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.Q8_0


def _sized_tensor(writer: gguf.GGUFWriter, name: str, shape: tuple[int, ...], qtype: gguf.GGMLQuantizationType) -> int:
    """Add a tensor of GGUF shape (ne0, ne1) = `shape`; returns its size in bytes."""
    data = np.random.default_rng(0).standard_normal(tuple(reversed(shape))).astype(np.float32)
    if qtype == F32:
        writer.add_tensor(name, data)
    elif qtype == F16:
        writer.add_tensor(name, data.astype(np.float16))
    else:
        writer.add_tensor(name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
    block, type_size = gguf.GGML_QUANT_SIZES[qtype]
    return int(np.prod(shape)) // block * type_size


def write_sized_llama_gguf(
    path: Path,
    *,
    blocks: int = 2,
    embd: int = 64,
    heads: int = 4,
    heads_kv: int | list[int] = 2,
    ff: int = 128,
    vocab: int = 96,
    ctx: int = 256,
    tied: bool = False,
    matrix_type: gguf.GGMLQuantizationType = F16,
    arch: str = "llama",
    extra_kv: dict[str, int] | None = None,
    projector: bool = False,
) -> dict[str, int | list[int]]:
    """A model of any shape with llama's tensor names and no tokenizer (Q8_0 token embeddings, F32 norms,
    `matrix_type` matrices); returns each part's bytes: token_embd, layers (one count per block), output_norm,
    output (0 when tied), projector (a stray vision tensor when asked for, else 0)."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(blocks)
    w.add_embedding_length(embd)
    w.add_feed_forward_length(ff)
    w.add_head_count(heads)
    w.add_head_count_kv(heads_kv)
    w.add_context_length(ctx)
    w.add_vocab_size(vocab)
    for key, value in (extra_kv or {}).items():
        w.add_uint32(key.format(arch=arch), value)
    head_dim = embd // heads
    kv_dim = (heads_kv if isinstance(heads_kv, int) else max(heads_kv)) * head_dim
    sizes: dict[str, int | list[int]] = {"token_embd": _sized_tensor(w, "token_embd.weight", (embd, vocab), Q8_0)}
    layers = []
    for il in range(blocks):
        n = 0
        for name, shape in [("attn_norm", (embd,)), ("ffn_norm", (embd,))]:
            n += _sized_tensor(w, f"blk.{il}.{name}.weight", shape, F32)
        for name, shape in [("attn_q", (embd, embd)), ("attn_k", (embd, kv_dim)), ("attn_v", (embd, kv_dim)),
                            ("attn_output", (embd, embd)), ("ffn_gate", (embd, ff)), ("ffn_up", (embd, ff)),
                            ("ffn_down", (ff, embd))]:
            n += _sized_tensor(w, f"blk.{il}.{name}.weight", shape, matrix_type)
        layers.append(n)
    sizes["layers"] = layers
    sizes["output_norm"] = _sized_tensor(w, "output_norm.weight", (embd,), F32)
    sizes["output"] = 0 if tied else _sized_tensor(w, "output.weight", (embd, vocab), F16)
    sizes["projector"] = _sized_tensor(w, "v.blk.0.attn_q.weight", (embd, embd), F16) if projector else 0
    _finish(w, {}, path)
    return sizes


def write_sized_moe_gguf(
    path: Path,
    *,
    blocks: int = 4,
    embd: int = 64,
    heads: int = 4,
    heads_kv: int = 2,
    expert_ff: int = 64,
    experts: int = 8,
    used: int = 2,
    vocab: int = 96,
    ctx: int = 256,
    arch: str = "qwen3moe",
) -> dict[str, int | list[int]]:
    """A mixture-of-experts model of any shape (qwen3moe's tensor names, no tokenizer): per block a router, the
    stacked experts (ffn_{gate,up,down}_exps, F16) and a shared expert (ffn_*_shexp: not an expert to
    --n-cpu-moe). Returns the bytes of token_embd, layers and experts (one count per block), output_norm, output."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(blocks)
    w.add_embedding_length(embd)
    w.add_feed_forward_length(expert_ff)
    w.add_expert_feed_forward_length(expert_ff)
    w.add_expert_count(experts)
    w.add_expert_used_count(used)
    w.add_head_count(heads)
    w.add_head_count_kv(heads_kv)
    w.add_context_length(ctx)
    w.add_vocab_size(vocab)
    kv_dim = heads_kv * (embd // heads)
    sizes: dict[str, int | list[int]] = {"token_embd": _sized_tensor(w, "token_embd.weight", (embd, vocab), Q8_0)}
    layers, expert_bytes = [], []
    for il in range(blocks):
        n = sum(_sized_tensor(w, f"blk.{il}.{name}.weight", (embd,), F32) for name in ("attn_norm", "ffn_norm"))
        for name, shape in [("attn_q", (embd, embd)), ("attn_k", (embd, kv_dim)), ("attn_v", (embd, kv_dim)),
                            ("attn_output", (embd, embd)), ("ffn_gate_inp", (embd, experts)),
                            ("ffn_gate_shexp", (embd, expert_ff)), ("ffn_up_shexp", (embd, expert_ff)),
                            ("ffn_down_shexp", (expert_ff, embd))]:
            n += _sized_tensor(w, f"blk.{il}.{name}.weight", shape, F16)
        e = sum(_sized_tensor(w, f"blk.{il}.{name}.weight", shape, F16)
                for name, shape in [("ffn_gate_exps", (embd, expert_ff, experts)),
                                    ("ffn_up_exps", (embd, expert_ff, experts)),
                                    ("ffn_down_exps", (expert_ff, embd, experts))])
        layers.append(n + e)
        expert_bytes.append(e)
    sizes["layers"], sizes["experts"] = layers, expert_bytes
    sizes["output_norm"] = _sized_tensor(w, "output_norm.weight", (embd,), F32)
    sizes["output"] = _sized_tensor(w, "output.weight", (embd, vocab), F16)
    _finish(w, {}, path)
    return sizes


# -- raw headers, byte by byte: for files GGUFWriter would never write (lying counts, deep nesting) -------------
T_UINT32, T_STRING, T_ARRAY, T_UINT64 = 4, 8, 9, 10


def u32(n: int) -> bytes:
    return n.to_bytes(4, "little")


def u64(n: int) -> bytes:
    return n.to_bytes(8, "little")


def gguf_string(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return u64(len(raw)) + raw


def raw_gguf(kv: list[tuple[str, int, bytes]], *, n_kv: int | None = None, n_tensors: int = 0,
             tail: bytes = b"") -> bytes:
    """A GGUF v3 header: `kv` as (key, value type, encoded value), then `tail` (tensor rows, padding).
    `n_kv` / `n_tensors` are what the header claims, whatever follows."""
    body = b"".join(gguf_string(key) + u32(vtype) + value for key, vtype, value in kv)
    return b"GGUF" + u32(3) + u64(n_tensors) + u64(len(kv) if n_kv is None else n_kv) + body + tail


def nested_array(depth: int) -> bytes:
    """An array value holding an array holding ... `depth` levels, the innermost empty."""
    value = u32(T_UINT32) + u64(0)
    for _ in range(depth - 1):
        value = u32(T_ARRAY) + u64(1) + value
    return value


# -- a reranker the real llama-server loads and scores ----------------------------------------------------------

RERANK_TEMPLATE = "<|im_start|>user\n<Query>: {query}\n<Document>: {document}<|im_end|>\n"


def _byte_tokens() -> list[str]:
    """GPT-2's byte-to-unicode table: one token per byte, so any text tokenizes (byte-level BPE)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = [b for b in range(256) if b not in printable]
    table = dict(zip(printable, printable, strict=True)) | {b: 256 + i for i, b in enumerate(extra)}
    return [chr(table[b]) for b in range(256)]


def write_qwen3_reranker_gguf(path: Path, *, seed: int = 0, n_ctx: int = 512, metadata: bool = True) -> Path:
    """A one-block Qwen3 reranker laid out as llama.cpp's converter writes Qwen3-Reranker: pooling type RANK,
    classifier labels yes/no, a `rerank` prompt template and the two-row `cls.output.weight` head, with random
    F32 weights (llama-server's score is softmax(head)[yes], so in (0, 1)). A byte-level vocabulary (256 byte
    tokens, one merge, three specials) makes any text tokenize. metadata=False leaves out the pooling type and the
    template (the head and its labels stay): a reranker known only by its cls.output tensor, as bge-reranker's
    GGUFs are."""
    n_embd, n_ff, heads, kv_heads, head_dim = 64, 128, 4, 2, 16
    w = _random(seed)
    writer = _tiny_writer(path, "qwen3", "tiny-qwen3-reranker", n_embd=n_embd, blocks=1, n_ff=n_ff, heads=heads,
                          kv_heads=kv_heads, n_ctx=n_ctx)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(1e6)
    writer.add_classifier_output_labels(["yes", "no"])  # the head's rows (llama.cpp's n_cls_out)
    if metadata:
        writer.add_pooling_type(gguf.PoolingType.RANK)
        writer.add_chat_template([{"name": "rerank", "template": RERANK_TEMPLATE}])
    tokens = _byte_vocabulary(writer, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], pre="qwen2", eos=259)
    tensors = {
        "token_embd.weight": w(len(tokens), n_embd),
        "output_norm.weight": ones(n_embd),
        "cls.output.weight": w(2, n_embd),
        "blk.0.attn_norm.weight": ones(n_embd),
        "blk.0.attn_q.weight": w(heads * head_dim, n_embd),
        "blk.0.attn_k.weight": w(kv_heads * head_dim, n_embd),
        "blk.0.attn_v.weight": w(kv_heads * head_dim, n_embd),
        "blk.0.attn_output.weight": w(n_embd, heads * head_dim),
        "blk.0.attn_q_norm.weight": ones(head_dim),
        "blk.0.attn_k_norm.weight": ones(head_dim),
        "blk.0.ffn_norm.weight": ones(n_embd),
        "blk.0.ffn_gate.weight": w(n_ff, n_embd),
        "blk.0.ffn_up.weight": w(n_ff, n_embd),
        "blk.0.ffn_down.weight": w(n_embd, n_ff),
    }
    return _finish(writer, tensors, path)


def _finish(writer: gguf.GGUFWriter, tensors: dict[str, np.ndarray], path: str | Path) -> Path:
    """Add the tensors and write the file out: header, metadata, tensor data."""
    for name, data in tensors.items():
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path)


def rewrite_gguf(src: Path, dst: Path, *, drop: tuple[str, ...] = (), rename: dict[str, str] | None = None,
                 add: dict[str, tuple[Any, gguf.GGUFValueType]] | None = None,
                 tensors: dict[str, np.ndarray] | None = None, arch: str | None = None,
                 more_tokens: int = 0) -> Path:
    """A copy of `src` with the key/values in `drop` left out, those in `rename` under their new names, `add`'s
    added ({key: (value, type)}), `tensors` appended, another architecture name, and `more_tokens` tokens more in
    the vocabulary than the model has embeddings; every tensor of `src` is copied as it is (quantized ones too),
    as gguf-py's own metadata editor copies them."""
    reader = gguf.GGUFReader(str(src))
    rename = rename or {}
    writer = gguf.GGUFWriter(str(dst), arch or str(reader.fields["general.architecture"].contents()))
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in ("general.architecture", *drop):
            continue
        kind = field.types[0]
        value = field.contents()
        if more_tokens and field.name in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores",
                                          "tokenizer.ggml.token_type"):
            filler = {"tokenizer.ggml.tokens": "<extra_token>", "tokenizer.ggml.scores": 0.0}
            value = [*value, *([filler.get(field.name, 1)] * more_tokens)]
            if field.name == "tokenizer.ggml.tokens":
                value[-more_tokens:] = [f"<extra_token_{i}>" for i in range(more_tokens)]
        writer.add_key_value(rename.get(field.name, field.name), value, kind,
                             sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
    for key, (value, kind) in (add or {}).items():
        writer.add_key_value(key, value, kind)
    for tensor in reader.tensors:
        writer.add_tensor_info(tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes,
                               tensor.tensor_type)
    for name, array in (tensors or {}).items():
        writer.add_tensor_info(name, array.shape, array.dtype, array.nbytes)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in reader.tensors:
        writer.write_tensor_data(tensor.data)
    for array in (tensors or {}).values():
        writer.write_tensor_data(array)
    writer.close()
    return dst


# -- a gpt-oss the real llama-server loads, in llama.cpp's layout or in Ollama's ---------------------------------

def _tiny_writer(path: Path, arch: str, name: str, *, n_embd: int, blocks: int, n_ff: int, heads: int,
                 kv_heads: int | list[int], n_ctx: int = 512) -> gguf.GGUFWriter:
    """A writer for a tiny F32 model of `arch`, its shape's keys written."""
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_type("model")
    writer.add_name(name)
    writer.add_file_type(0)
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(n_embd)
    writer.add_block_count(blocks)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    return writer


def ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)


def _random(seed: int) -> Any:
    """w(*shape): random F32 weights of that shape (scaled to 0.2), from `seed`."""
    rng = np.random.default_rng(seed)
    return lambda *shape: np.asarray(rng.standard_normal(shape) * 0.2, dtype=np.float32)


def _byte_vocabulary(writer: gguf.GGUFWriter, specials: list[str], *, pre: str, bos: int = 257, eos: int = 257,
                     add_bos: bool = False, model: str = "gpt2", types: list[int] | None = None) -> list[str]:
    """Write a byte-level vocabulary (GPT-2's byte tokens, so any text tokenizes; one merge, as llama.cpp wants
    merges for BPE) and then `specials` (control tokens unless `types` says otherwise); its tokens."""
    tokens = [*_byte_tokens(), "ab", *specials]
    writer.add_tokenizer_model(model)
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types or [1] * 257 + [3] * len(specials))
    writer.add_token_merges(["a b"])
    writer.add_bos_token_id(bos)
    writer.add_eos_token_id(eos)
    writer.add_add_bos_token(add_bos)
    return tokens


def write_tiny_gpt_oss(path: Path, *, ollama_layout: bool = False, seed: int = 0) -> Path:
    """A two-block gpt-oss (attention sinks, sliding-window attention, 4 experts of which 2 are used, biases
    everywhere) with random F32 weights and a byte-level vocabulary, as llama.cpp's converter lays it out; or, with
    `ollama_layout`, as Ollama publishes gpt-oss (its llama/compat reads it): the architecture spelled `gptoss` and
    its keys under `gptoss.`, no expert_feed_forward_length, no rope.scaling.type, GPT-2's pre-tokenizer, and the
    tensors `attn_out`, `attn_sinks` (no `.weight`) and `ffn_norm` where llama.cpp has `attn_output`,
    `attn_sinks.weight` and `post_attention_norm`. The same weights either way, so both answer alike."""
    n_embd, heads, kv_heads, head_dim, n_expert, n_ff_exp, n_vocab_extra = 64, 4, 2, 16, 4, 32, 3
    w = _random(seed)
    writer = _tiny_writer(path, "gptoss" if ollama_layout else "gpt-oss", "tiny-gpt-oss", n_embd=n_embd, blocks=2,
                          n_ff=n_ff_exp, heads=heads, kv_heads=kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(150000.0)
    writer.add_expert_count(n_expert)
    writer.add_expert_used_count(2)
    writer.add_sliding_window(128)
    if not ollama_layout:
        writer.add_expert_feed_forward_length(n_ff_exp)
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    writer.add_rope_scaling_factor(1.0)
    writer.add_rope_scaling_orig_ctx_len(512)
    tokens = _byte_vocabulary(writer, ["<|endoftext|>", "<|start|>", "<|end|>"][:n_vocab_extra],
                              pre="default" if ollama_layout else "gpt-4o")
    out_name, sinks_name, norm_name = (("attn_out", "attn_sinks", "ffn_norm") if ollama_layout
                                       else ("attn_output", "attn_sinks.weight", "post_attention_norm"))
    tensors = {"token_embd.weight": w(len(tokens), n_embd), "output_norm.weight": np.ones(n_embd, np.float32),
               "output.weight": w(len(tokens), n_embd)}
    for i in range(2):
        b = f"blk.{i}."
        tensors |= {
            b + "attn_norm.weight": np.ones(n_embd, np.float32),
            b + f"{norm_name}.weight": np.ones(n_embd, np.float32),
            b + "attn_q.weight": w(heads * head_dim, n_embd), b + "attn_q.bias": w(heads * head_dim),
            b + "attn_k.weight": w(kv_heads * head_dim, n_embd), b + "attn_k.bias": w(kv_heads * head_dim),
            b + "attn_v.weight": w(kv_heads * head_dim, n_embd), b + "attn_v.bias": w(kv_heads * head_dim),
            b + f"{out_name}.weight": w(n_embd, heads * head_dim), b + f"{out_name}.bias": w(n_embd),
            b + sinks_name: w(heads),
            b + "ffn_gate_inp.weight": w(n_expert, n_embd), b + "ffn_gate_inp.bias": w(n_expert),
            b + "ffn_gate_exps.weight": w(n_expert, n_ff_exp, n_embd), b + "ffn_gate_exps.bias": w(n_expert, n_ff_exp),
            b + "ffn_up_exps.weight": w(n_expert, n_ff_exp, n_embd), b + "ffn_up_exps.bias": w(n_expert, n_ff_exp),
            b + "ffn_down_exps.weight": w(n_expert, n_embd, n_ff_exp), b + "ffn_down_exps.bias": w(n_expert, n_embd),
        }
    return _finish(writer, tensors, path)


def write_tiny_olmo(path: Path, *, ollama_layout: bool = False, seed: int = 0) -> Path:
    """A two-block OLMo with sliding-window attention and random F32 weights, as llama.cpp's converter lays it out
    (architecture `olmo2`, whose loader reads OLMo 3 too), or as Ollama publishes OLMo 3 (`olmo3`, its keys under
    `olmo3.`; the tensors are the same)."""
    n_embd, heads, kv_heads, n_ff = 64, 4, 2, 128
    head_dim = n_embd // heads
    w = _random(seed)
    writer = _tiny_writer(path, "olmo3" if ollama_layout else "olmo2", "tiny-olmo", n_embd=n_embd, blocks=2, n_ff=n_ff,
                          heads=heads, kv_heads=kv_heads)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(500000.0)
    writer.add_sliding_window(64)
    tokens = _byte_vocabulary(writer, ["<|endoftext|>"], pre="default")
    tensors = {"token_embd.weight": w(len(tokens), n_embd), "output_norm.weight": ones(n_embd),
               "output.weight": w(len(tokens), n_embd)}
    for i in range(2):
        b = f"blk.{i}."
        tensors |= {
            b + "attn_q.weight": w(n_embd, n_embd), b + "attn_k.weight": w(kv_heads * head_dim, n_embd),
            b + "attn_v.weight": w(kv_heads * head_dim, n_embd), b + "attn_output.weight": w(n_embd, n_embd),
            b + "attn_q_norm.weight": ones(n_embd), b + "attn_k_norm.weight": ones(kv_heads * head_dim),
            b + "post_attention_norm.weight": ones(n_embd), b + "ffn_gate.weight": w(n_ff, n_embd),
            b + "ffn_up.weight": w(n_ff, n_embd), b + "ffn_down.weight": w(n_embd, n_ff),
            b + "post_ffw_norm.weight": ones(n_embd),
        }
    return _finish(writer, tensors, path)


# -- a model that writes a chosen answer, on the real llama-server ------------------------------------------------

def write_scripted_gguf(path: Path, script: list[str], *, control: tuple[str, ...] = (),
                        chat_template: str | None = None, n_ctx: int = 512) -> Path:
    """A one-block llama model whose greedy (or any) answer to any prompt is `script`, piece by piece, then its
    end-of-generation token. Each piece is one token of its own (CONTROL type for those in `control`, as a
    converter marks a vocabulary's special tokens, else USER_DEFINED: printed as written); the rest of the
    vocabulary is byte-level, so any prompt tokenizes. The weights make it a bigram machine: attention and
    feed-forward are zero, so the last hidden state is the current token's embedding, a one-hot of its place in
    the script (every other token shares place 0), and the output row of the next piece is the only one that
    scores. The pieces must differ (a bigram cannot count)."""
    if len(set(script)) != len(script):
        raise ValueError("each piece of the script must be a different token")
    n_embd, n_ff, heads = 64, 64, 4
    if len(script) + 1 > n_embd:
        raise ValueError(f"a script of at most {n_embd - 1} pieces")
    eos = "<|scripted_end|>"
    first = 257  # the script's first token id
    types = [1] * 257 + [3 if piece in control else 4 for piece in script] + [3]
    writer = _tiny_writer(path, "llama", "scripted", n_embd=n_embd, blocks=1, n_ff=n_ff, heads=heads, kv_heads=heads,
                          n_ctx=n_ctx)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    tokens = _byte_vocabulary(writer, [*script, eos], pre="default", bos=257 + len(script), eos=257 + len(script),
                              types=types)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
    embd = np.zeros((len(tokens), n_embd), np.float32)
    embd[:, 0] = 1.0  # any token not in the script: place 0, followed by the first piece
    out = np.zeros((len(tokens), n_embd), np.float32)
    out[first, 0] = 10.0
    for k in range(len(script)):
        embd[first + k] = 0.0
        embd[first + k, k + 1] = 1.0
        out[first + k + 1, k + 1] = 10.0  # piece k -> piece k + 1; the last -> the end token
    zero = np.zeros
    tensors = {"token_embd.weight": embd, "output_norm.weight": np.ones(n_embd, np.float32), "output.weight": out,
               "blk.0.attn_norm.weight": np.ones(n_embd, np.float32),
               "blk.0.ffn_norm.weight": np.ones(n_embd, np.float32),
               "blk.0.attn_q.weight": zero((n_embd, n_embd), np.float32),
               "blk.0.attn_k.weight": zero((n_embd, n_embd), np.float32),
               "blk.0.attn_v.weight": zero((n_embd, n_embd), np.float32),
               "blk.0.attn_output.weight": zero((n_embd, n_embd), np.float32),
               "blk.0.ffn_gate.weight": zero((n_ff, n_embd), np.float32),
               "blk.0.ffn_up.weight": zero((n_ff, n_embd), np.float32),
               "blk.0.ffn_down.weight": zero((n_embd, n_ff), np.float32)}
    return _finish(writer, tensors, path)


def write_tiny_gemma4(path: Path, *, ollama_layout: bool = False, expert_scale: bool = False, seed: int = 0) -> Path:
    """A two-block dense Gemma 4 (one sliding-window block, one global; F32 random weights) with a byte-level
    vocabulary under Gemma 4's BPE tokenizer, as llama.cpp's converter lays it out; or, with `ollama_layout`, as
    Ollama publishes Gemma 4: its tokenizer named `llama` and a vision encoder's tensors inside. `expert_scale` adds
    a MoE per-expert scale under the name each layout gives it (for the copy's names only: llama.cpp's dense loader
    would refuse the extra tensor)."""
    n_embd, heads, kv_heads, head_dim, n_ff = 64, 4, 2, 16, 128
    w = _random(seed)
    writer = _tiny_writer(path, "gemma4", "tiny-gemma4", n_embd=n_embd, blocks=2, n_ff=n_ff, heads=heads,
                          kv_heads=kv_heads)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_uint32("gemma4.attention.key_length_swa", head_dim)
    writer.add_uint32("gemma4.attention.value_length_swa", head_dim)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(1000000.0)
    writer.add_float32("gemma4.rope.freq_base_swa", 10000.0)
    writer.add_sliding_window(64)
    writer.add_array("gemma4.attention.sliding_window_pattern", [True, False])
    writer.add_uint32("gemma4.embedding_length_per_layer_input", 0)
    writer.add_float32("gemma4.final_logit_softcapping", 30.0)
    tokens = _byte_vocabulary(writer, ["<bos>", "<eos>", "<|channel>", "<channel|>"], pre="gemma4", eos=258,
                              add_bos=True, model="llama" if ollama_layout else "gemma4")
    tensors = {"token_embd.weight": w(len(tokens), n_embd), "output_norm.weight": ones(n_embd),
               "rope_freqs.weight": ones(head_dim // 2)}
    for i in range(2):
        b = f"blk.{i}."
        tensors |= {
            b + "attn_norm.weight": ones(n_embd), b + "attn_q.weight": w(heads * head_dim, n_embd),
            b + "attn_k.weight": w(kv_heads * head_dim, n_embd), b + "attn_v.weight": w(kv_heads * head_dim, n_embd),
            b + "attn_output.weight": w(n_embd, heads * head_dim), b + "attn_q_norm.weight": ones(head_dim),
            b + "attn_k_norm.weight": ones(head_dim), b + "post_attention_norm.weight": ones(n_embd),
            b + "ffn_norm.weight": ones(n_embd), b + "ffn_gate.weight": w(n_ff, n_embd),
            b + "ffn_up.weight": w(n_ff, n_embd), b + "ffn_down.weight": w(n_embd, n_ff),
            b + "post_ffw_norm.weight": ones(n_embd),
        }
    if expert_scale:
        tensors["blk.0.ffn_gate_inp.per_expert_scale" if ollama_layout else "blk.0.ffn_down_exps.scale"] = ones(4)
    if ollama_layout:  # its vision encoder inside (the copy leaves it out, as for any layout)
        tensors |= {"v.blk.0.attn_q.weight": w(8, 8), "mm.input_projection.weight": w(4, 8)}
    return _finish(writer, tensors, path)


def write_tiny_lfm2(path: Path, *, ollama_layout: bool = False, seed: int = 0) -> Path:
    """A two-block LFM2 (a short-convolution block, then an attention block; F32 random weights) with a byte-level
    vocabulary, as llama.cpp's converter lays it out; or, with `ollama_layout`, as Ollama publishes LFM2: the norm
    before the output under `output_norm` (llama.cpp reads it as `token_embd_norm`), no LFM2 pre-tokenizer, and a
    feed-forward length that its tensors do not have."""
    n_embd, heads, kv_heads, n_ff, l_cache = 64, 4, 2, 128, 3
    head_dim = n_embd // heads
    w = _random(seed)
    writer = _tiny_writer(path, "lfm2", "tiny-lfm2", n_embd=n_embd, blocks=2, n_ff=n_ff * 3 if ollama_layout else n_ff,
                          heads=heads, kv_heads=[0, kv_heads])
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(1000000.0)
    writer.add_uint32("lfm2.shortconv.l_cache", l_cache)
    tokens = _byte_vocabulary(writer, ["<|startoftext|>", "<|im_end|>"], pre="default" if ollama_layout else "lfm2",
                              eos=258)
    tensors = {"token_embd.weight": w(len(tokens), n_embd),
               ("output_norm.weight" if ollama_layout else "token_embd_norm.weight"): ones(n_embd)}
    for i in range(2):
        b = f"blk.{i}."
        tensors |= {b + "attn_norm.weight": ones(n_embd), b + "ffn_norm.weight": ones(n_embd),
                    b + "ffn_gate.weight": w(n_ff, n_embd), b + "ffn_up.weight": w(n_ff, n_embd),
                    b + "ffn_down.weight": w(n_embd, n_ff)}
    tensors |= {"blk.0.shortconv.conv.weight": w(n_embd, l_cache),
                "blk.0.shortconv.in_proj.weight": w(3 * n_embd, n_embd),
                "blk.0.shortconv.out_proj.weight": w(n_embd, n_embd),
                "blk.1.attn_q_norm.weight": ones(head_dim), "blk.1.attn_k_norm.weight": ones(head_dim),
                "blk.1.attn_q.weight": w(n_embd, n_embd), "blk.1.attn_k.weight": w(kv_heads * head_dim, n_embd),
                "blk.1.attn_v.weight": w(kv_heads * head_dim, n_embd), "blk.1.attn_output.weight": w(n_embd, n_embd)}
    return _finish(writer, tensors, path)


def write_tiny_glm_flash(path: Path, *, ollama_layout: bool = False, seed: int = 0) -> Path:
    """A two-block GLM-4.7-Flash shape (DeepSeek V2's multi-head latent attention; a dense block, then a block of 4
    experts, 2 used, and a shared one; F32 random weights) with a byte-level vocabulary, as llama.cpp's converter
    lays it out (architecture `deepseek2`, the attention's absorbed dims as its key/value lengths); or, with
    `ollama_layout`, as Ollama publishes GLM-4.7-Flash: `glm4moelite`, the per-head dims as key/value lengths and
    the absorbed ones as the `_mla` lengths, every head a KV head, no expert groups, its end-of-turn tokens only in
    `eos_token_ids`."""
    n_embd, heads, n_ff, n_ff_exp, n_expert = 64, 4, 128, 32, 4
    q_lora, kv_lora, rope, nope, v_head = 32, 32, 16, 16, 32
    eos_ids = [257, 258, 259]
    w = _random(seed)
    arch = "glm4moelite" if ollama_layout else "deepseek2"
    writer = _tiny_writer(path, arch, "tiny-glm-flash", n_embd=n_embd, blocks=2, n_ff=n_ff, heads=heads,
                          kv_heads=heads if ollama_layout else 1)
    a = arch + "."
    if ollama_layout:
        writer.add_uint32(a + "attention.key_length", nope + rope)
        writer.add_uint32(a + "attention.value_length", v_head)
        writer.add_uint32(a + "attention.key_length_mla", kv_lora + rope)
        writer.add_uint32(a + "attention.value_length_mla", kv_lora)
    else:
        writer.add_uint32(a + "attention.key_length", kv_lora + rope)
        writer.add_uint32(a + "attention.value_length", kv_lora)
        writer.add_uint32(a + "attention.key_length_mla", nope + rope)
        writer.add_uint32(a + "attention.value_length_mla", v_head)
    writer.add_uint32(a + "rope.dimension_count", rope)
    writer.add_float32(a + "rope.freq_base", 1000000.0)
    writer.add_float32(a + "attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_uint32(a + "attention.q_lora_rank", q_lora)
    writer.add_uint32(a + "attention.kv_lora_rank", kv_lora)
    writer.add_uint32(a + "leading_dense_block_count", 1)
    writer.add_uint32(a + "expert_count", n_expert)
    writer.add_uint32(a + "expert_used_count", 2)
    writer.add_uint32(a + "expert_shared_count", 1)
    writer.add_uint32(a + "expert_feed_forward_length", n_ff_exp)
    writer.add_float32(a + "expert_weights_scale", 1.0)
    writer.add_bool(a + "expert_weights_norm", True)
    writer.add_uint32(a + "expert_gating_func", 2)
    if not ollama_layout:
        writer.add_uint32(a + "expert_group_count", 1)
        writer.add_uint32(a + "expert_group_used_count", 1)
    tokens = _byte_vocabulary(writer, ["<|endoftext|>", "<|user|>", "<|observation|>"],
                              pre="default" if ollama_layout else "glm4")
    writer.add_array("tokenizer.ggml.eos_token_ids", eos_ids)
    if not ollama_layout:
        writer.add_uint32("tokenizer.ggml.eot_token_id", eos_ids[1])
        writer.add_uint32("tokenizer.ggml.eom_token_id", eos_ids[2])
    tensors = {"token_embd.weight": w(len(tokens), n_embd), "output_norm.weight": ones(n_embd),
               "output.weight": w(len(tokens), n_embd)}
    for i in range(2):
        b = f"blk.{i}."
        tensors |= {
            b + "attn_norm.weight": ones(n_embd), b + "attn_q_a_norm.weight": ones(q_lora),
            b + "attn_kv_a_norm.weight": ones(kv_lora), b + "attn_q_a.weight": w(q_lora, n_embd),
            b + "attn_q_b.weight": w(heads * (nope + rope), q_lora),
            b + "attn_kv_a_mqa.weight": w(kv_lora + rope, n_embd), b + "attn_k_b.weight": w(heads, kv_lora, nope),
            b + "attn_v_b.weight": w(heads, v_head, kv_lora), b + "attn_output.weight": w(n_embd, heads * v_head),
            b + "ffn_norm.weight": ones(n_embd),
        }
    tensors |= {"blk.0.ffn_gate.weight": w(n_ff, n_embd), "blk.0.ffn_up.weight": w(n_ff, n_embd),
                "blk.0.ffn_down.weight": w(n_embd, n_ff),
                "blk.1.ffn_gate_inp.weight": w(n_expert, n_embd), "blk.1.exp_probs_b.bias": w(n_expert),
                "blk.1.ffn_gate_exps.weight": w(n_expert, n_ff_exp, n_embd),
                "blk.1.ffn_up_exps.weight": w(n_expert, n_ff_exp, n_embd),
                "blk.1.ffn_down_exps.weight": w(n_expert, n_embd, n_ff_exp),
                "blk.1.ffn_gate_shexp.weight": w(n_ff_exp, n_embd), "blk.1.ffn_up_shexp.weight": w(n_ff_exp, n_embd),
                "blk.1.ffn_down_shexp.weight": w(n_embd, n_ff_exp)}
    return _finish(writer, tensors, path)


def write_tiny_qwen25vl(path: Path, *, ollama_layout: bool = False, seed: int = 0) -> Path:
    """A two-block Qwen2.5-VL text model (M-RoPE; F32 random weights) with a byte-level vocabulary, as llama.cpp's
    converter lays it out (architecture `qwen2vl`, `rope.dimension_sections` of four); or, with `ollama_layout`, as
    Ollama publishes Qwen2.5-VL: `qwen25vl`, the sections as `rope.mrope_section` of three, its vision encoder
    inside."""
    n_embd, heads, kv_heads, n_ff = 64, 4, 2, 128
    head_dim = n_embd // heads
    w = _random(seed)
    arch = "qwen25vl" if ollama_layout else "qwen2vl"
    writer = _tiny_writer(path, arch, "tiny-qwen25vl", n_embd=n_embd, blocks=2, n_ff=n_ff, heads=heads,
                          kv_heads=kv_heads)
    writer.add_float32(arch + ".attention.layer_norm_rms_epsilon", 1e-6)
    writer.add_float32(arch + ".rope.freq_base", 1000000.0)
    if ollama_layout:
        writer.add_array(arch + ".rope.mrope_section", [2, 3, 3])
    else:
        writer.add_array(arch + ".rope.dimension_sections", [2, 3, 3, 0])
    tokens = _byte_vocabulary(writer, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], pre="qwen2", eos=259)
    tensors = {"token_embd.weight": w(len(tokens), n_embd), "output_norm.weight": ones(n_embd),
               "output.weight": w(len(tokens), n_embd)}
    for i in range(2):
        b = f"blk.{i}."
        tensors |= {
            b + "attn_norm.weight": ones(n_embd), b + "attn_q.weight": w(n_embd, n_embd), b + "attn_q.bias": w(n_embd),
            b + "attn_k.weight": w(kv_heads * head_dim, n_embd), b + "attn_k.bias": w(kv_heads * head_dim),
            b + "attn_v.weight": w(kv_heads * head_dim, n_embd), b + "attn_v.bias": w(kv_heads * head_dim),
            b + "attn_output.weight": w(n_embd, n_embd), b + "ffn_norm.weight": ones(n_embd),
            b + "ffn_gate.weight": w(n_ff, n_embd), b + "ffn_up.weight": w(n_ff, n_embd),
            b + "ffn_down.weight": w(n_embd, n_ff),
        }
    if ollama_layout:  # its vision encoder inside (the copy leaves it out, as for any layout)
        tensors |= {"v.blk.0.attn_q.weight": w(8, 8), "mm.0.weight": w(4, 8)}
    return _finish(writer, tensors, path)
