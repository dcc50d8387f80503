"""Read a llama-family GGUF file: its architecture as a ModelConfig, its weights under HF names.

Weights come out as HF LlamaForCausalLM tensors ([out, in], Q/K rows in HF's rotary layout),
dequantized to the engine dtype, so the model code has one weight format whatever the source.
Dequantized weights are cached on disk (engine/loader/gguf_weight_cache.py), so only a GGUF's first
load pays for dequantizing.

Importing this module is torch-free; torch is imported when weights are read. (The tokenizer and
the router read GGUF metadata through `pagedock.models.gguf_reader.open_gguf`, never this module.)
"""

from __future__ import annotations

import os
import re
import struct
import sys
from collections.abc import Generator, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.model_config import ModelConfig
from pagedock.errors import ModelLoadError
from pagedock.models.gguf_reader import GGUFFile, GGUFTensorInfo, open_gguf

if TYPE_CHECKING:
    import torch

    from engine.loader.gguf_weight_cache import WeightLayout

SUPPORTED_GGUF_ARCHITECTURES = ("llama",)

# GGUF tensor name -> HF name; `{i}` is the layer index.
_GLOBAL_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
}
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_TENSOR_NAME = re.compile(r"^(?:blk\.(?P<layer>\d+)\.)?(?P<base>[a-z_]+)\.(?P<kind>weight|bias)$")
# What dequantizing raises on tensor bytes that do not hold what their type says.
_DEQUANTIZE_ERRORS = (NotImplementedError, ValueError, IndexError, struct.error, MemoryError)


