"""What every routing policy sees and returns: plain data in, an ordered list of replicas out.

A policy is a pure decision: it ranks the healthy candidates for one request from their snapshot
(cached prefix, queued work, KV usage) and the config's thresholds; the caller applies the side
effects (in-flight accounting, pending blocks, metrics, retries down the ranking).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar


@dataclass(frozen=True)
class RouteRequest:
    """One request as the policies see it."""

    num_prompt_tokens: int
    """Prompt tokens (the first prompt's, for a batch of prompts)."""
    session_key: str | None = None
    """The session header's value or the `user` field, for the session policy."""


@dataclass(frozen=True)
class Candidate:
    """One healthy replica at decision time."""

    url: str
    cached_tokens: int = 0
    """Tokens of the request's longest run of leading blocks that this replica holds."""
    queued_tokens: int = 0
    """Work ahead of the request, in prefill-token equivalents (see docs/router.md)."""
    num_cached_blocks: int = 0
    """Blocks this replica holds in all (how full its cache is)."""
    kv_cache_usage: float = 0.0
    """Fraction of the replica's KV blocks in use by running requests."""
    lora_load_ms: float = 0.0
    """The request's LoRA adapter is served here but not in a weight slot: --lora-load-ms."""


@dataclass(frozen=True)
class Ranking:
    """The replicas to try, best first, and why the first one was chosen."""

    order: list[Candidate]
    reason: str
    """affinity | load | tie | balance | session | round-robin (a metrics label)."""


class Policy(Protocol):
    name: str

    def rank(self, request: RouteRequest, candidates: Sequence[Candidate]) -> Ranking: ...


C = TypeVar("C")


def power_of_two_choices(
    tied: Sequence[C], rng: random.Random, load: Callable[[C], tuple[float, ...]]
) -> C:
    """Of two tied candidates drawn at random, the less loaded (a fresh draw, not a stale score)."""
    if len(tied) == 1:
        return tied[0]
    first, second = rng.sample(list(tied), 2)
    return first if load(first) <= load(second) else second


def with_first(chosen: Candidate, ordered: Sequence[Candidate]) -> list[Candidate]:
    """`ordered` with `chosen` moved to the front (the rest keep their order, for failover)."""
    return [chosen, *[c for c in ordered if c.url != chosen.url]]
