"""The slowest of k timings (tests/slowest_of.py), against every draw counted out."""

from __future__ import annotations

import itertools
import math
import random
import statistics

import pytest

from tests.slowest_of import slowest_of


def test_the_slowest_of_k_is_the_mean_over_every_draw_of_k() -> None:
    rng = random.Random(7)
    values = [rng.expovariate(5.0) for _ in range(9)]
    for k in range(1, len(values) + 1):
        draws = [max(draw) for draw in itertools.combinations(values, k)]
        assert slowest_of(values, k) == pytest.approx(statistics.fmean(draws))


def test_all_of_them_is_their_slowest_and_one_is_their_mean() -> None:
    values = [0.2, 0.9, 0.1, 0.4]
    assert slowest_of(values, 4) == pytest.approx(0.9)
    assert slowest_of(values, 1) == pytest.approx(0.4)


def test_one_outlier_counts_in_proportion_to_the_draws_that_hold_it() -> None:
    values = [0.1] * 76 + [5.0]
    assert slowest_of(values, 24) == pytest.approx(0.1 + 4.9 * 24 / 77)


def test_none_is_nan_and_more_than_there_are_is_an_error() -> None:
    assert math.isnan(slowest_of([], 3))
    assert math.isnan(slowest_of([0.1], 0))
    with pytest.raises(ValueError, match="the slowest of 3 of 2 values"):
        slowest_of([0.1, 0.2], 3)
