"""The operator's own Prometheus metrics (`pagedock_operator_*`), served on /metrics.

Per LLMDeployment (labels `namespace` and `llmdeployment`): what the built-in autoscaler read
and decided at its last tick, the scale decisions it made, and the reconcile passes and their
failures; one histogram of how long a pass takes. The autoscaler and the reconciler update it
where they decide; nothing here reads the cluster. An LLMDeployment's series end when it is
deleted, and its autoscaler series when it is no longer autoscaled by this replica (autoscaling
off, or another replica leads), so a dashboard never shows a decision nobody makes any more.

A reconcile pass or an autoscaler tick of an LLMDeployment reads the cluster, awaits, and writes
its metrics at the end, and the LLMDeployment may be deleted (`forget`) in between: a write after
that would bring back series nothing removes again. So each LLMDeployment has an epoch, which
`forget` moves on; a pass captures `epoch(key)` as it begins and hands it to each write, and a
write with an epoch that is no longer the current one is dropped (the pass was of an object since
deleted). The epochs of deleted LLMDeployments stay (one int per name), so that a pass still in
flight is recognised whenever it ends, and a new LLMDeployment of the same name counts afresh.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.metrics import MetricWrapperBase

PREFIX = "pagedock_operator_"
LABELS = ("namespace", "llmdeployment")
Key = tuple[str, str]
Metric = TypeVar("Metric", bound=MetricWrapperBase)
_RECONCILE_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclasses.dataclass(frozen=True)
class AutoscalerReading:
    """One LLMDeployment's autoscaler tick: its inputs and its decision."""

    desired_replicas: int
    """The replicas decided (written to spec.replicas)."""
    wanted_replicas: int
    """What the demand asked for, before minReplicas, maxReplicas and the scale limits."""
    current_replicas: int
    """spec.replicas before the decision."""
    ready_replicas: int
    """Ready engine replicas."""
    min_replicas: int
    max_replicas: int
    target_concurrency: float
    """Requests per engine replica to aim for."""
    concurrency: int
    """This tick's demand: held + flow-queued + max(in flight, the engines' own count)."""
    stable_concurrency: float
    """Mean concurrency over the stable window."""
    panic_concurrency: float
    """Mean concurrency over the panic window."""
    panicking: bool
    num_held_requests: int
    """Requests the routers hold for want of an engine (at zero replicas)."""
    num_inflight_requests: int
    """Requests in flight through the routers."""
    num_routers: int
    """Routers whose demand was read; 0 when none answered (then nothing is decided)."""

    @property
    def at_max_replicas(self) -> bool:
        """At maxReplicas with a demand that asks for at least as many: no headroom left."""
        return self.max_replicas <= min(self.desired_replicas, self.wanted_replicas)


# NOTE: a data table: each reading field's gauge and its HELP text.
AUTOSCALER_GAUGES = {
    "desired_replicas": "Engine replicas the built-in autoscaler decided at its last tick.",
    "wanted_replicas": "Engine replicas the demand asked for, before the bounds and scale limits.",
    "current_replicas": "spec.replicas before the autoscaler's last decision.",
    "ready_replicas": "Ready engine replicas at the autoscaler's last tick.",
    "min_replicas": "spec.autoscaling.minReplicas.",
    "max_replicas": "spec.autoscaling.maxReplicas.",
    "at_max_replicas": "1 at maxReplicas with a demand that asks for at least as many, else 0.",
    "target_concurrency": "spec.autoscaling.targetConcurrency: requests per engine replica.",
    "concurrency": "Requests held, flow-queued and in flight at the last tick (the demand).",
    "stable_concurrency": "Mean concurrency over the stable window.",
    "panic_concurrency": "Mean concurrency over the panic window.",
    "panicking": "1 while the autoscaler panics (scales on the panic window, never down).",
    "num_held_requests": "Requests the routers hold for want of an engine.",
    "num_inflight_requests": "Requests in flight through the routers.",
    "num_routers": "Routers whose demand was read at the last tick (0: none answered).",
}


