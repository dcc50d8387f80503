"""What benchmarks/tracing_overhead.py reports: the spans a receiver got per measured request,
the runs summed up against the 3 % bar, and the result as a table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from benchmarks.comparison_report import (
    markdown_table,
    ratio_lines,
    ratios_between,
    summarize_systems,
)
from tests.otlp_receiver import ReceivedSpan

ARMS = ("off", "on")
TARGET_RATIO = 0.97
"""Generated tok/s with tracing on over off, at least: tracing costs at most 3 %."""
REQUEST_SPANS = ("llm_request", "queue", "prefill", "decode")
"""The spans every traced request has (prefill_chunk spans come on top)."""
FIGURES = [
    "output_tok_s",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "itl_p50_ms",
    "e2e_p50_ms",
    "duration_s",
    "num_errors",
]
COLUMNS = [
    ("output_tok_s", "generated tok/s", 1),
    ("ttft_p50_ms", "TTFT p50 ms", 0),
    ("ttft_p99_ms", "TTFT p99 ms", 0),
    ("itl_p50_ms", "ITL p50 ms", 1),
    ("num_errors", "errors", 0),
]


def count_spans(spans: Sequence[ReceivedSpan], trace_ids: Sequence[str]) -> dict[str, Any]:
    """What the receiver got, and whether each measured request (one trace each) has at least
    the four spans of a request (REQUEST_SPANS)."""
    by_trace: dict[str, list[str]] = {t: [] for t in trace_ids}
    for span in spans:
        if span.trace_id in by_trace:
            by_trace[span.trace_id].append(span.name)
    per_request = [len(names) for names in by_trace.values()]
    short = [
        t
        for t, names in by_trace.items()
        if len(names) < len(REQUEST_SPANS) or not set(REQUEST_SPANS) <= set(names)
    ]
    return {
        "spans_received": len(spans),
        "spans_measured": sum(per_request),
        "measured_requests": len(by_trace),
        "min_spans_per_request": min(per_request, default=0),
        "spans_per_request": sum(per_request) / len(per_request) if per_request else 0.0,
        "requests_not_fully_traced": len(short),
        "by_name": dict(sorted(Counter(s.name for s in spans).items())),
    }


def summarize_runs(runs: list[dict[str, Any]], target: float = TARGET_RATIO) -> dict[str, Any]:
    """Median and range per arm, on/off ratios (median over median, per-pair range), and the
    verdict: tok/s on/off at least `target`, and every measured request of `on` traced."""
    summary = summarize_systems(runs, list(ARMS), FIGURES)
    ratios = [
        ratios_between(runs, [("on", "off")], figure)[0]
        for figure in ("output_tok_s", "ttft_p50_ms", "ttft_p99_ms")
    ]
    by = {(r["system"], r["repetition"]): r for r in runs}
    reps = sorted({rep for arm, rep in by if arm == "on" and ("off", rep) in by})
    per_pair = [by[("on", rep)]["output_tok_s"] / by[("off", rep)]["output_tok_s"] for rep in reps]
    on_runs = [r for r in runs if r["system"] == "on"]
    traced = bool(on_runs) and all(
        r["spans"]["requests_not_fully_traced"] == 0
        and r["spans"]["min_spans_per_request"] >= len(REQUEST_SPANS)
        for r in on_runs
    )
    off_silent = all(r["spans"]["spans_received"] == 0 for r in runs if r["system"] == "off")
    errors = sum(int(r["num_errors"]) for r in runs)
    tok_s = ratios[0]["of_medians"]
    passed = tok_s >= target and traced and off_silent and errors == 0
    return {
        "summary": summary,
        "ratios": ratios,
        "per_pair_tok_s_ratios": [round(x, 4) for x in per_pair],
        "verdict": {
            "target": f"generated tok/s on/off >= {target} (tracing costs <= "
            f"{round((1 - target) * 100)} %)",
            "tok_s_on_over_off": round(tok_s, 4),
            "cost_pct": round((1 - tok_s) * 100, 2),
            "every_on_request_traced": traced,
            "off_sent_no_spans": off_silent,
            "request_errors": errors,
            "pass": passed,
        },
    }


def markdown(result: dict[str, Any]) -> str:
    s, v = result["settings"], result["verdict"]
    machine = result["machine"]
    on_spans = [r["spans"] for r in result["runs"] if r["system"] == "on"]
    spans = ", ".join(
        f"{x['spans_measured']} for {x['measured_requests']} requests "
        f"(min {x['min_spans_per_request']} each)"
        for x in on_spans
    )
    header = (
        f"Tracing overhead online: workload A ({s['num_requests']} requests, "
        f"{result['workload']['max_tokens']} generated each, "
        f"streamed at concurrency {s['concurrency']}), `pagedock serve` ({s['model']}) without "
        f"and with `--otlp-traces-endpoint` (receiver in the benchmark's process, "
        f"OTEL_BSP_SCHEDULE_DELAY={result['env']['OTEL_BSP_SCHEDULE_DELAY']} ms; a `traceparent` "
        f"on every request in both arms). {s['repetitions']} repetitions: "
        f"{s.get('placement', 'one arm at a time, interleaved')}, a fresh server each. "
        f"{result['started']}, {machine['cpu_model']}, {machine['cores_usable']} "
        f"cores, load average {result['load_average_before']} before, "
        f"{result['load_average_after']} after; pagedock {result['commit']}. Median (min–max). "
        f"{result['note']}"
    ).strip()
    verdict = (
        f"**{'PASS' if v['pass'] else 'FAIL'}**: generated tok/s on/off "
        f"{v['tok_s_on_over_off']:.3f} (cost {v['cost_pct']:.1f} %; target {v['target']}); "
        f"per pair {', '.join(f'{x:.3f}' for x in result['per_pair_tok_s_ratios'])}. Spans "
        f"received per `on` run: {spans or 'none'}; every request traced: "
        f"{v['every_on_request_traced']}; `off` sent none: {v['off_sent_no_spans']}."
    )
    table = markdown_table(result["summary"], COLUMNS)
    return f"{header}\n\n{table}\n\n{ratio_lines(result['ratios'])}\n\n{verdict}\n"
