"""The built-in autoscaler's rule (llm_operator/autoscaler/rule.py), tick by tick, without a
cluster: from zero on a held request, stable and panic windows, the scale-up limit while pods
start, scale-down stabilization, min/max, and back to zero when idle."""

from __future__ import annotations

from typing import Any

from llm_operator.api.autoscaling import AutoscalingSpec
from llm_operator.autoscaler.rule import Decision, Observation, ScalerState, decide


def make_spec(**fields: Any) -> AutoscalingSpec:
    base: dict[str, Any] = {
        "enabled": True,
        "minReplicas": 0,
        "maxReplicas": 5,
        "targetConcurrency": 2,
        "stableWindowSeconds": 60,
        "scaleDownStabilizationSeconds": 30,
        "scaleToZeroAfterSeconds": 120,
    }
    return AutoscalingSpec.model_validate({**base, **fields})


def observe(
    now: float,
    held: int = 0,
    inflight: int = 0,
    ready: int = 1,
    current: int = 1,
    idle: float = 0.0,
) -> Observation:
    return Observation(now, held, inflight, idle, ready, current)


def test_a_held_request_scales_from_zero_to_one_at_once() -> None:
    decision = decide(make_spec(), ScalerState(), observe(0, held=1, ready=0, current=0))
    assert decision.replicas == 1


def test_at_zero_without_demand_it_stays_at_zero() -> None:
    decision = decide(make_spec(), ScalerState(), observe(0, ready=0, current=0, idle=5))
    assert decision.replicas == 0


def test_idle_for_scale_to_zero_after_seconds_goes_to_zero_and_not_before() -> None:
    spec, state = make_spec(), ScalerState()
    assert decide(spec, state, observe(0, idle=119)).replicas == 1
    assert decide(spec, state, observe(1, idle=120)).replicas == 0


def test_min_replicas_above_zero_never_goes_to_zero() -> None:
    decision = decide(make_spec(minReplicas=1), ScalerState(), observe(0, idle=10_000))
    assert decision.replicas == 1


def test_scale_up_is_limited_while_replicas_are_still_starting() -> None:
    """A long model load must not turn a growing queue into a runaway of pods."""
    spec, state = make_spec(), ScalerState()
    decisions = [
        decide(spec, state, observe(t, held=50 + t, ready=0, current=1)) for t in range(30)
    ]
    assert {d.replicas for d in decisions} == {1}


def test_scale_up_asks_at_most_max_scale_up_rate_times_the_ready_replicas() -> None:
    decision = decide(make_spec(), ScalerState(), observe(0, inflight=40, ready=1, current=1))
    assert decision.replicas == 2
    assert decision.panicking


def test_never_above_max_replicas() -> None:
    decision = decide(
        make_spec(maxReplicas=3), ScalerState(), observe(0, inflight=100, ready=3, current=3)
    )
    assert decision.replicas == 3


def test_a_short_burst_panics_up_and_panic_never_scales_down() -> None:
    spec, state = make_spec(targetConcurrency=1), ScalerState()
    for t in range(50):
        decide(spec, state, observe(t, inflight=1, ready=1, current=1))
    burst = [decide(spec, state, observe(50 + t, inflight=4, ready=2, current=2)) for t in range(6)]
    assert burst[-1].panicking and burst[-1].replicas == 4
    after = decide(spec, state, observe(57, inflight=0, ready=4, current=4))
    assert after.panicking and after.replicas == 4


def test_a_fresh_autoscaler_does_not_scale_down_before_one_stabilization_window() -> None:
    spec, state = make_spec(minReplicas=1), ScalerState()
    assert decide(spec, state, observe(100, inflight=0, ready=3, current=3)).replicas == 3
    assert decide(spec, state, observe(129, inflight=0, ready=3, current=3)).replicas == 3
    assert decide(spec, state, observe(131, inflight=0, ready=3, current=3)).replicas == 1


def test_scale_down_waits_for_the_stabilization_window() -> None:
    spec, state = make_spec(panicThresholdPercentage=1000), ScalerState()
    decide(spec, state, observe(-100, inflight=6, ready=3, current=3))  # watching for a while
    decide(spec, state, observe(0, inflight=6, ready=3, current=3))
    held: list[Decision] = [
        decide(spec, state, observe(t, inflight=0, ready=3, current=3)) for t in range(1, 30)
    ]
    assert all(d.replicas == 3 for d in held)
    # the stable window's mean has fallen since: after 30 s the high want has left the window
    later = decide(spec, state, observe(95, inflight=0, ready=3, current=3))
    assert later.replicas == 1


def test_a_kubectl_scale_is_overridden_by_the_rule() -> None:
    spec, state = make_spec(minReplicas=1, scaleDownStabilizationSeconds=0), ScalerState()
    decision = decide(spec, state, observe(0, inflight=0, ready=5, current=5))
    assert decision.replicas == 1


def test_requests_the_engines_report_count_when_they_bypass_the_routers() -> None:
    obs = Observation(0, 0, 1, 0.0, 1, 1, num_engine_requests=8)
    assert obs.concurrency == 8
    assert decide(make_spec(), ScalerState(), obs).replicas == 2


def test_requests_waiting_in_the_routers_flow_queues_are_demand() -> None:
    obs = Observation(0, 1, 8, 0.0, 2, 2, num_queued=7)
    assert obs.concurrency == 16  # one held, seven queued for a slot, eight in flight


def queued(now: float, wait_s: float, ready: int = 2, current: int = 2) -> Observation:
    """Two requests in flight per replica (the target: no concurrency want beyond `current`) and
    one queued, the oldest for `wait_s`."""
    return Observation(
        now, 0, 2 * current, 0.0, ready, current, num_queued=1, oldest_queued_seconds=wait_s
    )


def test_a_request_queued_past_the_target_wait_adds_a_replica_at_a_time() -> None:
    spec, state = (
        make_spec(minReplicas=1, targetConcurrency=3, targetQueueWaitSeconds=5),
        ScalerState(),
    )
    assert decide(spec, state, queued(0, wait_s=4)).replicas == 2  # within the target
    up = decide(spec, state, queued(1, wait_s=6))
    assert (up.replicas, up.cause) == (3, "queue_wait")
    assert "queued 6 s" in up.reason
    # The new replica is still starting: no more while it does, however long the wait.
    assert decide(spec, state, queued(2, wait_s=9, ready=2, current=3)).replicas == 3
    assert decide(spec, state, queued(3, wait_s=12, ready=3, current=3)).replicas == 4


def test_without_a_target_wait_the_queue_counts_by_its_depth_alone() -> None:
    spec = make_spec(minReplicas=1, targetConcurrency=3)
    assert spec.target_queue_wait_seconds is None
    assert decide(spec, ScalerState(), queued(0, wait_s=600)).replicas == 2


def test_a_target_wait_never_takes_the_replicas_past_the_maximum() -> None:
    spec = make_spec(minReplicas=1, maxReplicas=2, targetConcurrency=3, targetQueueWaitSeconds=5)
    assert decide(spec, ScalerState(), queued(0, wait_s=60)).replicas == 2
