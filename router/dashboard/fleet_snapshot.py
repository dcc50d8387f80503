"""fleet_snapshot: what the router's /dashboard draws, as one JSON-ready dict.

    replicas    per replica: health, load as the router knows it (running and waiting from its
                report, less what the router saw end since; the router's own in-flight count and
                queued tokens), KV use, prefix-cache hits and queries (the engine's counters: a
                viewer takes the rate between two snapshots), the size of its block pool, and
                its indexed blocks grouped by prefix (router/kv/prefix_groups.py): the largest
                `max_groups` groups, the rest summed, and the untraced blocks apart
    decisions   the newest routing decisions (router/policies/decision_log.py), each with its
                candidates' cached and queued tokens and the prefix-aware cost model's estimate

A prefix is named by the first 12 hex digits of its first block's hash, as a decision names the
prefix of its request: no prompt text leaves the router. The size of a snapshot is bounded by the
replicas and the caps, never by the blocks cached.
"""

from __future__ import annotations

import time
from typing import Any

from pagedock.kv.block_hash import BlockHash
from router.config import RouterConfig
from router.kv.kv_index import KVIndex
from router.policies import Candidate, RouteRequest
from router.policies.decision_log import DecisionLog, RecentDecision
from router.policies.prefix_aware import estimated_ttft_ms
from router.replicas.replica import Replica

MAX_GROUPS = 48
"""Prefix groups listed per replica; the rest are summed as `other_blocks`."""
MAX_DECISIONS = 30
PREFIX_HEX_DIGITS = 12


def prefix_name(h: BlockHash) -> str:
    return h[: PREFIX_HEX_DIGITS // 2].hex()


def fleet_snapshot(
    config: RouterConfig,
    replicas: dict[str, Replica],
    index: KVIndex,
    decisions: DecisionLog,
    max_groups: int = MAX_GROUPS,
    max_decisions: int = MAX_DECISIONS,
) -> dict[str, Any]:
    return {
        "time": round(time.time(), 3),
        "policy": config.policy,
        "replicas": [
            replica_snapshot(config, replicas[url], index, max_groups) for url in sorted(replicas)
        ],
        "decisions": [decision_view(config, d) for d in decisions.recent(max_decisions)],
        "num_decisions": decisions.num_recorded,
        "limits": {"max_groups": max_groups, "max_decisions": max_decisions},
    }


def replica_snapshot(
    config: RouterConfig, replica: Replica, index: KVIndex, max_groups: int
) -> dict[str, Any]:
    running, waiting = replica.reported_requests()
    load = replica.load
    queries = load.prefix_cache_queries
    counts = index.groups.counts(replica.url, max_groups)
    return {
        "url": replica.url,
        "healthy": replica.healthy,
        "warming": replica.warming,
        "kv_synced": replica.kv_synced,
        "kv_error": replica.kv_error,
        "num_requests_running": running,
        "num_requests_waiting": waiting,
        "inflight": len(replica.inflight),
        "queued_tokens": replica.queued_tokens(config),
        "kv_cache_usage": round(load.kv_cache_usage, 4),
        "prefix_cache_hits": load.prefix_cache_hits,
        "prefix_cache_queries": queries,
        "prefix_cache_hit_rate": round(load.prefix_cache_hits / queries, 4) if queries else None,
        "block_size": replica.block_size or config.block_size,
        "num_gpu_blocks": load.num_gpu_blocks or None,
        "cached_blocks": index.num_blocks(replica.url),
        "groups": [{"prefix": prefix_name(h), "blocks": n} for h, n in counts.groups],
        "other_groups": counts.other_groups,
        "other_blocks": counts.other_blocks,
        "untraced_blocks": counts.untraced_blocks,
    }


def decision_view(config: RouterConfig, d: RecentDecision) -> dict[str, Any]:
    request = RouteRequest(d.num_prompt_tokens)
    return {
        "time": round(d.at, 3),
        "request_id": d.request_id,
        "replica": d.replica,
        "reason": d.reason,
        "model": d.model,
        "predicted_cached_tokens": d.predicted_cached_tokens,
        "num_prompt_tokens": d.num_prompt_tokens,
        "prefix": None if d.prefix is None else prefix_name(d.prefix),
        "candidates": [candidate_view(config, c, request) for c in d.candidates],
    }


def candidate_view(config: RouterConfig, c: Candidate, request: RouteRequest) -> dict[str, Any]:
    return {
        "replica": c.url,
        "cached_tokens": c.cached_tokens,
        "queued_tokens": c.queued_tokens,
        "kv_cache_usage": round(c.kv_cache_usage, 4),
        "estimated_ttft_ms": round(estimated_ttft_ms(c, request, config), 2),
    }
