"""One step's adapter per token row (vLLM's LoRAMapping), grouped into segments by slot.

    token rows     | d0 | d1 | p0 p0 p0 p0 | p1 p1 p1 |
    token_slots      1   -1    0  0  0  0    1  1  1        (-1: the base model)
    segments         slot 0: rows [2 3 4 5]; slot 1: rows [0 6 7 8]
    groups           slot 0: rows [2 3 4 5]; slot 1: rows [0 6 7 8]   (equal sizes, padded)

Built once per step (the model runner, with the step's inputs) and read by every LoRA layer
(engine/lora/stacked_lora.py): one segment per adapter in the step, never one per request. The
runner groups a step's requests by slot (engine/worker/input_batch.py), so a segment's rows are
one or two contiguous runs, multiplied in place without a gather or a scatter. When the slots'
row counts are close (decode steps), the same rows also come as equal-sized groups, padded to the
largest, for one batched GEMM per product (`LoRAGroups`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

# The grouped path is taken when padding the groups to the largest adds at most this share of the
# step's adapter rows (padded rows are multiplied and then zeroed, so they cost arithmetic).
GROUPED_MAX_PADDING = 0.5


@dataclass(frozen=True)
class LoRASegment:
    slot: int
    rows: torch.Tensor | None
    """The step's token rows of this slot's adapter (int64); None when it is every row."""
    runs: tuple[tuple[int, int], ...] = ()
    """The same rows as contiguous [start, end) runs (the runner groups a step's requests by
    slot, so there are at most two: among the decodes and among the prefills)."""


@dataclass(frozen=True)
class LoRAGroups:
    """The step's adapter rows as one group per slot in the step, each padded to `size` rows."""

    slots: tuple[int, ...]
    """The slot of each group, ascending."""
    rows: torch.Tensor
    """[len(slots) * size] int64: the token row at each group position (padding repeats the
    group's first row)."""
    padding: torch.Tensor
    """[len(slots), size, 1] bool: True at a padded position (its product is zeroed)."""
    size: int


@dataclass(frozen=True)
class LoRAMapping:
    token_slots: torch.Tensor
    """[num_tokens] int64: each row's slot, -1 for the base model."""
    segments: tuple[LoRASegment, ...]
    """One per slot with rows in the step, by slot."""
    groups: LoRAGroups | None = None
    """The same rows as padded groups, when padding them costs little (else None)."""

    @classmethod
    def from_token_slots(cls, token_slots: np.ndarray, device: torch.device) -> LoRAMapping | None:
        """The mapping of a step whose rows have `token_slots`; None when no row has an adapter
        (the step then does no LoRA work at all)."""
        active = np.unique(token_slots[token_slots >= 0])
        if active.size == 0:
            return None
        segments: list[LoRASegment] = []
        slot_rows: list[np.ndarray] = []
        for slot in active.tolist():
            rows = np.flatnonzero(token_slots == slot)
            slot_rows.append(rows)
            whole = rows.size == token_slots.size
            tensor = None if whole else torch.from_numpy(rows).to(device)
            segments.append(LoRASegment(slot, tensor, contiguous_runs(rows)))
        groups = padded_groups(active.tolist(), slot_rows, device)
        return cls(
            torch.from_numpy(token_slots.astype(np.int64)).to(device), tuple(segments), groups
        )


def padded_groups(
    slots: list[int], slot_rows: list[np.ndarray], device: torch.device
) -> LoRAGroups | None:
    """Each slot's rows padded to the largest slot's count; None for a single slot (its rows are
    one or two runs, multiplied in place) and when the padding would exceed GROUPED_MAX_PADDING of
    the rows (a long prefill chunk beside a few decodes)."""
    if len(slots) < 2:
        return None
    size = max(rows.size for rows in slot_rows)
    real = sum(rows.size for rows in slot_rows)
    if len(slots) * size > (1 + GROUPED_MAX_PADDING) * real:
        return None
    positions = np.empty((len(slots), size), dtype=np.int64)
    padding = np.zeros((len(slots), size, 1), dtype=bool)
    for i, rows in enumerate(slot_rows):
        positions[i, : rows.size] = rows
        positions[i, rows.size :] = rows[0]
        padding[i, rows.size :] = True
    return LoRAGroups(
        tuple(slots),
        torch.from_numpy(positions.reshape(-1)).to(device),
        torch.from_numpy(padding).to(device),
        size,
    )


def contiguous_runs(rows: np.ndarray) -> tuple[tuple[int, int], ...]:
    """Sorted row indices as [start, end) runs: [2 3 4 7 8] -> ((2, 5), (7, 9))."""
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    starts = np.concatenate(([0], breaks))
    ends = np.concatenate((breaks, [rows.size]))
    return tuple((int(rows[a]), int(rows[b - 1]) + 1) for a, b in zip(starts, ends, strict=True))
