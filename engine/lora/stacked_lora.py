"""Every slot's LoRA on one module stacked into two matrices, for steps of few rows (decodes).

    A_all = [A(slot 0); A(slot 1); ...]          [R, in]   R = the slots' ranks summed
    B_all = [B(slot 0) | B(slot 1) | ...]         [out, R]  each part's B in its own columns
    mask  = (column's slot == row's slot)         [rows, R] built once per step and signature
    out  += ((x @ A_all^T) * mask) @ B_all^T

Two GEMMs and a multiply per module whatever the step's adapters, instead of a gather, a shrink,
an expand and a scatter per adapter segment (`add_segments`, Punica / S-LoRA's segmented
batching): on a decode step of a few dozen rows those small torch calls cost more than the
arithmetic. Each row multiplies every slot's A (R instead of its own rank), so for long prefill
chunks the segmented path does less work: the manager picks by the step's row count
(`STACKED_MAX_ROWS`). The mask zeroes other slots' ranks exactly, so both paths add the same
delta up to the order of the sums. Either way the loop is over the step's adapters, never its
requests, and the base weights are never merged with an adapter's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from engine.lora.lora_manager import PackedLoRA
    from engine.lora.lora_mapping import LoRASegment

# Steps of up to this many token rows take the stacked path (decode steps and short chunks).
STACKED_MAX_ROWS = 128
# A segment of up to this many contiguous runs is multiplied run by run in place; one of more
# (rows not grouped by slot) is gathered and scatter-added.
MAX_RUNS = 4

# Which slot each rank column of a stacked module belongs to: (slot, rank) per slot, in order.
Signature = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class StackedLoRA:
    a_all: torch.Tensor  # [R, in]
    b_all: torch.Tensor  # [width, R]: width the last output column any part adds to
    signature: Signature
    per_slot: dict[int, tuple[torch.Tensor, torch.Tensor]]
    """Each slot's own A [r, in] and dense B [width, r] (contiguous), for the segmented path."""

    @property
    def width(self) -> int:
        return int(self.b_all.shape[0])


def stack_slots(packed_by_slot: list[PackedLoRA | None], dtype: torch.dtype) -> StackedLoRA | None:
    """One module's LoRA of every slot that has it, stacked in `dtype` (`compute_dtype`); None
    when no slot has it."""
    present = [(slot, p) for slot, p in enumerate(packed_by_slot) if p is not None]
    if not present:
        return None
    width = max(part.column_end for _, p in present for part in p.parts)
    total = sum(int(p.shrink.shape[0]) for _, p in present)
    first = present[0][1].shrink
    b_all = torch.zeros(width, total, dtype=dtype, device=first.device)
    offset = 0
    for _, p in present:
        for part in p.parts:
            columns = slice(offset + part.rank_start, offset + part.rank_end)
            b_all[part.column_start : part.column_end, columns] = part.lora_b
        offset += int(p.shrink.shape[0])
    a_all = torch.cat([p.shrink for _, p in present]).to(dtype).contiguous()
    signature = tuple((slot, int(p.shrink.shape[0])) for slot, p in present)
    per_slot, offset = {}, 0
    for slot, p in present:
        rank = int(p.shrink.shape[0])
        lora_b = b_all[:, offset : offset + rank].contiguous()
        per_slot[slot] = (a_all[offset : offset + rank], lora_b)
        offset += rank
    return StackedLoRA(a_all, b_all, signature, per_slot)


def rank_mask(token_slots: torch.Tensor, signature: Signature, dtype: torch.dtype) -> torch.Tensor:
    """[rows, R]: 1 where the rank column belongs to the row's slot, else 0 (base rows: all 0)."""
    column_slots = torch.cat(
        [torch.full((rank,), slot, dtype=token_slots.dtype) for slot, rank in signature]
    ).to(token_slots.device)
    return (token_slots[:, None] == column_slots[None, :]).to(dtype)


def add_segments(
    out: torch.Tensor, x: torch.Tensor, stacked: StackedLoRA, segments: Sequence[LoRASegment]
) -> torch.Tensor:
    """`out` plus each adapter segment's delta, in place: per contiguous run of the segment's
    rows a shrink and one expand over every part's columns (the dense B) added into `out`."""
    width = stacked.width
    x = x.to(stacked.a_all.dtype)
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
        out[:, :width].index_add_(0, segment.rows, delta)
    return out


def add_stacked(
    out: torch.Tensor, x: torch.Tensor, stacked: StackedLoRA, mask: torch.Tensor
) -> torch.Tensor:
    """`out` plus every row's own adapter's delta, in place."""
    low = (x.to(stacked.a_all.dtype) @ stacked.a_all.T).mul_(mask)
    add_product(out[:, : stacked.width], low, stacked.b_all)
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
