"""Tracing's CPU per request, counted where it is spent (issue 38): the engine's request tracer
(engine/server/request_tracer.py) and OpenTelemetry's batch exporter, the only work the server's
`--otlp-traces-endpoint` adds, run here on requests shaped like workload A's. A throughput
comparison of two servers (benchmarks/tracing_overhead.py) moves by several per cent between runs
of the same arm; this counts the work itself.

    python benchmarks/tracing_cpu_cost.py --overhead-result \\
        benchmarks/results/tracing_overhead_<commit>.json

Method: the same loop twice in this process, with the OTLP receiver in a process of its own so
that only the sending side is counted: `off` builds each finished request's record (what the
engine hands its output listeners either way); `on` also hands each step's finished requests to
a RequestTracer on a tracer exporting over OTLP/HTTP in batches (as `pagedock serve` sets it up:
pagedock/tracing/tracer.py), then flushes the exporter. The process's CPU time (every thread,
the exporter's included) of `on` minus `off`, per request, is tracing's cost. Requests carry a
traceparent and the spans workload A's requests got in the overhead benchmark (llm_request,
queue, prefill, decode, one or two prefill_chunk). Repeated --repetitions times, interleaved
(off on off on ...); median and range.

The share: that cost over the server's time per request in the overhead result's `off` arm
(its run's wall seconds over its requests), which a CPU-bound server spends on at least one of
its cores; so the share is an upper bound.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import git_commit, machine_info
from benchmarks.quality_nll import check_commit
from benchmarks.traced_load import traceparents
from engine.core.request import RequestTiming
from engine.runtime.outputs import FinishedRequestStats, IterationStats
from engine.server.request_tracer import RequestTracer
from pagedock.request_ids import RequestIds, current_request, remember
from pagedock.tracing.tracer import start_tracing

ROOT = Path(__file__).resolve().parents[1]
FINISHED_PER_STEP = 4
"""Requests finishing in one step (workload A at concurrency 16 ends a few at a time)."""
RECEIVER = (
    "import sys; from tests.otlp_receiver import OtlpReceiver\n"
    "with OtlpReceiver() as r:\n"
    "    print(r.url, flush=True); sys.stdin.read()\n"
    "    print(len(r.spans), flush=True)\n"
)


def finished_requests(count: int, seed: int) -> list[FinishedRequestStats]:
    """`count` requests of workload A's shape: 128 tokens out, one prefill chunk (every sixth
    two: 5.17 spans a request, as the overhead benchmark's measured requests had), each with a
    traceparent remembered as the server's middleware remembers it."""
    now = time.monotonic()
    made = []
    for i, traceparent in enumerate(traceparents(count, seed)):
        request_id = f"cmpl-{seed}-{i}"
        token = current_request.set(RequestIds(f"x-{i}", traceparent))
        remember(request_id)
        current_request.reset(token)
        chunks = [(now + 0.1, now + 0.3, 300)] + (
            [(now + 0.3, now + 0.5, 200)] if i % 6 == 0 else []
        )
        timing = RequestTiming(
            arrival_time=now,
            first_scheduled_time=now + 0.1,
            first_token_time=now + 0.5,
            last_token_time=now + 12.0,
            finished_time=now + 12.0,
            num_generated_tokens=128,
            prefill_chunks=chunks,
        )
        made.append(FinishedRequestStats(f"{request_id}-0", None, 500, ["length"], timing))
    return made


def one_run(tracing_on: bool, count: int, seed: int, receiver_url: str) -> float:
    """The process's CPU seconds for `count` requests, traced or not."""
    started = time.process_time()
    finished = finished_requests(count, seed)
    if tracing_on:
        tracing = start_tracing("pagedock-engine", receiver_url)
        assert tracing is not None
        tracer = RequestTracer(tracing.tracer, "smollm2-135m-instruct")
        for i in range(0, count, FINISHED_PER_STEP):
            tracer.on_outputs(IterationStats(finished=finished[i : i + FINISHED_PER_STEP]))
        tracing.provider.force_flush()
        tracing.shutdown()
    return time.process_time() - started


