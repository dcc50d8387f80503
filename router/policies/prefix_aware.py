"""The prefix-aware policy: the lowest estimated time to first token wins.

    estimated_ttft_ms = prefill_ms_per_token * (queued_tokens + uncached_tokens) + lora_load_ms
    uncached_tokens   = num_prompt_tokens - cached_tokens
    lora_load_ms      = the config's, where the request's adapter is served but not resident

A LoRA adapter's request counts its cached blocks on its adapter's own chain (the dispatcher's
doing), so a replica that has the adapter loaded and holds its prefix wins.

Cache affinity lowers the second term, queued work raises the first, so an affine replica wins
until its queue costs more than the prefill it saves, and an overloaded affine replica loses to an
idle cold one. Two guards on top, each a threshold in the config (in the spirit of SGLang's
cache-aware policy): replicas whose KV cache is nearly full are a last resort, and when the chosen
replica's queue exceeds the shortest queue by more than an absolute *and* a relative threshold,
the least-loaded replica is taken instead. Estimates within `tie_tolerance_ms` tie; of tied
replicas, those holding the longest run of the request's blocks stay, and the rest of the tie is
broken by power of two choices on (cache fill, queued tokens) with a seeded RNG.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from router.config import RouterConfig
from router.policies.base import Candidate, Ranking, RouteRequest, power_of_two_choices, with_first


def estimated_ttft_ms(candidate: Candidate, request: RouteRequest, config: RouterConfig) -> float:
    uncached_tokens = max(0, request.num_prompt_tokens - candidate.cached_tokens)
    prefill_ms = config.prefill_ms_per_token * (candidate.queued_tokens + uncached_tokens)
    return prefill_ms + candidate.lora_load_ms


def is_imbalanced(chosen: Candidate, least: Candidate, config: RouterConfig) -> bool:
    gap = chosen.queued_tokens - least.queued_tokens
    return (
        gap > config.balance_abs_threshold_tokens
        and chosen.queued_tokens > config.balance_rel_threshold * least.queued_tokens
    )


def _load(candidate: Candidate) -> tuple[float, ...]:
    return (candidate.queued_tokens, candidate.kv_cache_usage)


def _cache_fill(candidate: Candidate) -> tuple[float, ...]:
    # NOTE: tied estimates mean the queues are as good as equal; the emptier cache then takes
    # the request, so new prefixes spread and evict each other less.
    return (candidate.num_cached_blocks, candidate.queued_tokens)


def _most_cached(tied: list[Candidate]) -> list[Candidate]:
    # NOTE: a tie keeps the request with its prefix: the replica that holds it (or is computing
    # it for an earlier request of the burst) wins over an emptier one, else the prefix would be
    # copied to a second replica and the two copies evict other prefixes. Only candidates holding
    # nothing of it are spread by cache fill.
    most = max(c.cached_tokens for c in tied)
    return [c for c in tied if c.cached_tokens == most]


class PrefixAwarePolicy:
    name = "prefix-aware"

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self.rng = random.Random(config.seed)

    def rank(self, request: RouteRequest, candidates: Sequence[Candidate]) -> Ranking:
        pool = self._below_kv_threshold(candidates)
        by_cost = sorted(pool, key=lambda c: estimated_ttft_ms(c, request, self.config))
        best_ms = estimated_ttft_ms(by_cost[0], request, self.config)
        tied = _most_cached(
            [
                c
                for c in by_cost
                if estimated_ttft_ms(c, request, self.config)
                <= best_ms + self.config.tie_tolerance_ms
            ]
        )
        chosen = power_of_two_choices(tied, self.rng, _cache_fill)
        reason = "tie" if len(tied) > 1 else ("affinity" if chosen.cached_tokens else "load")
        least = min(pool, key=_load)
        if is_imbalanced(chosen, least, self.config):
            chosen, reason = least, "balance"
        rest = sorted(candidates, key=lambda c: estimated_ttft_ms(c, request, self.config))
        return Ranking(with_first(chosen, rest), reason)

    def _below_kv_threshold(self, candidates: Sequence[Candidate]) -> list[Candidate]:
        roomy = [c for c in candidates if c.kv_cache_usage <= self.config.kv_usage_threshold]
        return roomy or list(candidates)
