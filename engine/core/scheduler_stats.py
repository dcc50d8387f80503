"""What the scheduler reports about itself: a snapshot between steps, and (on demand, for
benchmarks) what the running requests hold in the KV cache."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from engine.core.request import RequestStatus
from engine.spec_decode.spec_decoding_stats import SpecDecodingStats

if TYPE_CHECKING:
    from engine.core.kv_cache_manager import KVCacheManager
    from engine.core.request import Request
    from engine.core.scheduler import Scheduler


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
    num_interrupted_steps: int = 0
    """Steps cut short for a newcomer (engine/core/step_interrupt.py); the engine fills it in."""
    num_grammar_states: int = 0
    """Structured-outputs grammar states held (one per unfinished guided request); the engine
    fills it in, the scheduler does not know grammars."""
    running_lora_adapters: dict[str, int] = field(default_factory=dict)
    """Running requests per LoRA adapter that has any (vLLM's name); empty with LoRA off."""
    waiting_lora_adapters: dict[str, int] = field(default_factory=dict)
    """Waiting (queued or preempted) requests per LoRA adapter that has any."""
    spec_decoding_stats: SpecDecodingStats | None = None
    """Speculative decoding's counters (cumulative); None with it off."""


def scheduler_stats(scheduler: Scheduler) -> SchedulerStats:
    """`scheduler` and its KV cache now."""
    kv = scheduler.kv_cache_manager
    speculation = scheduler.speculation
    return SchedulerStats(
        num_running=len(scheduler.running),
        num_waiting=len(scheduler.waiting),
        kv_cache_usage=kv.usage,
        num_kv_blocks=kv.num_blocks,
        num_free_kv_blocks=kv.num_free_blocks,
        prefix_cache_queries=kv.prefix_cache_stats.queries,
        prefix_cache_hits=kv.prefix_cache_stats.hits,
        num_preemptions=scheduler.num_preemptions,
        spec_decoding_stats=None if speculation is None else speculation.snapshot(),
        **lora_request_counts(scheduler.requests.values() if scheduler.lora_slots else ()),
    )


class LoRARequestCounts(TypedDict):
    running_lora_adapters: dict[str, int]
    waiting_lora_adapters: dict[str, int]


def lora_request_counts(requests: Iterable[Request]) -> LoRARequestCounts:
    """The unfinished `requests` (in arrival order) counted per adapter, running and waiting.

    Both dicts list adapters in the order of their oldest unfinished request, as vLLM lists them
    (in the order adapters got requests; one with none left drops out)."""
    order: dict[str, None] = {}
    running: dict[str, int] = {}
    waiting: dict[str, int] = {}
    for request in requests:
        name = request.lora_name
        if name is None:
            continue
        order[name] = None
        counts = running if request.status == RequestStatus.RUNNING else waiting
        counts[name] = counts.get(name, 0) + 1
    return LoRARequestCounts(
        running_lora_adapters={name: running[name] for name in order if name in running},
        waiting_lora_adapters={name: waiting[name] for name in order if name in waiting},
    )


@dataclass
class KVOccupancy:
    """What the running requests hold in the KV cache now. Not kept per step: a benchmark that
    wants KV utilisation samples it after each step itself."""

    num_running: int
    num_tokens: int
    """Tokens whose KV is computed."""
    num_slots: int
    """Token slots of the blocks allocated to hold them."""


def kv_occupancy(running: Collection[Request], kv: KVCacheManager, block_size: int) -> KVOccupancy:
    """What the `running` requests hold in `kv` now. O(running): for benchmarks, not for the
    step path."""
    num_blocks = sum(kv.num_blocks_of(r.request_id) for r in running)
    return KVOccupancy(
        num_running=len(running),
        num_tokens=sum(r.num_computed_tokens for r in running),
        num_slots=num_blocks * block_size,
    )
