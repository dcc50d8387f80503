"""The slowest of k timings, to compare the tails of two samples of unlike size fairly.

The slowest of n timings grows with n: of 77 timings and 24 drawn from one distribution, the 77's
slowest is the slower three times in four (77 / (77 + 24)), and a p99 (nearest rank) of either is
its slowest. So a tail is compared at one sample size, the smaller sample's: that one by its
slowest, the larger by the slowest of k of its timings, expected over every k of them. One slow
outlier in the larger sample still counts, in proportion to the draws that hold it (k in n).
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def slowest_of(values: Sequence[float], k: int) -> float:
    """The slowest of `k` of `values` drawn without replacement, expected over every such draw:
    max(values) when k is len(values), their mean when k is 1; NaN when there are none (no
    values, or k below 1)."""
    if not values or k < 1:
        return math.nan
    if k > len(values):
        raise ValueError(f"the slowest of {k} of {len(values)} values")
    draws = math.comb(len(values), k)
    # The i-th smallest (from 0) is the slowest of the draws that hold it and k - 1 of the i
    # smaller ones.
    return sum(x * math.comb(i, k - 1) / draws for i, x in enumerate(sorted(values)))
