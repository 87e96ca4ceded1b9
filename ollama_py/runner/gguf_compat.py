"""GGUFs published by Ollama that upstream llama.cpp misreads or cannot read (no server here: a GGUF header in, a
verdict out; and the copy a verdict may call for).

    ollama_layout(info) -> Layout(overrides, note, text_only)
    write_text_only(src, dst)     (blocking) the copy a text_only layout is read from
    sweep_copies(dir, blobs)      (blocking) the copies whose model blob is gone, removed

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
  - a vision or audio encoder inside the model file (Ollama's Gemma 3 4B and up, Mistral 3, Llama 4, Qwen 3 VL),
    where llama.cpp's text loader wants only the text model's tensors, and a vocabulary longer than the token
    embeddings (Ollama leaves Gemma 3's multimodal tokens in): the text model is read from a copy of the file
    without those tensors and with its vocabulary cut to its embeddings (write_text_only, once per model, under
    the data dir; a copy whose model is gone is removed with it, or by the next prune). The images it could see are
    not seen: its encoder is in no projector llama.cpp reads;
  - Ollama's gpt-oss (architecture `gptoss`), OLMo 3 (`olmo3`), GLM-4.7-Flash (`glm4moelite`) and Qwen2.5-VL's
    text model (`qwen25vl`, its M-RoPE sections under another name and one fewer): read from a
    copy translated as Ollama's llama/compat translates them at load time (_TRANSLATIONS: the architecture's name
    and its keys' prefix; for gpt-oss also gpt-4o's pre-tokenizer, the expert FFN length from its tensors, YaRN,
    three tensor names; for GLM-4.7-Flash the latent attention's lengths, one KV head, GLM 4's pre-tokenizer, its
    end-of-turn tokens); the same copy as above, with the same lifetime;
  - Ollama's LFM2 (its output norm under another name, no pre-tokenizer, a wrong feed-forward length) and
    Ollama's Gemma 4 (the same architecture name, its tokenizer named `llama` where it is Gemma 4's BPE, its
    encoders inside, a MoE's per-expert scale under another name): read from such a copy too (_GEMMA4);
  - what needs tensors renamed or reshaped otherwise (another architecture of Ollama's own name) is not done: `note`
    says why, and the runner's load error carries it (the load is still tried: a newer llama.cpp
    may read the file), so a user reads "this GGUF is in Ollama's own layout" instead of only "unknown model
    architecture".
Files without those markers (every GGUF llama.cpp's converter writes) get nothing.
"""

from __future__ import annotations

import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import gguf

from ollama_py.store.gguf_meta import GGUFInfo

# Architectures under a name of Ollama's own, and the loader llama.cpp reads such weights with once translated.
_OWN_ARCHITECTURES = {
    "gptoss": "gpt-oss", "qwen25vl": "qwen2vl", "olmo3": "olmo2", "glm4moelite": "deepseek2",
    "deepseekocr": "deepseek2-ocr", "glmocr": "glm4", "nemotron_h_omni": "nemotron_h",
}
# Tensors of a vision or audio encoder and its projector: llama.cpp keeps them in a separate --mmproj file, and its
# text loader fails on a file that holds more tensors than it creates.
_ENCODER_PREFIXES = ("v.", "mm.", "a.", "model.vision_tower.")

_EOT_ID = 128009  # <|eot_id|> in Llama 3's vocabulary
_END_OF_TEXT_ID = 128001


@dataclass(frozen=True, slots=True)
class Layout:
    """What llama-server needs to read a GGUF as its publisher meant it."""

    overrides: tuple[str, ...] = ()  # each one `--override-kv` argument, KEY=TYPE:VALUE
    note: str = ""  # why llama-server may fail to load it ("" when nothing is known against it)
    text_only: bool = False  # its text model is read from a copy without the encoder (write_text_only)


