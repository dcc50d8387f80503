"""Router benchmark: prefix-aware vs round-robin vs least-loaded on a multi-tenant workload, and the
router's own added latency.

    python benchmarks/router_bench.py [--tenants 8 --turns 16 --concurrency 4]
    python benchmarks/router_bench.py --model smollm2-135m-instruct   # `make bench-router`

`--model smollm2-135m-instruct` runs the real-model scenario instead (benchmarks/router_smollm2.py:
2 pinned single-thread replicas, open-loop arrivals at 80 % of the measured peak; `--help` with it
lists its own flags). What follows is the tiny-model scenario.

Part 1 — 3 `pagedock serve` replicas of a tiny random llama on loopback (restarted per policy, so
every policy starts from empty caches) behind `pagedock route --policy P`; the workload is
`tenants` distinct 10-block system prompts x `turns` short user turns in random order, streamed.
Reports, per policy: prefix-cache hit rate (the engines' own counters) and its share of the best
any routing could reach, throughput, client-side TTFT p50 / p99. Writes a table and a PNG to
benchmarks/results/.

Part 2 (alone: --overhead-only) — a no-op replica (answers at once) measured directly and through
the router, from one client over warm keep-alive connections, the two in turn request by request:
p50 / p99 of each; the difference of the p50s is the router's added latency (target < 2 ms).
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

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.router.live import (  # noqa: E402
    Process,
    free_port,
    metric_sum,
    replica_process,
    router_process,
    wait_synced,
)
from tests.router.workload import Turn, best_possible_hit_tokens, tenant_turns  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
POLICIES = ("prefix-aware", "round-robin", "least-loaded")
NUM_KV_BLOCKS = 60


def run_policy(
    policy: str, model_dir: Path, logs: Path, turns: list[Turn], concurrency: int
) -> dict[str, Any]:
    replicas = [replica_process(model_dir, logs, NUM_KV_BLOCKS) for _ in range(3)]
    router: Process | None = None
    try:
        for r in replicas:
            r.start()
        for r in replicas:
            r.wait_ready()
        router = (
            router_process(model_dir, logs, [r.url for r in replicas], "--policy", policy)
            .start()
            .wait_ready()
        )
        wait_synced(router, [r.url for r in replicas])
        started = time.perf_counter()
        ttfts, tokens = asyncio.run(stream_all(router.url, turns, concurrency))
        elapsed = time.perf_counter() - started
        time.sleep(0.6)
        hits = sum(metric_sum(r.url, "vllm:prefix_cache_hits_total") for r in replicas)
        queries = sum(metric_sum(r.url, "vllm:prefix_cache_queries_total") for r in replicas)
    finally:
        for p in [router, *replicas]:
            if p is not None:
                p.kill()
    best = best_possible_hit_tokens(turns)
    return {
        "policy": policy,
        "hit_rate": hits / queries,
        "of_best": hits / best,
        "req_per_s": len(turns) / elapsed,
        "tok_per_s": tokens / elapsed,
        "ttft_p50_ms": 1000 * percentile(ttfts, 50),
        "ttft_p99_ms": 1000 * percentile(ttfts, 99),
    }


async def stream_all(url: str, turns: list[Turn], concurrency: int) -> tuple[list[float], int]:
    semaphore = asyncio.Semaphore(concurrency)
    ttfts: list[float] = []
    num_tokens = 0
    async with httpx.AsyncClient(timeout=120.0) as client:

        async def one(turn: Turn) -> None:
            nonlocal num_tokens
            body = {**turn.body, "stream": True, "max_tokens": 8, "ignore_eos": True}
            async with semaphore:
                sent = time.perf_counter()
                first: float | None = None
                async with client.stream(
                    "POST", url + "/v1/chat/completions", json=body
                ) as response:
                    assert response.status_code == 200, await response.aread()
                    async for line in response.aiter_lines():
                        if not line.startswith("data: ") or line == "data: [DONE]":
                            continue
                        delta = json.loads(line[6:])["choices"][0]["delta"].get("content")
                        if delta:
                            first = first or time.perf_counter()
                            num_tokens += 1
                ttfts.append((first or time.perf_counter()) - sent)

        await asyncio.gather(*(one(t) for t in turns))
    return ttfts, num_tokens


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# ---- part 2: the router's own latency -----------------------------------------------------------


NOOP_REPLICA = """
import json, sys, uuid
from fastapi import FastAPI, Response
from fastapi.responses import StreamingResponse
import asyncio, uvicorn
app = FastAPI()
BODY = json.dumps({"id": "cmpl-noop", "object": "text_completion", "created": 0, "model": "noop",
    "choices": [{"index": 0, "text": "ok", "finish_reason": "length"}],
    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})
@app.post("/v1/completions")
async def completions() -> Response:
    return Response(BODY, media_type="application/json")
@app.get("/health")
async def health() -> dict:
    return {"status": "ok"}
@app.get("/metrics")
async def metrics() -> Response:
    return Response("", media_type="text/plain")
