"""What benchmarks/speculative_decode.py reports from its runs: per scenario, each arm's output
tokens/s (median and range over the repetitions), on over off (median over median, with the
per-pair range) against issue 40's bar, whether the greedy outputs of the two arms were identical
token for token, and how many draft tokens were accepted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from benchmarks.repetitions import ratio, spread

ARMS = ("off", "on")
SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
)


def compare_outputs(off: Sequence[Sequence[int]], on: Sequence[Sequence[int]]) -> dict[str, Any]:
    """Request by request (the same requests, in order): how many answers are identical token
    for token, how many tokens the `off` answers have, and where each differing answer first
    differs (request index, token position)."""
    if len(off) != len(on):
        raise ValueError(f"the arms answered {len(off)} and {len(on)} requests")
    divergences = []
    for index, (a, b) in enumerate(zip(off, on, strict=True)):
        if list(a) != list(b):
            pairs = enumerate(zip(a, b, strict=False))
            first = next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))
            divergences.append({"request": index, "first_differing_token": first})
    return {
        "num_requests": len(off),
        "num_identical": len(off) - len(divergences),
        "num_tokens_off": sum(len(a) for a in off),
        "num_tokens_on": sum(len(b) for b in on),
        "divergences": divergences,
    }


def acceptance(before: dict[str, float], after: dict[str, float]) -> dict[str, Any]:
    """The spec-decode counters' growth between two scrapes of the `on` server, with the
    acceptance rate (accepted / draft tokens) and the mean tokens accepted per draft."""
    grown = {name: after.get(name, 0.0) - before.get(name, 0.0) for name in SPEC_COUNTERS}
    drafts, draft_tokens, accepted = (grown[name] for name in SPEC_COUNTERS)
    return {
        "num_drafts": int(drafts),
        "num_draft_tokens": int(draft_tokens),
        "num_accepted_tokens": int(accepted),
        "acceptance_rate": round(accepted / draft_tokens, 4) if draft_tokens else None,
        "mean_accepted_per_draft": round(accepted / drafts, 3) if drafts else None,
    }


def summarize(runs: list[dict[str, Any]], bars: dict[str, float]) -> dict[str, Any]:
    """Per scenario (in `bars`' order): the arms' output tok/s, on / off against its bar, the
    outputs compared over every repetition, and the acceptance over every repetition."""
    summary: dict[str, Any] = {}
    for scenario, bar in bars.items():
        by_arm = {
            arm: sorted(
                (r for r in runs if r["scenario"] == scenario and r["arm"] == arm),
                key=lambda r: r["repetition"],
            )
            for arm in ARMS
        }
        if not by_arm["on"]:
            continue
        values = {arm: [r["output_tok_s"] for r in rs] for arm, rs in by_arm.items()}
        on_over_off = ratio(values["on"], values["off"])
        summary[scenario] = {
            "output_tok_s": {arm: vars(spread(v)) for arm, v in values.items()},
            "on_over_off": vars(on_over_off),
            "bar": bar,
            "meets_bar": on_over_off.of_medians >= bar,
            "outputs": _outputs_over_repetitions(by_arm["on"]),
            "acceptance": _acceptance_over_repetitions(by_arm["on"]),
        }
    return summary


def _outputs_over_repetitions(on_runs: list[dict[str, Any]]) -> dict[str, Any]:
    compared = [r["outputs_vs_off"] for r in on_runs]
    num_requests = sum(c["num_requests"] for c in compared)
    num_identical = sum(c["num_identical"] for c in compared)
    return {
        "identical": num_identical == num_requests,
        "num_requests": num_requests,
        "num_identical": num_identical,
    }


def _acceptance_over_repetitions(on_runs: list[dict[str, Any]]) -> dict[str, Any]:
    totals = {
        key: sum(r["acceptance"][key] for r in on_runs)
        for key in ("num_drafts", "num_draft_tokens", "num_accepted_tokens")
    }
    drafts, draft_tokens = totals["num_drafts"], totals["num_draft_tokens"]
    return totals | {
        "acceptance_rate": round(totals["num_accepted_tokens"] / draft_tokens, 4)
        if draft_tokens
        else None,
        "mean_accepted_per_draft": round(totals["num_accepted_tokens"] / drafts, 3)
        if drafts
        else None,
    }


def markdown(summary: dict[str, Any]) -> str:
    """One row per scenario: the arms' medians (range), on / off, the bar, identical outputs,
    the acceptance rate."""
    lines = [
        "| scenario | off tok/s | on tok/s | on / off (pairs) | bar | identical outputs "
        "| acceptance |",
        "|---|---|---|---|---|---|---|",
    ]
    for scenario, s in summary.items():
        off, on, r = s["output_tok_s"]["off"], s["output_tok_s"]["on"], s["on_over_off"]
        outputs, rate = s["outputs"], s["acceptance"]["acceptance_rate"]
        lines.append(
            f"| {scenario} | {_cell(off)} | {_cell(on)} | **{r['of_medians']:.2f}x** "
            f"({r['pair_min']:.2f}-{r['pair_max']:.2f}) | {s['bar']:.2f}x "
            f"{'met' if s['meets_bar'] else 'missed'} | "
            f"{outputs['num_identical']}/{outputs['num_requests']} | "
            f"{'-' if rate is None else f'{rate:.2f}'} |"
        )
    return "\n".join(lines) + "\n"


def _cell(s: dict[str, float]) -> str:
    return f"{s['median']:.1f} ({s['min']:.1f}-{s['max']:.1f})"


def header_line(result: dict[str, Any]) -> str:
    """What ran, where and when, for the tables of docs/benchmarks.md."""
    s, machine = result["settings"], result["machine"]
    flags = ", ".join(flag for flag, present in machine["cpu_flags"].items() if present)
    head = (
        f"Speculative decoding on (`{s['speculative_config']}`) vs off, `pagedock serve` "
        f"side by side (a core and a thread each, swapped every repetition, fresh servers), "
        f"{s['repetitions']} repetitions; copy_c1 / copy_c4: {s['copy_requests'][0]} / "
        f"{s['copy_requests'][1]} copy-heavy chat requests at concurrency 1 / 4, up to "
        f"{s['copy_max_tokens']} tokens; workload_a: {s['a_requests']} requests at concurrency "
        f"{s['a_concurrency']}, 128 tokens each. {result['started']}, {machine['cpu_model']} "
        f"({flags}), load average {result['load_average_before'][0]} before, "
        f"{result['load_average_after'][0]} after; pagedock {result['commit']}. "
        f"Output tok/s median (min-max). {result['note']}"
    ).strip()
    if str(result["commit"]).endswith("+dirty"):
        head += " The commit is marked `+dirty`: not a result to quote."
    return head


def render(result: dict[str, Any]) -> str:
    return f"{header_line(result)}\n\n{markdown(result['summary']).strip()}"
