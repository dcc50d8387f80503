"""No false 503: the engine's progress-based /health under workload A.

    python benchmarks/liveness_under_load.py [--concurrency 32] [--stall-timeout-s 60]

`pagedock serve` (the built-in SmolLM2) runs workload A (64 requests of 32-512 prompt tokens, 128
generated each) at the given concurrency while a poller asks `/health` every 0.25 s. The engine
says 503 "engine stalled" when its loop has not gone round for --stall-timeout-s while work is
pending; its longest legitimate pause is the longest step (a full 2,048-token prefill chunk
batched with every running decode). The result records every /health answer's status, the
largest `seconds_since_progress` the poller saw (a lower bound of the longest step, within the
0.25 s poll), and so the margin to the timeout. Written to
benchmarks/results/liveness_under_load.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.load_generator import run_load
from benchmarks.machine import machine_info
from benchmarks.online_throughput import start_server
from benchmarks.workloads import workload_a

RESULT = Path(__file__).parent / "results" / "liveness_under_load.json"
POLL_S = 0.25


class HealthPoller(threading.Thread):
    """Polls /health until stopped; keeps every status, latency and seconds_since_progress."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.stopped = threading.Event()
        self.statuses: list[int] = []
        self.latencies_s: list[float] = []
        self.progress_ages_s: list[float] = []

    def run(self) -> None:
        with httpx.Client(timeout=5) as client:
            while not self.stopped.wait(POLL_S):
                started = time.perf_counter()
                try:
                    response = client.get(self.url + "/health")
                except httpx.HTTPError:
                    self.statuses.append(0)  # no answer at all counts as a failure too
                    continue
                self.latencies_s.append(time.perf_counter() - started)
                self.statuses.append(response.status_code)
                self.progress_ages_s.append(float(response.json().get("seconds_since_progress", 0)))


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.offline_throughput import resolve_benchmark_model
    from engine.loader.model_loader import read_model_config
    from pagedock.models.registry import resolve_model

    with tempfile.TemporaryDirectory() as tmp:
        model = resolve_benchmark_model(args.model, Path(tmp))
        vocab = read_model_config(resolve_model(model).path).vocab_size
        process, url = start_server(model, "float32", Path(tmp) / "server.log")
        try:
            poller = HealthPoller(url)
            poller.start()
            report = asyncio.run(run_load(url, workload_a(vocab), concurrency=args.concurrency))
            poller.stopped.set()
            poller.join()
        finally:
            process.terminate()
            process.wait(timeout=60)
    failures = sum(s != 200 for s in poller.statuses)
    settings = {
        "model": args.model,
        "dtype": "float32",
        "workload": "A (64 requests, seed 0)",
        "concurrency": args.concurrency,
        "stall_timeout_s": args.stall_timeout_s,
        "server": "pagedock serve defaults: max_num_batched_tokens 2048, max_num_seqs 256, "
        "prefix caching on",
        "poll_s": POLL_S,
    }
    longest = max(poller.progress_ages_s, default=0.0)
    return {
        "machine": machine_info(),
        "settings": settings,
        "health_polls": len(poller.statuses),
        "health_failures": failures,
        "health_latency_p50_ms": statistics.median(poller.latencies_s) * 1000,
        "health_latency_max_ms": max(poller.latencies_s) * 1000,
        "longest_seconds_since_progress": longest,
        "margin_to_stall_timeout": args.stall_timeout_s / longest if longest else None,
        "workload": report.__dict__,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--stall-timeout-s", type=float, default=60.0, help="the server's default")
    parser.add_argument("--note", default="", help="recorded in the result (e.g. machine load)")
    args = parser.parse_args()
    result = measure(args) | {"note": args.note}
    RESULT.write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"/health: {result['health_failures']} failures in {result['health_polls']} polls; "
        f"longest pause {result['longest_seconds_since_progress']:.2f} s "
        f"({result['margin_to_stall_timeout']:.0f}x under the {args.stall_timeout_s:g} s timeout); "
        f"wrote {RESULT}"
    )


if __name__ == "__main__":
    main()
