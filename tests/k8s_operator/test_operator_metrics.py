"""The operator's own metrics (llm_operator/operator_metrics.py) as Prometheus reads them, without
a cluster: an autoscaler tick's gauges, the scale and reconcile counters, series that end with
their LLMDeployment, the rule's reason for each scale, and the /metrics server."""

from __future__ import annotations

import logging
import socket
from typing import Any

import aiohttp
import pytest
from llm_operator.autoscaler.rule import SCALING_REASONS, Decision, ScalerState, decide
from llm_operator.controller.metrics_server import MetricsServer
from llm_operator.controller.reconcile_outcome import error_reason
from llm_operator.k8s.kube import KubeError
from llm_operator.operator_metrics import AUTOSCALER_GAUGES, AutoscalerReading, OperatorMetrics
from prometheus_client.samples import Sample

from tests.k8s_operator.exported_metrics import parse_scrape
from tests.k8s_operator.test_autoscaler_rule import make_spec, observe

CHAT = ("team-a", "chat")
OTHER = ("team-a", "code")
ELSEWHERE = ("team-b", "chat")


def make_reading(**changes: Any) -> AutoscalerReading:
    fields: dict[str, Any] = {
        "desired_replicas": 3,
        "wanted_replicas": 3,
        "current_replicas": 2,
        "ready_replicas": 2,
        "min_replicas": 1,
        "max_replicas": 4,
        "target_concurrency": 2.0,
        "concurrency": 6,
        "stable_concurrency": 5.5,
        "panic_concurrency": 6.0,
        "panicking": False,
        "num_held_requests": 1,
        "num_inflight_requests": 5,
        "num_routers": 2,
    }
    return AutoscalerReading(**{**fields, **changes})


def scrape(metrics: OperatorMetrics) -> dict[str, list[Sample]]:
    return parse_scrape(metrics.render().decode())


def value(metrics: OperatorMetrics, series: str, key: tuple[str, str], **labels: str) -> float:
    """The one sample of `series` for this LLMDeployment (and labels); KeyError when absent."""
    wanted = {"namespace": key[0], "llmdeployment": key[1], **labels}
    found = [
        sample.value
        for samples in scrape(metrics).values()
        for sample in samples
        if sample.name == series and sample.labels == wanted
    ]
    if not found:
        raise KeyError(f"{series}{wanted}")
    (only,) = found
    return only


def series_of(metrics: OperatorMetrics, key: tuple[str, str]) -> list[str]:
    return [
        sample.name
        for samples in scrape(metrics).values()
        for sample in samples
        if (sample.labels.get("namespace"), sample.labels.get("llmdeployment")) == key
    ]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_autoscaler_tick_sets_one_gauge_per_reading_field() -> None:
    metrics = OperatorMetrics()
    metrics.observe_autoscaler(CHAT, make_reading())
    expected = {
        "desired_replicas": 3,
        "wanted_replicas": 3,
        "current_replicas": 2,
        "ready_replicas": 2,
        "min_replicas": 1,
        "max_replicas": 4,
        "at_max_replicas": 0,
        "target_concurrency": 2.0,
        "concurrency": 6,
        "stable_concurrency": 5.5,
        "panic_concurrency": 6.0,
        "panicking": 0,
        "num_held_requests": 1,
        "num_inflight_requests": 5,
        "num_routers": 2,
    }
    assert set(expected) == set(AUTOSCALER_GAUGES)
    for name, number in expected.items():
        assert value(metrics, f"pagedock_operator_autoscaler_{name}", CHAT) == number, name


def test_the_text_names_each_family_with_its_help_and_type() -> None:
    metrics = OperatorMetrics()
    metrics.observe_autoscaler(CHAT, make_reading())
    text = metrics.render().decode()
    assert "# TYPE pagedock_operator_autoscaler_desired_replicas gauge" in text
    assert "# HELP pagedock_operator_autoscaler_at_max_replicas 1 at maxReplicas" in text
    assert "# TYPE pagedock_operator_autoscaler_scaling_decisions_total counter" in text
    assert "# TYPE pagedock_operator_reconcile_duration_seconds histogram" in text
    line = (
        'pagedock_operator_autoscaler_desired_replicas{llmdeployment="chat",namespace="team-a"} 3.0'
    )
    assert line in text.splitlines()


