"""The kernel A/B summary: each checkout's median over runs of its fastest passes, against the
first checkout's."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.attention_kernel import summarize


def run(checkout: str, fastest_ms: float) -> dict[str, object]:
    return {
        "checkout": checkout,
        "passes": {"prefill bf16": {"min_ms": fastest_ms, "median_ms": fastest_ms + 5}},
    }


def test_each_checkout_is_summarised_by_the_median_of_its_fastest_passes() -> None:
    old, new = Path("/old"), Path("/new")
    runs = [run("/old", 100.0), run("/new", 90.0), run("/old", 110.0), run("/new", 80.0)]
    runs += [run("/old", 120.0), run("/new", 99.0)]

    first, second = summarize(runs, [old, new])

    assert first["prefill bf16"] == {
        "median_ms": 110.0, "min_ms": 100.0, "max_ms": 120.0, "runs": 3, "vs_first": 1.0
    }  # fmt: skip
    assert second["prefill bf16"]["median_ms"] == 90.0
    assert second["prefill bf16"]["vs_first"] == pytest.approx(90.0 / 110.0)
