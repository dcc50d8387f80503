"""Runs one step on the model: builds the flat varlen batch, runs the forward pass, samples.

    scheduled (any order)      -> reordered: decodes (1 new token) first, then prefill chunks
    input_ids / positions      [num_tokens]         every new token of every request, no padding
    slot_mapping               [num_tokens]         block_ids[pos // bs] * bs + pos % bs
    block_tables               [num_seqs, max_blocks]
    sample_indices             rows whose request reaches its last token this step
"""

from __future__ import annotations

import numpy as np
import torch

from engine.attention import AttentionBackend, AttentionMetadata
from engine.model_config import ModelConfig
from engine.models.llama import LlamaForCausalLM
from engine.sampler import Sampler, SamplingTensors
from engine.scheduler_output import ModelRunnerOutput, ScheduledRequest, SchedulerOutput


class ModelRunner:
    def __init__(
        self,
        model: LlamaForCausalLM,
        config: ModelConfig,
        backend: AttentionBackend,
        num_kv_blocks: int,
        block_size: int,
        dtype: torch.dtype,
        device: torch.device,
        seed: int = 0,
    ) -> None:
        self.model = model
        self.config = config
        self.backend = backend
        self.block_size = block_size
        self.device = device
        self.kv_caches = allocate_kv_caches(config, num_kv_blocks, block_size, dtype, device)
        self.sampler = Sampler(torch.Generator(device="cpu").manual_seed(seed))
        # Per-request generators for requests with their own seed; dropped when they finish.
        self.generators: dict[str, torch.Generator] = {}

    @torch.inference_mode()
    def execute(self, output: SchedulerOutput) -> ModelRunnerOutput:
        for request_id in output.finished_req_ids:
            self.generators.pop(request_id, None)
        if output.is_empty:
            return ModelRunnerOutput({})
        batch = sorted(output.scheduled, key=lambda s: s.num_new_tokens != 1)
        input_ids, positions, meta, sample_rows = self._prepare_inputs(batch)
        logits = self.model(input_ids, positions, self.kv_caches, meta, sample_rows.indices)
        sampling = sample_rows.requests
        if not sampling:
            return ModelRunnerOutput({})
        tokens = self.sampler(logits.cpu(), self._sampling_tensors(sampling))
        return ModelRunnerOutput({s.request_id: t for s, t in zip(sampling, tokens, strict=True)})

    # ---- batch layout --------------------------------------------------------------------

    def _prepare_inputs(
        self, batch: list[ScheduledRequest]
    ) -> tuple[torch.Tensor, torch.Tensor, AttentionMetadata, _SampleRows]:
        bs = self.block_size
        query_lens = np.fromiter((s.num_new_tokens for s in batch), dtype=np.int64, count=len(batch))
        starts = np.fromiter((s.num_computed_tokens for s in batch), dtype=np.int64, count=len(batch))
        seq_lens = starts + query_lens
        query_start_loc = np.zeros(len(batch) + 1, dtype=np.int64)
        np.cumsum(query_lens, out=query_start_loc[1:])
        num_tokens = int(query_start_loc[-1])
        # Position of every token: its request's start plus its offset within the request's chunk.
        seq_index = np.repeat(np.arange(len(batch)), query_lens)
        positions = starts[seq_index] + (np.arange(num_tokens) - query_start_loc[seq_index])
        max_blocks = max(len(s.block_ids) for s in batch)
        block_tables = np.zeros((len(batch), max_blocks), dtype=np.int32)
        for row, s in enumerate(batch):
            block_tables[row, : len(s.block_ids)] = s.block_ids
        slot_mapping = block_tables[seq_index, positions // bs].astype(np.int64) * bs + positions % bs
        input_ids = np.fromiter(
            (tok for s in batch for tok in s.new_token_ids), dtype=np.int64, count=num_tokens
        )
        sample_requests = [s for s in batch if s.do_sample]
        sample_indices = [int(query_start_loc[i + 1]) - 1 for i, s in enumerate(batch) if s.do_sample]
        dev = self.device
        meta = AttentionMetadata(
            num_tokens=num_tokens,
            num_seqs=len(batch),
            num_decodes=int((query_lens == 1).sum()),
            slot_mapping=torch.from_numpy(slot_mapping).to(dev),
            query_start_loc=torch.from_numpy(query_start_loc.astype(np.int32)).to(dev),
            seq_lens=torch.from_numpy(seq_lens.astype(np.int32)).to(dev),
            block_tables=torch.from_numpy(block_tables).to(dev),
            max_query_len=int(query_lens.max()),
            max_seq_len=int(seq_lens.max()),
            query_start_loc_cpu=query_start_loc.tolist(),
            seq_lens_cpu=seq_lens.tolist(),
        )
        rows = _SampleRows(torch.tensor(sample_indices, dtype=torch.long, device=dev), sample_requests)
        return (
            torch.from_numpy(input_ids).to(dev),
            torch.from_numpy(positions).to(dev),
            meta,
            rows,
        )

    # ---- sampling parameters as tensors --------------------------------------------------

    def _sampling_tensors(self, batch: list[ScheduledRequest]) -> SamplingTensors:
        params = [s.sampling_params for s in batch]
        needs_penalties = any(p.has_penalties for p in params)
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
                if any(p.repetition_penalty != 1.0 for p in params)
                else None
            ),
            banned=[s.banned_token_ids for s in batch],
            generators=[self._generator_for(s) for s in batch],
            num_logprobs=[p.logprobs for p in params],
            all_greedy=all(p.is_greedy for p in params),
            needs_top_k_top_p=any(p.top_k > 0 or p.top_p < 1.0 for p in params),
            needs_min_p=any(p.min_p > 0 for p in params),
            needs_penalties=needs_penalties,
        )

    def _generator_for(self, s: ScheduledRequest) -> torch.Generator | None:
        seed = s.sampling_params.seed
        if seed is None or s.sampling_params.is_greedy:
            return None
        gen = self.generators.get(s.request_id)
        if gen is None:
            gen = torch.Generator(device="cpu").manual_seed(seed)
            self.generators[s.request_id] = gen
        return gen


class _SampleRows:
    def __init__(self, indices: torch.Tensor, requests: list[ScheduledRequest]) -> None:
        self.indices = indices
        self.requests = requests


def _pad(rows: list[list[int]]) -> torch.Tensor:
    width = max(1, max(len(r) for r in rows))
    out = torch.full((len(rows), width), -1, dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def kv_cache_bytes_per_block(config: ModelConfig, block_size: int, dtype: torch.dtype) -> int:
    element = torch.empty((), dtype=dtype).element_size()
    per_layer = 2 * block_size * config.num_key_value_heads * config.head_dim * element
    return per_layer * config.num_hidden_layers


def allocate_kv_caches(
    config: ModelConfig, num_blocks: int, block_size: int, dtype: torch.dtype, device: torch.device
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One [num_blocks, block_size, num_kv_heads, head_dim] K and V tensor per layer."""
    shape = (config.num_hidden_layers, 2, num_blocks, block_size, config.num_key_value_heads, config.head_dim)
    storage = torch.zeros(shape, dtype=dtype, device=device)
    return [(storage[i, 0], storage[i, 1]) for i in range(config.num_hidden_layers)]
