"""One step's adapter per token row (vLLM's LoRAMapping), grouped into segments by slot.

    token rows     | d0 | d1 | p0 p0 p0 p0 | p1 p1 p1 |
    token_slots      1   -1    0  0  0  0    1  1  1        (-1: the base model)
    segments         slot 0: rows [2 3 4 5]; slot 1: rows [0 6 7 8]

Built once per step (the model runner, with the step's inputs) and read by every LoRA layer
(engine/lora/stacked_lora.py): one segment per adapter in the step, never one per request. The
runner groups a step's requests by slot (engine/worker/input_batch.py), so a segment's rows are
one or two contiguous runs, multiplied in place without a gather or a scatter.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class LoRASegment:
    slot: int
    rows: torch.Tensor | None
    """The step's token rows of this slot's adapter (int64); None when it is every row."""
    runs: tuple[tuple[int, int], ...] = ()
    """The same rows as contiguous [start, end) runs (the runner groups a step's requests by
    slot, so there are at most two: among the decodes and among the prefills)."""


@dataclass(frozen=True)
class LoRAMapping:
    token_slots: torch.Tensor
    """[num_tokens] int64: each row's slot, -1 for the base model."""
    segments: tuple[LoRASegment, ...]
    """One per slot with rows in the step, by slot."""

    @classmethod
    def from_token_slots(cls, token_slots: np.ndarray, device: torch.device) -> LoRAMapping | None:
        """The mapping of a step whose rows have `token_slots`; None when no row has an adapter
        (the step then does no LoRA work at all)."""
        active = np.unique(token_slots[token_slots >= 0])
        if active.size == 0:
            return None
        segments: list[LoRASegment] = []
        for slot in active.tolist():
            rows = np.flatnonzero(token_slots == slot)
            whole = rows.size == token_slots.size
            tensor = None if whole else torch.from_numpy(rows).to(device)
            segments.append(LoRASegment(slot, tensor, contiguous_runs(rows)))
        return cls(torch.from_numpy(token_slots.astype(np.int64)).to(device), tuple(segments))


def contiguous_runs(rows: np.ndarray) -> tuple[tuple[int, int], ...]:
    """Sorted row indices as [start, end) runs: [2 3 4 7 8] -> ((2, 5), (7, 9))."""
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [rows.size]))
    return tuple((int(rows[a]), int(rows[b - 1]) + 1) for a, b in zip(starts, ends, strict=True))
