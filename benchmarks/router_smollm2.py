"""Routing under load on the real model (`python benchmarks/router_bench.py --model
smollm2-135m-instruct`, `make bench-router`): prefix-aware vs round-robin vs least-loaded in front
of 2 SmolLM2-135M replicas, one torch thread each, each pinned to its own core.

One run, in this order:
1. Round-robin on fresh replicas: the unloaded calibration (a calibration tenant's cold prompt,
   then its warm follow-ups, one at a time, straight to one replica: the goodput target is 2x the
   median warm TTFT), then the peak: the workload's first --peak-requests turns closed-loop at
   --peak-concurrency, which keeps both replicas busy. Peak requests/s = completed / duration.
2. Per policy, fresh replicas (empty caches) behind `pagedock route --policy P`: the whole
   workload open-loop, Poisson arrivals at --load x the peak (seeded: the same schedule for
   every policy), so every policy is offered less than round-robin's capacity.

The workload (benchmarks/router_workload.py): --tenants tenants, each a distinct system prompt of
--system-prompt-tokens tokens, --conversations conversations per tenant of --turns user turns,
each turn carrying its conversation's earlier turns; chat messages, streamed, --max-tokens output
tokens. Each replica gets the same KV pool, sized to hold about half the tenants' prefixes plus
the working set. Writes benchmarks/results/router_smollm2.{json,md,png}.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks import router_client as rc
from benchmarks import router_smollm2_args
from benchmarks.router_report import policy_row, routing_stats, write_results
from benchmarks.router_smollm2_args import MODEL
from benchmarks.router_workload import (
    ChatTurn,
    KvSizing,
    Messages,
    WorkloadShape,
    chat_turns,
    common_prefix_tokens,
    kv_sizing,
    poisson_arrivals,
    system_prompts,
    ttft_target_s,
)
from tests.router.live import Process, free_port, metric_sum, wait_synced

NUM_REPLICAS = 2
COUNTERS = (
    "vllm:prefix_cache_hits_total",
    "vllm:prefix_cache_queries_total",
    "vllm:request_success_total",
    "vllm:num_preemptions_total",
)


class Fleet:
    """NUM_REPLICAS `pagedock serve` replicas, replica i pinned to usable core i (mod the count),
    behind one `pagedock route --policy P` (not pinned)."""

    def __init__(self, policy: str, sizing: KvSizing, logs: Path) -> None:
        cores = sorted(os.sched_getaffinity(0))
        self.replicas = [
            Process(
                _serve_args(sizing),
                logs / f"{policy}-replica-{i}.log",
                cpus={cores[i % len(cores)]},
            )
            for i in range(NUM_REPLICAS)
        ]
        self.router = Process(
            _route_args(policy, [r.url for r in self.replicas]), logs / f"{policy}-router.log"
        )
        self.baseline: dict[str, float] = {}
        self.baseline_per_replica: list[float] = [0.0] * NUM_REPLICAS

    def start(self) -> Fleet:
        for r in self.replicas:
            r.start()
        for r in self.replicas:
            r.wait_ready(timeout_s=300.0)
        # A first request per replica (its lazy set-up, off the clock), on a prompt that shares no
        # block with the workload; the engines' counters are read from here on.
        asyncio.run(_warm_up([r.url for r in self.replicas]))
        self.rebase()
        self.router.start().wait_ready(timeout_s=120.0)
        wait_synced(self.router, [r.url for r in self.replicas], timeout_s=60.0)
        return self

    def rebase(self) -> None:
        """Count the engines' counters from now on."""
        self.baseline = {name: 0.0 for name in COUNTERS}
        self.baseline = self.counters()
        self.baseline_per_replica = [0.0] * NUM_REPLICAS
        self.baseline_per_replica = self.requests_per_replica()

    def counters(self) -> dict[str, float]:
        """The engines' own counters, summed over replicas, since the last rebase()."""
        totals = {name: sum(metric_sum(r.url, name) for r in self.replicas) for name in COUNTERS}
        return {name: totals[name] - self.baseline[name] for name in COUNTERS}

    def requests_per_replica(self) -> list[float]:
        """Requests each replica finished since the last rebase(): where the router sent them."""
        done = [metric_sum(r.url, "vllm:request_success_total") for r in self.replicas]
        return [n - b for n, b in zip(done, self.baseline_per_replica, strict=True)]

    def stop(self) -> None:
        for p in [self.router, *self.replicas]:
            p.kill()


