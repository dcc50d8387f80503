"""Tracing's throughput cost on workload A, online (issue 38): `pagedock serve` with tracing off
against the same server with `--otlp-traces-endpoint`, interleaved, a fresh server per run.

    python benchmarks/tracing_overhead.py                   # the real run (clean commit)
    python benchmarks/tracing_overhead.py --model /tmp/tiny --num-requests 4 --repetitions 1 \
        --allow-dirty --out /tmp/tracing_smoke.json          # a smoke run

Arms, in the order off on off on off on (--repetitions 3), or with --side-by-side both at once
in each repetition, each server on one core with one thread (the cores swapped every repetition)
and the same load sent to both together, so that the machine's drift between runs, which moved
one arm by 10 % from run to run here, falls on both alike: `off` is `pagedock serve` as it starts
by default; `on` adds `--otlp-traces-endpoint`, pointing at an OTLP/HTTP receiver in this process
(tests/otlp_receiver.py: protobuf, answers 200, keeps every span). The receiver runs in both arms
(idle in `off`), every request carries a W3C `traceparent` of its own in both arms, and the
batch exporter keeps its default delay (OTEL_BSP_SCHEDULE_DELAY=5000 ms, set explicitly and
recorded), so the arms differ by the flag alone. Each run: a fresh server (benchmarks/servers.py,
the engine settings of the online comparison: bench_systems.pagedock_engine_args), warmed up on
requests of its own (workload A's lengths, other token ids, 16 tokens out), then --num-requests
requests of workload A (128 generated each, greedy, ignore_eos) streamed at --concurrency, then
stopped: its exporter sends what it still holds as it exits, and the `on` arm's spans are counted
then, per measured request (at least llm_request, queue, prefill and decode: 4 spans).

Reported per arm: generated tok/s, TTFT p50 / p99 (median and range over the repetitions), and
on/off as median over median with the per-pair range. Pass: generated tok/s on/off >= 0.97 (tracing
costs at most 3 %) and every measured request of the `on` arm traced. Repetition i of both arms
sends the same token ids (content seed 100 + i), none found in the warm-up's prefix blocks.

Time: a 2-core AMD EPYC without AVX-512 (2026-12-03) took about 2.5 min per run of 64
requests at concurrency 16 (75 s of load), so the default 128 requests make 6 runs of about
4 min; a CPU with AVX-512 and bf16 runs several times faster. --num-requests 64 halves it.
Writes benchmarks/results/tracing_overhead_<commit>.{json,md}; a tree with uncommitted changes
is refused unless --allow-dirty (its commit is then marked `+dirty`: a result not to quote).
"""

from __future__ import annotations

import argparse
import asyncio
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
    EqualSettings,
    pagedock_engine_args,
    parse_pagedock_args,
    parse_system,
    usable_cores,
)
from benchmarks.load_generator import summarize
from benchmarks.machine import git_commit
from benchmarks.quality_nll import check_commit
from benchmarks.repetitions import interleaved_order
from benchmarks.result_header import ResultHeader
from benchmarks.servers import Server, start_pagedock
from benchmarks.traced_load import send_traced, trace_id_of, traceparents
from benchmarks.tracing_report import ARMS, count_spans, markdown, summarize_runs
from benchmarks.workloads import Workload, check_no_shared_block, workload_a
from tests.otlp_receiver import OtlpReceiver

PACKAGES = (
    "pagedock",
    "torch",
    "opentelemetry-sdk",
    "opentelemetry-exporter-otlp-proto-http",
    "opentelemetry-proto",
    "httpx",
    "uvicorn",
)
HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
WARMUP_CONTENT_SEED = 2_000
BSP_SCHEDULE_DELAY_MS = 5000
"""The batch span processor's default export delay (OpenTelemetry SDK), kept as a user has it."""
# Variables that would turn tracing on (or off) behind the flag's back: removed for both arms.
TRACING_ENV = (
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_SDK_DISABLED",
    "OTEL_TRACES_EXPORTER",
)


def warmup_prompts(vocab: int, count: int, repetitions: int, num_measured: int) -> list[list[int]]:
    """Requests of their own: no first block shared with any repetition's measured prompts."""
    prompts = workload_a(vocab, count, content_seed=WARMUP_CONTENT_SEED).prompts
    for rep in range(repetitions):
        measured = workload_a(vocab, num_measured, content_seed=100 + rep).prompts
        check_no_shared_block(prompts, measured, SMALLEST_BLOCK)
    return prompts


