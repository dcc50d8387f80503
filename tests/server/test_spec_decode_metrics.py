"""Speculative decoding on /metrics, with vLLM's names: drafts, draft tokens, accepted tokens and
accepted tokens per draft position move with the engine's counters; an engine that does not
speculate has none of them."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from engine.core.scheduler_stats import SchedulerStats
from engine.server.metrics import EngineMetrics
from engine.spec_decode.spec_decoding_stats import SpecDecodingStats
from tests.server.stats_factory import scheduler_stats

MODEL = "tiny"


def samples(metrics: EngineMetrics) -> dict[tuple[str, str], float]:
    """{(sample name, its position label or ""): value} of the spec_decode families."""
    text = metrics.render().decode()
    return {
        (s.name, s.labels.get("position", "")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("vllm:spec_decode") and s.name.endswith("_total")
    }


def stats(spec: SpecDecodingStats | None) -> SchedulerStats:
    return scheduler_stats(spec_decoding_stats=spec)


def spec(drafts: list[tuple[int, int]]) -> SpecDecodingStats:
    counters = SpecDecodingStats(3)
    for num_draft_tokens, num_accepted in drafts:
        counters.observe_draft(num_draft_tokens, num_accepted)
    return counters


def test_the_counters_carry_vllms_names_and_move_by_increments() -> None:
    metrics = EngineMetrics(MODEL)
    metrics.observe_stats(stats(spec([(3, 2)])))
    metrics.observe_stats(stats(spec([(3, 2), (3, 3), (2, 0)])))
    assert samples(metrics) == {
        ("vllm:spec_decode_num_drafts_total", ""): 3,
        ("vllm:spec_decode_num_draft_tokens_total", ""): 8,
        ("vllm:spec_decode_num_accepted_tokens_total", ""): 5,
        ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "0"): 2,
        ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "1"): 2,
        ("vllm:spec_decode_num_accepted_tokens_per_pos_total", "2"): 1,
    }


def test_an_engine_restart_behind_the_counters_restarts_them_from_its_values() -> None:
    metrics = EngineMetrics(MODEL)
    metrics.observe_stats(stats(spec([(3, 2), (3, 1)])))
    metrics.observe_stats(stats(spec([(3, 3)])))
    assert samples(metrics)[("vllm:spec_decode_num_drafts_total", "")] == 3
    assert samples(metrics)[("vllm:spec_decode_num_accepted_tokens_total", "")] == 6


def test_without_speculation_there_are_no_spec_decode_metrics() -> None:
    metrics = EngineMetrics(MODEL)
    metrics.observe_stats(stats(None))
    assert b"spec_decode" not in metrics.render()
