"""A projection with LoRA: y = base(x) + the step's low-rank deltas (vLLM's *LinearWithLoRA).

The base projection runs over all rows as before; the manager then adds each row's adapter's
delta (engine/lora/stacked_lora.py: the adapter rows in padded groups, two batched GEMMs, where
the groups are near equal; by adapter segment otherwise). q, k and v (or gate and up) of a fused
projection each get their own columns.
The base weights are never merged with an adapter's.

A step without adapter rows (no mapping) costs one attribute read per projection.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from engine.lora.lora_manager import LoRAManager

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
        if self.manager.mapping is None:
            return out
        return self.manager.apply(out, x, self.key)
