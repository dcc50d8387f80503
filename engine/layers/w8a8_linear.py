"""Int8 linear layers for the CPU: W8A8, weights quantized at load (EngineConfig.quantization):
the attention's QKV and output projections and the MLP's gate/up projection (KEPT_UNQUANTIZED
says why not the others).

Each weight row (output channel) is quantized symmetrically to int8 against its largest
magnitude, with a float32 scale; each input row (token) is quantized the same way as the layer
runs, and oneDNN multiplies the int8 codes on the CPU's VNNI units (`vpdpbusd`: unsigned
activations, so the codes travel as uint8 with zero point 128), scaling each output channel by
its weight scale; the layer then scales each token's row by the token's scale. The GEMM reads a
quarter of float32's weight bytes (half of bf16's) and multiplies 64 pairs an instruction where
bf16 multiplies 32.

Why W8A8 and not int8 weight-only: torch's `_weight_int8pack_mm` (int8 weights, bf16 inputs)
ran SmolLM2's 30 layers of decode GEMMs no faster than the bf16 oneDNN path at batch 1 and twice
as slow at 4 to 64; oneDNN's u8 x s8 GEMM ran them 1.4-1.7x faster than bf16 at batch 1 to 64
(one core, weights streamed from memory as in decode). The input's per-token quantization is one
C++ kernel (quantize_rows_cpu.cpp); in torch ops it cost more than the int8 GEMM saved, so
without the C++ kernels the layer is correct but slow.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from engine.kernels.cpu_kernels import kernels_for, load_cpu_kernels
from engine.layers.cpu_linear import onednn_available
from engine.layers.linear_swap import swap_cpu_float32_linears
from pagedock.errors import ConfigError

logger = logging.getLogger("pagedock.w8a8_linear")

# The layers left to the float path (pack_linears): their inputs carry the outliers one int8 scale
# a token can't hold. down_proj's input (SiLU(gate) * up) and the LM head's (the final norm's
# output, and every logit depends on it): on SmolLM2 and 3,069 tokens of GPL-3, quantizing every
# linear moved the mean NLL 1.53 % from transformers float32, all but these two 0.73 %.
KEPT_UNQUANTIZED = frozenset({"down_proj", "lm_head"})
# Unsigned activation codes: int8 code + 128 (oneDNN's x86 int8 GEMM wants u8 x s8).
_ZERO_POINT = 128


def w8a8_available() -> bool:
    """Whether this torch build has oneDNN's int8 linear (the x86 CPU builds do)."""
    return onednn_available() and hasattr(torch.ops.onednn, "qlinear_pointwise")


def check_quantization(name: str | None, dtype: torch.dtype, device: torch.device) -> None:
    """ConfigError unless this engine can run quantization `name` (None: nothing to check):
    w8a8 is for CPU engines with float32 activations, on a torch with oneDNN's int8 linear."""
    if name is None:
        return
    if device.type != "cpu" or dtype != torch.float32:
        raise ConfigError(
            f"quantization {name} runs on the CPU with float32 activations (dtype auto or "
            f"float32); this engine has {str(dtype).removeprefix('torch.')} on {device.type}"
        )
    if not w8a8_available():
        raise ConfigError(
            f"quantization {name} needs oneDNN's int8 linear (torch.ops.onednn.qlinear_pointwise)"
            ", which this torch build lacks"
        )


def quantize_weight(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(int8 codes [N, K], float32 scales [N]): each row symmetric against its largest
    magnitude (an all-zero row gets scale 1)."""
    weight = weight.detach().float()
    amax = weight.abs().amax(dim=1)
    scales = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    codes = torch.round(weight / scales[:, None]).clamp_(-127, 127).to(torch.int8)
    return codes, scales


def quantize_rows(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(uint8 codes + 128 [T, K], float32 scales [T, 1]) of each row of `x`: the C++ kernel, or
    the same arithmetic in torch ops."""
    kernels = kernels_for(x, bf16_ok=True)
    if kernels is not None:
        codes, scales = kernels.quantize_rows_u8(x)
        return codes, scales
    return quantize_rows_in_torch(x)


def quantize_rows_in_torch(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """quantize_rows without the C++ kernels."""
    amax = x.float().abs().amax(dim=1, keepdim=True)
    scales = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    clamped = (x.float() / scales).clamp_(-127, 127)
    return (clamped + (_ZERO_POINT + 0.5)).to(torch.uint8), scales


class W8A8Linear(nn.Module):
    """y = x W^T + b with W as int8 codes and per-output-channel scales, x quantized per token as
    it comes (best in `gemm_dtype`, what the bf16 path hands a linear); the product in float32,
    the activation dtype of the engines it serves."""

    def __init__(self, linear: nn.Linear, gemm_dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.gemm_dtype = gemm_dtype
        codes, scales = quantize_weight(linear.weight)
        self.packed_weight = torch.ops.onednn.qlinear_prepack(codes, None)
        self.weight_scale = scales
        self.weight_zero_point = torch.zeros(self.out_features, dtype=torch.long)
        self.bias = None if linear.bias is None else linear.bias.detach().float()
        # NOTE: looked up once: per call, the lookup took a third of a batch-1 layer's time.
        kernels = load_cpu_kernels()
        self._quantize_rows = (
            quantize_rows_in_torch if kernels is None else kernels.quantize_rows_u8
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The float32 product, shaped like `x` but for its last dimension."""
        codes, token_scales = self._quantize_rows(x.reshape(-1, self.in_features))
        # The token scales go on after the GEMM (oneDNN takes one input scale for the whole
        # matrix), then the bias. A float32 product takes them in one pass each; a bf16 one
        # took a widening copy more (a quarter of a batch-1 layer's time).
        out = torch.ops.onednn.qlinear_pointwise(
            codes,
            1.0,
            _ZERO_POINT,
            self.packed_weight,
            self.weight_scale,
            self.weight_zero_point,
            None,
            1.0,
            0,
            torch.float32,
            "none",
            [],
            "",
        ).mul_(token_scales)
        if self.bias is not None:
            out.add_(self.bias)
        return out.view(*x.shape[:-1], self.out_features)

    def weight_bytes(self) -> int:
        """The bytes this layer holds for its weight: the int8 codes and their scales."""
        return self.out_features * self.in_features + self.weight_scale.numel() * 4


def quantize_linears(model: nn.Module, gemm_dtype: torch.dtype = torch.bfloat16) -> int:
    """Swap every float32 CPU nn.Linear in `model` but those KEPT_UNQUANTIZED names for a
    W8A8Linear taking its input best in `gemm_dtype`; returns how many."""
    quantized = swap_cpu_float32_linears(
        model, lambda linear: W8A8Linear(linear, gemm_dtype), keep=KEPT_UNQUANTIZED
    )
    logger.debug("quantized %d linear layers to W8A8 (inputs in %s)", quantized, gemm_dtype)
    return quantized
