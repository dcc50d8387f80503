"""Tenants sharing one replica (issue 37, docs/tenants.md): fair sharing and priority bands,
measured as the clients see them.

    python -m benchmarks.tenant_fairness [--duration-s 45] [--repetitions 2]

One `pagedock serve` (SmolLM2-135M, one torch thread, pinned to the first usable core) behind
`pagedock route` with a tenants file (the router and this client on the other core). Every arm
starts a fresh router; the engine stays. Requests: random token ids, never the same twice in a
run (no arm finds another's prompts cached), --prompt-tokens in, --max-tokens out (ignore_eos),
streamed; arrival times seeded per repetition and tenant (every arm of a repetition gets the same
schedule).

1. capacity: requests/s, closed-loop at --slots in flight, through a router without flow control.
2. fairness: tenant B at --b-share x capacity, tenant A at ten times B's rate (past saturation),
   Poisson arrivals. Arms, interleaved per repetition:
   b_alone (B only), vtc and fcfs (both tenants; --max-inflight-per-replica --slots, the router's
   --fairness). Reported: B's TTFT p99 over B alone's, and how A's extra load was refused.
3. priority: tenant chat (priority 0) at --chat-share x capacity, and a flood of tenant batch
   (priority 10) closed-loop at 2 x --slots. Arms: chat_alone, bands. Reported: chat's TTFT p99
   over chat alone's, and batch's longest TTFT against --flow-starvation-s (no band starves).

Writes benchmarks/results/tenant_fairness.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks import tenant_client as tc
from benchmarks.machine import git_commit, machine_info
from tests.router.live import ROOT, Process, free_port

MODEL = "smollm2-135m-instruct"
RESULTS = ROOT / "benchmarks" / "results" / "tenant_fairness.json"
INTERRUPTED = "pagedock:interrupted_steps_total"
"""The engine's steps cut short for a newcomer (engine/core/step_interrupt.py), per arm."""
TENANTS = {
    "priority_classes": {"interactive": 0, "batch": 10},
    "tenants": [
        {"name": "a", "api_keys": ["sk-a"]},
        {"name": "b", "api_keys": ["sk-b"]},
        {"name": "chat", "api_keys": ["sk-chat"], "priority": "interactive"},
        {"name": "batch", "api_keys": ["sk-batch"], "priority": "batch"},
    ],
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration-s", type=float, default=60.0)
    p.add_argument("--repetitions", type=int, default=2)
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--slots", type=int, default=8, help="--max-inflight-per-replica")
    p.add_argument("--b-share", type=float, default=0.15)
    p.add_argument("--chat-share", type=float, default=0.15)
    p.add_argument("--flow-queue-ttl-s", type=float, default=30.0)
    p.add_argument("--flow-starvation-s", type=float, default=5.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--scenarios",
        nargs="+",
        choices=("fairness", "priority"),
        default=["fairness", "priority"],
        help="which of the two to run (each gets its arms, interleaved)",
    )
    p.add_argument(
        "--engine-flag",
        action="append",
        default=[],
        help="a `pagedock serve` flag for the engine (repeat: --engine-flag=--max-step-ms=400)",
    )
    p.add_argument(
        "--logs",
        type=Path,
        help="keep the engine's and routers' logs in this folder (default: a temporary one); "
        "with --engine-flag=--log-level=info the engine logs each request's TTFT and tenant",
    )
    p.add_argument("--out", type=Path, default=RESULTS)
    return p.parse_args()


class Bench:
    def __init__(self, args: argparse.Namespace, logs: Path) -> None:
        self.args = args
        self.logs = logs
        cores = sorted(os.sched_getaffinity(0))
        self.engine_cores = {cores[0]}
        self.client_cores = set(cores[1:]) or {cores[0]}
        self.tenants_file = logs / "tenants.json"
        self.tenants_file.write_text(json.dumps(TENANTS))
        serve = ["serve", "--model", MODEL, "--port", str(free_port()), "--num-threads", "1"]
        serve += ["--scheduling-policy", "priority", "--log-level", "warning", *args.engine_flag]
        self.engine = Process(serve, logs / "engine.log", cpus=self.engine_cores)
        self.prompts = random.Random(args.seed)
        """Every prompt of the run from one stream: none is sent twice."""

    def router(self, name: str, **flags: Any) -> Process:
        args = ["route", "--model", MODEL, "--port", str(free_port()), "--log-level", "warning"]
        args += ["--replica", self.engine.url, "--tenants", str(self.tenants_file)]
        args += ["--flow-queue-ttl-s", str(self.args.flow_queue_ttl_s)]
        args += ["--flow-starvation-s", str(self.args.flow_starvation_s)]
        for flag, value in flags.items():
            args += [f"--{flag.replace('_', '-')}", str(value)]
        return Process(args, self.logs / f"router-{name}.log", cpus=self.client_cores)

    def body(self) -> dict[str, Any]:
        return tc.body_of(tc.prompt(self.prompts, self.args.prompt_tokens), self.args.max_tokens)

    def schedule(self, seed: int, rate: float) -> list[tuple[float, dict[str, Any]]]:
        times = tc.arrivals(random.Random(seed), rate, self.args.duration_s)
        return [(t, self.body()) for t in times]


async def capacity(bench: Bench) -> float:
    router = bench.router("capacity").start().wait_ready()
    try:
        bodies = [bench.body() for _ in range(bench.args.slots * 8)]
        async with _client() as client:
            await tc.closed_loop(client, router.url, "sk-a", "a", bodies[:4], 2)  # warm-up
            started = time.perf_counter()
            sent = await tc.closed_loop(client, router.url, "sk-a", "a", bodies, bench.args.slots)
            elapsed = time.perf_counter() - started
        assert all(s.status == 200 for s in sent), tc.summary(sent)
        return len(sent) / elapsed
    finally:
        router.kill(signal.SIGTERM)


async def fairness_arm(bench: Bench, arm: str, rate_b: float, rep: int) -> dict[str, Any]:
    flags = {"fairness": "fcfs" if arm == "fcfs" else "vtc"}
    flags["max_inflight_per_replica"] = str(bench.args.slots)
    router = bench.router(f"{arm}-{rep}", **flags).start().wait_ready()
    seed = bench.args.seed + 1000 * rep
    try:
        async with _client() as client:
            cuts = await tc.counter_total(client, bench.engine.url, INTERRUPTED)
            sends = [tc.open_loop(client, router.url, "sk-b", "b", bench.schedule(seed, rate_b))]
            if arm != "b_alone":
                schedule_a = bench.schedule(seed + 1, rate_b * 10)
                sends.append(tc.open_loop(client, router.url, "sk-a", "a", schedule_a))
            results = await asyncio.gather(*sends)
            cuts = await tc.counter_total(client, bench.engine.url, INTERRUPTED) - cuts
            waits = await tc.router_waits(client, router.url, "b")
    finally:
        router.kill(signal.SIGTERM)
    row = {"arm": arm, "repetition": rep, "b": tc.summary(results[0]), "steps_cut": int(cuts)}
    row["b_router_wait"] = waits
    if len(results) > 1:
        row["a"] = tc.summary(results[1])
    return row


async def priority_arm(bench: Bench, arm: str, rate_chat: float, rep: int) -> dict[str, Any]:
    flags = {"max_inflight_per_replica": str(bench.args.slots)}
    router = bench.router(f"{arm}-{rep}", **flags).start().wait_ready()
    seed = bench.args.seed + 1000 * rep + 7
    try:
        async with _client() as client:
            cuts = await tc.counter_total(client, bench.engine.url, INTERRUPTED)
            schedule = bench.schedule(seed, rate_chat)
            chat = asyncio.ensure_future(
                tc.open_loop(client, router.url, "sk-chat", "chat", schedule)
            )
            batch: list[tc.Sent] = []
            if arm == "bands":
                stop = asyncio.Event()
                chat.add_done_callback(lambda _: stop.set())
                bodies = [bench.body() for _ in range(int(bench.args.duration_s * 100))]
                concurrency = 2 * bench.args.slots
                batch = await tc.closed_loop(
                    client, router.url, "sk-batch", "batch", bodies, concurrency, stop
                )
            chat_sent = await chat
            cuts = await tc.counter_total(client, bench.engine.url, INTERRUPTED) - cuts
            waits = await tc.router_waits(client, router.url, "chat")
    finally:
        router.kill(signal.SIGTERM)
    row = {"arm": arm, "repetition": rep, "chat": tc.summary(chat_sent), "steps_cut": int(cuts)}
    row["chat_router_wait"] = waits
    if batch:
        row["batch"] = tc.summary(batch)
    return row


def ratio(rows: list[dict[str, Any]], arm: str, base: str, who: str) -> dict[str, Any]:
    """Per repetition, `who`'s TTFT p99 in `arm` over the same repetition's `base` arm."""
    by = {(r["arm"], r["repetition"]): r for r in rows}
    ratios = [
        by[(arm, rep)][who]["ttft_p99_s"] / by[(base, rep)][who]["ttft_p99_s"]
        for (a, rep) in by
        if a == arm
        and "ttft_p99_s" in by[(arm, rep)][who]
        and "ttft_p99_s" in by.get((base, rep), {}).get(who, {})
    ]
    if not ratios:
        return {"median": None, "per_repetition": []}
    return {
        "median": round(statistics.median(ratios), 3),
        "min": round(min(ratios), 3),
        "max": round(max(ratios), 3),
        "per_repetition": [round(r, 3) for r in ratios],
    }


async def run(args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    bench = Bench(args, logs)
    bench.engine.start().wait_ready(180)
    os.sched_setaffinity(0, bench.client_cores)  # this client beside the router, off the engine
    try:
        peak = await capacity(bench)
        rows = []
        for rep in range(args.repetitions):
            for arm in ("b_alone", "vtc", "fcfs") if "fairness" in args.scenarios else ():
                rows.append(await fairness_arm(bench, arm, args.b_share * peak, rep))
                print(json.dumps(rows[-1]), flush=True)
            for arm in ("chat_alone", "bands") if "priority" in args.scenarios else ():
                rows.append(await priority_arm(bench, arm, args.chat_share * peak, rep))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        bench.engine.kill(signal.SIGTERM)
    return {
        "capacity_requests_per_s": round(peak, 3),
        "b_ttft_p99_vs_alone": {arm: ratio(rows, arm, "b_alone", "b") for arm in ("vtc", "fcfs")},
        "chat_ttft_p99_vs_alone": ratio(rows, "bands", "chat_alone", "chat"),
        "rows": rows,
    }


def main() -> None:
    args = parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tenant-bench-") as tmp:
        logs = args.logs or Path(tmp)
        logs.mkdir(parents=True, exist_ok=True)
        figures = asyncio.run(run(args, logs))
    result = {
        "scenario": "tenant_fairness",
        "command": " ".join([Path(sys.executable).name, "-m", "benchmarks.tenant_fairness"]),
        "git_commit": git_commit(ROOT),
        "machine": machine_info(),
        "load_average_at_start": load_before,
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "tenants": TENANTS,
        "wall_s": round(time.monotonic() - started, 1),
        **figures,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))


def _client() -> httpx.AsyncClient:
    # NOTE: idle connections expire here before the router's keep-alive timeout (5 s) closes
    # them: at equal timeouts a request sent on a connection the server is closing fails with
    # RemoteProtocolError (one in 182 did), which is the client's race, not a refusal.
    limits = httpx.Limits(max_connections=512, max_keepalive_connections=512, keepalive_expiry=2.0)
    return httpx.AsyncClient(timeout=httpx.Timeout(120.0), limits=limits)


if __name__ == "__main__":
    main()