def start_arm(
    arm: str, rep: int, args: argparse.Namespace, receiver: OtlpReceiver, cpus: set[int] | None
) -> Server:
    """A fresh server (tracing `arm`: to `receiver`), on `cpus` when given, warmed up."""
    engine_args = dict(args.engine_args)
    if arm == "on":
        engine_args["otlp_traces_endpoint"] = receiver.url
    server = start_pagedock(engine_args, args.model, args.log_dir / f"{arm}_{rep}.log", cpus)
    warm = Workload("warm-up", args.warmup_prompts, max_tokens=16)
    warm_headers = traceparents(len(warm.prompts), seed=WARMUP_CONTENT_SEED + rep)
    try:
        warmed, _ = asyncio.run(send_traced(server.url, warm, warm_headers, len(warm.prompts)))
    except BaseException:
        server.stop()
        raise
    failed = [r.error for r in warmed if not r.ok]
    if failed:
        server.stop()
        raise RuntimeError(f"warm-up requests failed on {server.url}: {failed[:3]}")
    return server


def measured_load(args: argparse.Namespace, rep: int) -> tuple[Workload, list[str]]:
    """Repetition `rep`'s workload A and its traceparents, the same for both arms."""
    workload = workload_a(args.vocab, args.num_requests, content_seed=100 + rep)
    return workload, traceparents(len(workload.prompts), seed=100 + rep)


def arm_record(
    arm: str, rep: int, server: Server, measured: tuple[Any, float], spans: dict[str, Any]
) -> dict[str, Any]:
    """One arm's run (its server stopped: `server.stopped` holds what stop() returned)."""
    results, duration = measured
    report = summarize(results, duration)
    return {
        "system": arm,
        "repetition": rep,
        **report.__dict__,
        "spans": spans,
        "server": server.stopped,
        "log": str(server.log),
    }


def run_arm(arm: str, rep: int, args: argparse.Namespace) -> dict[str, Any]:
    """A fresh server (tracing `arm`), warmed up, workload A streamed through it, stopped; the
    receiver's spans counted once it has exited (its exporter flushes on the way out)."""
    workload, headers = measured_load(args, rep)
    with OtlpReceiver() as receiver:
        server = start_arm(arm, rep, args, receiver, None)
        try:
            measured = asyncio.run(send_traced(server.url, workload, headers, args.concurrency))
        finally:
            server.stop()
        spans = count_spans(list(receiver.spans), [trace_id_of(h) for h in headers])
    return arm_record(arm, rep, server, measured, spans)