def read_gguf_config(path: str | os.PathLike[str], name: str | None = None) -> ModelConfig:
    """The model architecture stored in a llama GGUF's metadata.

    `name` (default: the file's basename) is the model identity that salts block hashes.
    """
    gguf = open_gguf(path)
    file = gguf.path
    meta = _Metadata(gguf)
    arch = meta.architecture()
    tensor_names = {t.name for t in gguf.tensors}
    if "rope_freqs.weight" in tensor_names:
        raise ModelLoadError(
            f"{file}: per-dimension rope frequency factors (rope_freqs.weight, llama3-style rope "
            "scaling) are not supported yet"
        )
    if meta.get(f"{arch}.expert_count", 0):
        raise ModelLoadError(f"{file}: mixture-of-experts GGUF models are not supported")
    heads = int(meta.require(f"{arch}.attention.head_count"))
    hidden_size = int(meta.require(f"{arch}.embedding_length"))
    head_dim = int(meta.get(f"{arch}.attention.key_length", hidden_size // heads))
    rope_dim = int(meta.get(f"{arch}.rope.dimension_count", head_dim))
    if rope_dim != head_dim:
        raise ModelLoadError(
            f"{file}: partial rotary embeddings (rope dimension {rope_dim} < head dim {head_dim}) "
            "are not supported"
        )
    eos_keys = ("eos_token_id", "eot_token_id", "eom_token_id")
    eos_ids = [int(v) for k in eos_keys if (v := meta.get(f"tokenizer.ggml.{k}")) is not None]
    bos = meta.get("tokenizer.ggml.bos_token_id")
    return ModelConfig(
        vocab_size=_vocab_size(meta, gguf, arch),
        hidden_size=hidden_size,
        intermediate_size=int(meta.require(f"{arch}.feed_forward_length")),
        num_hidden_layers=int(meta.require(f"{arch}.block_count")),
        num_attention_heads=heads,
        num_key_value_heads=int(meta.get(f"{arch}.attention.head_count_kv", heads)),
        head_dim=head_dim,
        rms_norm_eps=float(meta.get(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)),
        rope_theta=float(meta.get(f"{arch}.rope.freq_base", 10000.0)),
        rope_scaling=_rope_scaling(meta, arch),
        max_position_embeddings=int(meta.get(f"{arch}.context_length", 2048)),
        tie_word_embeddings="output.weight" not in tensor_names,
        attention_bias="blk.0.attn_q.bias" in tensor_names,
        mlp_bias="blk.0.ffn_up.bias" in tensor_names,
        bos_token_id=None if bos is None else int(bos),
        eos_token_ids=tuple(dict.fromkeys(eos_ids)),
        name=name or file.name,
    )


class _Metadata:
    """Typed access to a GGUF's key-value metadata, with errors that name the file."""

    def __init__(self, gguf: GGUFFile) -> None:
        self._values = gguf.metadata
        self.file = gguf.path

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    def require(self, key: str) -> Any:
        value = self.get(key)
        if value is None:
            raise ModelLoadError(f"{self.file}: GGUF metadata lacks the required key {key!r}")
        return value

    def architecture(self) -> str:
        arch = self.require("general.architecture")
        if arch not in SUPPORTED_GGUF_ARCHITECTURES:
            raise ModelLoadError(
                f"{self.file}: unsupported architecture {arch!r} (general.architecture); "
                f"pagedock serves {', '.join(SUPPORTED_GGUF_ARCHITECTURES)} GGUF models"
            )
        return str(arch)


def _vocab_size(meta: _Metadata, gguf: GGUFFile, arch: str) -> int:
    if (tokens := meta.get("tokenizer.ggml.tokens")) is not None:
        return len(tokens)
    if (size := meta.get(f"{arch}.vocab_size")) is not None:
        return int(size)
    for t in gguf.tensors:
        if t.name == "token_embd.weight":
            return int(t.shape[-1])
    raise ModelLoadError(f"{meta.file}: cannot tell the vocabulary size (no tokens, no embedding)")


def _rope_scaling(meta: _Metadata, arch: str) -> dict[str, Any] | None:
    """HF's rope_scaling dict from GGUF's rope.scaling.* keys (None for plain RoPE)."""
    kind = meta.get(f"{arch}.rope.scaling.type")
    factor = meta.get(f"{arch}.rope.scaling.factor")
    if kind is None and (linear := meta.get(f"{arch}.rope.scale_linear")) is not None:
        kind, factor = "linear", linear  # older files spell linear scaling this way
    if kind in (None, "none") or (kind == "linear" and float(factor or 1.0) == 1.0):
        return None
    if kind not in ("linear", "yarn"):
        raise ModelLoadError(f"{meta.file}: unsupported rope scaling type {kind!r}")
    scaling: dict[str, Any] = {"rope_type": kind, "factor": float(factor or 1.0)}
    if kind == "yarn":
        optional = {
            "original_max_position_embeddings": "original_context_length",
            "beta_fast": "yarn_beta_fast",
            "beta_slow": "yarn_beta_slow",
        }
        for hf_key, gguf_key in optional.items():
            if (value := meta.get(f"{arch}.rope.scaling.{gguf_key}")) is not None:
                scaling[hf_key] = value
    return scaling


def hf_tensor_name(gguf_name: str) -> str | None:
    """The HF LlamaForCausalLM name of a GGUF tensor; None for one that is not a weight we use."""
    m = _TENSOR_NAME.match(gguf_name)
    if m is None:
        return None
    base, kind, layer = m["base"], m["kind"], m["layer"]
    if layer is None:
        prefix = _GLOBAL_NAMES.get(base)
        return None if prefix is None else f"{prefix}.{kind}"
    suffix = _LAYER_NAMES.get(base)
    return None if suffix is None else f"model.layers.{layer}.{suffix}.{kind}"


def iter_gguf_weights(
    path: str | os.PathLike[str],
    dtype: torch.dtype,
    progress: bool = True,
    weight_cache: bool = True,
) -> Generator[tuple[str, torch.Tensor], None, None]:
    """Yield (HF name, tensor) for every weight of a llama GGUF, dequantized to `dtype`.

    Shapes are HF's ([out, in] for linear layers). `lm_head.weight` comes only when the file has
    its own output matrix (otherwise the embedding is tied). Progress goes to stderr. With
    `weight_cache`, the first full pass writes the weight cache; closing the generator early
    writes nothing.
    """
    from tqdm import tqdm

    from engine.loader.gguf_weight_cache import (
        WeightCacheWriter,
        open_cached_weights,
        weight_cache_path,
    )

    config = read_gguf_config(path)  # also checks architecture and support
    gguf = open_gguf(path)
    layout = _weight_layout(gguf)
    cache_path = weight_cache_path(gguf, dtype) if weight_cache else None
    cached = None if cache_path is None else open_cached_weights(cache_path, layout, dtype)
    writer = None
    if cached is None and cache_path is not None:
        writer = WeightCacheWriter(cache_path, layout, dtype)
    weights = cached if cached is not None else _dequantized_weights(gguf, config, dtype)
    with tqdm(
        total=len(layout),
        unit="tensor",
        desc=f"loading {gguf.path.name}",
        file=sys.stderr,
        disable=not progress,
        leave=False,
    ) as bar:
        try:
            for name, weight in weights:
                if writer is not None:
                    writer.add(name, weight)
                yield name, weight
                bar.update()
            if writer is not None:
                writer.commit()
        finally:
            if writer is not None:
                writer.abort()  # a no-op after commit; drops the partial file otherwise


def _weight_layout(gguf: GGUFFile) -> WeightLayout:
    """(HF name, HF shape) of every tensor, in file order; ModelLoadError on a foreign tensor."""
    layout = []
    for tensor in gguf.tensors:
        hf_name = hf_tensor_name(tensor.name)
        if hf_name is None:
            raise ModelLoadError(
                f"{gguf.path}: unexpected tensor {tensor.name!r} for a llama model"
            )
        layout.append((hf_name, tensor.hf_shape))
    return layout


def _dequantized_weights(
    gguf: GGUFFile, config: ModelConfig, dtype: torch.dtype
) -> Iterator[tuple[str, torch.Tensor]]:
    for tensor in gguf.tensors:
        hf_name = hf_tensor_name(tensor.name)
        assert hf_name is not None  # _weight_layout checked every name
        weight = _dequantize(tensor, gguf, dtype)
        yield hf_name, _undo_rope_permute(hf_name, weight, config)


def supported_tensor_types() -> list[str]:
    """Names of the GGML tensor types this loader can dequantize."""
    from gguf import GGMLQuantizationType, quants

    # gguf keeps its table of block formats private; fall back to the two plain float types.
    traits = getattr(quants, "_type_traits", {})
    types = [GGMLQuantizationType.F32, GGMLQuantizationType.F16, *traits]
    return [t.name for t in types]


def _dequantize(tensor: GGUFTensorInfo, gguf: GGUFFile, dtype: torch.dtype) -> torch.Tensor:
    import torch
    from gguf import quants

    if tensor.tensor_type.name not in supported_tensor_types():
        raise ModelLoadError(
            f"{gguf.path}: tensor {tensor.name!r} has unsupported type {tensor.tensor_type.name}; "
            f"supported: {', '.join(supported_tensor_types())}"
        )
    try:
        values = quants.dequantize(gguf.tensor_data(tensor), tensor.tensor_type)
    except _DEQUANTIZE_ERRORS as e:
        raise ModelLoadError(
            f"{gguf.path}: cannot dequantize tensor {tensor.name!r} "
            f"({tensor.tensor_type.name}): {e}"
        ) from e
    values = np.asarray(values, dtype=np.float32).reshape(tensor.hf_shape)
    if not values.flags.writeable:  # a view into the memory map; torch wants memory it owns
        values = values.copy()
    return torch.from_numpy(values).to(dtype)


def _undo_rope_permute(hf_name: str, weight: torch.Tensor, config: ModelConfig) -> torch.Tensor:
    """Put Q/K rows back in HF's rotary layout.

    NOTE: HF's rotate_half pairs dimension j of a head with j + head_dim/2; GGML's (normal-mode)
    rope pairs 2j with 2j + 1. The HF -> GGUF converter therefore interleaves each head's two
    halves: GGUF row (head, j, half) holds HF row (head, half, j). Reading it as
    [heads, head_dim/2, 2, ...] and swapping the last two head axes restores HF's order.
    """
    if ".q_proj." in hf_name:
        num_heads = config.num_attention_heads
    elif ".k_proj." in hf_name:
        num_heads = config.num_key_value_heads
    else:
        return weight
    if weight.shape[0] != num_heads * config.head_dim:
        raise ModelLoadError(
            f"{hf_name}: {weight.shape[0]} rows, expected {num_heads} heads x {config.head_dim}"
        )
    rest = weight.shape[1:]
    interleaved = weight.reshape(num_heads, config.head_dim // 2, 2, *rest)
    return interleaved.transpose(1, 2).reshape(weight.shape).contiguous()
