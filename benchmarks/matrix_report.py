"""The result files of benchmarks/online_matrix.py: JSON with every run and the machine, and a
markdown table per cell with issue 40's ratios."""

from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path
from typing import Any

from benchmarks.bench_systems import vllm_environment, vllm_model, vllm_python
from benchmarks.comparison_report import fmt_spread, ratios_between, summarize_systems
from benchmarks.llama_server import llama_server_binary, llama_server_model
from benchmarks.machine import vllm_version
from benchmarks.matrix_arms import BEST_VLLM, ENV_ARM_PREFIX, LLAMA, OURS, arm_environment
from benchmarks.matrix_cells import bars, cell_verdicts, paired_runs
from benchmarks.online_report import memory_by_system, pooled_percentiles
from benchmarks.result_header import ResultHeader

FIGURES = ["output_tok_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms"]
FIGURES += ["e2e_p99_ms", "num_errors", "output_tokens"]
COLUMNS = [("output_tok_s", "output tok/s", 1), ("ttft_p99_ms", "TTFT p99 ms", 0)]
COLUMNS += [("itl_p99_ms", "ITL p99 ms", 0), ("num_errors", "errors", 0)]


def llama_server_version() -> str | None:
    try:
        done = subprocess.run(
            [llama_server_binary(), "--version"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (done.stdout + done.stderr).strip() or None


def per_cell(args: argparse.Namespace, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each cell: the arms' summaries, ratios against each peer, and issue 40's verdicts."""
    cells: dict[str, Any] = {}
    cell_bars = bars(BEST_VLLM, LLAMA)
    for cell in args.cells:
        mine = [r for r in runs if r["cell"] == cell.key]
        arms = [a for a in args.arms if any(r["system"] == a for r in mine)]
        peers = [a for a in arms if a != OURS]
        ratios = []
        if OURS in arms:
            for figure in ("output_tok_s", "ttft_p99_ms", "itl_p99_ms"):
                ratios += [
                    entry
                    for p in peers
                    for entry in ratios_between(paired_runs(mine, OURS, p), [(OURS, p)], figure)
                ]
        cells[cell.key] = {
            "summary": summarize_systems(mine, arms, FIGURES),
            "ratios": ratios,
            "verdicts": cell_verdicts(mine, cell, OURS, cell_bars),
        }
    return cells


def write_matrix_results(
    args: argparse.Namespace,
    header: ResultHeader,
    matrix: dict[str, Any],
    grid: dict[str, Any] | None,
    out: Path,
) -> None:
    what = "online matrix (concurrency x prompt mix), streaming, issue 40"
    packages = ("torch", "transformers", "httpx")
    runs = matrix["runs"]
    expected = args.repetitions * len(args.arms)
    result = {
        **header.finish(what, 40, args.note, packages),
        "vllm": vllm_version(vllm_python()),
        "llama_server": llama_server_version(),
        "weights": {
            OURS: "smollm2-135m-instruct (built-in GGUF, loaded at its default dtype)",
            "vllm": vllm_model(),
            LLAMA: llama_server_model(),
        },
        "settings": settings_record(args),
        "vllm_grid": grid,
        "complete": not matrix.get("stopped_early") and len(matrix["memory"]) == expected,
        "failures": matrix.get("failures", []),
        "run_order": [f"{r['system']} #{r['repetition']} {r['cell']}" for r in runs],
        "cells": per_cell(args, runs),
        "pooled_percentiles": {k: pooled_percentiles(v) for k, v in matrix["pooled"].items()},
        "peak_memory": memory_by_system(matrix["memory"]),
        "memory_per_server": matrix["memory"],
        "runs": runs,
    }
    out.write_text(json.dumps(result, indent=2) + "\n")
    text = matrix_markdown(result)
    out.with_suffix(".md").write_text(text)
    print(f"\n{text}\nwrote {out}")


def settings_record(args: argparse.Namespace) -> dict[str, Any]:
    settings = args.arm_settings
    return {
        "cells": [c.key for c in args.cells],
        "arms": args.arms,
        "repetitions": args.repetitions,
        "requests_per_cell": f"max({args.min_requests}, {args.waves} x concurrency)",
        "max_tokens": args.max_tokens,
        "ignore_eos": True,
        "warmup": f"{args.warmup_requests} requests per mix, 16 tokens, per server",
        "kv_cache_gib": settings.kv_cache_gib,
        "threads": settings.threads,
        "vllm_best_knobs": settings.vllm_best_knobs,
        "arm_flags": settings.command_flags(),
        "arm_environment": {arm: env for arm in args.arms if (env := arm_environment(arm))},
        "vllm_environment": vllm_environment(settings.equal) if vllm_python() else None,
        "lock": str(args.lock) if args.lock else None,
        "server_lifetime": "one server per (arm, repetition), every cell in turn; one at a time",
    }


def matrix_markdown(result: dict[str, Any]) -> str:
    machine, s = result["machine"], result["settings"]
    flags = ", ".join(f for f, on in machine["cpu_flags"].items() if on)
    lines = [
        f"Online matrix, {s['repetitions']} interleaved repetitions, {s['requests_per_cell']} "
        f"requests per cell, {s['max_tokens']} tokens each; {result['started']}, commit "
        f"{result['commit']}, {machine['cpu_model']} ({flags}), {s['threads']} threads, load "
        f"{result['load_average_before']} -> {result['load_average_after']}; "
        f"{result['vllm']}; llama-server {result['llama_server']}; {s['kv_cache_gib']} GiB KV "
        f"each; vllm-best knobs {s['vllm_best_knobs']}. Median (min–max). {result['note']}",
        "",
        "| cell | system | " + " | ".join(h for _, h, _ in COLUMNS) + " |",
        "|---|---|" + "---|" * len(COLUMNS),
    ]
    for key, cell in result["cells"].items():
        for system, figures in cell["summary"].items():
            cells = [fmt_spread(figures.get(f), d) for f, _, d in COLUMNS]
            lines.append(f"| {key} | {system} | " + " | ".join(cells) + " |")
    lines += ["", "| cell | bar | pagedock / peer (pair range) | met |", "|---|---|---|---|"]
    for key, cell in result["cells"].items():
        for v in cell["verdicts"]:
            met = {True: "yes", False: "**no**", None: "n/a"}[v["met"]]
            lines.append(
                f"| {key} | {v['bar']} | {v['of_medians']:.2f} "
                f"({v['pair_min']:.2f}–{v['pair_max']:.2f}) | {met} |"
            )
    return "\n".join(lines + control_arm_lines(result)) + "\n"


def control_arm_lines(result: dict[str, Any]) -> list[str]:
    """pagedock over each `pagedock+NAME=VALUE` arm, every figure, per cell (none without)."""
    rows = [
        f"| {key} | pagedock / {r['against']} | {r['figure']} | {r['of_medians']:.2f} "
        f"({r['pair_min']:.2f}–{r['pair_max']:.2f}) |"
        for key, cell in result["cells"].items()
        for r in cell.get("ratios", [])
        if r["against"].startswith(ENV_ARM_PREFIX)
    ]
    if not rows:
        return []
    header = [
        "",
        "| cell | ratio | figure | median over median (pair range) |",
        "|---|---|---|---|",
    ]
    return [*header, *rows]
