"""Speculative decoding in the scheduler: which draft a running decode takes into a step, and the
drafts proposed after each step (engine/spec_decode/).

A running decode with a draft computes its last token and the draft's tokens in one step, as far
as the step's budget, the context length and its max_tokens allow; the runner returns how many
draft tokens it accepted and one token more (engine/sampling/rejection_sampler.py). Only verified
tokens count as computed (Scheduler.update), so a rejected token's KV slot is simply written again
by a later step, and the prefix cache, which caches only computed tokens' blocks, never holds an
unverified one. A step without blocks for a draft decodes without it; a preemption drops it.
"""

from __future__ import annotations

from engine.core.request import Request
from engine.spec_decode.draft_acceptance import DraftAcceptance
from engine.spec_decode.draft_eligibility import accepts_drafts
from engine.spec_decode.ngram_proposer import NgramProposer
from engine.spec_decode.spec_decoding_stats import SpecDecodingStats
from engine.spec_decode.token_history import TokenHistory
from pagedock.speculative_config import SpeculativeConfig


class Speculation:
    def __init__(self, config: SpeculativeConfig, max_model_len: int) -> None:
        self.proposer = NgramProposer(config)
        self.max_model_len = max_model_len
        self.stats = SpecDecodingStats(config.num_speculative_tokens)
        # Each running request's tokens as an array, appended to step by step.
        self._histories: dict[str, TokenHistory] = {}

    def fitting(self, request: Request, budget: int) -> list[int]:
        """The part of the request's draft this step takes: none unless it is a decode; then as
        many as fit beside its own token in `budget` and leave room for the token verification
        adds within the context length and max_tokens."""
        drafts = request.spec_token_ids
        if not drafts or request.num_tokens - request.num_computed_tokens != 1:
            return []
        room = min(
            budget - 1,
            self.max_model_len - request.num_tokens - 1,
            request.max_tokens - request.num_output_tokens - 1,
        )
        return list(drafts[: max(room, 0)])

    def observe(self, request: Request, num_draft_tokens: int, num_accepted_tokens: int) -> None:
        """One of the request's drafts was verified."""
        self.stats.observe_draft(num_draft_tokens, num_accepted_tokens)
        if request.draft_acceptance is None:
            request.draft_acceptance = DraftAcceptance()
        request.draft_acceptance.observe(
            num_draft_tokens, num_accepted_tokens, request.num_output_tokens
        )

    def propose(self, running: list[Request]) -> None:
        """After a step's update: a draft for each running decode that takes one (and whose
        drafts are not paused for being mostly rejected), none for the others."""
        histories, self._histories = self._histories, {}
        for request in running:
            request.spec_token_ids = ()
            if request.num_tokens - request.num_computed_tokens != 1:
                continue  # a prompt (or a recompute) still computing
            if request.pooling_params is not None or request.lora_name is not None:
                continue
            if not accepts_drafts(request.sampling_params, request.num_output_tokens):
                continue
            acceptance = request.draft_acceptance
            if acceptance is not None and not acceptance.wants_drafts(request.num_output_tokens):
                continue
            room = min(
                self.max_model_len - request.num_tokens - 1,
                request.max_tokens - request.num_output_tokens - 1,
            )
            if room > 0:
                history = histories.get(request.request_id) or TokenHistory()
                self._histories[request.request_id] = history
                tokens = history.view(request.all_token_ids)
                request.spec_token_ids = self.proposer.propose(tokens, room)

    def snapshot(self) -> SpecDecodingStats:
        return self.stats.snapshot()
