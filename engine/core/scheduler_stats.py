"""What the scheduler reports about itself: a snapshot between steps, and (on demand, for
benchmarks) what the running requests hold in the KV cache."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SchedulerStats:
    """The scheduler and its KV cache between two steps; counters are cumulative."""

    num_running: int
    num_waiting: int
    kv_cache_usage: float
    """Fraction of KV blocks referenced by requests (1 = full)."""
    num_kv_blocks: int
    num_free_kv_blocks: int
    """Blocks no request references (free-but-cached blocks count as free)."""
    prefix_cache_queries: int
    """Prompt tokens looked up in the prefix cache."""
    prefix_cache_hits: int
    """Prompt tokens found there."""
    num_preemptions: int
    num_grammar_states: int = 0
    """Structured-outputs grammar states held (one per unfinished guided request); the engine
    fills it in, the scheduler does not know grammars."""


@dataclass
class KVOccupancy:
    """What the running requests hold in the KV cache now. Not kept per step: a benchmark that
    wants KV utilisation samples it after each step itself."""

    num_running: int
    num_tokens: int
    """Tokens whose KV is computed."""
    num_slots: int
    """Token slots of the blocks allocated to hold them."""
