"""A projection with LoRA: y = base(x) + the step's low-rank deltas (vLLM's *LinearWithLoRA).

For each adapter segment of the step (engine/lora/lora_mapping.py) the segment's rows are
gathered once, multiplied by the stacked A matrices of every targeted part of the projection (one
"shrink" GEMM), then by each part's B (the "expand"), and scatter-added into that part's columns
of the base output: q, k and v (or gate and up) of a fused projection each get their own slice.
This is Punica / S-LoRA's segmented batching written in torch: one pass over the step's adapters,
never over its requests, and the base weights are never merged with an adapter's.

A step without adapter rows (no mapping) costs one attribute read per projection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from engine.lora.lora_manager import LoRAManager, PackedLoRA
    from engine.lora.lora_mapping import LoRAMapping

# A projection's key in an adapter's packed weights: (layer index, module), e.g.
# (0, "self_attn.qkv_proj").
ModuleKey = tuple[int, str]


class LoRALinear(nn.Module):
    def __init__(self, base_layer: nn.Module, key: ModuleKey, manager: LoRAManager) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.key = key
        self.manager = manager

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.base_layer(x)
        mapping = self.manager.mapping
        if mapping is None:
            return out
        return add_lora(out, x, mapping, self.manager.slot_weights, self.key)


def add_lora(
    out: torch.Tensor,
    x: torch.Tensor,
    mapping: LoRAMapping,
    slot_weights: list[dict[ModuleKey, PackedLoRA]],
    key: ModuleKey,
) -> torch.Tensor:
    """`out` (the base product of `x`) plus each segment's delta, in place."""
    for segment in mapping.segments:
        packed = slot_weights[segment.slot].get(key)
        if packed is None:
            continue  # this adapter leaves this projection alone
        rows = segment.rows
        x_seg = x if rows is None else x.index_select(0, rows)
        low = x_seg.to(packed.shrink.dtype) @ packed.shrink.T  # [rows, sum of the parts' ranks]
        for part in packed.parts:
            delta = (low[:, part.rank_start : part.rank_end] @ part.lora_b.T).to(out.dtype)
            columns = out[:, part.column_start : part.column_end]
            if rows is None:
                columns.add_(delta)
            else:
                columns.index_add_(0, rows, delta)
    return out
