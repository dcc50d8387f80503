"""The walk that the CPU's faster linear layers replace torch's with: every float32 nn.Linear on
the CPU in a model, swapped in place for the module a factory makes of it (pack_linears' oneDNN
PackedLinear, quantize_linears' W8A8Linear)."""

from __future__ import annotations

from collections.abc import Callable, Collection

import torch
from torch import nn


def swap_cpu_float32_linears(
    model: nn.Module,
    make: Callable[[nn.Linear], nn.Module],
    keep: Collection[str] = (),
) -> int:
    """Swap every float32 CPU nn.Linear in `model` but those whose attribute name is in `keep`
    for `make(linear)`; returns how many."""
    # NOTE: all found before any is swapped: the walk does not change what it is iterating over.
    swaps = [
        (parent, name, child)
        for parent in model.modules()
        for name, child in parent.named_children()
        if isinstance(child, nn.Linear)
        and name not in keep
        and child.weight.device.type == "cpu"
        and child.weight.dtype == torch.float32
    ]
    for parent, name, child in swaps:
        setattr(parent, name, make(child))
    return len(swaps)
