"""Speculative decoding's metrics, with vLLM's names: drafts verified, their tokens, the tokens
accepted, and those accepted at each position of their draft (`position` 0: the first). Present
only on an engine that speculates (their series appear with its first stats)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter

if TYPE_CHECKING:
    from engine.spec_decode.spec_decoding_stats import SpecDecodingStats


class SpecDecodeMetrics:
    def __init__(self, registry: CollectorRegistry, model_name: str) -> None:
        self.model_name = model_name
        labels = ["model_name"]
        # prometheus_client exposes each counter as NAME_total, as vLLM's are.
        self._drafts = Counter(
            "vllm:spec_decode_num_drafts", "Drafts verified.", labels, registry=registry
        )
        self._draft_tokens = Counter(
            "vllm:spec_decode_num_draft_tokens", "Draft tokens verified.", labels, registry=registry
        )
        self._accepted = Counter(
            "vllm:spec_decode_num_accepted_tokens",
            "Draft tokens accepted.",
            labels,
            registry=registry,
        )
        self._accepted_per_pos = Counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Draft tokens accepted, by their position in the draft.",
            [*labels, "position"],
            registry=registry,
        )
        self._last: SpecDecodingStats | None = None

    def observe(self, stats: SpecDecodingStats) -> None:
        """The engine's cumulative counters now: each metric grows by what they grew since the
        last call (all of it after an engine restart, whose counters start again from zero)."""
        m, last = self.model_name, self._last
        if last is not None and stats.num_drafts < last.num_drafts:
            last = None
        self._drafts.labels(m).inc(stats.num_drafts - (last.num_drafts if last else 0))
        self._draft_tokens.labels(m).inc(
            stats.num_draft_tokens - (last.num_draft_tokens if last else 0)
        )
        self._accepted.labels(m).inc(
            stats.num_accepted_tokens - (last.num_accepted_tokens if last else 0)
        )
        for position, count in enumerate(stats.num_accepted_tokens_per_pos):
            before = last.num_accepted_tokens_per_pos[position] if last else 0
            self._accepted_per_pos.labels(m, str(position)).inc(count - before)
        self._last = stats
