"""oneDNN-packed linear layers for the CPU path.

torch's default CPU linear goes through MKL's sgemm, which on some CPUs (AMD EPYC here) picks a
slow path for the skinny shapes of a decode step: 64 x 576 x 960 ran at ~15 GFLOP/s where oneDNN,
with the weight reordered once into its blocked layout, ran at ~190. Inductor's freezing pass does
the same reorder; doing it at load time keeps start-up free of compilation. EngineConfig.onednn
(`--no-onednn`, `PAGEDOCK_ONEDNN=false`) turns it off; the loader passes it to `pack_linears`.

With a bf16 `gemm_dtype` (EngineConfig.cpu_gemm_dtype) the packed weight is bf16, a float32
input is cast to bf16, and the product stays bf16: the GEMM runs on the CPU's bf16 units and reads
half the weight bytes. The product's consumers take it as it is where they can (the fused
add-and-norm and SiLU kernels widen it as they read and round their output back to bf16, the next
GEMM's input; the attention backend writes o_proj's input in the dtype `gemm_input_dtype` names),
so most GEMMs need no cast pass on either side; the model casts the rest (the QKV product before
rotary and the cache) back to its activation dtype.

A row's product must not depend on the rows beside it: speculative decoding's greedy outputs are
identical to decoding without it only if a verification pass (several rows of one sequence) gives
each row the bits a one-row decode step gives it. oneDNN multiplies a lone row through another
kernel than a batch's for some shapes (bf16, 1536 inputs on an AVX-512 EPYC: one row in nine
rounded differently), so each shape is probed once at load, and where a lone row differs it is
multiplied as two (the cost of a second row in a weight-bound GEMV: ~4 us of ~60).
"""

from __future__ import annotations

import logging

import torch
from torch import nn

from engine.layers.linear_swap import swap_cpu_float32_linears

logger = logging.getLogger("pagedock.cpu_linear")

# The batch size oneDNN tunes the packed layout for; any batch size works with it.
_PACK_BATCH_HINT = 64
# Outputs of the load-time probe comparing lone rows' products with the same rows in a batch (a
# kernel's rounding differs in a few outputs in ten thousand: narrow layers get more rows).
_PROBE_OUTPUTS = 1 << 16
_PROBE_ROWS = (8, 128)
# Whether a lone row's product differs from a batch's, per (in, out, dtype) (one probe per shape).
_LONE_ROW_DIFFERS: dict[tuple[int, int, torch.dtype], bool] = {}


def onednn_available() -> bool:
    """Whether this torch build can pack weights for oneDNN."""
    return torch.backends.mkldnn.is_available() and hasattr(
        torch.ops.mkldnn, "_reorder_linear_weight"
    )


def bf16_packing_available() -> bool:
    """Whether this torch and CPU can pack bfloat16 weights for oneDNN (it needs avx512bw, vl and
    dq, or avx_ne_convert; an AVX2-only CPU can't)."""
    if not onednn_available():
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(4, 8, dtype=torch.bfloat16), 1)
    except RuntimeError:
        return False
    return True


class PackedLinear(nn.Module):
    """y = x W^T + b with W held in oneDNN's blocked layout (inference only)."""

    def __init__(self, linear: nn.Linear, gemm_dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        self.in_features = linear.in_features
        self.out_features = linear.out_features
        self.gemm_dtype = gemm_dtype
        self.packed_weight = torch.ops.mkldnn._reorder_linear_weight(
            linear.weight.detach().to(gemm_dtype), _PACK_BATCH_HINT
        )
        self.bias = None if linear.bias is None else linear.bias.detach().to(gemm_dtype)
        self.pad_lone_row = _lone_row_differs(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The product in the GEMM dtype (the caller casts it where it needs another)."""
        x = x.to(self.gemm_dtype)
        if self.pad_lone_row and x.numel() == self.in_features:
            rows = x.reshape(1, self.in_features).expand(2, -1).contiguous()
            return self._product(rows)[:1].reshape(*x.shape[:-1], self.out_features)
        return self._product(x)

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.packed_weight, self.bias, "none", [], "")


def _lone_row_differs(layer: PackedLinear) -> bool:
    """Whether oneDNN gives a lone row of `layer`'s shape other bits than the same row in a batch
    (probed once per shape, on seeded random rows)."""
    key = (layer.in_features, layer.out_features, layer.gemm_dtype)
    if key not in _LONE_ROW_DIFFERS:
        fewest, most = _PROBE_ROWS
        rows = max(fewest, min(most, -(-_PROBE_OUTPUTS // layer.out_features)))
        generator = torch.Generator().manual_seed(0)
        probe = torch.randn(rows, layer.in_features, generator=generator).to(layer.gemm_dtype)
        with torch.no_grad():
            batch = layer._product(probe)
            _LONE_ROW_DIFFERS[key] = any(
                not torch.equal(layer._product(probe[i : i + 1]), batch[i : i + 1])
                for i in range(rows)
            )
    return _LONE_ROW_DIFFERS[key]


def gemm_input_dtype(layer: nn.Module) -> torch.dtype | None:
    """The dtype `layer` multiplies in when it casts its input to one (a PackedLinear, or a LoRA
    wrapper's `base_layer` that is one), or the dtype a W8A8Linear's product comes in (its
    input is best in it too: it is what the bf16 path hands it); None for a layer that takes
    its input as it comes."""
    if isinstance(layer, PackedLinear):
        return layer.gemm_dtype
    if isinstance(layer, nn.Linear):
        return None
    if isinstance(own := getattr(layer, "gemm_dtype", None), torch.dtype):
        return own
    base = getattr(layer, "base_layer", None)
    return base.gemm_dtype if isinstance(base, PackedLinear) else None


def pack_linears(
    model: nn.Module, enabled: bool = True, gemm_dtype: torch.dtype = torch.float32
) -> int:
    """Swap every float32 CPU nn.Linear in `model` for a PackedLinear multiplying in `gemm_dtype`;
    returns how many (0 when not `enabled` or oneDNN is unavailable)."""
    if not enabled or not onednn_available():
        return 0
    packed = swap_cpu_float32_linears(model, lambda linear: PackedLinear(linear, gemm_dtype))
    logger.debug("packed %d linear layers for oneDNN (%s)", packed, gemm_dtype)
    return packed
