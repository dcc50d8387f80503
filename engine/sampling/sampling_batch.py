"""Gathers the per-request sampling parameters of a step into the Sampler's tensors."""

from __future__ import annotations

from collections.abc import Callable

import torch

from engine.core.scheduler_output import ScheduledRequest
from engine.sampling.sampler import SamplingTensors


def build_sampling_tensors(
    batch: list[ScheduledRequest],
    generator_for: Callable[[ScheduledRequest], torch.Generator | None],
) -> SamplingTensors:
    params = [s.sampling_params for s in batch]
    if all(p.is_greedy and not p.has_penalties for p in params):
        return _greedy_tensors(batch)
    needs_penalties = any(p.has_penalties for p in params)
    needs_repetition = any(p.repetition_penalty != 1.0 for p in params)
    return SamplingTensors(
        temperature=torch.tensor([0.0 if p.is_greedy else p.temperature for p in params]),
        top_k=torch.tensor([p.top_k for p in params], dtype=torch.long),
        top_p=torch.tensor([p.top_p for p in params]),
        min_p=torch.tensor([p.min_p for p in params]),
        presence_penalty=torch.tensor([p.presence_penalty for p in params]),
        frequency_penalty=torch.tensor([p.frequency_penalty for p in params]),
        repetition_penalty=torch.tensor([p.repetition_penalty for p in params]),
        output_tokens=_pad([s.output_token_ids for s in batch]) if needs_penalties else None,
        seen_tokens=(
            _pad([s.prompt_token_ids + s.output_token_ids for s in batch])
            if needs_repetition
            else None
        ),
        banned=[s.banned_token_ids for s in batch],
        generators=[generator_for(s) for s in batch],
        num_logprobs=[p.logprobs for p in params],
        all_greedy=all(p.is_greedy for p in params),
        needs_top_k_top_p=any(p.top_k > 0 or p.top_p < 1.0 for p in params),
        needs_min_p=any(p.min_p > 0 for p in params),
        needs_penalties=needs_penalties,
    )


def _greedy_tensors(batch: list[ScheduledRequest]) -> SamplingTensors:
    """The common all-greedy step: argmax needs no per-row parameter tensors."""
    empty = torch.empty(0)
    return SamplingTensors(
        temperature=empty,
        top_k=empty,
        top_p=empty,
        min_p=empty,
        presence_penalty=empty,
        frequency_penalty=empty,
        repetition_penalty=empty,
        output_tokens=None,
        seen_tokens=None,
        banned=[s.banned_token_ids for s in batch],
        generators=[None] * len(batch),
        num_logprobs=[s.sampling_params.logprobs for s in batch],
        all_greedy=True,
        needs_top_k_top_p=False,
        needs_min_p=False,
        needs_penalties=False,
    )


def _pad(rows: list[list[int]]) -> torch.Tensor:
    """Token id rows padded with -1 into one tensor."""
    width = max(1, max(len(r) for r in rows))
    out = torch.full((len(rows), width), -1, dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out
