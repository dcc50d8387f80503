"""One policy's row of the SmolLM2 router scenario (benchmarks/router_report.py): what the client
measured and the engines counted, turned into hit rates, latency percentiles and goodput."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from benchmarks.router_client import Outcome
from benchmarks.router_report import policy_row, routing_stats, write_results
from benchmarks.router_workload import ChatTurn, KvSizing, WorkloadShape

COUNTERS = {
    "vllm:prefix_cache_hits_total": 96.0,
    "vllm:prefix_cache_queries_total": 400.0,
    "vllm:num_preemptions_total": 0.0,
}


def make_turns() -> list[ChatTurn]:
    # One tenant, three turns of 64 prompt tokens sharing the first 48: an unbounded cache hits
    # 48 tokens (3 full blocks) on each of the last two.
    return [ChatTurn(0, 0, k, [], [1] * 48 + [k] * 16) for k in range(3)]


def make_row(outcomes: list[Outcome], target_s: float = 0.2) -> dict:
    return policy_row(
        "prefix-aware", outcomes, 2.0, COUNTERS, [2.0, 1.0], target_s, make_turns(), prefix_blocks=3
    )


def test_the_hit_rate_is_the_cached_share_of_the_answered_prompts() -> None:
    row = make_row(
        [
            Outcome("ok", 0.5, 1.0, 8, 0),
            Outcome("ok", 0.1, 1.0, 8, 48),
            Outcome("ok", 0.1, 1.0, 8, 48),
        ]
    )
    assert row["hit_rate"] == pytest.approx(96 / 192)
    assert row["of_best"] == pytest.approx(1.0)
    assert row["engine_hit_rate"] == pytest.approx(96 / 400)
    assert row["num_prefix_hits"] == 2


def test_rejections_and_errors_are_counted_apart_and_against_goodput() -> None:
    row = make_row(
        [
            Outcome("ok", 0.1, 1.0, 8, 48),
            Outcome("rejected", detail="HTTP 429"),
            Outcome("error", detail="ReadError"),
        ]
    )
    assert (row["num_ok"], row["num_rejected"], row["num_errors"]) == (1, 1, 1)
    assert row["goodput"] == pytest.approx(1 / 3)
    assert row["errors"] == ["HTTP 429", "ReadError"]


def test_throughput_and_latency_come_from_the_answered_requests() -> None:
    row = make_row(
        [
            Outcome("ok", 0.4, 1.0, 8, 0),
            Outcome("ok", 0.1, 1.0, 8, 48),
            Outcome("ok", 0.3, 1.0, 8, 48),
        ]
    )
    assert row["req_per_s"] == pytest.approx(1.5)
    assert row["output_tok_per_s"] == pytest.approx(12.0)
    assert row["ttft_p50_ms"] == pytest.approx(300.0)
    assert row["ttft_p99_ms"] == pytest.approx(400.0)
    assert row["goodput"] == pytest.approx(1 / 3)
    assert row["goodput_req_per_s"] == pytest.approx(0.5)


def test_the_results_are_written_as_json_markdown_and_png(tmp_path: Path) -> None:
    turns = make_turns()
    row = make_row(
        [
            Outcome("ok", 0.5, 1.0, 8, 0),
            Outcome("ok", 0.1, 1.0, 8, 48),
            Outcome("ok", 0.1, 1.0, 8, 48),
        ]
    )
    args = argparse.Namespace(
        output=tmp_path / "router_smollm2", load=0.8, seed=0, max_tokens=8, ttft_target_ms=None
    )
    sizing = KvSizing(num_kv_blocks=20, prefix_blocks=3, tail_blocks=2, reasoning="why")
    peak = {"concurrency": 8, "req_per_s": 1.25, "calibration": {"hit_ttfts_ms": [100.0]}}
    load = {"before": (1.0, 1.0, 1.0), "after": (1.0, 1.0, 1.0)}
    write_results(args, WorkloadShape(1, 1, 3), sizing, turns, peak, 1.0, 0.2, [row], 9.0, load)
    result = json.loads((tmp_path / "router_smollm2.json").read_text())
    assert result["peak"]["req_per_s"] == 1.25 and result["arrival_rate_req_per_s"] == 1.0
    assert (
        result["kv_sizing"]["num_kv_blocks"] == result["replicas"]["engine"]["num_kv_blocks"] == 20
    )
    assert result["replicas"]["engine"]["num_threads"] == 1
    assert result["ttft_target_ms"] == pytest.approx(200.0)
    assert "cpu_flags" in result["machine"]
    assert "| prefix-aware | 50.0% |" in (tmp_path / "router_smollm2.md").read_text()
    assert (tmp_path / "router_smollm2.png").stat().st_size > 0


def test_routing_stats_give_each_replica_s_tenants_and_the_router_s_prediction_accuracy() -> None:
    turns = [ChatTurn(t, 0, k, [], [1] * 64) for t, k in [(0, 0), (1, 0), (0, 1), (1, 1)]]
    a, b = "http://127.0.0.1:1", "http://127.0.0.1:2"
    outcomes = [
        Outcome("ok", 0.5, 1.0, 8, 0, replica=a, predicted_cached_tokens=0),
        Outcome("ok", 0.5, 1.0, 8, 0, replica=b, predicted_cached_tokens=0),
        Outcome("ok", 0.1, 1.0, 8, 48, replica=a, predicted_cached_tokens=48),
        Outcome("ok", 0.1, 1.0, 8, 32, replica=a, predicted_cached_tokens=48),
    ]
    stats = routing_stats(outcomes, turns, [a, b])
    assert stats["tenants_per_replica"] == [{0: 2, 1: 1}, {1: 1}]
    assert stats["prediction_exact_share"] == pytest.approx(3 / 4)
