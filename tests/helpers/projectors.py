"""Tiny multimodal projectors (mmproj GGUFs) and media, for tests that run the real llama-server with --mmproj.

    write_vision_projector(path)   a LLaVA-1.5-style vision projector ("mlp"): a 2-block ViT on 32x32 images
                                   (8x8 patches: VISION_TOKENS = 16 image tokens) and the mm.0/mm.2 MLP
    write_audio_projector(path)    an Ultravox-style audio projector ("ultravox"): a whisper encoder (two conv1d,
                                   one block) and the stacking SwiGLU MLP; AUDIO_TOKENS (100) per started 30 s
    png_bytes(size)                a small RGB PNG (stdlib only), for an image request
    wav_bytes(seconds, rate)       a mono 16-bit PCM WAV of a sine tone (stdlib only), for an audio request

The weights are random (a fixed seed), so what the model says about the media means nothing: the point is that
llama-server (tools/mtmd/clip.cpp) loads the projector beside a real text model, reports the modality in /props
(`modalities`: {"vision": true, ...} or {"audio": true, ...}; the clip loader's own "has vision encoder" / "has
audio encoder" lines only show at `-lv 4`), and turns each media marker of a prompt into image or audio tokens.
llama-server picks a random marker per process unless LLAMA_MEDIA_MARKER is set (the runner factory sets it to
"<__media__>"; /props says which as `media_marker`). Both files are a few hundred KB, load in a few milliseconds
and encode one image or one 30 s audio chunk in well under a second on two CPU cores. Their output width (mm.2 /
mm.a.mlp.2) must equal the text model's n_embd, which llama-server checks at load: 576 for SmolLM2-135M.
"""

from __future__ import annotations

import array
import io
import math
import struct
import sys
import wave
import zlib
from pathlib import Path

import gguf
import numpy as np

from tests.fakes.gguf_files import write_gguf

# The vision encoder: a 32x32 image cut into 8x8 patches -> 16 patches (and a class token), embedding 32.
IMAGE_SIZE = 32
PATCH_SIZE = 8
VISION_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2  # what one image becomes in the prompt (the class token is dropped)
VISION_EMBD, VISION_HEADS, VISION_FF, VISION_BLOCKS, VISION_MM_HIDDEN = 32, 4, 64, 2, 64

# The audio encoder: whisper's front end (16 kHz, 128 mel bins, 30 s chunks of 3000 frames -> 1500 positions
# after the stride-2 conv), embedding 32, then 15 frames stacked into one -> 100 tokens per chunk. The graph's row
# count after stacking must equal clip.cpp's expected 3000/stack/2, or the first audio request aborts the server
# ("expected output N tokens, got M" / "Invalid number of output tokens"): the stack factor must divide 1500, and
# GGML_PAD (a bit mask, wrong for a stride that is not a power of two) must not round up a row. 15 with embedding
# 32 was checked against the real llama-server; Ultravox's own 8 is not safe here (stride 8*32=256 pads 1500 to
# 1504 positions: 188 tokens, 187 expected, abort).
AUDIO_MEL_BINS = 128
AUDIO_EMBD, AUDIO_HEADS, AUDIO_FF, AUDIO_BLOCKS, AUDIO_MM_HIDDEN = 32, 4, 64, 1, 64
AUDIO_STACK_FACTOR = 15
AUDIO_POSITIONS = 1500  # whisper's 3000 mel frames per 30 s chunk, halved by the second conv
AUDIO_TOKENS = AUDIO_POSITIONS // AUDIO_STACK_FACTOR  # per started 30 s of audio

CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


