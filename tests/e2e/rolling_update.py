"""A Deployment's RollingUpdate, as the Deployment controller paces it: what real Kubernetes does
when a template changes and the e2e needs for rollouts under load (docs/e2e.md).

With `maxSurge` and `maxUnavailable` (numbers or percentages of `spec.replicas`, surge rounded up
and unavailable down, as Kubernetes does; the default 25 % each), one pass:

* creates new-template pods while all pods stay within `replicas + maxSurge`;
* deletes old-template pods, unready ones first (they serve nothing), then ready ones while the
  ready pods stay at least `replicas - maxUnavailable`.

A deleted pod leaves the count at once (a ReplicaSet does not count terminating pods), while it
runs its preStop hook and grace period. `Recreate` deletes every old pod first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]
DEFAULT_BUDGET = "25%"


@dataclass(frozen=True)
class RolloutStep:
    num_new: int
    """New-template pods to create now."""
    old_to_delete: list[Obj]
    """Old-template pods to delete now."""


def rollout_step(deployment: Obj, fresh: list[Obj], stale: list[Obj], is_ready: Any) -> RolloutStep:
    """This pass's part of the rollout from the `stale` pods to the `fresh` ones."""
    wanted = int(deployment["spec"].get("replicas", 1))
    strategy = deployment["spec"].get("strategy") or {}
    if strategy.get("type") == "Recreate":
        return RolloutStep(0 if stale else max(wanted - len(fresh), 0), list(stale))
    surge, unavailable = budgets(strategy.get("rollingUpdate") or {}, wanted)
    num_new = max(min(wanted - len(fresh), wanted + surge - len(fresh) - len(stale)), 0)
    unready = [p for p in stale if not is_ready(p)]
    ready_old = [p for p in stale if is_ready(p)]
    ready_new = sum(map(is_ready, fresh))
    min_available = wanted - unavailable
    # The Deployment controller's budget: no more old pods go than keeps `min_available` once
    # the new pods that are not ready yet are discounted.
    budget = len(fresh) + len(stale) - min_available - (len(fresh) - ready_new)
    if budget <= 0:
        return RolloutStep(num_new, [])
    cleanup = unready[:budget]
    down = min(budget - len(cleanup), max(ready_new + len(ready_old) - min_available, 0))
    return RolloutStep(num_new, cleanup + ready_old[:down])


def budgets(rolling_update: Obj, wanted: int) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) as pod counts; never both 0 (the API refuses that)."""
    surge = _count(rolling_update.get("maxSurge", DEFAULT_BUDGET), wanted, math.ceil)
    unavailable = _count(rolling_update.get("maxUnavailable", DEFAULT_BUDGET), wanted, math.floor)
    return (surge, unavailable) if surge or unavailable else (1, 0)


def _count(value: int | str, wanted: int, rounding: Any) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return int(rounding(wanted * int(value[:-1]) / 100))
    return int(value)
