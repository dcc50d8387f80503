"""Counters the scheduler keeps: preemptions, KV utilisation, step sizes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.core.kv_cache_manager import KVCacheManager
from engine.core.request import Request


@dataclass
class SchedulerStats:
    num_steps: int = 0
    num_preemptions: int = 0
    num_finished: int = 0
    num_scheduled_tokens: int = 0
    # KV utilisation = tokens held in the cache / slots of the blocks allocated to hold them,
    # summed over steps (so the ratio of the sums is the step average, weighted by size).
    kv_tokens_stored: int = 0
    kv_slots_allocated: int = 0
    # The same workload under a naive max_model_len reservation per running request.
    naive_slots_reserved: int = 0

    def record_step(
        self, running: Sequence[Request], kv: KVCacheManager, num_scheduled_tokens: int
    ) -> None:
        self.num_steps += 1
        self.num_scheduled_tokens += num_scheduled_tokens
        if not running:
            return
        tokens = sum(r.num_computed_tokens for r in running)
        blocks = sum(kv.num_blocks_of(r.request_id) for r in running)
        self.kv_tokens_stored += tokens
        self.kv_slots_allocated += blocks * kv.block_size

    def record_naive(self, num_running: int, max_model_len: int) -> None:
        self.naive_slots_reserved += num_running * max_model_len

    @property
    def kv_utilisation(self) -> float:
        if not self.kv_slots_allocated:
            return 0.0
        return self.kv_tokens_stored / self.kv_slots_allocated

    @property
    def naive_kv_utilisation(self) -> float:
        if not self.naive_slots_reserved:
            return 0.0
        return self.kv_tokens_stored / self.naive_slots_reserved
