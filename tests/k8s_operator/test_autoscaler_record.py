"""The autoscaler's windows as a record (llm_operator/autoscaler/record.py), without a cluster: a
rule restored on another process's clock decides as the one that never stopped; stale records,
records of another object and unreadable ones are ignored."""

from __future__ import annotations

import json
import random
from collections import deque
from typing import Any

from llm_operator.api.autoscaling import AutoscalingSpec
from llm_operator.autoscaler.record import Clock, decode, encode, running_maxima
from llm_operator.autoscaler.rule import Observation, ScalerState, decide

UID = "0b6f4c1e-uid"


def make_spec(**fields: Any) -> AutoscalingSpec:
    base: dict[str, Any] = {
        "enabled": True,
        "minReplicas": 1,
        "maxReplicas": 5,
        "targetConcurrency": 2,
        "stableWindowSeconds": 30,
        "scaleDownStabilizationSeconds": 60,
    }
    return AutoscalingSpec.model_validate({**base, **fields})


def observe(now: float, inflight: int, current: int) -> Observation:
    return Observation(now, 0, inflight, 0.0, current, current)


def busy_then_quiet(spec: AutoscalingSpec, until: float) -> tuple[ScalerState, int]:
    """A rule that saw 8 in flight for 40 s, then 1: it scaled to 4 and is being held there."""
    state, current = ScalerState(), 1
    t = 0.0
    while t <= until:
        decision = decide(spec, state, observe(t, 8 if t < 40 else 1, current))
        current = decision.replicas
        t += 1.0
    return state, current


def test_a_restored_rule_decides_as_the_one_that_never_stopped() -> None:
    spec = make_spec()
    kept, current = busy_then_quiet(spec, until=70.0)
    assert current == 4
    # Saved on one process's clock at t=70 (wall 1_000_070); read 3 s later by a process whose
    # monotonic clock reads 5.0.
    text = encode(kept, UID, Clock(monotonic=70.0, wall=1_000_070.0))
    restored = decode(text, UID, spec, Clock(monotonic=5.0, wall=1_000_073.0))
    assert restored is not None
    for step in range(60):  # same inputs, each on its own clock: the same decisions
        mine = decide(spec, kept, observe(73.0 + step, 1, current))
        theirs = decide(spec, restored, observe(5.0 + step, 1, current))
        assert (mine.replicas, mine.reason) == (theirs.replicas, theirs.reason), step
        current = mine.replicas
    assert current < 4  # the window ran out and both scaled down alike


def test_a_restored_rule_is_not_held_back_by_the_first_window_guard() -> None:
    spec = make_spec()
    kept, current = busy_then_quiet(spec, until=70.0)
    text = encode(kept, UID, Clock(monotonic=70.0, wall=1_000_070.0))
    restored = decode(text, UID, spec, Clock(monotonic=0.0, wall=1_000_071.0))
    assert restored is not None
    # 81 s after the load dropped (restored clock 50 = old clock 121) the recommendations of 4 are
    # out of the window: the restored rule scales down, a rule that starts afresh (the old
    # behaviour) would wait a whole stabilization window more.
    decision = decide(spec, restored, observe(50.0, 1, current))
    afresh = decide(spec, ScalerState(), observe(50.0, 1, current))
    assert decision.replicas < current, decision
    assert (afresh.replicas, afresh.reason) == (
        current,
        "wants 1, no scale-down in the first stabilization window",
    )


def test_a_record_older_than_the_windows_is_ignored() -> None:
    spec = make_spec()
    kept, _ = busy_then_quiet(spec, until=70.0)
    text = encode(kept, UID, Clock(monotonic=70.0, wall=1_000_070.0))
    assert decode(text, UID, spec, Clock(monotonic=0.0, wall=1_000_070.0 + 61)) is None
    assert decode(text, UID, spec, Clock(monotonic=0.0, wall=1_000_070.0 + 59)) is not None


def test_entries_older_than_their_window_and_an_ended_panic_are_dropped() -> None:
    spec = make_spec(scaleDownStabilizationSeconds=50)
    state = ScalerState(
        samples=deque([(0.0, 9), (20.0, 3), (49.0, 2)]),
        wants=deque([(0.0, 5), (20.0, 4), (49.0, 1)]),
        panic_until=45.0,
        started_at=0.0,
    )
    text = encode(state, UID, Clock(monotonic=50.0, wall=2_000.0))
    restored = decode(text, UID, spec, Clock(monotonic=100.0, wall=2_010.0))
    assert restored is not None
    # old clock + 40 = new clock: now (100) is old 60; stable window 30 s, stabilization 50 s
    assert list(restored.samples) == [(89.0, 2)]
    assert list(restored.wants) == [(60.0, 4), (89.0, 1)]
    assert restored.panic_until is None  # ended at old 45
    assert restored.started_at == 40.0


def test_a_record_of_another_object_or_unreadable_is_ignored() -> None:
    spec = make_spec()
    clock = Clock(monotonic=10.0, wall=5_000.0)
    text = encode(ScalerState(started_at=1.0), UID, clock)
    assert decode(text, "another-uid", spec, clock) is None  # deleted and created again
    assert decode("", UID, spec, clock) is None
    assert decode("{not json", UID, spec, clock) is None
    assert decode(json.dumps({**json.loads(text), "version": 99}), UID, spec, clock) is None
    assert decode(json.dumps({**json.loads(text), "samples": [["x", 1]]}), UID, spec, clock) is None


def test_the_scale_down_window_keeps_only_what_can_still_be_its_maximum() -> None:
    rng = random.Random(7)
    window = [(float(t), rng.randint(1, 6)) for t in range(200)]
    kept = running_maxima(window)
    assert len(kept) < 20
    for cut in range(200):
        assert max(v for t, v in kept if t >= cut) == max(v for t, v in window if t >= cut)


def test_a_record_of_a_full_window_stays_small() -> None:
    spec = make_spec(stableWindowSeconds=600, scaleDownStabilizationSeconds=3600)
    state, _ = busy_then_quiet(spec, until=600.0)
    assert len(encode(state, UID, Clock(600.0, 1e9))) < 16_000  # a ConfigMap holds 1 MiB