@contextlib.contextmanager
def running_fleet(policy: str, sizing: KvSizing, logs: Path) -> Iterator[Fleet]:
    fleet = Fleet(policy, sizing, logs)
    try:
        yield fleet.start()
    finally:
        fleet.stop()


def _serve_args(sizing: KvSizing) -> list[str]:
    return [
        "serve",
        "--model",
        MODEL,
        "--port",
        str(free_port()),
        "--num-kv-blocks",
        str(sizing.num_kv_blocks),
        "--block-size",
        str(sizing.block_size),
        "--num-threads",
        "1",
        "--max-model-len",
        str(sizing.max_model_len),
        "--log-level",
        "warning",
    ]


def _route_args(policy: str, replicas: list[str]) -> list[str]:
    args = [
        "route",
        "--model",
        MODEL,
        "--port",
        str(free_port()),
        "--policy",
        policy,
        "--log-level",
        "warning",
        "--predicted-cached-tokens-header",  # router_client.py reads it
    ]
    for url in replicas:
        args += ["--replica", url]
    return args


async def _warm_up(urls: list[str]) -> None:
    body = rc.request_body([{"role": "user", "content": "Warm-up: say hello."}], 4)
    for url in urls:
        (outcome,) = await rc.sequential(url, [body])
        assert outcome.status == "ok", outcome.detail


