"""RMSNorm, alone and fused with the residual add that precedes it in every decoder layer.

A layer carries two streams, vLLM-style: `hidden` (the last sublayer's output) and `residual`
(the running sum). `add_and_norm` folds the add into the norm's pass over the row; on the CPU
in float32 both run as the C++ kernels (one pass per row where torch runs five kernels). With
bf16 GEMMs under float32 activations, `hidden` is the GEMM's bf16 product: the kernel widens it
into the float32 residual and rounds the normalised row back into it, the next GEMM's input.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from engine.kernels.cpu_kernels import kernels_for


class RMSNorm(nn.Module):
    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernels = kernels_for(x)
        if kernels is not None:
            return kernels.rms_norm(x, self.weight, self.eps)
        return rms_norm_reference(x, self.weight, self.eps)

    def add_and_norm(
        self, x: torch.Tensor, residual: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """residual += x, then (RMSNorm(residual), residual). Both tensors are the caller's to
        overwrite: the kernel path writes the result into x, in x's dtype."""
        kernels = kernels_for(residual)
        if kernels is not None and x.dtype in (torch.float32, torch.bfloat16):
            kernels.fused_add_rms_norm_(x, residual, self.weight, self.eps)
            return x, residual
        residual.add_(x)
        return rms_norm_reference(residual, self.weight, self.eps), residual


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    if x.dtype == torch.float32:
        return F.rms_norm(x, weight.shape, weight, eps)
    # Lower precisions normalise in float32, as the reference implementation does.
    x32 = x.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(x.dtype)
