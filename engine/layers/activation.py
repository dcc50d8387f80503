"""SwiGLU's elementwise half over the fused [gate | up] projection: silu(gate) * up."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from engine.kernels.cpu_kernels import kernels_for


def silu_and_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """[T, 2I] -> [T, I]; the C++ kernel on the CPU (float32, or a bf16 GEMM's bf16 product, in
    and out in that dtype) reads and writes each element once."""
    kernels = kernels_for(gate_up, bf16_ok=True)
    if kernels is not None:
        return kernels.silu_and_mul(gate_up)
    gate, up = gate_up.chunk(2, dim=-1)
    # In place in the gate/up buffer: no two extra [T, I] temporaries.
    F.silu(gate, inplace=True)
    return gate.mul_(up)
