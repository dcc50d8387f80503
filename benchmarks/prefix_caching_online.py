"""Prefix caching online: `pagedock serve` with prefix caching on against the same server with
`--no-prefix-caching`, on requests that share a long prefix.

    python benchmarks/prefix_caching_online.py [--repetitions 3]

Each repetition, for each server in turn (interleaved): one request warms a 400-token prefix, then
32 requests sharing it (each with a short tail of its own, 32 tokens out) are sent at once. Each
repetition has a prefix of its own, so no repetition finds the last one's blocks. Reports mean,
p50 and p99 TTFT per repetition, their medians, and off/on (target: mean TTFT >= 5x better on).
Writes benchmarks/results/prefix_caching_online.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_systems import (
    PAGEDOCK_MODEL,
    SMOLLM2_VOCAB,
    EqualSettings,
    pagedock_engine_args,
    parse_pagedock_args,
    parse_system,
    usable_cores,
)
from benchmarks.comparison_report import (
    markdown_table,
    ratio_lines,
    ratios_between,
    summarize_systems,
)
from benchmarks.load_generator import send_all, summarize
from benchmarks.machine import git_commit, machine_info
from benchmarks.repetitions import interleaved_order
from benchmarks.servers import Server, start_pagedock
from benchmarks.workloads import Workload, shared_prefix_workload, workload_a

HERE = Path(__file__).resolve().parent
ARMS = {"prefix caching on": True, "prefix caching off": False}
FIGURES = ["ttft_mean_ms", "ttft_p50_ms", "ttft_p99_ms", "output_tok_s", "num_errors"]
COLUMNS = [
    ("ttft_mean_ms", "TTFT mean ms", 0),
    ("ttft_p50_ms", "TTFT p50 ms", 0),
    ("ttft_p99_ms", "TTFT p99 ms", 0),
    ("output_tok_s", "output tok/s", 1),
    ("num_errors", "errors", 0),
]


def run_arm(server: Server, prompts: list[list[int]], max_tokens: int) -> dict[str, Any]:
    """One request alone (it stores the prefix), then the rest all at once; the rest measured."""
    warm = Workload("warm-prefix", prompts[:1], max_tokens)
    asyncio.run(send_all(server.url, warm, concurrency=1))
    measured = Workload("shared-prefix", prompts[1:], max_tokens)
    results, duration = asyncio.run(send_all(server.url, measured, concurrency=len(prompts)))
    return dict(summarize(results, duration).__dict__)


def start_arms(args: argparse.Namespace) -> dict[str, Server]:
    system = parse_system(args.system)
    extra = parse_pagedock_args(args.pagedock_arg)
    servers = {}
    for arm, on in ARMS.items():
        settings = EqualSettings(args.kv_cache_gib, enable_prefix_caching=on, threads=args.threads)
        engine_args = pagedock_engine_args(settings, system, extra)
        servers[arm] = start_pagedock(engine_args, PAGEDOCK_MODEL, args.log_dir / f"{on}.log")
        warm = workload_a(SMOLLM2_VOCAB, 4, content_seed=3_000)
        asyncio.run(send_all(servers[arm].url, Workload("warm-up", warm.prompts, 8), 4))
    return servers


def run(args: argparse.Namespace) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    servers = start_arms(args)
    runs = []
    try:
        for rep, arm in interleaved_order(list(ARMS), args.repetitions):
            workload = shared_prefix_workload(SMOLLM2_VOCAB, args.num_requests + 1, seed=500 + rep)
            figures = run_arm(servers[arm], workload.prompts, workload.max_tokens)
            runs.append({"system": arm, "repetition": rep, **figures})
            print(json.dumps({k: v for k, v in runs[-1].items() if k != "errors"}), flush=True)
    finally:
        memory = [{"system": arm, **s.stop()} for arm, s in servers.items()]
    return runs, memory


def header_line(result: dict[str, Any]) -> str:
    w = result["workload"]
    reps = max(r["repetition"] for r in result["runs"]) + 1
    return (
        f"Prefix caching online ({w['requests']} requests sharing a {w['prefix_tokens']}-token "
        f"prefix, sent at once after one warmed it; {reps} interleaved repetitions), "
        f"{result['started']}, {result['machine']['cpu_model']}, {result['system']}, pagedock "
        f"{result['pagedock_commit']}. Median (min–max). {result['note']}"
    ).strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--system", default="pagedock float32", help="pagedock's dtype, e.g. 'pagedock auto'"
    )
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--num-requests", type=int, default=32)
    parser.add_argument("--kv-cache-gib", type=int, default=2)
    parser.add_argument("--threads", type=int, default=usable_cores())
    parser.add_argument("--pagedock-arg", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--note", default="")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "prefix_caching_online.json")
    args = parser.parse_args()
    args.log_dir = Path(tempfile.mkdtemp(prefix="pagedock-prefix-"))
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    runs, memory = run(args)
    arms = list(ARMS)
    summary = summarize_systems(runs, arms, FIGURES)
    ratios = ratios_between(runs, [(arms[1], arms[0])], "ttft_mean_ms")
    result = {
        "benchmark": "prefix caching online: pagedock serve, prefix caching on vs off",
        "started": started,
        "note": args.note,
        "machine": machine_info(),
        "pagedock_commit": git_commit(HERE.parent),
        "system": args.system,
        "workload": {
            "name": "shared-prefix",
            "requests": args.num_requests,
            "prefix_tokens": 400,
            "max_tokens": 32,
            "arrival": "one request warms the prefix, then all at once",
            "seeds": "500 + repetition (a prefix of its own per repetition)",
        },
        "settings": {"kv_cache_gib": args.kv_cache_gib, "threads": args.threads},
        "pagedock_only_levers": parse_pagedock_args(args.pagedock_arg),
        "run_order": [f"{r['system']} #{r['repetition']}" for r in runs],
        "summary": summary,
        "ratios": ratios,
        "target": "off / on mean TTFT >= 5",
        "memory_per_server": memory,
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    text = f"{header_line(result)}\n\n{markdown_table(summary, COLUMNS)}\n\n{ratio_lines(ratios)}\n"
    args.out.with_suffix(".md").write_text(text)
    print("\n" + text)


if __name__ == "__main__":
    main()