def ollama_layout(info: GGUFInfo | None) -> Layout:
    """The overrides and the note for a model's GGUF header (None: nothing known)."""
    if info is None or info.kind in ("projector", "mmproj", "adapter"):
        return Layout()
    arch = info.architecture
    own = _OWN_ARCHITECTURES.get(arch)
    same = _translation(arch, info.kv.get("tokenizer.ggml.model"), (t[0] for t in info.tensor_table))
    if same is _GEMMA4:
        return Layout(note=_note("Gemma 4 with its tokenizer named 'llama' (SentencePiece, which splits its "
                                 "control tokens) or its encoders inside; it was read from a translated copy"),
                      text_only=True)
    if same is _LFM2:
        return Layout(note=_note("LFM2 with its output norm named 'output_norm', where llama.cpp reads "
                                 "'token_embd_norm'; it was read from a translated copy"), text_only=True)
    if arch in _TRANSLATIONS:  # renamed in the copy, as Ollama's llama/compat renames it when it loads
        return Layout(note=_note(f"architecture '{arch}', which llama.cpp reads as '{own}' once translated; it was "
                                 "read from a translated copy"), text_only=True)
    if own is not None:
        return Layout(note=_note(f"architecture '{arch}', which llama.cpp reads as '{own}' only once translated"))
    overrides: list[str] = []
    notes: list[str] = []
    encoder = _encoder_tensors(info)
    if encoder:
        notes.append(f"{encoder} tensor{'' if encoder == 1 else 's'} of a vision or audio encoder inside the model "
                     "file, where llama.cpp wants them in a separate projector file")
    if surplus := _surplus_vocabulary(info):
        notes.append(f"a vocabulary of {surplus} tokens for {_embedding_rows(info)} token "
                     "embeddings")
    if arch == "llama":
        overrides += _llama3(info)
    elif arch == "gemma3":
        overrides += _gemma3(info)
    elif arch == "mistral3":
        overrides += _mistral3(info)
    if not notes:
        return Layout(tuple(overrides))
    # both are undone in a copy of the file: the text model's tensors and a vocabulary cut to its embeddings
    return Layout(tuple(overrides), _note("; ".join(notes) + "; its text model was read from a copy without "
                                          "them"), text_only=True)


def _note(reason: str) -> str:
    return (f"this GGUF is in Ollama's own layout ({reason}), which upstream llama.cpp does not read: use a GGUF "
            "converted by llama.cpp (from Hugging Face, or `ollama-py create` from the model's safetensors)")


def _encoder_tensors(info: GGUFInfo) -> int:
    return sum(1 for name, _type, _shape in info.tensor_table if name.startswith(_ENCODER_PREFIXES))


def _embedding_rows(info: GGUFInfo) -> int | None:
    return next((shape[1] for name, _type, shape in info.tensor_table
                 if name == "token_embd.weight" and len(shape) >= 2), None)


def _surplus_vocabulary(info: GGUFInfo) -> int:
    """The vocabulary's length where it lists more tokens than the model has embeddings (Ollama leaves its
    multimodal tokens in; llama.cpp refuses the embeddings' shape), else 0."""
    rows, tokens = _embedding_rows(info), info.kv.get("tokenizer.ggml.tokens")
    return len(tokens) if rows is not None and isinstance(tokens, list) and len(tokens) > rows else 0


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


def _gemma3(info: GGUFInfo) -> list[str]:
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


TEXT_ONLY_DIR = "text-only"  # under the data dir: the copies write_text_only makes, one per model blob

_VOCABULARY_ARRAYS = ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type")


@dataclass(frozen=True, slots=True)
class Translation:
    """An architecture of Ollama's own name as llama.cpp reads it (what Ollama's llama/compat does at load time,
    done once in the copy): the name and its keys' prefix, keys set, tensor names' parts renamed."""

    arch: str
    keys: tuple[tuple[str, object, gguf.GGUFValueType], ...] = ()  # set whatever the file says
    defaults: tuple[tuple[str, object, gguf.GGUFValueType], ...] = ()  # set where the file has none
    parts: tuple[tuple[str, str], ...] = ()  # a tensor name's dot-separated part, renamed
    weight_suffix: tuple[str, ...] = ()  # tensors whose name ends in this part, without llama.cpp's `.weight`
    feed_forward_of: tuple[str, str] = ("", "")  # (key, tensor): the key from the tensor's second dimension
    suffixes: tuple[tuple[str, str], ...] = ()  # a tensor name (or its ending after a dot), renamed
    # keys set from the file's own key/values (by their names in the file), whatever the file says of them
    derived: Callable[[Mapping[str, object]], list[tuple[str, object, gguf.GGUFValueType]]] | None = None
    dropped: tuple[str, ...] = ()  # keys (by their names in the file) that `derived` replaces under another name
    feed_forward_forced: bool = False  # feed_forward_of's key set whatever the file says (else only where missing)


