"""Verifies speculative drafts against the target model's logits, keeping the output distribution
exactly the target's (Leviathan et al., 2023; Chen et al., 2023; vLLM's RejectionSampler).

A request with a draft d_1..d_k has k + 1 rows of logits: row 0 at its last token (the
distribution of the token after it), row i at draft token d_i. Verification walks the draft:

- greedy rows accept d_i while it is row i-1's argmax; the first mismatch is replaced by that
  argmax, and after k accepted tokens row k's argmax is the bonus token. The tokens are the ones
  decoding one at a time would give.
- random rows compute p, each row's distribution as the Sampler draws from it (temperature, then
  top-k and top-p, softmax, then min-p), and accept d_i with probability p_{i-1}(d_i) (the draft
  is deterministic: its own distribution puts all its mass on d_i). On rejection the token is
  drawn from p_{i-1} with d_i removed and renormalised (max(p - q, 0) for that q), and nothing
  after it is kept; after k accepted tokens the bonus is drawn from p_k. Each emitted token is
  then distributed exactly as p given the tokens before it.

Rows with a seed of their own, penalties, bans or a grammar never get drafts
(engine/spec_decode/draft_eligibility.py): they sample as without speculation.
"""

from __future__ import annotations

import torch

from engine.inputs.sampling_params import SamplingParams
from engine.sampling.sampler import apply_top_k_top_p


class RejectionSampler:
    def __init__(self, generator: torch.Generator) -> None:
        # The engine's generator for rows without a seed (shared with the Sampler).
        self.generator = generator

    def __call__(
        self, logits: torch.Tensor, drafts: list[list[int]], params: list[SamplingParams]
    ) -> list[tuple[int, int]]:
        """For each request (its len(draft) + 1 rows of `logits` in turn): how many leading draft
        tokens it accepted, and the token that follows them."""
        greedy_ids = logits.argmax(dim=-1).tolist()
        row_params = [p for p, d in zip(params, drafts, strict=True) for _ in range(len(d) + 1)]
        probs = None
        if not all(p.is_greedy for p in params):
            probs = target_probs(logits, row_params)
        results = []
        row = 0
        for draft, p in zip(drafts, params, strict=True):
            rows = slice(row, row + len(draft) + 1)
            if p.is_greedy or probs is None:
                results.append(verify_greedy(greedy_ids[rows], draft))
            else:
                results.append(self._verify_random(probs[rows], draft))
            row += len(draft) + 1
        return results

    def _verify_random(self, probs: torch.Tensor, draft: list[int]) -> tuple[int, int]:
        """Rejection sampling of one request's draft against its rows' distributions."""
        k = len(draft)
        draft_probs = probs[torch.arange(k), torch.tensor(draft, dtype=torch.long)]
        uniform = torch.rand(k, generator=self.generator, dtype=probs.dtype)
        rejected = (uniform >= draft_probs).nonzero()
        num_accepted = int(rejected[0, 0]) if len(rejected) else k
        final = probs[num_accepted].clone()
        if num_accepted < k:
            final[draft[num_accepted]] = 0.0  # the residual max(p - q, 0), q one-hot at d
            if not bool(final.sum() > 0):  # p was all on d: unreachable but for rounding
                return num_accepted, draft[num_accepted]
        token = torch.multinomial(final, 1, generator=self.generator)
        return num_accepted, int(token)


def verify_greedy(argmax_ids: list[int], draft: list[int]) -> tuple[int, int]:
    """(draft tokens equal to the argmax of the row before them, in a row; the argmax after)."""
    num_accepted = 0
    while num_accepted < len(draft) and draft[num_accepted] == argmax_ids[num_accepted]:
        num_accepted += 1
    return num_accepted, argmax_ids[num_accepted]


def target_probs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Each row's sampling distribution, as Sampler._sample draws from it (greedy rows at
    temperature 1: their probabilities are not read)."""
    temperature = torch.tensor([1.0 if p.is_greedy else p.temperature for p in params])
    logits = logits.float() / temperature.unsqueeze(1)
    if any(p.top_k > 0 or p.top_p < 1.0 for p in params):
        top_k = torch.tensor([p.top_k for p in params], dtype=torch.long)
        top_p = torch.tensor([p.top_p for p in params])
        logits = apply_top_k_top_p(logits, top_k, top_p)
    probs = logits.softmax(dim=-1)
    if any(p.min_p > 0 for p in params):
        min_p = torch.tensor([p.min_p for p in params])
        top = probs.max(dim=-1, keepdim=True).values
        probs = probs.masked_fill(probs < min_p.unsqueeze(1) * top, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs
