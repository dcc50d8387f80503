"""When a request gets no drafts for a while: the adaptive rule that keeps speculation from
slowing down text it cannot predict, without giving up on the text that follows.

Each verified draft updates an exponential moving average of the fraction of its tokens that
were accepted (weight EMA_WEIGHT for the newest, starting from 1). Once a request has had
MIN_DRAFTS drafts verified, an average below MIN_ACCEPTANCE_RATE pauses its drafts for the next
FIRST_PAUSE_TOKENS output tokens, twice as many at every later pause: a rejected token costs a row
of the forward pass and gains nothing, so a request whose drafts are mostly wrong runs as without
speculation (one token a step, decode steps that are not widened). When a pause ends the average
restarts at the bar, so one draft decides: half of it or more accepted lifts the average and the
drafts go on, less pauses them again. A copy that resumes after a stretch the model wrote itself
(a preamble, a fixed typo, a changed sentence) is drafted again; text that never follows its
n-grams pays for a handful of probes over its whole length. A request whose text never repeats an
n-gram gets no drafts in the first place.
"""

from __future__ import annotations

from dataclasses import dataclass

EMA_WEIGHT = 0.3
MIN_DRAFTS = 4
MIN_ACCEPTANCE_RATE = 0.3
FIRST_PAUSE_TOKENS = 16


@dataclass
class DraftAcceptance:
    """One request's record of its verified drafts."""

    acceptance_rate: float = 1.0
    """The moving average of accepted / proposed tokens per draft."""
    num_drafts: int = 0
    """Drafts verified so far."""
    pause_tokens: int = FIRST_PAUSE_TOKENS
    """Output tokens the next pause lasts (doubled by every pause)."""
    resume_at: int = 0
    """The number of output tokens from which the request gets drafts again."""

    def observe(
        self, num_draft_tokens: int, num_accepted_tokens: int, num_output_tokens: int
    ) -> None:
        """One verified draft of `num_draft_tokens` of which the first `num_accepted_tokens` were
        accepted, for a request with `num_output_tokens` output tokens before them."""
        rate = num_accepted_tokens / num_draft_tokens
        self.acceptance_rate += EMA_WEIGHT * (rate - self.acceptance_rate)
        self.num_drafts += 1
        if self.num_drafts >= MIN_DRAFTS and self.acceptance_rate < MIN_ACCEPTANCE_RATE:
            self.resume_at = num_output_tokens + self.pause_tokens
            self.pause_tokens *= 2
            self.acceptance_rate = MIN_ACCEPTANCE_RATE  # the draft after the pause decides

    def wants_drafts(self, num_output_tokens: int) -> bool:
        """Whether a request with `num_output_tokens` output tokens gets a draft (not paused)."""
        return num_output_tokens >= self.resume_at