class _Weights:
    """Small random float32 tensors from a fixed seed; numpy shapes are ggml's ne reversed."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def w(self, *shape: int, dtype: type = np.float32) -> np.ndarray:
        return (self.rng.standard_normal(shape) * 0.02).astype(dtype)

    @staticmethod
    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)

    @staticmethod
    def zeros(*shape: int) -> np.ndarray:
        return np.zeros(shape, dtype=np.float32)


def _encoder_blocks(p: _Weights, prefix: str, blocks: int, embd: int, ff: int, *,
                    k_bias: bool) -> dict[str, np.ndarray]:
    """A pre-norm transformer's blocks with clip.cpp's names (ln1, attn_q/k/v/out, ln2, ffn_up/down). ffn_down is
    (embd, ff) in numpy, ne [ff, embd]: ne[0] != embd, so clip.cpp does not take it for a legacy swapped pair."""
    tensors: dict[str, np.ndarray] = {}
    for il in range(blocks):
        b = f"{prefix}.blk.{il}"
        tensors |= {
            f"{b}.ln1.weight": p.ones(embd), f"{b}.ln1.bias": p.zeros(embd),
            f"{b}.attn_q.weight": p.w(embd, embd), f"{b}.attn_q.bias": p.zeros(embd),
            f"{b}.attn_k.weight": p.w(embd, embd),
            f"{b}.attn_v.weight": p.w(embd, embd), f"{b}.attn_v.bias": p.zeros(embd),
            f"{b}.attn_out.weight": p.w(embd, embd), f"{b}.attn_out.bias": p.zeros(embd),
            f"{b}.ln2.weight": p.ones(embd), f"{b}.ln2.bias": p.zeros(embd),
            f"{b}.ffn_up.weight": p.w(ff, embd), f"{b}.ffn_up.bias": p.zeros(ff),
            f"{b}.ffn_down.weight": p.w(embd, ff), f"{b}.ffn_down.bias": p.zeros(embd),
        }
        if k_bias:  # CLIP has a key bias; whisper has none (clip.cpp asserts that for the whisper encoder)
            tensors[f"{b}.attn_k.bias"] = p.zeros(embd)
    return tensors


def _write_projector(path: Path, name: str, kv: dict[str, object], tensors: dict[str, np.ndarray]) -> Path:
    """A "clip" GGUF with general.type "mmproj", as llama.cpp's converter writes one (tests/fakes/gguf_files)."""
    return write_gguf(path, "clip", {"general.name": name, "general.file_type": int(gguf.LlamaFileType.ALL_F32),
                                     **kv}, tensors, general_type=gguf.GGUFType.MMPROJ)


def write_vision_projector(path: Path, text_embd: int = 576, *, seed: int = 0) -> Path:
    """Write a tiny LLaVA-1.5-style vision projector (clip.projector_type "mlp") to `path` and return it.

    Tests pass it to the real llama-server with `--mmproj` beside a real text model (SmolLM2-135M: n_embd 576 =
    `text_embd`, which llama-server requires the projector's output width to match), then send an image: the
    server loads it as a vision projector (/props `modalities.vision` true) and replaces each `<__media__>` with
    VISION_TOKENS (16) image embeddings. The encoder is a CLIP ViT shrunk to embedding 32, 4 heads, 2 blocks
    (llava runs all but the last), 32x32 input in 8x8 patches, with a class token, learned positions and a
    pre-norm; the projector is mm.0 (32 -> 64), GELU, mm.2 (64 -> text_embd). Random float32 weights (the patch
    convolution in F16, as llama.cpp's converter writes it), fixed seed: about 240 KB.
    """
    p = _Weights(seed)
    e, n_pos = VISION_EMBD, VISION_TOKENS + 1
    kv: dict[str, object] = {
        "clip.projector_type": "mlp",
        "clip.has_vision_encoder": True,
        "clip.has_audio_encoder": False,
        "clip.use_gelu": True,
        "clip.vision.image_size": IMAGE_SIZE,
        "clip.vision.patch_size": PATCH_SIZE,
        "clip.vision.embedding_length": e,
        "clip.vision.feed_forward_length": VISION_FF,
        "clip.vision.attention.head_count": VISION_HEADS,
        "clip.vision.attention.layer_norm_epsilon": 1e-5,
        "clip.vision.block_count": VISION_BLOCKS,
        "clip.vision.projection_dim": text_embd,
        "clip.vision.image_mean": CLIP_MEAN,
        "clip.vision.image_std": CLIP_STD,
    }
    tensors = {
        # conv2d kernel ne [patch, patch, 3, embd]
        "v.patch_embd.weight": p.w(e, 3, PATCH_SIZE, PATCH_SIZE, dtype=np.float16),
        "v.class_embd": p.w(e),
        "v.position_embd.weight": p.w(n_pos, e),
        "v.pre_ln.weight": p.ones(e),
        "v.pre_ln.bias": p.zeros(e),
        **_encoder_blocks(p, "v", VISION_BLOCKS, e, VISION_FF, k_bias=True),
        "mm.0.weight": p.w(VISION_MM_HIDDEN, e),
        "mm.0.bias": p.zeros(VISION_MM_HIDDEN),
        "mm.2.weight": p.w(text_embd, VISION_MM_HIDDEN),
        "mm.2.bias": p.zeros(text_embd),
    }
    return _write_projector(path, "tiny-llava-mmproj", kv, tensors)


