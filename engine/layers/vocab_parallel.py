"""The embedding split over tensor-parallel ranks by vocabulary rows (engine/models/tp_layout.py).

Each rank looks up the ids that fall in its rows, writes zeros for the others, and one
all-reduce sums the ranks' partial embeddings into every rank's full one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn import functional as F

if TYPE_CHECKING:
    from engine.distributed.tp_group import TPGroup


class VocabParallelEmbedding(nn.Module):
    def __init__(
        self, vocab_start: int, vocab_per_rank: int, hidden_size: int, tp: TPGroup
    ) -> None:
        super().__init__()
        self.vocab_start = vocab_start
        self.vocab_end = vocab_start + vocab_per_rank
        self.weight = nn.Parameter(torch.empty(vocab_per_rank, hidden_size), requires_grad=False)
        self.tp = tp

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        mine = (input_ids >= self.vocab_start) & (input_ids < self.vocab_end)
        local_ids = (input_ids - self.vocab_start) * mine
        hidden = F.embedding(local_ids, self.weight) * mine.unsqueeze(-1).to(self.weight.dtype)
        return self.tp.all_reduce(hidden)