class OperatorMetrics:
    """The registry behind the operator's /metrics, and the updates its parts make."""

    def __init__(self, scaling_reasons: Mapping[str, Iterable[str]] | None = None) -> None:
        """`scaling_reasons`: direction (up, down) -> the reasons a scale that way can have; each
        pair's counter starts at 0 with an LLMDeployment's first tick, so that `increase()` sees
        the first decision too."""
        self.scaling_reasons = {d: tuple(r) for d, r in (scaling_reasons or {}).items()}
        self.registry = CollectorRegistry()
        self._gauges = {
            name: Gauge(PREFIX + "autoscaler_" + name, text, LABELS, registry=self.registry)
            for name, text in AUTOSCALER_GAUGES.items()
        }
        self._scalings = Counter(
            PREFIX + "autoscaler_scaling_decisions",
            "Scale decisions of the built-in autoscaler, by direction (up, down) and reason.",
            (*LABELS, "direction", "reason"),
            registry=self.registry,
        )
        self._reconciles = Counter(
            PREFIX + "reconciles",
            "Reconcile passes of an LLMDeployment, failed or not.",
            LABELS,
            registry=self.registry,
        )
        self._reconcile_errors = Counter(
            PREFIX + "reconcile_errors",
            "Reconcile passes that failed or could not apply every child, by reason.",
            (*LABELS, "reason"),
            registry=self.registry,
        )
        self.reconcile_duration = Histogram(
            PREFIX + "reconcile_duration_seconds",
            "How long one reconcile pass took.",
            buckets=_RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self._epochs: dict[Key, int] = {}
        # The label values written per LLMDeployment, so its series can be removed.
        self._series: dict[str, dict[Key, set[tuple[MetricWrapperBase, tuple[str, ...]]]]] = {
            "autoscaler": defaultdict(set),
            "reconcile": defaultdict(set),
        }

    def epoch(self, key: Key) -> int:
        """The LLMDeployment's epoch now, for a pass to capture as it begins."""
        return self._epochs.get(key, 0)

    def observe_autoscaler(
        self, key: Key, reading: AutoscalerReading, epoch: int | None = None
    ) -> None:
        """One tick's reading; `epoch` (here and in every write): the one the pass captured,
        None for a write that did not await since it read the cluster."""
        if self._stale(key, epoch):
            return
        if key not in self._series["autoscaler"]:
            for direction, reasons in self.scaling_reasons.items():
                for reason in reasons:
                    self._child("autoscaler", self._scalings, key, direction, reason)
        values = {**dataclasses.asdict(reading), "at_max_replicas": reading.at_max_replicas}
        for name, gauge in self._gauges.items():
            self._child("autoscaler", gauge, key).set(float(values[name]))

    def observe_no_demand(self, key: Key, epoch: int | None = None) -> None:
        """No router answered: no decision, and the last one's gauges stay."""
        if self._stale(key, epoch):
            return
        self._child("autoscaler", self._gauges["num_routers"], key).set(0)

    def count_scaling(
        self, key: Key, current: int, desired: int, reason: str, epoch: int | None = None
    ) -> None:
        if self._stale(key, epoch):
            return
        direction = "up" if desired > current else "down"
        self._child("autoscaler", self._scalings, key, direction, reason).inc()

    def count_reconcile(
        self, key: Key, seconds: float, failure: str | None, epoch: int | None = None
    ) -> None:
        """One reconcile pass; `failure` names why it failed or applied only part, if it did."""
        if self._stale(key, epoch):
            return
        self.reconcile_duration.observe(seconds)
        self._child("reconcile", self._reconciles, key).inc()
        if failure is not None:
            self._child("reconcile", self._reconcile_errors, key, failure).inc()

    def retain_autoscaled(self, namespace: str | None, keys: Iterable[Key]) -> None:
        """End the autoscaler series of every LLMDeployment in `namespace` (None: all) but
        `keys`: gone, or no longer autoscaled here."""
        kept = set(keys)
        for key in list(self._series["autoscaler"]):
            if (namespace is None or key[0] == namespace) and key not in kept:
                self.forget_autoscaler(key)

    def forget_autoscaler(self, key: Key) -> None:
        """Its autoscaler series end (autoscaling off, or deleted)."""
        self._remove("autoscaler", key)

    def forget(self, key: Key) -> None:
        """The LLMDeployment is gone: every series of it ends, and so does its epoch (the writes
        of a pass begun before are dropped)."""
        self._epochs[key] = self.epoch(key) + 1
        for group in self._series:
            self._remove(group, key)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)

    def _stale(self, key: Key, epoch: int | None) -> bool:
        return epoch is not None and epoch != self.epoch(key)

    def _child(self, group: str, metric: Metric, key: Key, *extra: str) -> Metric:
        values = (*key, *extra)
        self._series[group][key].add((metric, values))
        return metric.labels(*values)

    def _remove(self, group: str, key: Key) -> None:
        for metric, values in self._series[group].pop(key, set()):
            metric.remove(*values)
