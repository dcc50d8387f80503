"""pagedock:interrupted_steps_total follows the engine's cumulative count of steps cut short for
a newcomer (engine/core/step_interrupt.py), by increments."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from engine.core.scheduler_stats import SchedulerStats
from engine.server.metrics import EngineMetrics
from tests.server.stats_factory import scheduler_stats


def stats(num_interrupted_steps: int) -> SchedulerStats:
    return scheduler_stats(num_interrupted_steps=num_interrupted_steps)


def interrupted(metrics: EngineMetrics) -> float:
    text = metrics.render().decode()
    values = [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "pagedock:interrupted_steps_total" and s.labels == {"model_name": "tiny"}
    ]
    assert len(values) == 1
    return values[0]


def test_the_counter_moves_with_the_engines_count() -> None:
    metrics = EngineMetrics("tiny")
    metrics.observe_stats(stats(0))
    assert interrupted(metrics) == 0
    for count in (2, 2, 5):
        metrics.observe_stats(stats(count))
    assert interrupted(metrics) == 5