def calibrate(replica_url: str, encode: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Unloaded TTFTs on one idle replica: a cold system prompt, then warm follow-ups."""
    (system,) = system_prompts(encode, random.Random(args.seed + 1), 1, args.system_prompt_tokens)
    system = "Calibration. " + system  # shares no block with any tenant's prompt
    bodies = [
        rc.request_body(_calibration_chat(system, k), args.max_tokens)
        for k in range(1 + args.calibration_hits)
    ]
    outcomes = asyncio.run(rc.sequential(replica_url, bodies))
    assert all(o.status == "ok" and o.ttft_s is not None for o in outcomes), [
        o.detail for o in outcomes
    ]
    hits = [o.ttft_s for o in outcomes[1:] if o.ttft_s is not None]
    return {
        "miss_ttft_ms": 1000 * (outcomes[0].ttft_s or 0.0),
        "hit_ttfts_ms": [1000 * t for t in hits],
        "hit_cached_tokens": [o.num_cached_tokens for o in outcomes[1:]],
    }


def _calibration_chat(system: str, k: int) -> Messages:
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Calibration question {k}: what is a prefix?"},
    ]


def measure_peak(
    turns: list[ChatTurn], sizing: KvSizing, encode: Any, args: argparse.Namespace, logs: Path
) -> dict[str, Any]:
    with running_fleet("round-robin", sizing, logs) as fleet:
        calibration = calibrate(fleet.replicas[0].url, encode, args)
        fleet.rebase()
        peak_turns = turns[: args.peak_requests]
        outcomes, duration_s = asyncio.run(
            rc.closed_loop(fleet.router.url, peak_turns, args.peak_concurrency, args.max_tokens)
        )
        counters = fleet.counters()
    ok = sum(1 for o in outcomes if o.status == "ok")
    return {
        "calibration": calibration,
        "policy": "round-robin",
        "num_requests": len(peak_turns),
        "concurrency": args.peak_concurrency,
        "num_ok": ok,
        "duration_s": duration_s,
        "req_per_s": ok / duration_s,
        "engine_hit_rate": counters["vllm:prefix_cache_hits_total"]
        / max(1.0, counters["vllm:prefix_cache_queries_total"]),
        "errors": sorted({o.detail for o in outcomes if o.detail})[:5],
    }


def run_policy(
    policy: str,
    turns: list[ChatTurn],
    arrivals_s: list[float],
    sizing: KvSizing,
    target_s: float,
    args: argparse.Namespace,
    logs: Path,
) -> dict[str, Any]:
    with running_fleet(policy, sizing, logs) as fleet:
        outcomes, duration_s = asyncio.run(
            rc.open_loop(fleet.router.url, turns, arrivals_s, args.max_tokens)
        )
        time.sleep(1.0)  # the engines' counters are updated at the end of a step
        counters = fleet.counters()
        per_replica = fleet.requests_per_replica()
    row = policy_row(
        policy, outcomes, duration_s, counters, per_replica, target_s, turns, sizing.prefix_blocks
    )
    return {**row, **routing_stats(outcomes, turns, [r.url for r in fleet.replicas])}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    return router_smollm2_args.parse_args(argv, description=__doc__)


@dataclass(frozen=True)
class Workload:
    shape: WorkloadShape
    turns: list[ChatTurn]
    sizing: KvSizing
    encode: Any  # the model's tokenizer's encode: text -> token ids


def prepare_workload(args: argparse.Namespace) -> Workload:
    """The workload's chat turns, rendered with the model's chat template, and the KV pool size."""
    from pagedock.protocol import ChatCompletionRequest
    from pagedock.text.prompt_renderer import render_chat
    from router.kv.prompt_hasher import load_tokenizer

    tokenizer = load_tokenizer(MODEL)
    assert tokenizer is not None

    def render(messages: Messages) -> list[int]:
        return render_chat(
            tokenizer, ChatCompletionRequest.model_validate({"model": MODEL, "messages": messages})
        ).token_ids

    shape = WorkloadShape(args.tenants, args.conversations, args.turns, args.system_prompt_tokens)
    turns = chat_turns(tokenizer.encode, render, shape, args.seed)
    sizing = kv_sizing(
        turns,
        common_prefix_tokens(turns),
        args.max_tokens,
        max(1, args.peak_concurrency // NUM_REPLICAS),
    )
    return Workload(shape, turns, sizing, tokenizer.encode)


def goodput_target_s(args: argparse.Namespace, peak: dict[str, Any]) -> float:
    """--ttft-target-ms, or by default 2x the median unloaded hit TTFT of the calibration."""
    if args.ttft_target_ms:
        return args.ttft_target_ms / 1000
    return ttft_target_s([t / 1000 for t in peak["calibration"]["hit_ttfts_ms"]])


def run_policies(
    workload: Workload, args: argparse.Namespace, logs: Path, started: float
) -> tuple[dict[str, Any], float, float, list[dict[str, Any]]]:
    """(peak, rate, target_s, rows): the round-robin peak, then each policy at --load x it."""
    turns, sizing = workload.turns, workload.sizing
    peak = measure_peak(turns, sizing, workload.encode, args, logs)
    target_s = goodput_target_s(args, peak)
    rate = args.load * peak["req_per_s"]
    print(
        f"peak {peak['req_per_s']:.2f} req/s (round-robin, closed loop); "
        f"arrivals at {rate:.2f} req/s; TTFT target {1000 * target_s:.0f} ms "
        f"[{time.time() - started:.0f} s]",
        flush=True,
    )
    arrivals = poisson_arrivals(rate, len(turns), args.seed)
    rows = []
    for policy in args.policies.split(","):
        rows.append(run_policy(policy, turns, arrivals, sizing, target_s, args, logs))
        print(
            f"{policy}: TTFT p90 {rows[-1]['ttft_p90_ms']:.0f} ms, "
            f"hit rate {rows[-1]['hit_rate']:.1%} [{time.time() - started:.0f} s]",
            flush=True,
        )
    return peak, rate, target_s, rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    workload = prepare_workload(args)
    started, load_before = time.time(), os.getloadavg()
    print(
        f"{len(workload.turns)} requests; {workload.sizing.num_kv_blocks} KV blocks per replica; "
        f"load average {load_before}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="router-smollm2-") as tmp:
        peak, rate, target_s, rows = run_policies(workload, args, Path(tmp), started)
    load = {"before": load_before, "after": os.getloadavg()}
    shape, sizing, turns = workload.shape, workload.sizing, workload.turns
    write_results(
        args, shape, sizing, turns, peak, rate, target_s, rows, time.time() - started, load
    )
    return 0
