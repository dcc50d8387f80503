"""CUDA graphs for decode-only steps: capture the model's forward once per batch size, replay it.

A decode step of a small model on a GPU is dominated by launch overhead (hundreds of kernels of a
few microseconds each); a CUDA graph replays them all with one launch. A graph fixes every
address and every launch shape, so:

- inputs live in persistent buffers sized for the largest captured batch; a step copies its
  inputs into their leading rows and replays the graph of the smallest captured size >= its
  batch (sizes 1, 2, 4, 8, then multiples of 8, up to max_num_seqs and at most 256);
- padding rows write nowhere (slot -1, which every cache-write path skips) and read a valid
  one-token context (seq_len 1, block 0), and their logits are dropped;
- block tables have a fixed width (max_model_len / block_size blocks), and the attention
  metadata's max_seq_len is max_model_len, so the decode kernel's split-K choice is the same at
  capture and at every replay;
- only steps whose scheduled requests all decode exactly one token take the graph path, and only
  up to the largest captured size; anything else runs eagerly.

The capture itself is behind `GraphCapture`: `torch.cuda.CUDAGraph` on a GPU; tests on the CPU
use `EagerCapture`, which re-runs the same function on the same persistent buffers — the padding,
the buffer updates and the output slicing are then checked against the eager path without a GPU.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from engine.attention.backend import AttentionMetadata
from engine.core.scheduler_output import ScheduledRequest
from engine.worker.input_batch import block_table_array

logger = logging.getLogger("pagedock.cuda_graphs")

Forward = Callable[[], torch.Tensor]
# The largest batch captured: beyond it a decode step's GEMMs amortise the launches anyway.
MAX_CAPTURE_SIZE = 256


def capture_sizes(max_num_seqs: int) -> list[int]:
    """1, 2, 4, 8, 16, 24, ... up to max_num_seqs (and MAX_CAPTURE_SIZE), always including the
    top size so that every batch up to it has a graph."""
    top = min(max_num_seqs, MAX_CAPTURE_SIZE)
    sizes = [s for s in (1, 2, 4) if s < top] + list(range(8, top, 8))
    return sorted({*sizes, top})


def is_graphable(batch: list[ScheduledRequest], max_size: int) -> bool:
    """A decode-only step (one new token per request, every request sampling) small enough."""
    return 0 < len(batch) <= max_size and all(s.num_new_tokens == 1 and s.do_sample for s in batch)


class GraphCapture(Protocol):
    def capture(self, forward: Forward) -> Callable[[], torch.Tensor]:
        """Record `forward`; return a replay whose result is the captured output tensor."""
        ...


class CudaCapture:
    """torch.cuda.CUDAGraph, every graph in one shared memory pool (captured largest first, so
    smaller graphs reuse the largest one's intermediate buffers)."""

    def __init__(self) -> None:
        self.pool = torch.cuda.graph_pool_handle()

    def capture(self, forward: Forward) -> Callable[[], torch.Tensor]:
        # Warm-up on a side stream first: lazy initialisation (cuBLAS handles, Triton's
        # compilation and autotuning) must not happen inside the capture.
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(2):
                forward()
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            output = forward()

        def replay() -> torch.Tensor:
            graph.replay()
            return output

        return replay


class EagerCapture:
    """Stands in for a CUDA graph where there is none: replay re-runs the function on the same
    persistent buffers. Used by the CPU tests of the padding and buffer logic."""

    def capture(self, forward: Forward) -> Callable[[], torch.Tensor]:
        forward()
        return forward


@dataclass
class _Buffers:
    input_ids: torch.Tensor  # [max_size] int64
    positions: torch.Tensor  # [max_size] int64
    slot_mapping: torch.Tensor  # [max_size] int64, -1 = padding
    seq_lens: torch.Tensor  # [max_size] int32, 1 on padding rows
    block_tables: torch.Tensor  # [max_size, max_blocks] int32
    query_start_loc: torch.Tensor  # [max_size + 1] int32: arange (one token per sequence)
    sample_indices: torch.Tensor  # [max_size] int64: arange


class DecodeGraphRunner:
    """Captured forward passes of decode-only steps, one per batch size."""

    def __init__(
        self,
        model: torch.nn.Module,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        max_num_seqs: int,
        max_model_len: int,
        block_size: int,
        device: torch.device,
        capturer: GraphCapture,
    ) -> None:
        self.model = model
        self.kv_caches = kv_caches
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.sizes = capture_sizes(max_num_seqs)
        self.max_size = self.sizes[-1]
        max_blocks = -(-max_model_len // block_size)
        n = self.max_size
        self.buffers = _Buffers(
            input_ids=torch.zeros(n, dtype=torch.int64, device=device),
            positions=torch.zeros(n, dtype=torch.int64, device=device),
            slot_mapping=torch.full((n,), -1, dtype=torch.int64, device=device),
            seq_lens=torch.ones(n, dtype=torch.int32, device=device),
            block_tables=torch.zeros(n, max_blocks, dtype=torch.int32, device=device),
            query_start_loc=torch.arange(n + 1, dtype=torch.int32, device=device),
            sample_indices=torch.arange(n, dtype=torch.int64, device=device),
        )
        self.replays: dict[int, Callable[[], torch.Tensor]] = {}
        # Largest first: with a shared pool the smaller graphs fit in the largest one's memory.
        for size in reversed(self.sizes):
            self.replays[size] = capturer.capture(self._forward_fn(size))
        logger.info("captured decode graphs for batch sizes %s", self.sizes)

    def _metadata(self, size: int) -> AttentionMetadata:
        b = self.buffers
        return AttentionMetadata(
            num_tokens=size,
            num_seqs=size,
            num_decodes=size,
            slot_mapping=b.slot_mapping[:size],
            query_start_loc=b.query_start_loc[: size + 1],
            seq_lens=b.seq_lens[:size],
            block_tables=b.block_tables[:size],
            max_query_len=1,
            max_seq_len=self.max_model_len,
            # Host copies at capture time: decode-only steps never read them on the GPU path.
            query_start_loc_cpu=list(range(size + 1)),
            seq_lens_cpu=[self.max_model_len] * size,
        )

    def _forward_fn(self, size: int) -> Forward:
        b = self.buffers
        meta = self._metadata(size)

        def forward() -> torch.Tensor:
            return self.model(
                b.input_ids[:size],
                b.positions[:size],
                self.kv_caches,
                meta,
                b.sample_indices[:size],
            )

        return forward

    def run(self, batch: list[ScheduledRequest]) -> torch.Tensor:
        """Logits [len(batch), vocab] of a decode-only batch (is_graphable must hold)."""
        n = len(batch)
        size = next(s for s in self.sizes if s >= n)
        self._load_inputs(batch, size)
        return self.replays[size]()[:n]

    def _load_inputs(self, batch: list[ScheduledRequest], size: int) -> None:
        n, bs = len(batch), self.block_size
        positions = np.fromiter((s.num_computed_tokens for s in batch), dtype=np.int64, count=n)
        ids = np.fromiter((s.new_token_ids[0] for s in batch), dtype=np.int64, count=n)
        last_blocks = np.fromiter(
            (s.block_ids[p // bs] for s, p in zip(batch, positions, strict=True)),
            dtype=np.int64,
            count=n,
        )
        tables = block_table_array(batch)
        width = tables.shape[1]
        b = self.buffers
        b.input_ids[:n].copy_(torch.from_numpy(ids))
        b.positions[:n].copy_(torch.from_numpy(positions))
        b.slot_mapping[:n].copy_(torch.from_numpy(last_blocks * bs + positions % bs))
        b.seq_lens[:n].copy_(torch.from_numpy((positions + 1).astype(np.int32)))
        b.block_tables[:n, :width].copy_(torch.from_numpy(tables))
        # Padding rows: write nowhere, read one valid slot.
        b.slot_mapping[n:size].fill_(-1)
        b.seq_lens[n:size].fill_(1)
        b.block_tables[n:size].zero_()