def measure(args: argparse.Namespace) -> dict[str, Any]:
    receiver = subprocess.Popen(
        [sys.executable, "-c", RECEIVER],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert receiver.stdin is not None and receiver.stdout is not None
    url = receiver.stdout.readline().strip()
    runs: dict[str, list[float]] = {"off": [], "on": []}
    try:
        one_run(True, 64, 99, url)  # warm-up: the exporter's imports, the first connection
        for repetition in range(args.repetitions):
            for arm in ("off", "on"):
                seconds = one_run(arm == "on", args.num_requests, 100 + repetition, url)
                runs[arm].append(seconds)
                print(f"{arm} #{repetition}: {seconds:.3f} s CPU", flush=True)
    finally:
        receiver.stdin.close()
        spans_received = int(receiver.stdout.readline() or 0)
        receiver.wait(30)
    per_request_us = [
        (on - off) / args.num_requests * 1e6
        for off, on in zip(runs["off"], runs["on"], strict=True)
    ]
    expected = sum(spans_per_request(i) for i in range(64))
    expected += args.repetitions * sum(spans_per_request(i) for i in range(args.num_requests))
    assert spans_received == expected, f"{spans_received} spans received of {expected} sent"
    return {"cpu_s": runs, "spans_received": spans_received, "per_request_us": per_request_us}


def spans_per_request(i: int) -> int:
    return 6 if i % 6 == 0 else 5


def server_seconds_per_request(overhead_result: Path) -> float:
    """Wall seconds of the overhead result's `off` runs per request (the median run)."""
    result = json.loads(overhead_result.read_text())
    off = [r for r in result["runs"] if r["system"] == "off"]
    return statistics.median(r["duration_s"] / r["num_requests"] for r in off)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--num-requests", type=int, default=4000)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--overhead-result", type=Path, required=True)
    parser.add_argument("--allow-dirty", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    commit = git_commit(ROOT)
    check_commit(commit, args.allow_dirty)
    os.environ.setdefault("OTEL_BSP_SCHEDULE_DELAY", "5000")  # the SDK's default, recorded
    # NOTE: every span kept: a server ends a request or so a second, this loop thousands, and
    # spans past the default queue (2,048) would be dropped unexported, their cost uncounted.
    os.environ.setdefault("OTEL_BSP_MAX_QUEUE_SIZE", "200000")
    load_before = os.getloadavg()
    result = report(args, commit, load_before, measure(args))
    out = args.out or ROOT / "benchmarks" / "results" / f"tracing_cpu_cost_{commit}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    cost = result["tracing_cpu_us_per_request"]
    print(
        f"tracing: {cost['median']:.0f} us CPU a request ({cost['min']:.0f}-{cost['max']:.0f}); "
        f"workload A: {result['server_seconds_per_request_off']:.2f} s of the server a request; "
        f"share at most {result['share_upper_bound']:.4%}; {out}"
    )


def report(
    args: argparse.Namespace, commit: str | None, load_before: Any, measured: dict[str, Any]
) -> dict[str, Any]:
    costs = measured["per_request_us"]
    server_s = server_seconds_per_request(args.overhead_result)
    return {
        "benchmark": "tracing CPU per request: the request tracer and the OTLP batch exporter",
        "issue": 38,
        "commit": commit,
        "machine": {**machine_info(), "load_average_before": load_before},
        "load_average_after": os.getloadavg(),
        "settings": {
            "num_requests": args.num_requests,
            "repetitions": args.repetitions,
            "finished_per_step": FINISHED_PER_STEP,
            "spans_per_request": "5, every sixth request 6: llm_request, queue, prefill, decode, "
            "prefill_chunk",
            "OTEL_BSP_MAX_QUEUE_SIZE": os.environ["OTEL_BSP_MAX_QUEUE_SIZE"],
            "OTEL_BSP_SCHEDULE_DELAY": os.environ["OTEL_BSP_SCHEDULE_DELAY"],
            "overhead_result": str(args.overhead_result),
        },
        **measured,
        "tracing_cpu_us_per_request": {
            "median": statistics.median(costs),
            "min": min(costs),
            "max": max(costs),
        },
        "server_seconds_per_request_off": server_s,
        "share_upper_bound": statistics.median(costs) / 1e6 / server_s,
    }


if __name__ == "__main__":
    main()