@pytest.mark.parametrize(
    ("desired", "wanted", "at_max"),
    [(4, 4, 1), (4, 9, 1), (4, 2, 0), (3, 9, 0)],
    ids=["demand-for-max", "demand-above-max", "held-at-max-without-demand", "on-its-way-up"],
)
def test_at_max_replicas_needs_the_maximum_and_a_demand_for_as_many(
    desired: int, wanted: int, at_max: int
) -> None:
    """A deployment held at a fixed size (minReplicas = maxReplicas) under light load is not at
    its maximum in this sense; one still scaling up (limited while replicas start) neither."""
    metrics = OperatorMetrics()
    metrics.observe_autoscaler(CHAT, make_reading(desired_replicas=desired, wanted_replicas=wanted))
    assert value(metrics, "pagedock_operator_autoscaler_at_max_replicas", CHAT) == at_max


def test_every_scaling_reason_starts_at_zero_so_that_the_first_decision_is_an_increase() -> None:
    metrics = OperatorMetrics(SCALING_REASONS)
    series = "pagedock_operator_autoscaler_scaling_decisions_total"
    metrics.observe_autoscaler(CHAT, make_reading())
    for direction, reasons in SCALING_REASONS.items():
        for reason in reasons:
            assert value(metrics, series, CHAT, direction=direction, reason=reason) == 0
    metrics.count_scaling(CHAT, 2, 3, "concurrency")
    metrics.count_scaling(CHAT, 3, 1, "idle")
    assert value(metrics, series, CHAT, direction="up", reason="concurrency") == 1
    assert value(metrics, series, CHAT, direction="down", reason="idle") == 1
    assert value(metrics, series, CHAT, direction="down", reason="concurrency") == 0


def test_no_router_answering_zeroes_the_routers_and_keeps_the_last_decision() -> None:
    metrics = OperatorMetrics()
    metrics.observe_autoscaler(CHAT, make_reading())
    metrics.observe_no_demand(CHAT)
    assert value(metrics, "pagedock_operator_autoscaler_num_routers", CHAT) == 0
    assert value(metrics, "pagedock_operator_autoscaler_desired_replicas", CHAT) == 3


def test_a_reconcile_counts_a_pass_and_a_failure_by_its_reason() -> None:
    metrics = OperatorMetrics()
    metrics.count_reconcile(CHAT, 0.02, None)
    metrics.count_reconcile(CHAT, 0.3, "ChildRejected")
    metrics.count_reconcile(CHAT, 0.1, "ChildRejected")
    assert value(metrics, "pagedock_operator_reconciles_total", CHAT) == 3
    errors = "pagedock_operator_reconcile_errors_total"
    assert value(metrics, errors, CHAT, reason="ChildRejected") == 2
    with pytest.raises(KeyError):
        value(metrics, errors, CHAT, reason="InvalidSpec")
    durations = scrape(metrics)["pagedock_operator_reconcile_duration_seconds"]
    counts = [s.value for s in durations if s.name.endswith("_count")]
    buckets = {s.labels["le"]: s.value for s in durations if s.name.endswith("_bucket")}
    assert counts == [3] and buckets["0.05"] == 1 and buckets["0.25"] == 2


def test_a_deleted_llmdeployment_leaves_no_series() -> None:
    metrics = OperatorMetrics(SCALING_REASONS)
    for key in (CHAT, OTHER):
        metrics.observe_autoscaler(key, make_reading())
        metrics.count_scaling(key, 2, 3, "panic")
        metrics.count_reconcile(key, 0.1, "InvalidSpec")
    metrics.forget(CHAT)
    assert series_of(metrics, CHAT) == []
    scalings = sum(len(reasons) for reasons in SCALING_REASONS.values())  # every direction's
    assert len(series_of(metrics, OTHER)) == len(AUTOSCALER_GAUGES) + scalings + 2


def test_the_writes_of_a_pass_begun_before_the_deletion_are_dropped() -> None:
    """A reconcile pass or an autoscaler tick captures the epoch as it begins; the LLMDeployment
    is deleted (forget) before the pass writes: nothing of it comes back. Another LLMDeployment's
    passes count, and so do those of a new one of the same name, begun after."""
    metrics = OperatorMetrics(SCALING_REASONS)
    metrics.count_reconcile(CHAT, 0.1, None)
    began, began_other = metrics.epoch(CHAT), metrics.epoch(OTHER)
    metrics.forget(CHAT)
    metrics.count_reconcile(CHAT, 0.1, "APIError", began)
    metrics.observe_no_demand(CHAT, began)
    metrics.count_scaling(CHAT, 2, 3, "panic", began)
    metrics.observe_autoscaler(CHAT, make_reading(), began)
    assert series_of(metrics, CHAT) == []
    metrics.count_reconcile(OTHER, 0.1, None, began_other)
    assert value(metrics, "pagedock_operator_reconciles_total", OTHER) == 1
    metrics.count_reconcile(CHAT, 0.1, None, metrics.epoch(CHAT))  # a new `chat`
    assert value(metrics, "pagedock_operator_reconciles_total", CHAT) == 1


