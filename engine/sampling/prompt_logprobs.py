"""Prompt logprobs (vLLM's `prompt_logprobs`), from the logits a prefill chunk computed at the
positions of the requests that asked: each prompt token's log-probability and rank, and the top
alternatives at its position.

The logits at position p predict the token at p + 1, so the last row of a chunk gives the first
token of the next chunk: the targets are read from the whole prompt, never from the chunk.
log_softmax runs in float32 on a slice of rows at a time, so what it adds stays at one slice's
[rows, vocab] however long the chunk.
"""

from __future__ import annotations

import torch

from engine.core.scheduler_output import LogprobsLists, ScheduledRequest

ROWS_PER_SLICE = 256
"""Rows normalised at once: 256 x a 128k vocabulary is 128 MiB of float32."""


def compute_prompt_logprobs(
    logits: torch.Tensor, batch: list[ScheduledRequest]
) -> dict[str, LogprobsLists]:
    """`logits`: [rows, vocab], the prompt-logprob rows of `batch`'s requests, request by
    request in batch order (engine/worker/input_batch.py's prompt_logprobs_rows)."""
    out: dict[str, LogprobsLists] = {}
    row = 0
    for s in batch:
        num_rows = s.num_prompt_logprobs_rows
        if not num_rows:
            continue
        first_position = s.num_computed_tokens + s.prompt_logprobs_offset
        targets = s.prompt_token_ids[first_position + 1 : first_position + 1 + num_rows]
        assert len(targets) == num_rows, "prompt-logprob rows past the prompt's end"
        num_top = s.sampling_params.prompt_logprobs or 0
        out[s.request_id] = _logprobs_lists(
            logits[row : row + num_rows], targets, num_top, first_position + 1
        )
        row += num_rows
    return out


def _logprobs_lists(
    logits: torch.Tensor, targets: list[int], num_top: int, first_token_index: int
) -> LogprobsLists:
    target_ids = torch.tensor(targets, dtype=torch.long, device=logits.device).unsqueeze(1)
    ids, values, ranks = [], [], []
    for start in range(0, len(targets), ROWS_PER_SLICE):
        logprobs = logits[start : start + ROWS_PER_SLICE].float().log_softmax(dim=-1)
        selected_ids = target_ids[start : start + ROWS_PER_SLICE]
        selected = logprobs.gather(1, selected_ids)
        # As vLLM counts it: the tokens at least as likely, the token itself included.
        ranks.append((logprobs >= selected).sum(dim=-1))
        if num_top:
            top = logprobs.topk(num_top, dim=-1)
            ids.append(torch.cat([selected_ids, top.indices], dim=1))
            values.append(torch.cat([selected, top.values], dim=1))
        else:
            ids.append(selected_ids)
            values.append(selected)
    return LogprobsLists(
        first_token_index,
        torch.cat(ids).tolist(),
        torch.cat(values).tolist(),
        torch.cat(ranks).tolist(),
    )
