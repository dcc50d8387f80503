"""The autoscaler's windows as a record that outlives the operator process (state_store.py keeps it
in a ConfigMap): what one LLMDeployment's rule remembers (rule.py's ScalerState), on the wall clock.

The rule keeps its times on this process's monotonic clock, which means nothing to another process
or node; the record holds wall-clock seconds relative to `savedAt` (epoch seconds), so a restarted
operator or a new leader reads it on its own clock. Restoring applies these staleness rules:

  - a record of another object (uid), another format version or unreadable: ignored
  - a record older than the longer of the stable and the scale-down stabilization windows: ignored
    (nothing in it could still count; the rule starts afresh, with its first-window guard)
  - otherwise each entry older than its own window is dropped, a panic that has ended is dropped,
    and `startedAt` is kept, so the first-window guard does not hold a restored rule back again.

The seconds between the last write and the restore are unobserved, as ticks where no router
answered are: they add nothing to either window.
The scale-down window is stored as its running maxima only (an entry followed by a larger or
equal one can never be the maximum of a window that ends now or later), so it stays small.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from llm_operator.api.autoscaling import AutoscalingSpec
from llm_operator.autoscaler.rule import ScalerState

VERSION = 1


@dataclass(frozen=True)
class Clock:
    """One instant on both clocks: the rule's (monotonic) and the record's (wall, epoch s)."""

    monotonic: float
    wall: float

    def to_monotonic(self, wall: float) -> float:
        return wall - self.wall + self.monotonic


def encode(state: ScalerState, uid: str, clock: Clock) -> str:
    """The record (JSON) of this state, saved now."""
    record: dict[str, Any] = {
        "version": VERSION,
        "uid": uid,
        "savedAt": round(clock.wall, 3),
        "startedAt": _age(state.started_at, clock),
        "panicUntil": _age(state.panic_until, clock),
        "samples": [[_age(t, clock), value] for t, value in state.samples],
        "wants": [[_age(t, clock), value] for t, value in running_maxima(state.wants)],
    }
    return json.dumps(record, separators=(",", ":"))


def decode(text: str, uid: str, spec: AutoscalingSpec, clock: Clock) -> ScalerState | None:
    """The state to resume from, or None when the record must be ignored (module docstring)."""
    try:
        record = json.loads(text)
        if record.get("version") != VERSION or record.get("uid") != uid:
            return None
        saved_at = float(record["savedAt"])
        samples = _entries(record.get("samples") or [], saved_at, clock)
        wants = _entries(record.get("wants") or [], saved_at, clock)
        started_at = _instant(record.get("startedAt"), saved_at, clock)
        panic_until = _instant(record.get("panicUntil"), saved_at, clock)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    stable_s = float(spec.stable_window_seconds)
    longest = max(stable_s, float(spec.scale_down_stabilization_seconds))
    if clock.wall - saved_at > longest:
        return None
    now = clock.monotonic
    return ScalerState(
        samples=deque((t, v) for t, v in samples if now - stable_s <= t <= now),
        wants=deque(
            (t, v) for t, v in wants if now - spec.scale_down_stabilization_seconds <= t <= now
        ),
        panic_until=panic_until if panic_until is not None and panic_until > now else None,
        started_at=started_at,
    )


def running_maxima(window: Iterable[tuple[float, int]]) -> list[tuple[float, int]]:
    """The entries no later entry equals or exceeds: the max of every suffix of the window."""
    kept: list[tuple[float, int]] = []
    for t, value in window:
        while kept and kept[-1][1] <= value:
            kept.pop()
        kept.append((t, value))
    return kept


def _age(t: float | None, clock: Clock) -> float | None:
    """Seconds from the save to `t` (negative: before it), rounded for a short record."""
    return None if t is None else round(t - clock.monotonic, 2)


def _instant(age: Any, saved_at: float, clock: Clock) -> float | None:
    return None if age is None else clock.to_monotonic(saved_at + float(age))


def _entries(items: list[Any], saved_at: float, clock: Clock) -> list[tuple[float, int]]:
    return [(clock.to_monotonic(saved_at + float(age)), int(value)) for age, value in items]
