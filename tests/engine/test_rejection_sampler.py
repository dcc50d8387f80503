"""The rejection sampler keeps the output distribution exactly the target's, whatever the draft;
greedy rows get the tokens one-at-a-time decoding gives."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from engine.inputs.sampling_params import SamplingParams
from engine.sampling.rejection_sampler import RejectionSampler, target_probs, verify_greedy

# Three rows of a 6-token vocabulary: the distribution of the token after the last real one,
# after the first draft token, and after the second.
LOGITS = torch.tensor(
    [
        [2.0, 1.0, 0.5, 0.0, -1.0, 0.3],
        [0.1, -0.5, 1.5, 0.7, 0.0, 1.0],
        [0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    ],
    dtype=torch.float32,
)
NUM_TRIALS = 12_000
TOLERANCE = 0.02  # ~4.5 standard deviations of a frequency at this many trials


def sample_many(params: SamplingParams, draft: list[int]) -> list[tuple[int, int]]:
    """NUM_TRIALS verifications of `draft` on LOGITS' rows, as one batch of requests."""
    sampler = RejectionSampler(torch.Generator().manual_seed(0))
    rows = len(draft) + 1
    logits = LOGITS[:rows].repeat(NUM_TRIALS, 1)
    return sampler(logits, [draft] * NUM_TRIALS, [params] * NUM_TRIALS)


def first_tokens(results: list[tuple[int, int]], draft: list[int]) -> Counter[int]:
    return Counter(draft[0] if accepted else token for accepted, token in results)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.7, top_k=4),
        SamplingParams(temperature=1.3, top_p=0.8),
        SamplingParams(temperature=1.0, min_p=0.2),
    ],
    ids=["plain", "top-k", "top-p", "min-p"],
)
@pytest.mark.parametrize("draft_token", [0, 3, 4])
def test_the_first_token_is_distributed_as_the_target_whatever_the_draft(
    params: SamplingParams, draft_token: int
) -> None:
    """A likely draft token, an unlikely one, and one the row's filters exclude: the first
    output token's empirical distribution matches p within the tolerance."""
    draft = [draft_token]
    counts = first_tokens(sample_many(params, draft), draft)
    p = target_probs(LOGITS[:1], [params])[0]
    for token in range(LOGITS.shape[1]):
        assert counts[token] / NUM_TRIALS == pytest.approx(float(p[token]), abs=TOLERANCE)


def test_a_token_after_an_accepted_draft_token_is_distributed_as_its_row() -> None:
    params = SamplingParams(temperature=1.0)
    draft = [0, 2]
    results = sample_many(params, draft)
    seconds = Counter(
        draft[1] if accepted == 2 else token for accepted, token in results if accepted >= 1
    )
    p = target_probs(LOGITS[1:2], [params])[0]
    num = sum(seconds.values())
    assert num > NUM_TRIALS / 3  # the first draft token is the likeliest: most are accepted
    for token in range(LOGITS.shape[1]):
        assert seconds[token] / num == pytest.approx(float(p[token]), abs=2 * TOLERANCE)


def test_a_rejected_draft_token_is_never_the_replacement() -> None:
    draft = [4]
    results = sample_many(SamplingParams(temperature=1.0), draft)
    assert all(token != 4 for accepted, token in results if accepted == 0)


def test_greedy_accepts_drafts_while_they_are_the_argmax_then_corrects() -> None:
    assert verify_greedy([5, 6, 7, 8], [5, 6, 1]) == (2, 7)
    assert verify_greedy([5, 6, 7, 8], [5, 6, 7]) == (3, 8)  # all accepted: the bonus token
    assert verify_greedy([5, 6], [1]) == (0, 5)


def test_greedy_rows_in_a_batch_take_the_argmax_of_their_own_rows() -> None:
    sampler = RejectionSampler(torch.Generator().manual_seed(0))
    greedy, random = SamplingParams(temperature=0.0), SamplingParams(temperature=1.0)
    logits = torch.cat([LOGITS[:2], LOGITS[:2]])
    [(accepted, token), _] = sampler(logits, [[0], [0]], [greedy, random])
    assert (accepted, token) == (1, 2)  # row 0's argmax is 0 (accepted), row 1's is 2
