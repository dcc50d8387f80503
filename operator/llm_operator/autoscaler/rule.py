"""The built-in autoscaler's rule, a pure function of its inputs and its own past (Knative KPA
style, with the HPA's scale-down stabilization):

    concurrency  = requests held by the routers + requests waiting in their flow queues + the
                   larger of the requests in flight through them and the requests the engines
                   report running or waiting
    stable_want  = ceil(mean concurrency over the stable window / targetConcurrency)
    panic_want   = ceil(mean concurrency over the panic window  / targetConcurrency)
    panic        when panic_want >= panicThreshold% of the ready replicas (at least 1); it lasts
                 a stable window from the last time that held, and never scales down
    want         = panic ? max(panic_want, current) : stable_want
    queue wait   with targetQueueWaitSeconds: while the oldest request in the routers' flow
                 queues has waited longer than that, want at least current + 1 (a replica at a
                 time: the scale-up limit below waits for each to start)
    scale-up     at most ceil(maxScaleUpRate x ready) (at least 1), and never above the current
                 replicas while some are still starting: a 7-minute model load is not a reason
                 to ask for more pods every second
    scale-down   only to the highest want of the last scaleDownStabilizationSeconds, and not
                 in the first such window after the autoscaler starts watching (an operator
                 with no recorded past must not read "no want" as "want less")
    zero         minReplicas 0: no request and nothing held or in flight for
                 scaleToZeroAfterSeconds -> 0; at 0 it stays there until a request is held;
                 otherwise at least 1 (a held request brings one at once, no window)
    clamp        [max(minReplicas, 1 unless idle), maxReplicas]
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from llm_operator.api.autoscaling import AutoscalingSpec


@dataclass(frozen=True)
class Observation:
    """What the routers and the engine Deployment said at one tick."""

    now: float
    num_held: int
    num_inflight: int
    idle_seconds: float
    """Seconds since the last request any router received."""
    ready_replicas: int
    current_replicas: int
    """spec.replicas as it stands."""
    num_engine_requests: int = 0
    """Running + waiting, as the engines report them (clients that bypass the routers too)."""
    num_queued: int = 0
    """Waiting in the routers' flow queues for a slot (with --max-inflight-per-replica)."""
    oldest_queued_seconds: float = 0.0
    """How long the oldest of those has waited (0: none waits)."""

    @property
    def concurrency(self) -> int:
        return self.num_held + self.num_queued + max(self.num_inflight, self.num_engine_requests)


@dataclass(frozen=True)
class Decision:
    replicas: int
    reason: str
    """Why, in a few words a person reads in an Event (`kubectl describe`)."""
    stable_concurrency: float
    panic_concurrency: float
    panicking: bool
    cause: str = "steady"
    """`reason` as one word for a metric label: one of SCALING_REASONS, or steady when held."""
    wanted_replicas: int = 0
    """What the demand asked for, before the bounds and the scale limits."""


# The `cause` of a decision that changes the replicas, by direction.
SCALING_REASONS = {
    "up": ("concurrency", "panic", "queue_wait", "scale_up_limit"),
    "down": ("concurrency", "stabilization", "idle"),
}


@dataclass
class ScalerState:
    """The windows one LLMDeployment's rule keeps between ticks (in the operator's memory, and
    recorded for the next operator by state_store.py)."""

    samples: deque[tuple[float, int]] = field(default_factory=deque)
    wants: deque[tuple[float, int]] = field(default_factory=deque)
    panic_until: float | None = None
    started_at: float | None = None
    """The first tick's time: no scale-down within one stabilization window of it."""


def decide(spec: AutoscalingSpec, state: ScalerState, obs: Observation) -> Decision:
    if state.started_at is None:
        state.started_at = obs.now
    stable_s = float(spec.stable_window_seconds)
    panic_s = stable_s * spec.panic_window_percentage / 100
    _record(state.samples, obs.now, obs.concurrency, stable_s)
    stable = _mean_since(state.samples, obs.now - stable_s)
    panic = _mean_since(state.samples, obs.now - panic_s)
    stable_want = math.ceil(stable / spec.target_concurrency)
    panic_want = math.ceil(panic / spec.target_concurrency)
    if panic_want >= max(obs.ready_replicas, 1) * spec.panic_threshold_percentage / 100:
        state.panic_until = obs.now + stable_s
    panicking = state.panic_until is not None and obs.now < state.panic_until
    wanted = max(panic_want, obs.current_replicas) if panicking else stable_want
    queue_bound = _queue_too_slow(spec, obs) and wanted <= obs.current_replicas
    if queue_bound:
        wanted = obs.current_replicas + 1
    want, reason, cause = _bounded(spec, state, obs, wanted)
    if cause == "concurrency" and want > obs.current_replicas:
        if queue_bound:
            cause = "queue_wait"
            reason = f"a request queued {obs.oldest_queued_seconds:.0f} s in a flow queue"
        elif panicking:
            cause = "panic"
    return Decision(
        want, reason, round(stable, 2), round(panic, 2), panicking, cause, wanted_replicas=wanted
    )


def _bounded(
    spec: AutoscalingSpec, state: ScalerState, obs: Observation, want: int
) -> tuple[int, str, str]:
    """The want after the scale-up limit, stabilization, zero and min/max; why, and its cause."""
    current = obs.current_replicas
    if spec.min_replicas == 0 and (_idle(spec, obs) or (current == 0 and obs.concurrency == 0)):
        state.wants.clear()  # from zero only on demand (a restarted router is not demand)
        return 0, f"no request for {obs.idle_seconds:.0f} s", "idle"
    floor = max(spec.min_replicas, 1)
    want = min(max(want, floor), spec.max_replicas)
    _record(state.wants, obs.now, want, float(spec.scale_down_stabilization_seconds))
    if want > current:
        limit = max(1, math.ceil(spec.max_scale_up_rate * obs.ready_replicas))
        if obs.ready_replicas < current:  # some are still starting: wait for them
            limit = current
        if want > limit:
            return (
                max(limit, current),
                f"wants {want}, limited to {max(limit, current)} "
                f"while {current - obs.ready_replicas} start",
                "scale_up_limit",
            )
        return want, f"concurrency {obs.concurrency} ({obs.num_held} held)", "concurrency"
    if want < current:
        started = obs.now if state.started_at is None else state.started_at  # 0.0 is a time
        if obs.now - started < spec.scale_down_stabilization_seconds:
            return (
                current,
                f"wants {want}, no scale-down in the first stabilization window",
                "steady",
            )
        stabilized = min(current, max(w for _, w in state.wants))
        if stabilized > want:
            return (
                stabilized,
                f"wants {want}, held at {stabilized} by the scale-down stabilization window",
                "stabilization",
            )
        return want, f"concurrency {obs.concurrency} over the stable window", "concurrency"
    return want, "steady", "steady"


def _queue_too_slow(spec: AutoscalingSpec, obs: Observation) -> bool:
    target = spec.target_queue_wait_seconds
    return target is not None and obs.oldest_queued_seconds > target


def _idle(spec: AutoscalingSpec, obs: Observation) -> bool:
    return obs.concurrency == 0 and obs.idle_seconds >= spec.scale_to_zero_after_seconds


def _record(window: deque[tuple[float, int]], now: float, value: int, span_s: float) -> None:
    window.append((now, value))
    while window and window[0][0] < now - span_s:
        window.popleft()


def _mean_since(samples: deque[tuple[float, int]], since: float) -> float:
    values = [v for t, v in samples if t >= since]
    return sum(values) / len(values) if values else 0.0
