"""The n-gram proposer (vLLM's prompt lookup) and the adaptive rule that stops drafts."""

from __future__ import annotations

import pytest

from engine.spec_decode.draft_acceptance import FIRST_PAUSE_TOKENS, MIN_DRAFTS, DraftAcceptance
from engine.spec_decode.ngram_proposer import NgramProposer
from engine.spec_decode.token_history import TokenHistory
from pagedock.speculative_config import SpeculativeConfig


def proposer(k: int = 3, low: int = 2, high: int = 4) -> NgramProposer:
    return NgramProposer(SpeculativeConfig("ngram", k, low, high))


def test_the_tokens_after_an_earlier_occurrence_of_the_suffix_are_proposed() -> None:
    assert proposer().propose([1, 2, 3, 4, 5, 9, 2, 3]) == [4, 5, 9]


def test_the_longest_suffix_wins_over_a_more_recent_shorter_match() -> None:
    # "2 3" last occurred before 8, but "1 2 3" (longer) occurred before 4.
    tokens = [1, 2, 3, 4, 0, 2, 3, 8, 1, 2, 3]
    assert proposer(k=2).propose(tokens) == [4, 0]


def test_among_matches_of_one_length_the_most_recent_wins() -> None:
    tokens = [2, 3, 4, 2, 3, 5, 6, 2, 3]
    assert proposer(k=2).propose(tokens) == [5, 6]


def test_the_draft_stops_at_the_end_of_the_tokens() -> None:
    # The most recent "7 7" starts one before the suffix: only one token follows it.
    assert proposer(k=4, low=2, high=2).propose([7, 7, 7]) == [7]


def test_no_match_of_at_least_prompt_lookup_min_proposes_nothing() -> None:
    assert proposer(low=2).propose([1, 2, 3, 4, 5, 3]) == []
    assert proposer(low=1).propose([1, 2, 3, 4, 5, 3]) == [4, 5, 3]
    assert proposer().propose([5]) == []
    assert proposer().propose([]) == []


def test_n_grams_longer_than_prompt_lookup_max_do_not_matter() -> None:
    # With max 2, "2 3" is matched; its most recent occurrence is the second.
    tokens = [1, 2, 3, 4, 9, 2, 3, 5, 1, 2, 3]
    assert proposer(k=1, low=1, high=2).propose(tokens) == [5]
    assert proposer(k=1, low=1, high=3).propose(tokens) == [4]


def test_max_num_tokens_caps_the_draft() -> None:
    tokens = [1, 2, 3, 4, 5, 9, 2, 3]
    assert proposer().propose(tokens, max_num_tokens=1) == [4]
    assert proposer().propose(tokens, max_num_tokens=0) == []


def test_a_long_request_is_proposed_for_quickly() -> None:
    """O(length): 100,000 tokens of a repeated pattern (every position a candidate) still
    propose from the most recent occurrence."""
    tokens = [1, 2, 3, 4] * 25_000
    assert proposer(k=4).propose(tokens) == [1, 2, 3, 4]


def test_drafts_pause_once_mostly_rejected_after_a_few() -> None:
    acceptance = DraftAcceptance()
    for output in range(MIN_DRAFTS - 1):
        acceptance.observe(4, 0, output)
        assert acceptance.wants_drafts(output + 1)  # too few drafts to judge
    acceptance.observe(4, 0, 10)
    assert not acceptance.wants_drafts(11)
    assert not acceptance.wants_drafts(10 + FIRST_PAUSE_TOKENS - 1)
    assert acceptance.wants_drafts(10 + FIRST_PAUSE_TOKENS)


def test_after_a_pause_one_rejected_draft_pauses_again_twice_as_long() -> None:
    acceptance = DraftAcceptance()
    for _ in range(MIN_DRAFTS):
        acceptance.observe(4, 0, 0)
    resumed = FIRST_PAUSE_TOKENS
    acceptance.observe(4, 1, resumed)  # a quarter accepted: paused again
    assert not acceptance.wants_drafts(resumed + 2 * FIRST_PAUSE_TOKENS - 1)
    assert acceptance.wants_drafts(resumed + 2 * FIRST_PAUSE_TOKENS)


def test_after_a_pause_one_mostly_accepted_draft_brings_the_drafts_back() -> None:
    acceptance = DraftAcceptance()
    for _ in range(MIN_DRAFTS):
        acceptance.observe(4, 0, 0)
    acceptance.observe(4, 2, FIRST_PAUSE_TOKENS)  # the copy resumed
    for output in range(FIRST_PAUSE_TOKENS + 1, FIRST_PAUSE_TOKENS + 20):
        assert acceptance.wants_drafts(output)
        acceptance.observe(4, 4, output)


def test_drafts_go_on_while_mostly_accepted() -> None:
    acceptance = DraftAcceptance()
    for output in range(20):
        acceptance.observe(4, 3, 2 * output)
        acceptance.observe(4, 0, 2 * output + 1)
    assert acceptance.wants_drafts(40)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"prompt_lookup_max": 4}, (4, 4)),
        ({"prompt_lookup_min": 2}, (2, 2)),
        ({}, (5, 5)),
        ({"prompt_lookup_min": 2, "prompt_lookup_max": 4}, (2, 4)),
    ],
)
def test_prompt_lookup_bounds_default_to_each_other(given: dict, expected: tuple) -> None:
    config = SpeculativeConfig.parse({"method": "ngram", "num_speculative_tokens": 3, **given})
    assert (config.prompt_lookup_min, config.prompt_lookup_max) == expected


def test_a_token_history_follows_the_tokens_as_they_grow() -> None:
    history = TokenHistory()
    tokens = [5, 6, 7]
    assert history.view(tokens).tolist() == [5, 6, 7]
    for step in range(40):
        tokens.append(step)
        assert history.view(tokens).tolist() == tokens
    assert history.view([1, 2]).tolist() == [1, 2]  # another request's: started again