def test_autoscaler_series_end_for_those_no_longer_autoscaled_in_that_namespace_only() -> None:
    """Autoscaling turned off, or the object gone since the last tick: its decision ends; its
    reconcile counters stay. Another namespace is not touched."""
    metrics = OperatorMetrics()
    for key in (CHAT, OTHER, ELSEWHERE):
        metrics.observe_autoscaler(key, make_reading())
        metrics.count_reconcile(key, 0.1, None)
    metrics.retain_autoscaled("team-a", [OTHER])
    assert series_of(metrics, CHAT) == ["pagedock_operator_reconciles_total"]
    assert "pagedock_operator_autoscaler_desired_replicas" in series_of(metrics, OTHER)
    assert "pagedock_operator_autoscaler_desired_replicas" in series_of(metrics, ELSEWHERE)
    metrics.retain_autoscaled(None, [])  # this replica leads nowhere any more
    assert "pagedock_operator_autoscaler_desired_replicas" not in series_of(metrics, ELSEWHERE)


def scaled(decision: Decision, current: int) -> tuple[str, str]:
    assert decision.replicas != current, decision
    return ("up" if decision.replicas > current else "down"), decision.cause


def test_each_scale_names_one_of_the_declared_reasons_for_its_direction() -> None:
    """The metric's `reason` is a bounded word, not the Event's sentence with its numbers."""
    calm = make_spec(maxReplicas=8, panicThresholdPercentage=1000)
    assert scaled(decide(calm, ScalerState(), observe(0, inflight=4)), 1) == ("up", "concurrency")
    limited = decide(make_spec(maxReplicas=8), ScalerState(), observe(0, held=16, ready=1))
    assert scaled(limited, 1) == ("up", "scale_up_limit")
    assert (limited.wanted_replicas, limited.replicas) == (8, 2)
    panicking = decide(make_spec(maxReplicas=8), ScalerState(), observe(0, inflight=8, ready=2))
    assert panicking.panicking and scaled(panicking, 1) == ("up", "panic")
    idle = decide(make_spec(), ScalerState(), observe(0, idle=500))
    assert scaled(idle, 1) == ("down", "idle")
    spec, state = make_spec(scaleDownStabilizationSeconds=30, stableWindowSeconds=6), ScalerState()
    decide(spec, state, observe(0, inflight=8, current=4, ready=4))  # wants 4
    decide(spec, state, observe(25, inflight=6, current=4, ready=4))  # wants 3, first window
    held = decide(spec, state, observe(31, inflight=2, current=4, ready=4))  # wants 1
    assert scaled(held, 4) == ("down", "stabilization") and held.replicas == 3
    for decision, current in ((limited, 1), (panicking, 1), (idle, 1), (held, 4)):
        direction, cause = scaled(decision, current)
        assert cause in SCALING_REASONS[direction]


def test_a_failed_pass_is_named_by_where_the_failure_came_from() -> None:
    assert error_reason(KubeError(409, "conflict")) == "APIError"
    assert error_reason(aiohttp.ClientConnectionError("refused")) == "APIUnreachable"
    assert error_reason(TimeoutError()) == "APIUnreachable"
    assert error_reason(KeyError("spec")) == "InternalError"


@pytest.mark.asyncio
async def test_the_server_serves_the_prometheus_text_format() -> None:
    metrics = OperatorMetrics()
    metrics.observe_autoscaler(CHAT, make_reading())
    server, port = MetricsServer(metrics), free_port()
    assert await server.start(port, "127.0.0.1")
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/metrics") as response,
        ):
            assert response.status == 200
            assert response.headers["Content-Type"].startswith("text/plain; version=")
            assert parse_scrape(await response.text()) == scrape(metrics)
    finally:
        await server.stop()


@pytest.mark.asyncio
async def test_a_taken_port_is_logged_and_the_operator_goes_on_without_metrics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with caplog.at_level(logging.ERROR):
            assert not await MetricsServer(OperatorMetrics()).start(port, "127.0.0.1")
    assert f"cannot serve /metrics on port {port}" in caplog.text
