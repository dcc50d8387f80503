"""Demand: what the operator's autoscaler reads from each router (GET /router/demand).

Requests held for want of a replica, requests in flight, the time since the last request, and per
replica its recent prefix hits (the router's view of whose cache is hot, for a cache-aware
scale-down) and its own report of running and waiting requests and KV usage. Prefix hits decay
exponentially (half-life `HIT_HALF_LIFE_S`), so the score is bounded memory and reflects the
last minutes, not the replica's lifetime.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

HIT_HALF_LIFE_S = 60.0


@dataclass
class DecayingScore:
    value: float = 0.0
    at: float = field(default_factory=time.monotonic)

    def add(self, amount: float, now: float) -> None:
        self.value = self.current(now) + amount
        self.at = now

    def current(self, now: float) -> float:
        return self.value * math.pow(0.5, max(0.0, now - self.at) / HIT_HALF_LIFE_S)


class DemandTracker:
    def __init__(self) -> None:
        self.started_at = time.monotonic()
        self.num_requests = 0
        """Requests received (API routes), since the router started."""
        self.last_request_at: float | None = None
        self.num_dispatched = 0
        """Requests sent to a replica; the sequence number of the last one."""
        self._hits: dict[str, DecayingScore] = {}

    def arrived(self) -> None:
        self.num_requests += 1
        self.last_request_at = time.monotonic()

    def dispatched(self, url: str, cached_tokens: int) -> int:
        """Count a request sent to `url`; returns its dispatch sequence number (1, 2, ...)."""
        self.num_dispatched += 1
        if cached_tokens > 0:
            self._hits.setdefault(url, DecayingScore()).add(cached_tokens, time.monotonic())
        return self.num_dispatched

    def prefix_hit_score(self, url: str, now: float) -> float:
        """Cached prompt tokens the router sent to `url`, decayed with age."""
        score = self._hits.get(url)
        return score.current(now) if score is not None else 0.0

    def forget(self, url: str) -> None:
        self._hits.pop(url, None)

    def idle_seconds(self, now: float) -> float:
        """Seconds since the last request (since the start before the first one)."""
        return now - (self.last_request_at if self.last_request_at is not None else self.started_at)


def demand_view(
    tracker: DemandTracker, num_held: int, oldest_held_s: float, replicas: list[dict[str, Any]]
) -> dict[str, Any]:
    """The /router/demand body (a plain JSON document; docs/router.md lists its fields)."""
    now = time.monotonic()
    return {
        "num_held": num_held,
        "oldest_held_seconds": round(oldest_held_s, 3),
        "num_inflight": sum(r["inflight"] for r in replicas),
        "num_requests": tracker.num_requests,
        "idle_seconds": round(tracker.idle_seconds(now), 3),
        "replicas": replicas,
    }
