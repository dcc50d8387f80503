"""least-loaded: the shortest queue wins, ignoring the cache; ties by power of two choices."""

from __future__ import annotations

import random
from collections.abc import Sequence

from router.config import RouterConfig
from router.policies.base import Candidate, Ranking, RouteRequest, power_of_two_choices, with_first


def _load(candidate: Candidate) -> tuple[float, ...]:
    return (candidate.queued_tokens, candidate.kv_cache_usage)


class LeastLoadedPolicy:
    name = "least-loaded"

    def __init__(self, config: RouterConfig) -> None:
        self.rng = random.Random(config.seed)

    def rank(self, request: RouteRequest, candidates: Sequence[Candidate]) -> Ranking:
        ordered = sorted(candidates, key=_load)
        least = _load(ordered[0])
        tied = [c for c in ordered if _load(c) == least]
        return Ranking(with_first(power_of_two_choices(tied, self.rng, _load), ordered), "load")