def run_side_by_side(rep: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Both arms at once, each server on a core of its own (swapped every repetition), the same
    load sent to both together: the machine's drift falls on both alike."""
    cores = sorted(os.sched_getaffinity(0))[:2]
    placement = dict(zip(ARMS, cores if rep % 2 == 0 else cores[::-1], strict=True))
    workload, headers = measured_load(args, rep)
    with OtlpReceiver() as off_receiver, OtlpReceiver() as on_receiver:
        receivers = {"off": off_receiver, "on": on_receiver}
        servers: dict[str, Server] = {}
        try:
            for arm in ARMS:
                servers[arm] = start_arm(arm, rep, args, receivers[arm], {placement[arm]})
            measured = asyncio.run(both_arms(servers, workload, headers, args.concurrency))
        finally:
            for server in servers.values():
                server.stop()
        trace_ids = [trace_id_of(h) for h in headers]
        spans = {arm: count_spans(list(receivers[arm].spans), trace_ids) for arm in ARMS}
    return [
        arm_record(arm, rep, servers[arm], measured[arm], spans[arm]) | {"core": placement[arm]}
        for arm in ARMS
    ]


async def both_arms(
    servers: dict[str, Server], workload: Workload, headers: list[str], concurrency: int
) -> dict[str, tuple[Any, float]]:
    sent = [send_traced(servers[arm].url, workload, headers, concurrency) for arm in ARMS]
    return dict(zip(ARMS, await asyncio.gather(*sent), strict=True))


def run_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    if args.side_by_side:
        for rep in range(args.repetitions):
            started = time.strftime("%H:%M:%S", time.gmtime())
            shown(runs, [r | {"started_utc": started} for r in run_side_by_side(rep, args)])
        return runs
    for rep, arm in interleaved_order(list(ARMS), args.repetitions):
        started = time.strftime("%H:%M:%S", time.gmtime())
        shown(runs, [run_arm(arm, rep, args) | {"started_utc": started}])
    return runs


def shown(runs: list[dict[str, Any]], records: list[dict[str, Any]]) -> None:
    """`records` added to `runs`, each printed as it is (without its errors and memory)."""
    for record in records:
        runs.append(record)
        print(json.dumps({k: v for k, v in record.items() if k not in ("errors", "server")}))


def server_env() -> tuple[dict[str, str], dict[str, str]]:
    """Set the servers' tracing environment (they inherit this process's): the batch delay at
    its default, nothing that would trace without the flag. Returns (set, removed)."""
    removed = {k: os.environ.pop(k) for k in TRACING_ENV if k in os.environ}
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = str(BSP_SCHEDULE_DELAY_MS)
    otel = {k: v for k, v in sorted(os.environ.items()) if k.startswith("OTEL_")}
    return otel, removed


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=PAGEDOCK_MODEL, help="a built-in name or a directory")
    parser.add_argument("--system", default="pagedock auto", help="pagedock's dtype")
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--num-requests", type=int, default=128)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--warmup-requests", type=int, default=8)
    parser.add_argument("--kv-cache-gib", type=int, default=2)
    parser.add_argument("--threads", type=int, default=usable_cores())
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="both arms at once, a core and a thread each, cores swapped every repetition",
    )
    parser.add_argument("--pagedock-arg", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--allow-dirty", action="store_true", help="run on uncommitted changes")
    parser.add_argument("--out", type=Path, help="default: results/tracing_overhead_<commit>.json")
    parser.add_argument("--note", default="")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.side_by_side:
        args.threads = 1
    commit = git_commit(HERE.parent)
    check_commit(commit, args.allow_dirty)
    header = ResultHeader.begin(commit)
    env, removed = prepare(args)
    runs = run_all(args)
    result = {
        **header.finish(
            "tracing overhead online: pagedock serve, --otlp-traces-endpoint off vs on",
            38,
            args.note,
            PACKAGES,
        ),
        "settings": settings_of(args),
        "env": env,
        "env_removed": removed,
        "workload": workload_of(args),
        "receiver": "tests/otlp_receiver.py OtlpReceiver in the benchmark's process, both arms",
        "run_order": [f"{r['system']} #{r['repetition']}" for r in runs],
        **summarize_runs(runs),
        "runs": runs,
    }
    out = args.out or RESULTS / f"tracing_overhead_{commit or 'unknown'}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    out.with_suffix(".md").write_text(text)
    print("\n" + text)
    print(f"wrote {out}")


def prepare(args: argparse.Namespace) -> tuple[dict[str, str], dict[str, str]]:
    """The model's vocabulary, the engine's arguments, the warm-up prompts and a log folder, on
    `args`; the servers' environment (and what was removed from it)."""
    from engine.loader.model_loader import read_model_config
    from pagedock.models.registry import resolve_model

    args.vocab = read_model_config(resolve_model(args.model).path).vocab_size
    settings = EqualSettings(args.kv_cache_gib, threads=args.threads)
    extra = parse_pagedock_args(args.pagedock_arg)
    args.engine_args = pagedock_engine_args(settings, parse_system(args.system), extra)
    args.warmup_prompts = warmup_prompts(
        args.vocab, args.warmup_requests, args.repetitions, args.num_requests
    )
    args.log_dir = Path(tempfile.mkdtemp(prefix="pagedock-tracing-"))
    print(f"logs: {args.log_dir}", flush=True)
    return server_env()


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "model": args.model,
        "system": args.system,
        "concurrency": args.concurrency,
        "num_requests": args.num_requests,
        "repetitions": args.repetitions,
        "warmup_requests": args.warmup_requests,
        "engine_args": args.engine_args,
        "on_arm_extra_flag": "--otlp-traces-endpoint http://127.0.0.1:<port>/v1/traces",
        "side_by_side": args.side_by_side,
        "placement": "both arms at once, one core each (swapped every repetition), one thread"
        if args.side_by_side
        else "one arm at a time, on every usable core",
    }


def workload_of(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "name": "A",
        "requests": args.num_requests,
        "max_tokens": 128,
        "prompt_lengths": "workload A's, seed 0",
        "content_seeds": "100 + repetition, the same for both arms of a repetition",
        "warmup": f"{args.warmup_requests} requests of content seed {WARMUP_CONTENT_SEED}, "
        "16 tokens, per server",
        "arrival": f"closed loop at concurrency {args.concurrency}, streamed",
        "traceparent": "one of its own on every request, both arms (seeded)",
    }


if __name__ == "__main__":
    main()