@app.get("/v1/kv/events")
async def events() -> StreamingResponse:
    async def lines():
        snapshot = {
            "type": "snapshot", "instance_id": uuid.uuid4().hex, "seq": -1, "block_size": 16,
            "block_hashes": [], "root_hash": "00" * 32,
        }
        yield json.dumps(snapshot) + "\\n"
        while True:
            await asyncio.sleep(10)
            heartbeat = {"type": "heartbeat", "instance_id": snapshot["instance_id"], "seq": -1}
            yield json.dumps(heartbeat) + "\\n"
    return StreamingResponse(lines(), media_type="application/x-ndjson")
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
"""


def router_overhead(model_dir: Path, logs: Path, num_requests: int) -> dict[str, float]:
    """Latency of the same request sent directly to a no-op replica and through the router."""
    import subprocess

    port = free_port()
    noop = subprocess.Popen([sys.executable, "-c", NOOP_REPLICA, str(port)])
    replica_url = f"http://127.0.0.1:{port}"
    router = router_process(model_dir, logs, [replica_url])
    try:
        router.start().wait_ready()
        wait_synced(router, [replica_url])
        body = {
            "prompt": "a prompt of about the size people send to a router " * 8,
            "max_tokens": 1,
        }
        direct, routed = timed_posts([replica_url, router.url], body, num_requests)
    finally:
        router.kill()
        noop.kill()
        noop.wait()
    return {
        "direct_p50_ms": percentile(direct, 50),
        "direct_p99_ms": percentile(direct, 99),
        "routed_p50_ms": percentile(routed, 50),
        "routed_p99_ms": percentile(routed, 99),
        "added_p50_ms": percentile(routed, 50) - percentile(direct, 50),
    }


def timed_posts(
    urls: list[str], body: dict[str, Any], num_requests: int, num_warmup: int = 50
) -> list[list[float]]:
    """Milliseconds per request to each of `urls`, sequential, one warm keep-alive connection per
    URL from one client. The URLs take turns request by request, so whatever else the machine is
    doing meanwhile weighs on every URL alike."""
    content = json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    latencies: list[list[float]] = [[] for _ in urls]
    with httpx.Client(timeout=10.0) as client:
        for i in range(num_warmup + num_requests):
            for url, samples in zip(urls, latencies, strict=True):
                started = time.perf_counter()
                response = client.post(url + "/v1/completions", content=content, headers=headers)
                elapsed = time.perf_counter() - started
                assert response.status_code == 200, response.text
                if i >= num_warmup:  # warm-up: connections, caches, the router's first requests
                    samples.append(1000 * elapsed)
    return latencies


# ---- report -------------------------------------------------------------------------------------


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| policy | prefix hit rate | of best possible | req/s | output tok/s | TTFT p50 ms "
        "| TTFT p99 ms |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['policy']} | {r['hit_rate']:.1%} | {r['of_best']:.1%} | {r['req_per_s']:.1f} "
            f"| {r['tok_per_s']:.0f} | {r['ttft_p50_ms']:.1f} | {r['ttft_p99_ms']:.1f} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["policy"] for r in rows]
    panels = [
        ("of_best", "prefix hits / best possible"),
        ("req_per_s", "throughput (req/s)"),
        ("ttft_p50_ms", "TTFT p50 (ms)"),
        ("ttft_p99_ms", "TTFT p99 (ms)"),
    ]
    fig, axes = plt.subplots(1, len(panels), figsize=(16, 4))
    for ax, (key, title) in zip(axes, panels, strict=True):
        ax.bar(names, [r[key] for r in rows], color=["tab:green", "tab:gray", "tab:blue"])
        ax.set_title(title)
        ax.tick_params(axis="x", rotation=20)
    fig.suptitle("pagedock router: 3 tiny-model replicas, multi-tenant workload")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def overhead_report(overhead: dict[str, float], num_requests: int) -> str:
    o = overhead
    return (
        f"router added latency (no-op replica, {num_requests} sequential requests each way, "
        f"interleaved, warm connections): direct p50 {o['direct_p50_ms']:.2f} ms / "
        f"p99 {o['direct_p99_ms']:.2f} ms, "
        f"through the router p50 {o['routed_p50_ms']:.2f} ms / p99 {o['routed_p99_ms']:.2f} ms; "
        f"added p50 {o['added_p50_ms']:.2f} ms (target < 2 ms)\n"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    model = argparse.ArgumentParser(add_help=False)
    model.add_argument("--model", default="tiny")
    if model.parse_known_args(argv)[0].model != "tiny":
        from benchmarks.router_smollm2 import main as smollm2_main

        return smollm2_main(argv)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--model",
        default="tiny",
        choices=["tiny", "smollm2-135m-instruct"],
        help="tiny: 3 tiny random replicas (this scenario); "
        "smollm2-135m-instruct: the real-model scenario",
    )
    parser.add_argument("--tenants", type=int, default=8)
    parser.add_argument("--turns", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--overhead-requests", type=int, default=500)
    parser.add_argument(
        "--overhead-only", action="store_true", help="only part 2 (prints, writes nothing)"
    )
    args = parser.parse_args(argv)
    from pagedock.text.tokenizer import Tokenizer
    from tests.tiny_model import make_tiny_llama_dir

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_tiny_llama_dir(Path(tmp) / "tiny")
        logs = Path(tmp)
        if args.overhead_only:
            print(
                overhead_report(
                    router_overhead(model_dir, logs, args.overhead_requests), args.overhead_requests
                )
            )
            return 0
        turns = tenant_turns(Tokenizer.from_hf_dir(model_dir), 11, args.tenants, args.turns)
        rows = [run_policy(p, model_dir, logs, turns, args.concurrency) for p in POLICIES]
        overhead = router_overhead(model_dir, logs, args.overhead_requests)
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = table(rows) + "\n\n" + overhead_report(overhead, args.overhead_requests)
    print(report)
    (RESULTS / "router_bench.md").write_text(report)
    plot(rows, RESULTS / "router_bench.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
