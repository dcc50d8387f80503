"""round-robin: each request to the next replica in turn (for comparison)."""

from __future__ import annotations

from collections.abc import Sequence

from router.config import RouterConfig
from router.policies.base import Candidate, Ranking, RouteRequest


class RoundRobinPolicy:
    name = "round-robin"

    def __init__(self, config: RouterConfig) -> None:
        self.next_index = 0

    def rank(self, request: RouteRequest, candidates: Sequence[Candidate]) -> Ranking:
        ordered = sorted(candidates, key=lambda c: c.url)
        start = self.next_index % len(ordered)
        self.next_index += 1
        return Ranking(ordered[start:] + ordered[:start], "round-robin")
