"""Prefix affinity through vLLM's own router (`vllm-router`, PyPI) in front of two pagedock
engines (issue 39): its round_robin, cache_aware and kv_aware policies, and pagedock's own
router (`pagedock route --policy prefix-aware`) for reference, on one shared-prefix workload.

    python benchmarks/vllm_router_affinity.py                       # the real run (clean commit)
    python benchmarks/vllm_router_affinity.py --repetitions 1 --allow-dirty \
        --output /tmp/vllm_router_affinity.json                     # a check

Each run: two fresh `pagedock serve` engines of the tiny random llama (tests/tiny_model.py: hit
rate does not depend on model speed), each publishing vLLM's ZMQ KV events (with replay) and
holding --num-kv-blocks blocks, about 5 of the 8 groups' prefixes, so a policy that sends every
group to both engines evicts them; then the router of the arm, then the workload: --groups
distinct system prompts of --prefix-blocks blocks x --turns short user turns each, in random
order (tests/router/workload.py, seed --seed + repetition, the same for every arm of a
repetition), chat completions of 2 tokens, closed loop at --concurrency. Arms run interleaved
(A B C D A B C D ...), fresh processes each time. kv_aware starts once its log shows a subscriber
on each engine's events.

Reported per arm (median and range over the repetitions): prefix hit rate (cached prompt tokens
over prompt tokens, from each response's usage; the engines' own vllm:prefix_cache_* counters
beside it), its share of the best any routing could reach on the workload, the share of
follow-ups (every request after its group's first) whose cached tokens cover all the blocks it
shares with an earlier request of its group, i.e. that landed on a replica holding its prefix,
and requests per replica (the engines' vllm:request_success_total). Writes
benchmarks/results/vllm_router_affinity_<commit>.json; a tree with uncommitted changes is
refused unless --allow-dirty (its commit is then marked `+dirty`: a result not to quote).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.machine import git_commit  # noqa: E402
from benchmarks.quality_nll import check_commit  # noqa: E402
from benchmarks.repetitions import interleaved_order  # noqa: E402
from benchmarks.result_header import ResultHeader  # noqa: E402
from benchmarks.router_workload import common_prefix_length  # noqa: E402
from benchmarks.vllm_router_fleet import EngineEvents, VllmRouter  # noqa: E402
from tests.eventually import eventually_sync  # noqa: E402
from tests.router.live import (  # noqa: E402
    Process,
    free_port,
    metric_sum,
    replica_process,
    router_process,
    vllm_events,
    wait_synced,
)
from tests.router.workload import Turn, best_possible_hit_tokens, send_all, tenant_turns  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
ARMS = ("round_robin", "cache_aware", "kv_aware", "pagedock prefix-aware")
BLOCK_SIZE = 16
MODEL = "tiny"


def start_engines(args: argparse.Namespace) -> tuple[list[Process], list[EngineEvents]]:
    engines = [replica_process(args.model_dir, args.log_dir, args.num_kv_blocks) for _ in range(2)]
    events = []
    for engine in engines:
        events_port, replay_port = (int(p) for p in vllm_events(engine).split(":"))
        events.append(EngineEvents(engine.url, events_port, replay_port))
    for engine in engines:
        engine.start()
    for engine in engines:
        engine.wait_ready()
    return engines, events


def start_router(
    arm: str, engines: list[Process], events: list[EngineEvents], args: argparse.Namespace
) -> Process | VllmRouter:
    urls = [e.url for e in engines]
    if arm.startswith("pagedock"):
        ours = router_process(args.model_dir, args.log_dir, urls, "--policy", arm.split()[-1])
        ours.start().wait_ready(timeout_s=60)
        wait_synced(ours, urls)
        return ours
    log = args.log_dir / f"vllm-router-{arm}-{time.monotonic_ns()}.log"
    router = VllmRouter(arm, urls, MODEL, log, free_port(), free_port(), events, BLOCK_SIZE)
    router.start().wait_ready()
    if arm == "kv_aware":  # a subscriber on each engine before the first event is published
        eventually_sync(
            lambda: all(f"kv_index subscriber for {u} " in router.log_text() for u in urls),
            timeout=30,
            what=lambda: router.log_text()[-2000:],
        )
    return router


def run_arm(arm: str, repetition: int, args: argparse.Namespace) -> dict[str, Any]:
    turns = tenant_turns(
        args.tokenizer, args.seed + repetition, args.groups, args.turns, args.prefix_blocks
    )
    engines: list[Process] = []
    router: Process | VllmRouter | None = None
    try:
        engines, events = start_engines(args)
        router = start_router(arm, engines, events, args)
        bodies = [{**t.body, "model": MODEL} for t in turns]
        started = time.perf_counter()
        responses = asyncio.run(send_all(router.url, bodies, args.concurrency))
        elapsed = time.perf_counter() - started
        bad = [r.text for r in responses if r.status_code != 200]
        assert not bad, f"{arm}: {len(bad)} failed requests, e.g. {bad[0][:500]}"
        counts = engine_counts(engines, len(turns))
    finally:
        for p in [router, *engines]:
            if p is not None:
                p.kill()
    usages = [r.json()["usage"] for r in responses]
    return {"arm": arm, "repetition": repetition, "elapsed_s": round(elapsed, 2)} | figures(
        turns, usages, counts
    )


def engine_counts(engines: list[Process], num_requests: int) -> dict[str, Any]:
    """Requests per engine and its prefix-cache counters, once every request is counted."""

    def served() -> list[float]:
        per_engine = [metric_sum(e.url, "vllm:request_success_total") for e in engines]
        return per_engine if sum(per_engine) >= num_requests else []

    per_engine = eventually_sync(served, timeout=30, what="the engines counting every request")
    hits = sum(metric_sum(e.url, "vllm:prefix_cache_hits_total") for e in engines)
    queries = sum(metric_sum(e.url, "vllm:prefix_cache_queries_total") for e in engines)
    return {
        "requests_per_replica": [int(n) for n in per_engine],
        "engine_hit_rate": hits / queries if queries else 0.0,
    }


def figures(turns: list[Turn], usages: list[dict[str, Any]], counts: dict[str, Any]) -> dict:
    cached = [u["prompt_tokens_details"]["cached_tokens"] for u in usages]
    prompt = sum(u["prompt_tokens"] for u in usages)
    on_holder = []
    for i, turn in enumerate(turns):
        earlier = [t.token_ids for t in turns[:i] if t.tenant == turn.tenant]
        if not earlier:
            continue  # the group's first request: nobody holds its prefix yet
        shared = max(common_prefix_length(turn.token_ids, e) for e in earlier)
        shared = min(shared, len(turn.token_ids) - 1) // BLOCK_SIZE * BLOCK_SIZE
        on_holder.append(cached[i] >= shared)
    return {
        "hit_rate": sum(cached) / prompt,
        "of_best": sum(cached) / best_possible_hit_tokens(turns, BLOCK_SIZE),
        "follow_ups_on_holder": sum(on_holder) / len(on_holder),
        "num_follow_ups": len(on_holder),
        "prompt_tokens": prompt,
        "cached_tokens": sum(cached),
        **counts,
    }


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        out[arm] = {
            key: {
                "median": statistics.median(r[key] for r in mine),
                "min": min(r[key] for r in mine),
                "max": max(r[key] for r in mine),
            }
            for key in ("hit_rate", "engine_hit_rate", "of_best", "follow_ups_on_holder")
        } | {"requests_per_replica": [r["requests_per_replica"] for r in mine]}
    return out


def table(summary: dict[str, Any]) -> str:
    lines = [
        "| arm | hit rate | of best | follow-ups on holder | requests per replica |",
        "|---|---|---|---|---|",
    ]
    for arm, s in summary.items():
        shown = arm if arm.startswith("pagedock") else f"vllm-router {arm}"
        per_replica = " ".join("/".join(map(str, c)) for c in s["requests_per_replica"])
        cells = [_cell(s[k]) for k in ("hit_rate", "of_best", "follow_ups_on_holder")]
        lines.append(f"| {shown} | {' | '.join(cells)} | {per_replica} |")
    return "\n".join(lines)


def _cell(figure: dict[str, float]) -> str:
    return f"{figure['median']:.1%} ({figure['min']:.1%}-{figure['max']:.1%})"


def settings_of(args: argparse.Namespace) -> dict[str, Any]:
    engine_args = replica_process(args.model_dir, args.log_dir, args.num_kv_blocks, port=1).args
    engine_args[engine_args.index("--port") + 1] = "<port>"
    return {
        "arms": list(ARMS),
        "model": "tests/tiny_model.py make_tiny_llama_dir (2 layers, hidden 64, vocab 512)",
        "engines": 2,
        "engine_args": [{str(args.model_dir): "<tmp>/tiny"}.get(a, a) for a in engine_args],
        "engine_kv_events": "--kv-events-config zmq, tcp://*:<port>, replay tcp://*:<port>",
        "vllm_router_args": "--policy P --worker-startup-check-interval 1; kv_aware: "
        f"--kv-event-model {MODEL} --kv-event-block-size {BLOCK_SIZE} --kv-event-source "
        "and --kv-event-replay-source per engine (benchmarks/vllm_router_fleet.py)",
        "pagedock_router_args": "pagedock route --policy prefix-aware (tests/router/live.py)",
        "groups": args.groups,
        "turns_per_group": args.turns,
        "prefix_blocks": args.prefix_blocks,
        "block_size": BLOCK_SIZE,
        "num_kv_blocks_per_engine": args.num_kv_blocks,
        "concurrency": args.concurrency,
        "repetitions": args.repetitions,
        "seed": args.seed,
        "request": "POST /v1/chat/completions, max_tokens 2, temperature 0, not streamed",
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--turns", type=int, default=8, help="requests per group")
    parser.add_argument("--prefix-blocks", type=int, default=10)
    parser.add_argument("--num-kv-blocks", type=int, default=60, help="per engine")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--allow-dirty", action="store_true", help="run on uncommitted changes")
    parser.add_argument(
        "--output", type=Path, help="default: results/vllm_router_affinity_<c>.json"
    )
    parser.add_argument("--note", default="")
    return parser.parse_args(argv)


def prepare(args: argparse.Namespace) -> None:
    """The tiny model, its tokenizer and a log folder, on `args`."""
    from pagedock.text.tokenizer import Tokenizer
    from tests.tiny_model import make_tiny_llama_dir

    work = Path(tempfile.mkdtemp(prefix="pagedock-vllm-router-"))
    args.model_dir = make_tiny_llama_dir(work / MODEL)  # served as "tiny", its folder's name
    args.tokenizer = Tokenizer.from_hf_dir(args.model_dir)
    args.log_dir = work / "logs"
    args.log_dir.mkdir()
    print(f"logs: {args.log_dir}", flush=True)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    commit = git_commit(ROOT)
    check_commit(commit, args.allow_dirty)
    header = ResultHeader.begin(commit)
    prepare(args)
    runs = []
    for repetition, arm in interleaved_order(ARMS, args.repetitions):
        runs.append(run_arm(arm, repetition, args))
        print(json.dumps(runs[-1]), flush=True)
    summary = summarize(runs)
    result = {
        **header.finish(
            "prefix affinity through vllm-router in front of two pagedock engines",
            39,
            args.note,
            ("pagedock", "vllm-router", "torch", "httpx", "pyzmq", "msgpack"),
        ),
        "settings": settings_of(args),
        "summary": summary,
        "runs": runs,
    }
    out = args.output or RESULTS / f"vllm_router_affinity_{commit or 'unknown'}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print("\n" + table(summary))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
