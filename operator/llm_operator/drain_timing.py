"""How long an engine pod drains, and its termination grace period, from the spec and what the
engines report (GET /drain, engine/server/drain.py).

    deadline = drainTimeoutSeconds, raised toward the longest recent request when that is longer,
               up to maxDrainTimeoutSeconds (unset: never raised)
    grace    = preStop sleep + deadline + handoff seconds (engine-reported) + EXIT_SLACK_SECONDS

The deadline is the user's: `drainTimeoutSeconds` is what a leaving pod gives its streams, and
only `maxDrainTimeoutSeconds` lets the observed requests stretch it (the engine gets the same
deadline as `--drain-timeout`: a grace period longer than the engine's own deadline would only
be idle time). What the engine reports sizes the time past the deadline: it hands off or aborts
what is left, lets those streams send their last bytes and closes (`handoff_seconds`).

NOTE: both values are in the pod template, so a new observation would roll every pod. The
reconciler (controller/drain_sizing.py) applies a new observation only when the template changes
for another reason, and records the observation a template was built from on the Deployment
(`DRAIN_OBSERVATION_ANNOTATION`, outside the template) so it can rebuild the same template.
"""

import dataclasses
import json
import math
from typing import Any

PRE_STOP_SLEEP_SECONDS = 5
DEFAULT_HANDOFF_SECONDS = 7.0
"""The engine's handoff seconds (engine/server/drain.py) when no engine has reported them."""
MAX_HANDOFF_SECONDS = 60.0
"""What a report of the handoff seconds counts for at most."""
EXIT_SLACK_SECONDS = 8
"""Past the engine's handoff: its last engine step, the process's exit, the kubelet's timing."""


@dataclasses.dataclass(frozen=True)
class DrainObservation:
    """What the engines reported, as a pod template is built from it."""

    request_seconds: float | None = None
    """The longest recent request, or the oldest in flight if that is longer, over the engines."""
    handoff_seconds: float | None = None
    """Past the drain deadline, the longest an engine needs to hand off or abort and close."""

    def to_annotation(self) -> str:
        fields = {"requestSeconds": self.request_seconds, "handoffSeconds": self.handoff_seconds}
        return json.dumps(fields, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_annotation(cls, text: str | None) -> "DrainObservation | None":
        """The observation `to_annotation` wrote; None for none or for anything else."""
        try:
            fields = json.loads(text) if text else None
        except ValueError:
            return None
        if not isinstance(fields, dict):
            return None
        return cls(_seconds(fields.get("requestSeconds")), _seconds(fields.get("handoffSeconds")))


@dataclasses.dataclass(frozen=True)
class DrainTiming:
    drain_timeout_seconds: int
    """The engine's --drain-timeout: how long a leaving pod lets its requests run."""
    termination_grace_period_seconds: int
    """The pod's terminationGracePeriodSeconds: preStop, the drain, the handoff, the exit."""


def drain_timing(
    drain_timeout_seconds: int,
    max_drain_timeout_seconds: int | None,
    observed: DrainObservation | None,
) -> DrainTiming:
    """The spec's drainTimeoutSeconds and maxDrainTimeoutSeconds, and what the engines reported."""
    observed = observed or DrainObservation()
    deadline = drain_timeout_seconds
    cap = max(max_drain_timeout_seconds or 0, deadline)
    if observed.request_seconds is not None:
        deadline = min(max(deadline, math.ceil(observed.request_seconds)), cap)
    handoff = observed.handoff_seconds
    margin = math.ceil(
        DEFAULT_HANDOFF_SECONDS if handoff is None else min(handoff, MAX_HANDOFF_SECONDS)
    )
    grace = PRE_STOP_SLEEP_SECONDS + deadline + margin + EXIT_SLACK_SECONDS
    return DrainTiming(deadline, grace)


def _seconds(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return max(float(value), 0.0)
