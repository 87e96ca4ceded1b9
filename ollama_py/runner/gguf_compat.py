"""GGUFs published by Ollama that upstream llama.cpp misreads or cannot read (pure: a GGUF header in, a verdict out).

    ollama_layout(info) -> Layout(overrides, note)

Ollama's library publishes some models in a layout of its own: metadata under other names or missing, a vision
encoder inside the model file, an architecture spelled its own way. Ollama loads them through a translation layer
it patches into llama.cpp (llama/compat); our runner is upstream llama-server, which has none. A store shared
with Ollama (OLLAMA_MODELS=~/.ollama/models) holds such files, so:

  - what is metadata only is given to llama-server as `--override-kv KEY=TYPE:VALUE` (read wherever llama.cpp
    reads that key), with the values Ollama's layer puts there:
      * Llama 3 files without a pre-tokenizer (llama.cpp then tokenizes with its default one: "GENERATION QUALITY
        WILL BE DEGRADED") or whose end-of-sequence token is <|end_of_text|> where the instruct model ends its turns
        with <|eot_id|>: tokenizer.ggml.pre = llama-bpe, eos and eot = 128009;
      * Gemma 3 files without layer_norm_rms_epsilon (which llama.cpp requires: "key not found in model"), with their
        RoPE bases under Ollama's names (rope.global/local.freq_base), or without the linear RoPE scaling of the
        128K-context sizes;
      * Mistral 3 files with their YaRN parameters under Ollama's names;
  - what needs tensors renamed, dropped or reshaped cannot be done from outside the runner: `note` says why, and
    the runner's load error carries it (the load is still tried: a newer llama.cpp may read the file), so a user
    reads "this GGUF is in Ollama's own layout" instead of only "wrong number of tensors".
Files without those markers (every GGUF llama.cpp's converter writes) get nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from ollama_py.store.gguf_meta import GGUFInfo

# Architectures under a name of Ollama's own, and the loader llama.cpp reads such weights with once translated.
_OWN_ARCHITECTURES = {
    "gptoss": "gpt-oss", "qwen25vl": "qwen2vl", "olmo3": "olmo2", "glm4moelite": "deepseek2",
    "deepseekocr": "deepseek2-ocr", "glmocr": "glm4", "nemotron_h_omni": "nemotron_h",
}
# Tensors of a vision or audio encoder and its projector: llama.cpp keeps them in a separate --mmproj file, and its
# text loader fails on a file that holds more tensors than it creates.
_ENCODER_PREFIXES = ("v.", "mm.", "a.")

_EOT_ID = 128009  # <|eot_id|> in Llama 3's vocabulary
_END_OF_TEXT_ID = 128001


@dataclass(frozen=True, slots=True)
class Layout:
    """What llama-server needs to read a GGUF as its publisher meant it."""

    overrides: tuple[str, ...] = ()  # each one `--override-kv` argument, KEY=TYPE:VALUE
    note: str = ""  # why llama-server may fail to load it ("" when nothing is known against it)


def ollama_layout(info: GGUFInfo | None) -> Layout:
    """The overrides and the note for a model's GGUF header (None: nothing known)."""
    if info is None or info.kind in ("projector", "mmproj", "adapter"):
        return Layout()
    arch = info.architecture
    own = _OWN_ARCHITECTURES.get(arch)
    if own is not None:
        return Layout(note=_note(f"architecture '{arch}', which llama.cpp reads as '{own}' only once translated"))
    overrides: list[str] = []
    notes: list[str] = []
    encoder = _encoder_tensors(info)
    if encoder:
        notes.append(f"{encoder} tensor{'' if encoder == 1 else 's'} of a vision or audio encoder inside the model "
                     "file, where llama.cpp wants them in a separate projector file")
    if arch == "llama":
        overrides += _llama3(info)
    elif arch == "gemma3":
        overrides += _gemma3(info, notes)
    elif arch == "mistral3":
        overrides += _mistral3(info)
    return Layout(tuple(overrides), _note("; ".join(notes)) if notes else "")


def _note(reason: str) -> str:
    return (f"this GGUF is in Ollama's own layout ({reason}), which upstream llama.cpp does not read: use a GGUF "
            "converted by llama.cpp (from Hugging Face, or `ollama-py create` from the model's safetensors)")


def _encoder_tensors(info: GGUFInfo) -> int:
    return sum(1 for name, _type, _shape in info.tensor_table if name.startswith(_ENCODER_PREFIXES))


def _token(info: GGUFInfo, index: int) -> str | None:
    tokens = info.kv.get("tokenizer.ggml.tokens")
    if isinstance(tokens, list) and 0 <= index < len(tokens) and isinstance(tokens[index], str):
        return tokens[index]
    return None


