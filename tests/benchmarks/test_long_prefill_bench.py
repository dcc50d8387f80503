"""benchmarks/long_prefill.py's report: per threshold, the median of the runs' medians and their
range, in a table with one row a threshold."""

from benchmarks.long_prefill import FIGURES, prompts, summarize, table


def run(threshold: int, rep: int, value: float) -> dict[str, object]:
    return {"threshold": threshold, "repetition": rep, **dict.fromkeys(FIGURES, value)}


def test_each_threshold_gets_the_median_and_range_of_its_runs() -> None:
    runs = [run(0, 0, 3.0), run(128, 0, 1.0), run(0, 1, 5.0), run(128, 1, 2.0), run(0, 2, 4.0)]
    summary = summarize(runs, [0, 128])
    assert summary["0"]["neighbour_ttft_ms"] == {"median": 4.0, "min": 3.0, "max": 5.0}
    assert summary["128"]["alone_long_s"] == {"median": 1.5, "min": 1.0, "max": 2.0}
    rows = table(summary).splitlines()
    assert len(rows) == 4 and rows[2].startswith("| 0 | 4 (3-5)")


def test_prompts_are_seeded_and_avoid_the_special_ids() -> None:
    first, again = prompts(1000, 2, 50, seed=1), prompts(1000, 2, 50, seed=1)
    assert first == again and first != prompts(1000, 2, 50, seed=2)
    assert all(100 <= t < 1000 for p in first for t in p) and len(first[0]) == 50
