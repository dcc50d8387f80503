"""Summaries of interleaved repetitions, as JSON, a markdown table and a chart.

Every figure of every repetition stays in the result file (`runs`); the summary gives, per system,
the median and the range (min..max) of each figure, and the ratios between systems as median over
median with the range of the per-pair ratios.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from benchmarks.repetitions import ratio, spread


def summarize_systems(
    runs: list[dict[str, Any]], systems: list[str], figures: list[str]
) -> dict[str, dict[str, dict[str, float]]]:
    """{system: {figure: {median, min, max, n}}} over the runs, in repetition order."""
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for system in systems:
        mine = _in_order(runs, system)
        summary[system] = {
            f: asdict(spread([r[f] for r in mine])) for f in figures if all(f in r for r in mine)
        }
    return summary


def ratios_between(
    runs: list[dict[str, Any]], pairs: list[tuple[str, str]], figure: str
) -> list[dict[str, Any]]:
    """Each (a, b) pair: a's figure over b's, median over median and the per-pair range."""
    out = []
    for a, b in pairs:
        r = ratio([x[figure] for x in _in_order(runs, a)], [y[figure] for y in _in_order(runs, b)])
        out.append({"system": a, "against": b, "figure": figure, **asdict(r)})
    return out


def comparison_pairs(systems: list[str]) -> list[tuple[str, str]]:
    """Every pagedock system against every vLLM one; with no vLLM, pagedock's dtypes against the
    first (float32)."""
    ours = [s for s in systems if s.startswith("pagedock")]
    peers = [s for s in systems if not s.startswith("pagedock")]
    if peers:
        return [(a, b) for a in ours for b in peers]
    return [(a, ours[0]) for a in ours[1:]]


def _in_order(runs: list[dict[str, Any]], system: str) -> list[dict[str, Any]]:
    return sorted((r for r in runs if r["system"] == system), key=lambda r: r["repetition"])


def fmt_spread(entry: dict[str, float] | None, digits: int = 1) -> str:
    """`216.8 (210.1–220.4)`: the median, and the range over the repetitions."""
    if not entry:
        return ""
    if entry["n"] == 1:
        return f"{entry['median']:,.{digits}f}"
    return f"{entry['median']:,.{digits}f} ({entry['min']:,.{digits}f}–{entry['max']:,.{digits}f})"


def markdown_table(
    summary: dict[str, dict[str, dict[str, float]]],
    columns: list[tuple[str, str, int]],
    notes: dict[str, str] | None = None,
) -> str:
    """One row per system; `columns` are (figure, header, decimals); `notes` an extra column
    (e.g. the pagedock-only levers a system ran with)."""
    headers = ["system", *(h for _, h, _ in columns)] + (["notes"] if notes else [])
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    for system, figures in summary.items():
        cells = [system, *(fmt_spread(figures.get(f), d) for f, _, d in columns)]
        if notes:
            cells.append(notes.get(system, ""))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio_lines(ratios: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"- {r['system']} / {r['against']} ({r['figure']}): **{r['of_medians']:.2f}x** median over "
        f"median; per-pair {r['pair_min']:.2f}x–{r['pair_max']:.2f}x"
        for r in ratios
    )


def save_chart(
    summary: dict[str, dict[str, dict[str, float]]], panels: list[tuple[str, str]], path: Path
) -> None:
    """One horizontal bar panel per (figure, title): medians with min-max error bars."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    systems = list(summary)
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 1.2 + 0.45 * len(systems)))
    for ax, (figure, title) in zip(axes if len(panels) > 1 else [axes], panels, strict=True):
        entries = [summary[s].get(figure) for s in systems]
        medians = [e["median"] if e else 0.0 for e in entries]
        low = [e["median"] - e["min"] if e else 0.0 for e in entries]
        high = [e["max"] - e["median"] if e else 0.0 for e in entries]
        ax.barh(systems, medians, xerr=[low, high], color="#4477aa", capsize=3)
        ax.set_title(f"{title}\nmedian, bars: min-max", fontsize=9)
        ax.invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
