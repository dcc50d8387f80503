"""Pooler: embedding requests' final hidden states, pooled across their prefill chunks.

An embedding request's prompt is computed in chunks like any prompt, beside other requests. Each
step the runner hands over the final-norm hidden states of the rows its pooling reads
(ScheduledRequest.num_pooling_rows: every prompt position for MEAN, the first for CLS, the last for
LAST); their float32 sum is kept per request. The step that computes the request's last prompt
position turns the sum into its embedding: divided by the positions read (the mean; one row for
LAST and CLS), cut to `dimensions`, then normalized, as vLLM's embedding head does.

NOTE: MEAN sums chunk by chunk, so the same prompt chunked otherwise (another batch, another
budget) adds in another order: its embedding agrees to float32 rounding, not bit for bit. A
preempted request's sum is dropped with it (the recompute pools every row again), as is a finished
or aborted one's.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.nn.functional as F

from engine.core.scheduler_output import ScheduledRequest
from engine.inputs.pooling_params import PoolingParams


class Pooler:
    def __init__(self) -> None:
        self._sums: dict[str, torch.Tensor] = {}
        """By request id: the sum of the rows pooled so far, for requests still in prefill."""

    @property
    def has_pending(self) -> bool:
        """Whether a request has pooled rows but not finished its prompt yet."""
        return bool(self._sums)

    def drop(self, request_ids: Iterable[str]) -> None:
        """Forget these requests' sums (finished, aborted or preempted)."""
        if self._sums:
            for request_id in request_ids:
                self._sums.pop(request_id, None)

    def pool(
        self, batch: list[ScheduledRequest], hidden: torch.Tensor | None
    ) -> dict[str, torch.Tensor]:
        """Add the step's pooled rows (`hidden`: [rows, hidden_size], the final hidden states of
        input_batch.pooling_rows, in batch order) to their requests' sums; the embeddings of the
        requests whose prompt this step finished, by request id (float32, on the CPU)."""
        embeddings: dict[str, torch.Tensor] = {}
        row = 0
        for s in batch:
            params = s.pooling_params
            if params is None:
                continue
            if s.num_pooling_rows:
                assert hidden is not None, "pooling rows without their hidden states"
                part = hidden[row : row + s.num_pooling_rows].float().sum(dim=0)
                row += s.num_pooling_rows
                so_far = self._sums.get(s.request_id)
                self._sums[s.request_id] = part if so_far is None else so_far + part
            num_prompt_tokens = len(s.prompt_token_ids)
            if s.num_computed_tokens + s.num_new_tokens == num_prompt_tokens:
                total = self._sums.pop(s.request_id, None)
                if total is not None:  # (None: a bug, which the scheduler reports as an error)
                    embeddings[s.request_id] = embedding_of(total, params, num_prompt_tokens)
        return embeddings


def embedding_of(
    total: torch.Tensor, params: PoolingParams, num_prompt_tokens: int
) -> torch.Tensor:
    """The embedding from the sum of the pooled rows: their mean, its first `dimensions` values,
    scaled to unit L2 norm when `normalize`."""
    first, end = params.pooled_positions(num_prompt_tokens)
    embedding = total / (end - first)
    if params.dimensions is not None:
        embedding = embedding[: params.dimensions]
    if params.normalize:
        embedding = F.normalize(embedding, p=2.0, dim=0)
    return embedding.cpu()
