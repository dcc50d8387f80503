"""The walk pack_linears and quantize_linears share: every float32 CPU nn.Linear, nested or not,
swapped for what the factory makes of it; a kept name and another dtype left as they are."""

from __future__ import annotations

import torch
from torch import nn

from engine.layers.linear_swap import swap_cpu_float32_linears


class Swapped(nn.Module):
    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.original = linear


def test_float32_cpu_linears_are_swapped_but_the_kept_names_and_other_dtypes() -> None:
    block = nn.ModuleDict(
        {
            "up_proj": nn.Linear(4, 8),
            "down_proj": nn.Linear(8, 4),
            "bf16_proj": nn.Linear(4, 4).to(torch.bfloat16),
        }
    )
    model = nn.ModuleDict({"layer": block, "head": nn.Linear(4, 2), "norm": nn.LayerNorm(4)})
    up_proj, head = block["up_proj"], model["head"]

    swapped = swap_cpu_float32_linears(model, Swapped, keep={"down_proj"})

    assert swapped == 2
    assert isinstance(block["up_proj"], Swapped) and block["up_proj"].original is up_proj
    assert isinstance(model["head"], Swapped) and model["head"].original is head
    assert type(block["down_proj"]) is nn.Linear and type(block["bf16_proj"]) is nn.Linear
    assert type(model["norm"]) is nn.LayerNorm
