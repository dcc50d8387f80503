"""Rotary position embeddings with the scaling variants llama configs use.

The cos/sin table covers every position up to max_positions once; a step gathers rows by the
tokens' positions, so ragged batches need no per-sequence work.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from engine.kernels.cpu_kernels import kernels_for
from engine.model_config import ModelConfig


def _default_inv_freq(head_dim: int, base: float) -> torch.Tensor:
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).double() / head_dim
    return 1.0 / (base**exponents)


def _llama3_inv_freq(inv_freq: torch.Tensor, scaling: dict[str, Any]) -> torch.Tensor:
    factor = float(scaling["factor"])
    low_freq_factor = float(scaling.get("low_freq_factor", 1.0))
    high_freq_factor = float(scaling.get("high_freq_factor", 4.0))
    old_context = float(scaling.get("original_max_position_embeddings", 8192))
    low_freq_wavelen = old_context / low_freq_factor
    high_freq_wavelen = old_context / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    # Long wavelengths are stretched by `factor`, short ones kept, the band between blended.
    scaled = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return torch.where(is_medium, blended, scaled)


def _yarn_inv_freq(
    head_dim: int, base: float, scaling: dict[str, Any], max_positions: int
) -> tuple[torch.Tensor, float]:
    factor = float(scaling["factor"])
    original = float(scaling.get("original_max_position_embeddings", max_positions / factor))
    beta_fast = float(scaling.get("beta_fast", 32.0))
    beta_slow = float(scaling.get("beta_slow", 1.0))

    def correction_dim(num_rotations: float) -> float:
        return (head_dim * math.log(original / (num_rotations * 2 * math.pi))) / (
            2 * math.log(base)
        )

    low = float(max(math.floor(correction_dim(beta_fast)), 0))
    high = float(min(math.ceil(correction_dim(beta_slow)), head_dim - 1))
    if low == high:
        high += 0.001
    ramp = (torch.arange(head_dim // 2, dtype=torch.float64) - low) / (high - low)
    extrapolation = 1 - ramp.clamp(0, 1)
    pos_freqs = base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    inv_freq = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (
        1.0 / pos_freqs
    ) * extrapolation
    attention_factor = scaling.get("attention_factor")
    if attention_factor is None:
        attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    return inv_freq, float(attention_factor)


def compute_inv_freq(config: ModelConfig, max_positions: int) -> tuple[torch.Tensor, float, float]:
    """(inverse frequencies, position scale, cos/sin multiplier) for the config's rope type."""
    head_dim, base = config.head_dim, config.rope_theta
    scaling = config.rope_scaling or {}
    rope_type = config.rope_type
    if rope_type == "yarn":
        inv_freq, attention_factor = _yarn_inv_freq(head_dim, base, scaling, max_positions)
        return inv_freq, 1.0, attention_factor
    if rope_type == "dynamic":
        # A paged engine can't re-rotate cached keys as the sequence grows (HF's dynamic NTK
        # does, per call), so like vLLM we fix the base for the longest context served.
        factor = float(scaling["factor"])
        original = config.max_position_embeddings
        if max_positions > original:
            base = base * ((factor * max_positions / original) - (factor - 1)) ** (
                head_dim / (head_dim - 2)
            )
        return _default_inv_freq(head_dim, base), 1.0, 1.0
    inv_freq = _default_inv_freq(head_dim, base)
    if rope_type == "llama3":
        return _llama3_inv_freq(inv_freq, scaling), 1.0, 1.0
    if rope_type == "linear":
        return inv_freq, 1.0 / float(scaling["factor"]), 1.0
    return inv_freq, 1.0, 1.0


class RotaryEmbedding(torch.nn.Module):
    """HF's rotate-half convention: x * cos + rotate_half(x) * sin."""

    def __init__(self, config: ModelConfig, max_positions: int) -> None:
        super().__init__()
        self.config = config
        self.max_positions = max_positions
        self.cos = torch.empty(0)
        self.sin = torch.empty(0)
        self.build_tables(torch.device("cpu"))

    def build_tables(self, device: torch.device) -> None:
        """(Re)compute the cos/sin tables; models built on the meta device call this after."""
        with torch.device("cpu"):
            inv_freq, scale, multiplier = compute_inv_freq(self.config, self.max_positions)
            positions = torch.arange(self.max_positions, dtype=torch.float64) * scale
            freqs = torch.outer(positions, inv_freq)  # [max_positions, head_dim / 2]
            self.cos = (freqs.cos() * multiplier).float().to(device)
            self.sin = (freqs.sin() * multiplier).float().to(device)

    def lookup(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and sin rows of a step's positions, [T, 1, D/2]: once per step, shared by layers."""
        cos = self.cos[positions].unsqueeze(1).to(dtype)
        sin = self.sin[positions].unsqueeze(1).to(dtype)
        return cos, sin


def apply_rotary(
    query: torch.Tensor, key: torch.Tensor, cos_sin: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, torch.Tensor]:
    """query [T, H, D], key [T, Hkv, D] -> rotated (HF's rotate-half convention). On CPU in
    float32 the C++ kernel rotates them in place (they are the step's own QKV buffer);
    elsewhere the result is a copy."""
    cos, sin = cos_sin
    kernels = kernels_for(query)
    if kernels is not None and key.dtype == query.dtype:
        kernels.rotary_embedding_(query, key, cos, sin)
        return query, key
    return rotate_reference(query, cos, sin), rotate_reference(key, cos, sin)


def rotate_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)
