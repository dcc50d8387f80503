"""The quality benchmark's own arithmetic (benchmarks/quality_nll.py), without a model."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from benchmarks.quality_nll import (
    MODES,
    check_commit,
    compare,
    mean_nll,
    parse_args,
    result_path,
    token_logprobs_of,
    windows_of,
)
from engine.runtime.logprobs import Logprob


def test_windows_are_consecutive_and_the_short_rest_is_left_out() -> None:
    assert windows_of(list(range(10)), 4, None) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert windows_of(list(range(10)), 4, 1) == [[0, 1, 2, 3]]
    assert windows_of(list(range(3)), 4, None) == []


def test_each_prompt_token_after_the_first_is_scored_by_its_own_entry() -> None:
    prompt = [5, 6, 7]
    entries = [None, {6: Logprob(-1.0, 2), 9: Logprob(-0.5, 1)}, {7: Logprob(-2.0, 1)}]
    assert token_logprobs_of(prompt, entries) == [-1.0, -2.0]
    with pytest.raises(ValueError, match="do not cover"):
        token_logprobs_of(prompt, entries[1:])


def test_the_mean_nll_is_per_scored_token_over_every_window() -> None:
    assert mean_nll([[-1.0, -2.0], [-3.0]]) == pytest.approx(2.0)


def test_a_mode_is_compared_in_percent_of_the_reference() -> None:
    reference = [[-2.0, -2.0], [-2.0, -2.0]]
    near = compare(reference, [[-2.01, -2.01], [-2.01, -2.01]])
    assert near["mean_nll"] == pytest.approx(2.01)
    assert near["difference_pct"] == pytest.approx(0.5)
    assert near["within_1_pct"] is True
    assert near["max_abs_logprob_diff"] == pytest.approx(0.01)
    far = compare(reference, [[-2.0, -2.0], [-2.0, -2.1]])
    assert far["difference_pct"] == pytest.approx(1.25)
    assert far["within_1_pct"] is False
    assert math.isclose(far["mean_abs_logprob_diff"], 0.025)


def test_results_are_named_by_commit_and_a_dirty_tree_is_refused_unless_allowed() -> None:
    assert result_path(Path("r"), "abc1234") == Path("r/quality_nll_abc1234.json")
    check_commit("abc1234", allow_dirty=False)
    check_commit("abc1234+dirty", allow_dirty=True)
    for commit in ("abc1234+dirty", None):
        with pytest.raises(SystemExit, match="clean"):
            check_commit(commit, allow_dirty=False)


def test_every_mode_is_offered_and_the_default_is_one_of_them() -> None:
    args = parse_args([])
    assert args.modes == list(MODES) and "auto" in MODES and MODES["auto"] == {}
    assert args.window == 1024 and args.max_windows is None
