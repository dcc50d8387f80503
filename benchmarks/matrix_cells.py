"""The cells of the online matrix (benchmarks/online_matrix.py) and what each is judged by.

A cell is a concurrency and a prompt mix: `32:A` is 32 requests in flight, workload A's prompt
lengths. Every system in a cell gets the same requests (the same token ids, the same fixed
output length), so every arm does the same work; each repetition's requests have content of
their own, so no repetition hits a prefix cache another one filled.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from benchmarks.comparison_report import ratios_between
from benchmarks.workloads import Workload, synthetic_workload

# Prompt lengths (tokens, both ends included) of each mix, as issue 40 names them.
PROMPT_MIXES: dict[str, tuple[int, int]] = {
    "chat": (16, 64),
    "A": (32, 512),
    "long": (1024, 1800),
}
# Content seeds of the measured requests: this base, plus the cell's index and the repetition's
# (apart by CELL_SEED_STRIDE), so no two (cell, repetition) pairs share content.
CONTENT_SEED_BASE = 10_000
CELL_SEED_STRIDE = 100


@dataclass(frozen=True)
class Cell:
    concurrency: int
    mix: str

    @property
    def key(self) -> str:
        return f"{self.concurrency}:{self.mix}"


def parse_cell(text: str) -> Cell:
    """`32:A`, `8:chat`, `64:long`: a concurrency and one of PROMPT_MIXES."""
    concurrency, sep, mix = text.partition(":")
    if not sep or not concurrency.strip().isdigit() or int(concurrency) < 1:
        raise ValueError(f"a cell is CONCURRENCY:MIX (e.g. 32:A), got {text!r}")
    if mix not in PROMPT_MIXES:
        raise ValueError(
            f"unknown prompt mix {mix!r} in {text!r}; known: {', '.join(PROMPT_MIXES)}"
        )
    return Cell(int(concurrency), mix)


def matrix_cells(
    concurrencies: list[int], mixes: list[str], explicit: list[str] | None = None
) -> list[Cell]:
    """The cells given one by one, or every concurrency with every mix."""
    texts = explicit or [f"{c}:{m}" for c, m in itertools.product(concurrencies, mixes)]
    cells = [parse_cell(t) for t in texts]
    if len(set(cells)) != len(cells):
        raise ValueError(f"cells named twice: {texts}")
    return cells


def num_requests(cell: Cell, waves: int, min_requests: int) -> int:
    """`waves` times the concurrency, so each in-flight slot serves `waves` requests in turn."""
    return max(min_requests, waves * cell.concurrency)


def cell_workload(
    cell: Cell, index: int, repetition: int, vocab_size: int, count: int, max_tokens: int
) -> Workload:
    """The cell's requests in one repetition: lengths fixed per cell (seed = its index), content
    of the (cell, repetition) pair's own."""
    content_seed = CONTENT_SEED_BASE + index + CELL_SEED_STRIDE * repetition
    return synthetic_workload(
        cell.mix, vocab_size, count, PROMPT_MIXES[cell.mix], max_tokens, index, content_seed
    )


@dataclass(frozen=True)
class Bar:
    """pagedock's figure over a peer's, as issue 40 sets it, from a concurrency up."""

    peer: str
    figure: str
    bound: float
    at_least: bool
    """True: the ratio must be at least `bound` (throughput); False: at most (latency)."""
    min_concurrency: int = 1

    def met(self, value: float) -> bool:
        return value >= self.bound if self.at_least else value <= self.bound

    def describe(self) -> str:
        return f"{self.figure} {'>=' if self.at_least else '<='} {self.bound}x {self.peer}"


def bars(best_vllm: str, llama: str) -> list[Bar]:
    """Issue 40's done-when: against vLLM at its best knobs, and llama-server at concurrency 8
    and up."""
    return [
        Bar(best_vllm, "output_tok_s", 1.3, True),
        Bar(best_vllm, "ttft_p99_ms", 0.8, False),
        Bar(best_vllm, "itl_p99_ms", 0.5, False),
        Bar(llama, "output_tok_s", 2.0, True, min_concurrency=8),
    ]


def cell_verdicts(
    runs: list[dict[str, Any]], cell: Cell, ours: str, cell_bars: list[Bar]
) -> list[dict[str, Any]]:
    """Each bar whose peer ran in the cell: the ratio (median over median, per-pair range) and
    whether it is met; a bar below its concurrency is reported with `met` None."""
    mine = [r for r in runs if r["cell"] == cell.key]
    verdicts = []
    for bar in cell_bars:
        pairs = paired_runs(mine, ours, bar.peer)
        if not pairs:
            continue
        (entry,) = ratios_between(pairs, [(ours, bar.peer)], bar.figure)
        applies = cell.concurrency >= bar.min_concurrency
        met = bar.met(entry["of_medians"]) if applies else None
        verdicts.append({"cell": cell.key, "bar": bar.describe(), **entry, "met": met})
    return verdicts


def paired_runs(runs: list[dict[str, Any]], a: str, b: str) -> list[dict[str, Any]]:
    """`a`'s and `b`'s runs of the repetitions both ran (a matrix stopped early leaves its last
    repetition part-run): a ratio pairs repetition i of one with repetition i of the other."""
    reps_a = {r["repetition"] for r in runs if r["system"] == a}
    reps_b = {r["repetition"] for r in runs if r["system"] == b}
    both = reps_a & reps_b
    return [r for r in runs if r["system"] in (a, b) and r["repetition"] in both]