_S, _U32 = gguf.GGUFValueType.STRING, gguf.GGUFValueType.UINT32
_TRANSLATIONS = {
    # gpt-oss as Ollama publishes it: its own spelling, no expert FFN length or YaRN type, GPT-2's pre-tokenizer
    # (gpt-oss needs gpt-4o's: else its harmony headers come out malformed), three tensor names of its converter
    "gptoss": Translation(
        "gpt-oss", keys=(("tokenizer.ggml.pre", "gpt-4o", _S),),
        defaults=(("gpt-oss.rope.scaling.type", "yarn", _S),),
        parts=(("attn_out", "attn_output"), ("ffn_norm", "post_attention_norm")),
        weight_suffix=("attn_sinks",),
        feed_forward_of=("gpt-oss.expert_feed_forward_length", "blk.0.ffn_gate_exps.weight")),
    # OLMo 3: llama.cpp's olmo2 loader reads its tensors and its sliding-window RoPE; only the name differs
    "olmo3": Translation("olmo2"),
    # GLM-4.7-Flash: DeepSeek V2's latent attention under a name of Ollama's own, with the older convention of
    # per-head key/value lengths (llama.cpp's deepseek2 wants the absorbed ones, one KV head, and the per-head ones
    # as the `_mla` lengths), no expert groups, GLM 4's pre-tokenizer, its end-of-turn tokens in eos_token_ids
    "glm4moelite": Translation(
        "deepseek2", keys=(("tokenizer.ggml.pre", "glm4", _S),),
        defaults=(("deepseek2.expert_group_count", 1, _U32), ("deepseek2.expert_group_used_count", 1, _U32)),
        derived=lambda kv: _latent_attention(kv, "glm4moelite.")),
    # Qwen2.5-VL: llama.cpp's qwen2vl loader reads it, its M-RoPE sections as four (the last 0) under another name
    "qwen25vl": Translation("qwen2vl", derived=lambda kv: _rope_sections(kv, "qwen25vl.rope.mrope_section"),
                            dropped=("qwen25vl.rope.mrope_section",)),
}


def _rope_sections(kv: Mapping[str, object], key: str) -> list[tuple[str, object, gguf.GGUFValueType]]:
    """qwen2vl's four M-RoPE sections from the three a file wrote under `key`."""
    sections = kv.get(key)
    if not isinstance(sections, list) or len(sections) < 3 or not all(isinstance(s, int) for s in sections[:3]):
        return []
    return [("qwen2vl.rope.dimension_sections", [*sections[:3], 0], gguf.GGUFValueType.ARRAY)]


def _latent_attention(kv: Mapping[str, object], prefix: str) -> list[tuple[str, object, gguf.GGUFValueType]]:
    """deepseek2's latent-attention keys from a file that wrote the per-head ones (Ollama's glm4moelite)."""
    out: list[tuple[str, object, gguf.GGUFValueType]] = [("deepseek2.attention.head_count_kv", 1, _U32)]
    kv_lora, rope, head = (kv.get(prefix + k) for k in ("attention.kv_lora_rank", "rope.dimension_count",
                                                          "attention.key_length"))
    if isinstance(kv_lora, int) and isinstance(rope, int):
        out += [("deepseek2.attention.key_length", kv_lora + rope, _U32),
                ("deepseek2.attention.value_length", kv_lora, _U32)]
    if isinstance(head, int):
        out += [("deepseek2.attention.key_length_mla", head, _U32),
                ("deepseek2.attention.value_length_mla", head, _U32)]
    ends = kv.get("tokenizer.ggml.eos_token_ids")
    if isinstance(ends, list):
        ids = [i for i in ends if isinstance(i, int) and i >= 0]
        for name, at in (("tokenizer.ggml.eot_token_id", 1), ("tokenizer.ggml.eom_token_id", 2)):
            if name not in kv and len(ids) > at:
                out.append((name, ids[at], _U32))
    return out
# Gemma 4 as Ollama publishes it (the same architecture name): its tokenizer named `llama` (SentencePiece, which
# would split `<|channel>`, `<|tool_call>`... into pieces) where it is Gemma 4's BPE, its encoders inside (dropped
# as for any layout), and the MoE's per-expert scale under the router's name where llama.cpp reads the down
# projection's. Its experts' separate gate and up tensors llama.cpp reads as they are.
_GEMMA4 = Translation("gemma4", keys=(("tokenizer.ggml.model", "gemma4", _S),),
                      suffixes=(("ffn_gate_inp.per_expert_scale", "ffn_down_exps.scale"),))


# LFM2 as Ollama publishes it (the same architecture name): the norm before the output under `output_norm`, where
# llama.cpp reads `token_embd_norm`; no LFM2 pre-tokenizer; a feed-forward length its tensors may not have.
_LFM2 = Translation("lfm2", keys=(("tokenizer.ggml.pre", "lfm2", _S),),
                    suffixes=(("output_norm.weight", "token_embd_norm.weight"),),
                    feed_forward_of=("lfm2.feed_forward_length", "blk.0.ffn_gate.weight"), feed_forward_forced=True)


def _translation(arch: str, tokenizer: object, tensors: Iterable[str]) -> Translation | None:
    """The translation a file of this architecture, tokenizer and tensors needs, None if none."""
    if arch in _TRANSLATIONS:
        return _TRANSLATIONS[arch]
    if arch == "lfm2":
        names = set(tensors)
        return _LFM2 if "output_norm.weight" in names and "token_embd_norm.weight" not in names else None
    if arch == "gemma4" and (tokenizer == "llama" or any(
            name.startswith(_ENCODER_PREFIXES) or name.endswith(".per_expert_scale") for name in tensors)):
        return _GEMMA4
    return None