def _int(info: GGUFInfo, key: str) -> int | None:
    value = info.kv.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(info: GGUFInfo, key: str) -> float | None:
    value = info.kv.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str(info: GGUFInfo, key: str) -> str | None:
    value = info.kv.get(key)
    return value if isinstance(value, str) else None


def _default_pre(info: GGUFInfo) -> bool:
    pre = info.kv.get("tokenizer.ggml.pre")
    return pre is None or pre in ("", "default")


def _f(key: str, value: float) -> str:
    return f"{key}=float:{value!r}"


def _llama3(info: GGUFInfo) -> list[str]:
    """Ollama's Llama 3 marker: <|eot_id|> at 128009 and a Llama 3 chat format, with no pre-tokenizer (or the
    default one) or <|end_of_text|> as the end of sequence."""
    if _token(info, _EOT_ID) != "<|eot_id|>":
        return []
    template = _str(info, "tokenizer.chat_template") or ""
    if not (_token(info, 128006) == "<|start_header_id|>" or "<|start_header_id|>" in template
            or "<|eot_id|>" in template):
        return []
    eos, eot = _int(info, "tokenizer.ggml.eos_token_id"), _int(info, "tokenizer.ggml.eot_token_id")
    if not (_default_pre(info) or eos == _END_OF_TEXT_ID):
        return []
    out = []
    if _default_pre(info):
        out.append("tokenizer.ggml.pre=str:llama-bpe")
    if eos is None or eos == _END_OF_TEXT_ID:
        out.append(f"tokenizer.ggml.eos_token_id=int:{_EOT_ID}")
    if eot is None or eot == _END_OF_TEXT_ID:
        out.append(f"tokenizer.ggml.eot_token_id=int:{_EOT_ID}")
    return out


def _gemma3(info: GGUFInfo, notes: list[str]) -> list[str]:
    """Ollama's Gemma 3 markers: its converter's key names (nested RoPE bases, padding/unknown-token flags, the
    multimodal token count) or no RMS-norm epsilon, which every such file lacks."""
    kv = info.kv
    marked = any(k in kv for k in ("gemma3.mm.tokens_per_image", "gemma3.rope.global.freq_base",
                                   "gemma3.rope.local.freq_base", "tokenizer.ggml.add_padding_token",
                                   "tokenizer.ggml.add_unknown_token")) \
        or "gemma3.attention.layer_norm_rms_epsilon" not in kv or _encoder_tensors(info) > 0
    if not marked:
        return []
    out = []
    base = _float(info, "gemma3.rope.global.freq_base")
    if base is None and "gemma3.rope.freq_base" not in kv:
        base = 1_000_000.0
    if base is not None:
        out.append(_f("gemma3.rope.freq_base", base))
    local = _float(info, "gemma3.rope.local.freq_base")
    if local is None and "gemma3.rope.freq_base_swa" not in kv:
        local = 10_000.0
    if local is not None:
        out.append(_f("gemma3.rope.freq_base_swa", local))
    if "gemma3.attention.layer_norm_rms_epsilon" not in kv:
        out.append(_f("gemma3.attention.layer_norm_rms_epsilon", 1e-6))
    if (_int(info, "gemma3.context_length") or 0) >= 131072 and "gemma3.rope.scaling.type" not in kv:
        out += ["gemma3.rope.scaling.type=str:linear", _f("gemma3.rope.scaling.factor", 8.0)]
    rows = next((shape[1] for name, _type, shape in info.tensor_table
                 if name == "token_embd.weight" and len(shape) >= 2), None)
    tokens = kv.get("tokenizer.ggml.tokens")
    if rows is not None and isinstance(tokens, list) and len(tokens) > rows:
        notes.append(f"a vocabulary of {len(tokens)} tokens for {rows} token embeddings")
    return out


def _mistral3(info: GGUFInfo) -> list[str]:
    """Mistral 3's YaRN parameters and attention temperature under Ollama's names, copied to llama.cpp's."""
    renames = (("mistral3.rope.scaling.beta_fast", "mistral3.rope.scaling.yarn_beta_fast"),
               ("mistral3.rope.scaling.beta_slow", "mistral3.rope.scaling.yarn_beta_slow"),
               ("mistral3.rope.scaling.mscale_all_dim", "mistral3.rope.scaling.yarn_log_multiplier"),
               ("mistral3.rope.scaling_beta", "mistral3.attention.temperature_scale"))
    out = []
    for theirs, ours in renames:
        value = _float(info, theirs)
        if value is not None and ours not in info.kv:
            out.append(_f(ours, value))
    if out and _default_pre(info):
        out.append("tokenizer.ggml.pre=str:tekken")
    return out
