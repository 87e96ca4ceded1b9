"""Tiny Hugging Face model directories made on the spot (no hub): a random 2-layer Llama with a sentencepiece
tokenizer trained on a few sentences, and a LoRA adapter for it, as transformers and peft-style tools save them.

    make_llama_dir(path)            config.json, model.safetensors, tokenizer.model, tokenizer_config.json, ...
    make_lora_dir(path, base_dir)   adapter_config.json + adapter_model.safetensors

Needs the `convert` extra (torch, transformers, safetensors, sentencepiece); imported lazily so that test modules
that use it can skip cleanly where it is missing.
"""

from __future__ import annotations

import json
from pathlib import Path

SENTENCES = [
    "The sky is blue because air scatters blue light more than red light.",
    "A llama is a domesticated South American camelid.",
    "Once upon a time there was a tiny model that could write a few words.",
    "Hello world, this is a test of the tokenizer and the converter.",
    "Quick brown foxes jump over lazy dogs while the sun shines.",
    "Numbers like 1 2 3 4 5 6 7 8 9 0 appear in text too.",
]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _train_tokenizer(out_dir: Path) -> Path:
    import sentencepiece as spm

    prefix = out_dir / "tokenizer"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES * 4), model_prefix=str(prefix), vocab_size=400, model_type="bpe",
        byte_fallback=True, hard_vocab_limit=False, character_coverage=1.0, bos_id=1, eos_id=2, unk_id=0,
        pad_id=-1, minloglevel=2,
    )
    (out_dir / "tokenizer.vocab").unlink(missing_ok=True)
    return prefix.with_suffix(".model")


def make_llama_dir(path: Path, *, architecture: str = "LlamaForCausalLM", chat_template: bool = True,
                   seed: int = 0) -> Path:
    """A random LlamaForCausalLM (2 layers, hidden 64) saved as safetensors with its tokenizer, in `path`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, LlamaTokenizer

    path.mkdir(parents=True, exist_ok=True)
    spm_model = _train_tokenizer(path)
    tokenizer = LlamaTokenizer(vocab_file=str(spm_model), legacy=False)
    if chat_template:
        tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(path)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, bos_token_id=1,
        eos_token_id=2, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(path, safe_serialization=True)
    if architecture != "LlamaForCausalLM":
        cfg = json.loads((path / "config.json").read_text())
        cfg["architectures"] = [architecture]
        (path / "config.json").write_text(json.dumps(cfg, indent=2))
    return path


def make_lora_dir(path: Path, base_dir: Path, *, rank: int = 4, seed: int = 1, scale: float = 0.5) -> Path:
    """A LoRA adapter (q_proj and v_proj of every layer) for the model in `base_dir`, as peft saves one."""
    import torch
    from safetensors.torch import save_file

    cfg = json.loads((base_dir / "config.json").read_text())
    hidden, heads, kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    kv_dim = hidden // heads * kv
    torch.manual_seed(seed)
    tensors = {}
    for layer in range(cfg["num_hidden_layers"]):
        for proj, out_dim in (("q_proj", hidden), ("v_proj", kv_dim)):
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{proj}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, hidden) * scale
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(out_dim, rank) * scale
    path.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(path / "adapter_model.safetensors"))
    (path / "adapter_config.json").write_text(json.dumps({
        "base_model_name_or_path": str(base_dir), "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank,
        "lora_alpha": 2 * rank, "lora_dropout": 0.0, "target_modules": ["q_proj", "v_proj"], "bias": "none",
        "fan_in_fan_out": False, "inference_mode": True,
    }, indent=2))
    return path


def make_embedding_gemma_dir(path: Path, *, seed: int = 0) -> Path:
    """A random EmbeddingGemma-style sentence-transformers directory: a 2-layer Gemma3TextModel with mean pooling
    (1_Pooling) and two Dense projections (2_Dense 64->128, 3_Dense 128->64) listed in modules.json."""
    import torch
    from safetensors.torch import save_file
    from transformers import Gemma3TextConfig, Gemma3TextModel, GemmaTokenizer

    path.mkdir(parents=True, exist_ok=True)
    tokenizer = GemmaTokenizer(vocab_file=str(_train_tokenizer(path)))
    tokenizer.save_pretrained(path)
    torch.manual_seed(seed)
    config = Gemma3TextConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, head_dim=16, max_position_embeddings=256, sliding_window=512, bos_token_id=1,
        eos_token_id=2, pad_token_id=0,
    )
    Gemma3TextModel(config).save_pretrained(path, safe_serialization=True)
    cfg = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps({**cfg, "architectures": ["Gemma3TextModel"]}, indent=2))
    modules = [("", "Transformer"), ("1_Pooling", "Pooling"), ("2_Dense", "Dense"), ("3_Dense", "Dense")]
    (path / "modules.json").write_text(json.dumps([
        {"idx": i, "name": str(i), "path": p, "type": f"sentence_transformers.models.{t}"}
        for i, (p, t) in enumerate(modules)]))
    (path / "1_Pooling").mkdir(exist_ok=True)
    (path / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 64,
                                                                "pooling_mode_mean_tokens": True}))
    for name, (n_in, n_out) in {"2_Dense": (64, 128), "3_Dense": (128, 64)}.items():
        (path / name).mkdir(exist_ok=True)
        save_file({"linear.weight": torch.randn(n_out, n_in) * 0.1}, str(path / name / "model.safetensors"))
        (path / name / "config.json").write_text(json.dumps({
            "in_features": n_in, "out_features": n_out, "bias": False,
            "activation_function": "torch.nn.modules.linear.Identity"}))
    return path