def _tensor_name(name: str, translation: Translation | None) -> str:
    if translation is None:
        return name
    for old, new in translation.suffixes:
        if name == old or name.endswith("." + old):
            name = name[:-len(old)] + new
    parts = [dict(translation.parts).get(part, part) for part in name.split(".")]
    if parts[-1] in translation.weight_suffix:
        parts.append("weight")
    return ".".join(parts)


def _key_name(key: str, old_arch: str, translation: Translation | None) -> str:
    if translation is not None and key.startswith(old_arch + "."):
        return translation.arch + key[len(old_arch):]
    return key


def write_text_only(src: Path, dst: Path) -> None:
    """(Blocking: a copy of the model's text weights.) `src` as llama.cpp's text loader reads it: without the
    tensors of an encoder inside it, its vocabulary arrays cut to its token embeddings' rows, an architecture of
    Ollama's own name translated (_TRANSLATIONS); every other key/value and tensor as it is. Written beside `dst`
    and renamed onto it, so a copy cut short is never read."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    need, free = src.stat().st_size, shutil.disk_usage(dst.parent).free
    if free < need + (1 << 30):  # the copy is at most the file's size; a GiB left beside it
        raise OSError(errno.ENOSPC, f"{need / 2**30:.1f} GiB are needed and {free / 2**30:.1f} GiB are free")
    reader = gguf.GGUFReader(str(src))
    embd = next((t for t in reader.tensors if t.name == "token_embd.weight"), None)
    rows = int(embd.shape[1]) if embd is not None and len(embd.shape) >= 2 else None
    handle, name = tempfile.mkstemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".partial")
    os.close(handle)
    writer_path = Path(name)
    arch = str(reader.fields["general.architecture"].contents())
    tokenizer = reader.fields["tokenizer.ggml.model"].contents() if "tokenizer.ggml.model" in reader.fields else None
    translation = _translation(arch, tokenizer, (t.name for t in reader.tensors))
    writer = gguf.GGUFWriter(str(writer_path), translation.arch if translation is not None else arch)
    try:
        keys = {key: (value, kind) for key, value, kind in translation.keys} if translation is not None else {}
        if translation is not None and translation.feed_forward_forced:
            keys |= {key: (value, kind) for key, value, kind in _feed_forward(reader, translation)}
        if translation is not None and translation.derived is not None:
            values = {f.name: f.contents() for f in reader.fields.values() if not f.name.startswith("GGUF.")}
            keys |= {key: (value, kind) for key, value, kind in translation.derived(values)}
        written = set()
        for field in reader.fields.values():
            if field.name.startswith("GGUF.") or field.name == "general.architecture" or (
                    translation is not None and field.name in translation.dropped):
                continue
            name = _key_name(field.name, arch, translation)
            kind = field.types[0]
            value = field.contents()
            if name in keys:
                value, kind = keys.pop(name)
            elif field.name in _VOCABULARY_ARRAYS and rows is not None and isinstance(value, list):
                value = value[:rows]
            writer.add_key_value(name, value, kind,
                                 sub_type=field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None)
            written.add(name)
        if translation is not None:
            derived = [] if translation.feed_forward_forced else _feed_forward(reader, translation)
            for key, value, kind in (*((k, v, t) for k, (v, t) in keys.items()), *translation.defaults, *derived):
                if key not in written:
                    writer.add_key_value(key, value, kind)
                    written.add(key)
        kept = [t for t in reader.tensors if not t.name.startswith(_ENCODER_PREFIXES)]
        for tensor in kept:
            writer.add_tensor_info(_tensor_name(tensor.name, translation), tensor.data.shape, tensor.data.dtype,
                                   tensor.data.nbytes, tensor.tensor_type)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for tensor in kept:
            writer.write_tensor_data(tensor.data)
        writer.close()
        os.replace(writer_path, dst)
    finally:
        writer.close()
        writer_path.unlink(missing_ok=True)


def _feed_forward(reader: gguf.GGUFReader, translation: Translation) -> list[tuple[str, object, gguf.GGUFValueType]]:
    """The key a translation reads from a tensor's shape (gpt-oss's expert FFN length: ne[1] of an expert gate)."""
    key, tensor_name = translation.feed_forward_of
    tensor = next((t for t in reader.tensors if t.name == tensor_name), None) if key else None
    if tensor is None or len(tensor.shape) < 2:
        return []
    return [(key, int(tensor.shape[1]), _U32)]


def sweep_copies(directory: Path, blobs: Path) -> list[str]:
    """(Blocking.) Remove the text-only copies whose model blob is gone from `blobs` (a model deleted, or pruned);
    the names removed."""
    removed = []
    for copy in directory.glob("sha256-*.gguf"):
        if not (blobs / copy.name.removesuffix(".gguf")).exists():
            copy.unlink(missing_ok=True)
            removed.append(copy.name)
    return removed
