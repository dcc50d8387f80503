"""Interleaved repetitions and what is reported from them: median, spread, ratios.

A comparison runs every system once per repetition, in the same order each time (A B A B A B),
so slow drift of a shared machine lands on every system alike. A ratio of two systems is the
ratio of their medians, with the range of the per-pair ratios (repetition i of A over
repetition i of B) beside it to show how far one pair can stray.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def interleaved_order(systems: Sequence[str], repetitions: int) -> list[tuple[int, str]]:
    """(repetition, system) in run order: every system once per repetition, same order each time."""
    if repetitions < 1:
        raise ValueError(f"repetitions must be at least 1, got {repetitions}")
    if len(set(systems)) != len(systems):
        raise ValueError(f"systems named twice: {list(systems)}")
    return [(rep, system) for rep in range(repetitions) for system in systems]


@dataclass(frozen=True)
class Spread:
    """The median of one figure over the repetitions, and its range."""

    median: float
    min: float
    max: float
    n: int


def spread(values: Sequence[float]) -> Spread:
    if not values:
        raise ValueError("no values to summarize")
    return Spread(statistics.median(values), min(values), max(values), len(values))


@dataclass(frozen=True)
class Ratio:
    """System A against system B on one figure: median over median, and the per-pair range."""

    of_medians: float
    pair_min: float
    pair_max: float


def ratio(a: Sequence[float], b: Sequence[float]) -> Ratio:
    """`a` and `b` are one figure per repetition, in repetition order (pair i ran together)."""
    if len(a) != len(b) or not a:
        raise ValueError(
            f"ratios need one value per repetition on both sides: {len(a)} vs {len(b)}"
        )
    pairs = [x / y for x, y in zip(a, b, strict=True)]
    return Ratio(statistics.median(a) / statistics.median(b), min(pairs), max(pairs))
