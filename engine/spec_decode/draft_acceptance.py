"""When a request stops getting drafts: the adaptive rule that keeps speculation from slowing
down text it cannot predict.

Each verified draft updates an exponential moving average of the fraction of its tokens that
were accepted (weight EMA_WEIGHT for the newest, starting from 1). Once a request has had
MIN_DRAFTS drafts verified, an average below MIN_ACCEPTANCE_RATE stops its drafts for the rest of
the request: a rejected token costs a row of the forward pass and gains nothing, so a request
whose drafts are mostly wrong runs as without speculation (one token a step, decode steps that
are not widened). A request whose text never repeats an n-gram gets no drafts in the first place.
"""

from __future__ import annotations

from dataclasses import dataclass

EMA_WEIGHT = 0.3
MIN_DRAFTS = 4
MIN_ACCEPTANCE_RATE = 0.3


@dataclass
class DraftAcceptance:
    """One request's record of its verified drafts."""

    acceptance_rate: float = 1.0
    """The moving average of accepted / proposed tokens per draft."""
    num_drafts: int = 0
    """Drafts verified so far."""

    def observe(self, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        """One verified draft of `num_draft_tokens` of which the first `num_accepted_tokens` were
        accepted."""
        rate = num_accepted_tokens / num_draft_tokens
        self.acceptance_rate += EMA_WEIGHT * (rate - self.acceptance_rate)
        self.num_drafts += 1

    @property
    def wants_drafts(self) -> bool:
        return self.num_drafts < MIN_DRAFTS or self.acceptance_rate >= MIN_ACCEPTANCE_RATE
