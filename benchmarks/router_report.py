"""Results of the SmolLM2 router scenario (benchmarks/router_smollm2.py): one row per policy from
the client's measurements and the engines' counters, written as JSON (every setting, the machine,
the measured peak and the arrival rate), a markdown table and a PNG."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from benchmarks.machine import git_commit, machine_info
from benchmarks.router_client import Outcome
from benchmarks.router_workload import (
    ChatTurn,
    KvSizing,
    WorkloadShape,
    as_dict,
    goodput_share,
    percentile,
)
from tests.router.workload import Turn, best_possible_hit_tokens

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "router_smollm2"
BLOCK_SIZE = 16
_SCENARIO = (
    "routing under load, SmolLM2-135M (benchmarks/router_bench.py --model smollm2-135m-instruct)"
)
_DEFAULT_TARGET_REASONING = (
    "2 x the median TTFT of a prefix-cache hit on an idle replica (peak.calibration): what a "
    "warm tenant's user gets when nothing is queued, with room for one more such prefill ahead "
    "of it"
)
_PINNING = (
    "replica i to usable core i (sched_setaffinity in the child before exec); the router and "
    "this client are not pinned and share those cores"
)


def policy_row(
    policy: str,
    outcomes: list[Outcome],
    duration_s: float,
    counters: dict[str, float],
    requests_per_replica: list[float],
    target_s: float,
    turns: list[ChatTurn],
    prefix_blocks: int,
) -> dict[str, Any]:
    ok = [o for o in outcomes if o.status == "ok"]
    good = goodput_share([o.ttft_s if o.status == "ok" else None for o in outcomes], target_s)
    return {
        "policy": policy,
        "num_requests": len(outcomes),
        "num_ok": len(ok),
        "num_rejected": sum(1 for o in outcomes if o.status == "rejected"),
        "num_errors": sum(1 for o in outcomes if o.status == "error"),
        "errors": sorted({o.detail for o in outcomes if o.detail})[:5],
        **_cache_stats(outcomes, counters, turns),
        "requests_per_replica": requests_per_replica,
        "duration_s": duration_s,
        "req_per_s": len(ok) / duration_s,
        "output_tok_per_s": sum(o.num_output_tokens for o in ok) / duration_s,
        **_ttft_stats(ok, prefix_blocks * BLOCK_SIZE),
        "goodput": good,
        "goodput_req_per_s": good * len(outcomes) / duration_s,
    }


def _cache_stats(
    outcomes: list[Outcome], counters: dict[str, float], turns: list[ChatTurn]
) -> dict[str, Any]:
    """Prefix-cache hits two ways. Per request: the cached prompt tokens each response reports
    (usage.prompt_tokens_details.cached_tokens), once per request. The engines' own counters:
    they count a lookup at every scheduling attempt, so a request that waits for KV blocks is
    counted again at each step it waits; under KV pressure they overstate both totals."""
    answered = [(o, t) for o, t in zip(outcomes, turns, strict=True) if o.status == "ok"]
    cached = sum(o.num_cached_tokens for o, _ in answered)
    return {
        "hit_rate": cached / max(1, sum(len(t.token_ids) for _, t in answered)),
        "cached_tokens": cached,
        "of_best": cached / max(1, _best_hit_tokens(turns)),
        "engine_hit_rate": counters["vllm:prefix_cache_hits_total"]
        / max(1.0, counters["vllm:prefix_cache_queries_total"]),
        "engine_hit_tokens": counters["vllm:prefix_cache_hits_total"],
        "engine_query_tokens": counters["vllm:prefix_cache_queries_total"],
        "num_preemptions": counters["vllm:num_preemptions_total"],
    }


def _ttft_stats(ok: list[Outcome], prefix_tokens: int) -> dict[str, Any]:
    ttfts = [o.ttft_s for o in ok if o.ttft_s is not None]
    # A request is a prefix hit when the engine found its whole system prompt cached.
    hit = [o.ttft_s for o in ok if o.ttft_s is not None and o.num_cached_tokens >= prefix_tokens]
    miss = [o.ttft_s for o in ok if o.ttft_s is not None and o.num_cached_tokens < prefix_tokens]
    return {
        "ttft_p50_ms": 1000 * percentile(ttfts, 50),
        "ttft_p90_ms": 1000 * percentile(ttfts, 90),
        "ttft_p99_ms": 1000 * percentile(ttfts, 99),
        "num_prefix_hits": len(hit),
        "ttft_p50_prefix_hit_ms": 1000 * percentile(hit, 50),
        "ttft_p50_prefix_miss_ms": 1000 * percentile(miss, 50),
    }


def routing_stats(
    outcomes: list[Outcome], turns: list[ChatTurn], replica_urls: list[str]
) -> dict[str, Any]:
    """Where the router sent each tenant's requests (from x-pagedock-replica), and how often its
    prediction of the cached prompt tokens was what the engine then found."""
    split: list[dict[int, int]] = [{} for _ in replica_urls]
    for outcome, turn in zip(outcomes, turns, strict=True):
        if outcome.replica in replica_urls:
            counts = split[replica_urls.index(outcome.replica)]
            counts[turn.tenant] = counts.get(turn.tenant, 0) + 1
    predicted = [o for o in outcomes if o.status == "ok" and o.predicted_cached_tokens is not None]
    exact = sum(1 for o in predicted if o.predicted_cached_tokens == o.num_cached_tokens)
    return {
        "tenants_per_replica": [dict(sorted(c.items())) for c in split],
        "prediction_exact_share": exact / len(predicted) if predicted else float("nan"),
    }


_best_cache: dict[int, int] = {}


def _best_hit_tokens(turns: list[ChatTurn]) -> int:
    """Prefix-cache hit tokens with an unbounded cache shared by all (computed once per
    workload)."""
    key = id(turns)
    if key not in _best_cache:
        _best_cache[key] = best_possible_hit_tokens(
            [Turn(t.tenant, {}, t.token_ids) for t in turns]
        )
    return _best_cache[key]


def write_results(
    args: argparse.Namespace,
    shape: WorkloadShape,
    sizing: KvSizing,
    turns: list[ChatTurn],
    peak: dict[str, Any],
    rate: float,
    target_s: float,
    rows: list[dict[str, Any]],
    wall_s: float,
    load_average: dict[str, Any],
) -> None:
    stem: Path = args.output or RESULTS
    stem.parent.mkdir(parents=True, exist_ok=True)
    result = {
        "scenario": _SCENARIO,
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "git_commit": git_commit(ROOT),
        "machine": machine_info(),
        "load_average": {
            **load_average,
            "note": "os.getloadavg() (1, 5, 15 min) at start and end: "
            "whatever else ran on the cores",
        },
        "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "workload": {
            **as_dict(shape),
            "format": "chat messages (the router renders and hashes them as the engine does)",
            "prompt_tokens_min": min(len(t.token_ids) for t in turns),
            "prompt_tokens_max": max(len(t.token_ids) for t in turns),
            "best_possible_hit_tokens": _best_hit_tokens(turns),
        },
        **_fleet_record(sizing),
        "peak": peak,
        "arrival_rate_req_per_s": rate,
        "arrival": f"open loop, Poisson at {args.load} x the measured round-robin peak, "
        f"seed {args.seed}, the same schedule for every policy",
        "ttft_target_ms": 1000 * target_s,
        "ttft_target_reasoning": "given with --ttft-target-ms"
        if args.ttft_target_ms
        else _DEFAULT_TARGET_REASONING,
        "policy_order": [r["policy"] for r in rows],
        "policies": rows,
        "wall_s": wall_s,
    }
    stem.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    stem.with_suffix(".md").write_text(markdown(result))
    plot(result, stem.with_suffix(".png"))
    print(markdown(result))


def _fleet_record(sizing: KvSizing) -> dict[str, Any]:
    """Every engine and router setting, as this checkout's config classes resolve the flags the
    scenario passes (the child processes run the same checkout)."""
    from engine.config import EngineConfig
    from engine.server.openai.context import ServerOptions
    from router.config import RouterConfig

    engine = EngineConfig(
        num_kv_blocks=sizing.num_kv_blocks,
        block_size=sizing.block_size,
        max_model_len=sizing.max_model_len,
        num_threads=1,
    )
    return {
        "replicas": {
            "count": 2,
            "pinned": _PINNING,
            "engine": dataclasses.asdict(engine),
            "server": dataclasses.asdict(ServerOptions()),
        },
        "kv_sizing": {
            "num_kv_blocks": sizing.num_kv_blocks,
            "prefix_blocks": sizing.prefix_blocks,
            "tail_blocks": sizing.tail_blocks,
            "max_model_len": sizing.max_model_len,
            "reasoning": sizing.reasoning,
        },
        "router": {**dataclasses.asdict(RouterConfig(replicas=["per run"])), "policy": "per run"},
    }


def markdown(result: dict[str, Any]) -> str:
    w, peak = result["workload"], result["peak"]
    lines = [
        "SmolLM2-135M, 2 replicas (1 torch thread each, pinned), "
        f"{result['kv_sizing']['num_kv_blocks']} KV blocks each; "
        f"{w['num_tenants']} tenants x {w['conversations_per_tenant']} conversations x "
        f"{w['turns_per_conversation']} turns ({w['num_requests']} requests, prompts "
        f"{w['prompt_tokens_min']}-{w['prompt_tokens_max']} tokens), "
        f"{result['settings']['max_tokens']} output tokens each, streamed.",
        f"Peak (round-robin, closed loop at {peak['concurrency']}): {peak['req_per_s']:.2f} req/s; "
        f"arrivals Poisson at {result['arrival_rate_req_per_s']:.2f} req/s "
        f"({result['settings']['load']:.0%} of it). "
        f"Goodput: share of requests with TTFT <= {result['ttft_target_ms']:.0f} ms. Prefix hit "
        "rate: cached / prompt tokens as each response reports them (of best: against an unbounded "
        "cache); engine counters: vllm:prefix_cache_hits / queries (one lookup per admission).",
        f"Machine: {result['machine']['cpu_model']}, commit {result['git_commit']}; "
        "full record in the JSON.",
        "",
        "| policy | prefix hit rate | of best | engine counters | TTFT p50 ms | p90 ms | p99 ms "
        "| req/s | output tok/s | goodput | rejected | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["policies"]:
        lines.append(
            f"| {r['policy']} | {r['hit_rate']:.1%} | {r['of_best']:.1%} "
            f"| {r['engine_hit_rate']:.1%} | {r['ttft_p50_ms']:.0f} | {r['ttft_p90_ms']:.0f} "
            f"| {r['ttft_p99_ms']:.0f} | {r['req_per_s']:.2f} | {r['output_tok_per_s']:.1f} "
            f"| {r['goodput']:.1%} | {r['num_rejected']} | {r['num_errors']} |"
        )
    lines += [
        "",
        "Requests per tenant on each replica (tenant: requests), from x-pagedock-replica:",
    ]
    for r in result["policies"]:
        split = "; ".join(
            f"replica {i}: " + ", ".join(f"{t}: {n}" for t, n in c.items())
            for i, c in enumerate(r.get("tenants_per_replica", []))
        )
        lines.append(f"- {r['policy']}: {split}")
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["policies"]
    names = [r["policy"] for r in rows]
    fig, axes = plt.subplots(1, 4, figsize=(17, 4))
    width = 0.27
    for i, q in enumerate((50, 90, 99)):
        axes[0].bar(
            [x + (i - 1) * width for x in range(len(rows))],
            [r[f"ttft_p{q}_ms"] for r in rows],
            width,
            label=f"p{q}",
        )
    axes[0].set_xticks(range(len(rows)), names)
    axes[0].set_title("TTFT (ms)")
    axes[0].legend()
    for ax, (key, title) in zip(
        axes[1:],
        [
            ("hit_rate", "prefix-cache hit rate"),
            ("goodput", f"goodput (TTFT <= {result['ttft_target_ms']:.0f} ms)"),
            ("req_per_s", "throughput (req/s)"),
        ],
        strict=True,
    ):
        ax.bar(
            names, [r[key] for r in rows], color=["tab:green", "tab:gray", "tab:blue"][: len(rows)]
        )
        ax.set_title(title)
    for ax in axes:
        ax.tick_params(axis="x", rotation=15)
    fig.suptitle(
        "pagedock router: 2 SmolLM2-135M replicas, Poisson arrivals at "
        f"{result['arrival_rate_req_per_s']:.2f} req/s "
        f"({result['settings']['load']:.0%} of round-robin's peak)"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
