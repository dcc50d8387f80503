"""Every slot's LoRA on one module stacked, and the step's deltas in few, large products.

Two paths, both looping over the step's adapters (never its requests) and neither merging an
adapter into the base weights:

- **grouped** (decode steps and short mixed ones): the step's adapter rows gathered into one
  group per slot, padded to the largest group (engine/lora/lora_mapping.py LoRAGroups), then
  two batched GEMMs against every slot's A and B stacked on a leading axis, and one scatter-add:

      xs    = x[rows]                     [groups, size, in]
      delta = (xs @ A[slots]) @ B[slots]  [groups, size, width]   (padded positions zeroed)
      out[rows, :width] += delta

  Four or five torch calls per module whatever the number of adapters, and each row multiplies
  only its own adapter's rank (Punica's BGMV, S-LoRA's padded batching).
- **segmented** (long prefill chunks, whose groups would need much padding): per contiguous run
  of an adapter's rows a shrink and one expand, in place; a segment whose rows are scattered is
  gathered and scatter-added.

Each slot's B is dense over the module's output columns (q, k and v of a fused projection each
fill their own columns, zeros elsewhere), so one expand covers every part.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from engine.lora.lora_manager import PackedLoRA
    from engine.lora.lora_mapping import LoRAGroups, LoRASegment

# A segment of up to this many contiguous runs is multiplied run by run in place; one of more
# (rows not grouped by slot) is gathered and scatter-added.
MAX_RUNS = 4


@dataclass(frozen=True)
class StackedLoRA:
    a_batched: torch.Tensor
    """[slots, in, rank]: each slot's A transposed, its rank padded with zeros to the largest
    (a slot without this module: all zeros)."""
    b_batched: torch.Tensor
    """[slots, rank, width]: each slot's dense B transposed; width the last output column any
    part adds to."""
    per_slot: dict[int, tuple[torch.Tensor, torch.Tensor]]
    """Each slot's own A [r, in] and dense B [width, r] (contiguous), for the segmented path."""

    @property
    def width(self) -> int:
        return int(self.b_batched.shape[2])


def stack_slots(packed_by_slot: list[PackedLoRA | None], dtype: torch.dtype) -> StackedLoRA | None:
    """One module's LoRA of every slot that has it, stacked in `dtype` (`compute_dtype`); None
    when no slot has it."""
    present = [(slot, p) for slot, p in enumerate(packed_by_slot) if p is not None]
    if not present:
        return None
    width = max(part.column_end for _, p in present for part in p.parts)
    rank = max(int(p.shrink.shape[0]) for _, p in present)
    first = present[0][1].shrink
    num_slots, in_features = len(packed_by_slot), int(first.shape[1])
    a_batched = torch.zeros(num_slots, in_features, rank, dtype=dtype, device=first.device)
    b_batched = torch.zeros(num_slots, rank, width, dtype=dtype, device=first.device)
    per_slot = {}
    for slot, p in present:
        r = int(p.shrink.shape[0])
        a_batched[slot, :, :r] = p.shrink.T
        for part in p.parts:
            ranks = slice(part.rank_start, part.rank_end)
            b_batched[slot, ranks, part.column_start : part.column_end] = part.lora_b.T
        per_slot[slot] = (
            a_batched[slot, :, :r].T.contiguous(),
            b_batched[slot, :r, :].T.contiguous(),
        )
    return StackedLoRA(a_batched, b_batched, per_slot)


def add_grouped(
    out: torch.Tensor, x: torch.Tensor, stacked: StackedLoRA, groups: LoRAGroups
) -> torch.Tensor:
    """`out` plus every adapter row's delta, in place, in two batched GEMMs."""
    a, b = stacked.a_batched, stacked.b_batched
    if len(groups.slots) != a.shape[0]:
        index = torch.tensor(groups.slots, device=a.device)
        a, b = a.index_select(0, index), b.index_select(0, index)
    xs = x.index_select(0, groups.rows).to(a.dtype).view(len(groups.slots), groups.size, -1)
    low = torch.bmm(xs, a).masked_fill_(groups.padding, 0.0)
    delta = torch.bmm(low, b).view(-1, stacked.width)
    out[:, : stacked.width].index_add_(0, groups.rows, delta.to(out.dtype))
    return out


def add_segments(
    out: torch.Tensor, x: torch.Tensor, stacked: StackedLoRA, segments: Sequence[LoRASegment]
) -> torch.Tensor:
    """`out` plus each adapter segment's delta, in place: per contiguous run of the segment's
    rows a shrink and one expand over every part's columns (the dense B) added into `out`."""
    width = stacked.width
    x = x.to(stacked.a_batched.dtype)
    for segment in segments:
        weights = stacked.per_slot.get(segment.slot)
        if weights is None:
            continue  # this adapter leaves this module alone
        lora_a, lora_b = weights
        if segment.rows is None or len(segment.runs) <= MAX_RUNS:
            for start, end in segment.runs or ((0, x.shape[0]),):
                add_product(out[start:end, :width], x[start:end] @ lora_a.T, lora_b)
            continue
        delta = (x.index_select(0, segment.rows) @ lora_a.T) @ lora_b.T
        out[:, :width].index_add_(0, segment.rows, delta.to(out.dtype))
    return out


def add_product(out: torch.Tensor, low: torch.Tensor, lora_b: torch.Tensor) -> torch.Tensor:
    """out += low @ lora_b^T, fused where the dtypes agree."""
    if out.dtype == low.dtype:
        return out.addmm_(low, lora_b.T)
    return out.add_(low @ lora_b.T)


def compute_dtype(out_dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The dtype of the low-rank products: float32 on a CPU (torch's small bfloat16 GEMMs there
    are slower than float32 ones, and the deltas keep full precision), else the base's."""
    return torch.float32 if device.type == "cpu" else out_dtype
