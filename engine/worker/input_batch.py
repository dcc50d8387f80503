"""Builds a step's flat varlen batch from the scheduled requests (numpy, then one copy to torch).

scheduled (decodes first)  | d0 | d1 | p0 p0 p0 p0 | p1 p1 p1 |
query_start_loc              0    1    2             6          9
positions                    num_computed_tokens + offset within the step's chunk
slot_mapping                 block_ids[pos // bs] * bs + pos % bs
sample_indices               the last row of each request that samples this step (before its
                             draft, if it has one), then the rows whose logits give prompt
                             logprobs (requests that asked for them), then the draft rows
lora_mapping                 each row's adapter slot (-1: base), LoRA engines only
pooling_indices              the rows whose final hidden states embedding requests pool, request
                             by request in batch order; None in a step without any (the usual)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from engine.attention.backend import AttentionMetadata
from engine.core.scheduler_output import ScheduledRequest
from engine.lora.lora_mapping import LoRAMapping


@dataclass
class ModelInputs:
    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    sample_indices: torch.Tensor
    sample_requests: list[ScheduledRequest]
    lora_mapping: LoRAMapping | None = None
    """The step's adapter per row; None without LoRA or when no row has an adapter."""
    pooling_indices: torch.Tensor | None = None
    """The rows embedding requests pool (`pooling_rows`); None when no request pools any."""


def order_decodes_first(scheduled: list[ScheduledRequest]) -> list[ScheduledRequest]:
    """The attention backends batch single-token queries together; they must come first. Within
    the decodes and within the prefills, requests are grouped by LoRA slot (base first), so each
    adapter's rows form at most two contiguous runs (engine/lora/lora_mapping.py); without LoRA
    every slot is -1 and the order is the scheduler's."""
    return sorted(scheduled, key=lambda s: (s.num_new_tokens != 1, s.lora_slot))


def build_model_inputs(
    batch: list[ScheduledRequest], block_size: int, device: torch.device, with_lora: bool = False
) -> ModelInputs:
    num_seqs = len(batch)
    query_lens = np.fromiter((s.num_new_tokens for s in batch), dtype=np.int64, count=num_seqs)
    starts = np.fromiter((s.num_computed_tokens for s in batch), dtype=np.int64, count=num_seqs)
    seq_lens = starts + query_lens
    query_start_loc = np.zeros(num_seqs + 1, dtype=np.int64)
    np.cumsum(query_lens, out=query_start_loc[1:])
    num_tokens = int(query_start_loc[-1])
    seq_index = np.repeat(np.arange(num_seqs), query_lens)
    positions = starts[seq_index] + (np.arange(num_tokens) - query_start_loc[seq_index])
    block_tables = block_table_array(batch)
    slot_mapping = (
        block_tables[seq_index, positions // block_size].astype(np.int64) * block_size
        + positions % block_size
    )
    input_ids = np.fromiter(
        (tok for s in batch for tok in s.new_token_ids), dtype=np.int64, count=num_tokens
    )
    sample_rows = [i for i, s in enumerate(batch) if s.do_sample]
    sample_indices = query_start_loc[1:][sample_rows] - 1
    prompt_rows = prompt_logprobs_rows(batch, query_start_loc)
    if prompt_rows is not None:
        sample_indices = np.concatenate([sample_indices, prompt_rows])
    if any(s.draft_token_ids for s in batch):
        sample_indices = with_draft_rows(batch, sample_rows, sample_indices, query_start_loc)
    meta = AttentionMetadata(
        num_tokens=num_tokens,
        num_seqs=num_seqs,
        num_decodes=int((query_lens == 1).sum()),
        slot_mapping=torch.from_numpy(slot_mapping).to(device),
        query_start_loc=torch.from_numpy(query_start_loc.astype(np.int32)).to(device),
        seq_lens=torch.from_numpy(seq_lens.astype(np.int32)).to(device),
        block_tables=torch.from_numpy(block_tables).to(device),
        max_query_len=int(query_lens.max()),
        max_seq_len=int(seq_lens.max()),
        query_start_loc_cpu=query_start_loc.tolist(),
        seq_lens_cpu=seq_lens.tolist(),
    )
    return ModelInputs(
        input_ids=torch.from_numpy(input_ids).to(device),
        positions=torch.from_numpy(positions).to(device),
        meta=meta,
        sample_indices=torch.from_numpy(sample_indices).to(device),
        sample_requests=[batch[i] for i in sample_rows],
        lora_mapping=build_lora_mapping(batch, query_lens, device) if with_lora else None,
        pooling_indices=pooling_rows(batch, query_start_loc, device),
    )


def prompt_logprobs_rows(
    batch: list[ScheduledRequest], query_start_loc: np.ndarray
) -> np.ndarray | None:
    """The rows whose logits give prompt logprobs, request by request in batch order; None when
    no request computes any this step (the usual case: nothing is added)."""
    asking = [(i, s) for i, s in enumerate(batch) if s.num_prompt_logprobs_rows]
    if not asking:
        return None
    return np.concatenate(
        [
            np.arange(s.num_prompt_logprobs_rows)
            + int(query_start_loc[i])
            + s.prompt_logprobs_offset
            for i, s in asking
        ]
    )


def with_draft_rows(
    batch: list[ScheduledRequest],
    sample_rows: list[int],
    sample_indices: np.ndarray,
    query_start_loc: np.ndarray,
) -> np.ndarray:
    """Speculative decoding: each sampling row of a request with a draft moved back to its last
    token before the draft, and each draft token's row appended (request by request, in
    sampling order): row i of a draft gives the logits that verify draft token i + 1, or, after
    the last, the token that follows the whole draft."""
    num_drafts = np.array([len(batch[i].draft_token_ids) for i in sample_rows], dtype=np.int64)
    sample_indices = sample_indices.copy()
    sample_indices[: len(sample_rows)] -= num_drafts
    ends = query_start_loc[1:][sample_rows]
    draft_rows = [np.arange(end - k, end) for end, k in zip(ends, num_drafts, strict=True) if k]
    return np.concatenate([sample_indices, *draft_rows])


def pooling_rows(
    batch: list[ScheduledRequest], query_start_loc: np.ndarray, device: torch.device
) -> torch.Tensor | None:
    """The rows whose final hidden states embedding requests pool this step, request by
    request in batch order; None when none does (a step of generation only: nothing added)."""
    pooling = [(i, s) for i, s in enumerate(batch) if s.num_pooling_rows]
    if not pooling:
        return None
    rows = np.concatenate(
        [
            np.arange(s.num_pooling_rows) + int(query_start_loc[i]) + s.pooling_offset
            for i, s in pooling
        ]
    )
    return torch.from_numpy(rows).to(device)


def build_lora_mapping(
    batch: list[ScheduledRequest], query_lens: np.ndarray, device: torch.device
) -> LoRAMapping | None:
    """Each token row's adapter slot, from its request's; None when no request has one."""
    seq_slots = np.fromiter((s.lora_slot for s in batch), dtype=np.int64, count=len(batch))
    if seq_slots.max() < 0:
        return None
    return LoRAMapping.from_token_slots(np.repeat(seq_slots, query_lens), device)


def block_table_array(batch: list[ScheduledRequest]) -> np.ndarray:
    """[len(batch), longest block list] int32: each request's block ids, padded with 0."""
    max_blocks = max(len(s.block_ids) for s in batch)
    tables = np.zeros((len(batch), max_blocks), dtype=np.int32)
    for row, s in enumerate(batch):
        tables[row, : len(s.block_ids)] = s.block_ids
    return tables