def write_audio_projector(path: Path, text_embd: int = 576, *, seed: int = 1,
                          stack_factor: int = AUDIO_STACK_FACTOR) -> Path:
    """Write a tiny Ultravox-style audio projector (clip.projector_type "ultravox") to `path` and return it.

    Tests pass it to the real llama-server with `--mmproj` beside a real text model (output width `text_embd` =
    the text model's n_embd, 576 for SmolLM2-135M, which llama-server checks) and send a WAV: the server loads it
    as an audio projector (/props `modalities.audio` true), turns the clip into 128-bin log-mel frames (whisper's
    front end: 16 kHz, padded to 30 s chunks of 3000 frames) and each `<__media__>` into AUDIO_TOKENS (100)
    embeddings per started 30 s. The encoder is whisper shrunk to embedding 32, 4 heads, 1 block: conv1d
    (128 mels -> 32, k3) and conv1d (stride 2), 1500 learned positions, attn_k without bias, a post-norm; the
    projector stacks 15 frames (AUDIO_STACK_FACTOR), RMS-norms, mm.a.mlp.1 (480 -> 2*64), SwiGLU, RMS-norm,
    mm.a.mlp.2 (64 -> text_embd). Random float32 weights (conv kernels in F16, as llama.cpp's converter writes
    them), fixed seed: about 650 KB.
    """
    p = _Weights(seed)
    e, stacked = AUDIO_EMBD, AUDIO_EMBD * stack_factor
    kv: dict[str, object] = {
        "clip.projector_type": "ultravox",
        "clip.has_vision_encoder": False,
        "clip.has_audio_encoder": True,
        "clip.audio.num_mel_bins": AUDIO_MEL_BINS,
        "clip.audio.embedding_length": e,
        "clip.audio.feed_forward_length": AUDIO_FF,
        "clip.audio.attention.head_count": AUDIO_HEADS,
        "clip.audio.attention.layer_norm_epsilon": 1e-5,
        "clip.audio.block_count": AUDIO_BLOCKS,
        "clip.audio.projection_dim": text_embd,
        "clip.audio.projector.stack_factor": stack_factor,
    }
    tensors = {
        # conv1d kernels ne [k, in, out]; their biases ne [1, out] (added to [frames, out])
        "a.conv1d.1.weight": p.w(e, AUDIO_MEL_BINS, 3, dtype=np.float16),
        "a.conv1d.1.bias": p.zeros(e, 1),
        "a.conv1d.2.weight": p.w(e, e, 3, dtype=np.float16),
        "a.conv1d.2.bias": p.zeros(e, 1),
        "a.position_embd.weight": p.w(AUDIO_POSITIONS, e),
        **_encoder_blocks(p, "a", AUDIO_BLOCKS, e, AUDIO_FF, k_bias=False),
        "a.post_ln.weight": p.ones(e),
        "a.post_ln.bias": p.zeros(e),
        "mm.a.norm_pre.weight": p.ones(stacked),
        "mm.a.mlp.1.weight": p.w(2 * AUDIO_MM_HIDDEN, stacked),
        "mm.a.norm_mid.weight": p.ones(AUDIO_MM_HIDDEN),
        "mm.a.mlp.2.weight": p.w(text_embd, AUDIO_MM_HIDDEN),
    }
    return _write_projector(path, "tiny-ultravox-mmproj", kv, tensors)


def wav_bytes(seconds: float = 1.0, rate: int = 16000) -> bytes:
    """A mono 16-bit PCM WAV of a 440 Hz sine tone (`seconds` long at `rate` Hz), written with the stdlib `wave`
    module, for an audio request to llama-server with write_audio_projector's projector (it decodes WAV and
    resamples to 16 kHz itself)."""
    n = int(seconds * rate)
    samples = array.array("h", (int(0.3 * 32767 * math.sin(2 * math.pi * 440 * i / rate)) for i in range(n)))
    if sys.byteorder == "big":
        samples.byteswap()  # WAV samples are little-endian
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())
    return buf.getvalue()


def png_bytes(size: int = 32) -> bytes:
    """A `size` x `size` 8-bit RGB PNG (a colour gradient), built from zlib and struct alone (no PIL), for an image
    request to llama-server with write_vision_projector's projector (it decodes PNG and resizes to 32x32)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    step = 255 // max(size - 1, 1)
    rows = b"".join(
        b"\x00" + bytes(v for x in range(size) for v in (x * step % 256, y * step % 256, (x + y) * step // 2 % 256))
        for y in range(size)
    )
    header = struct.pack(">IIBBBBB", size, size, 8, 2, 0, 0, 0)  # 8-bit, truecolour, deflate, no filter, no interlace
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
