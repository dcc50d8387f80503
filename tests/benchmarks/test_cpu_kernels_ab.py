"""The kernel A/B summary: each build's pass time against the first build's in the same round."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.cpu_kernels_ab import summarize


def test_each_build_is_summarised_by_its_ratio_to_the_first_within_each_round() -> None:
    # Round 2 is slow for both builds (a busy machine); the ratio within the round is unaffected.
    times = {"prefill bf16": [[100.0, 150.0, 102.0], [90.0, 135.0, 97.0]]}

    first, second = summarize(times, [Path("/old"), Path("/new")])

    assert first["prefill bf16"] == {
        "median_ms": 102.0,
        "vs_first": 1.0,
        "vs_first_min": 1.0,
        "vs_first_max": 1.0,
        "rounds": 3,
    }
    assert second["prefill bf16"]["median_ms"] == 97.0
    assert second["prefill bf16"]["vs_first"] == pytest.approx(0.9)
    assert second["prefill bf16"]["vs_first_min"] == pytest.approx(0.9)
    assert second["prefill bf16"]["vs_first_max"] == pytest.approx(97.0 / 102.0)


def test_rounds_of_unequal_length_are_refused() -> None:
    with pytest.raises(ValueError):
        summarize({"decode int8": [[10.0, 11.0], [9.0]]}, [Path("/old"), Path("/new")])
