"""SpecDecodingStats: speculative decoding's cumulative counters (vLLM's metrics:
vllm:spec_decode_num_drafts, _num_draft_tokens, _num_accepted_tokens and
_num_accepted_tokens_per_pos, engine/server/metrics.py)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace


@dataclass
class SpecDecodingStats:
    num_spec_tokens: int
    """num_speculative_tokens: the positions a draft may have."""
    num_drafts: int = 0
    """Drafts verified (one per request and step that had any)."""
    num_draft_tokens: int = 0
    """Draft tokens verified."""
    num_accepted_tokens: int = 0
    """Draft tokens accepted (the token each verification adds itself is not counted)."""
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)
    """Draft tokens accepted at each position of their draft (0: the first)."""

    def __post_init__(self) -> None:
        if not self.num_accepted_tokens_per_pos:
            self.num_accepted_tokens_per_pos = [0] * self.num_spec_tokens

    def observe_draft(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        self.num_drafts += 1
        self.num_draft_tokens += num_draft_tokens
        self.num_accepted_tokens += num_accepted_tokens
        for position in range(num_accepted_tokens):
            self.num_accepted_tokens_per_pos[position] += 1

    @property
    def acceptance_rate(self) -> float:
        """Accepted / proposed draft tokens; 0 before any draft."""
        return self.num_accepted_tokens / self.num_draft_tokens if self.num_draft_tokens else 0.0

    def snapshot(self) -> SpecDecodingStats:
        return replace(self, num_accepted_tokens_per_pos=list(self.num_accepted_tokens_per_pos))
