"""DecisionLog: the router's recent routing decisions, for people to read (the router's /dashboard).

A bounded ring: the newest `capacity` requests sent to a replica, each with where it went, why
(the policy's reason), the cached tokens predicted there, and the candidates it was weighed
against. No prompt text: a request's prefix is named by the hash of its first block on the chosen
replica's chain, the name the replica's cache groups carry (router/kv/prefix_groups.py).

Recording is on the request path, so it keeps references only (the frozen candidates the policy
ranked); what a reader sees is built when it asks.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from pagedock.kv.block_hash import BlockHash
from router.policies.base import Candidate

DEFAULT_CAPACITY = 100
MAX_CANDIDATES = 8
"""Candidates kept per decision, best first (a fleet may have hundreds)."""


@dataclass(frozen=True)
class RecentDecision:
    at: float
    """time.time() when the request was sent."""
    request_id: str
    """The router's id of the attempt (a retry elsewhere is a decision of its own)."""
    replica: str
    reason: str
    predicted_cached_tokens: int
    num_prompt_tokens: int
    prefix: BlockHash | None
    """The request's first block hash on the replica's chain; None without a full block."""
    candidates: tuple[Candidate, ...]
    """The candidates in the order the proxy would try them (at most MAX_CANDIDATES)."""
    model: str | None = None


class DecisionLog:
    def __init__(
        self, capacity: int = DEFAULT_CAPACITY, clock: Callable[[], float] = time.time
    ) -> None:
        self._ring: deque[RecentDecision] = deque(maxlen=capacity)
        self._clock = clock
        self.num_recorded = 0
        """Decisions recorded since the router started (the ring keeps the last `capacity`)."""

    @property
    def capacity(self) -> int:
        return self._ring.maxlen or 0

    def record(
        self,
        request_id: str,
        replica: str,
        reason: str,
        predicted_cached_tokens: int,
        num_prompt_tokens: int,
        prefix: BlockHash | None,
        ranked: list[Candidate],
        model: str | None = None,
    ) -> None:
        self._ring.append(
            RecentDecision(
                self._clock(),
                request_id,
                replica,
                reason,
                predicted_cached_tokens,
                num_prompt_tokens,
                prefix,
                tuple(ranked[:MAX_CANDIDATES]),
                model,
            )
        )
        self.num_recorded += 1

    def recent(self, limit: int | None = None) -> list[RecentDecision]:
        """The newest first; at most `limit`."""
        newest = list(reversed(self._ring))
        return newest if limit is None else newest[:limit]
