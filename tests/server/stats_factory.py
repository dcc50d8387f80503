"""SchedulerStats for the metrics tests: an engine of 8 free blocks with nothing cached, and
whatever fields a test sets."""

from __future__ import annotations

from typing import Any

from engine.core.scheduler_stats import SchedulerStats


def scheduler_stats(**fields: Any) -> SchedulerStats:
    base: dict[str, Any] = dict(
        num_running=1,
        num_waiting=0,
        kv_cache_usage=0.0,
        num_kv_blocks=8,
        num_free_kv_blocks=8,
        prefix_cache_queries=0,
        prefix_cache_hits=0,
        num_preemptions=0,
    )
    return SchedulerStats(**(base | fields))
