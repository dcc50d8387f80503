"""Every Prometheus metric family the code registers, with its type and label names: the
engine's server (vLLM's names, pagedock's, per tenant, LoRA), the router's (routing and flow
control) and the operator's (autoscaler, reconciles). The dashboards and alerts may query only
these.

A family's series carry its name plus the suffixes prometheus_client writes for its type:
a counter `NAME_total` (and `NAME_created`), a histogram `NAME_bucket{le}`, `NAME_sum`,
`NAME_count` (and `NAME_created`), a gauge `NAME`.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

SERIES_SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
}


@dataclass(frozen=True)
class Family:
    name: str
    type: str
    labels: frozenset[str]

    def series_names(self) -> set[str]:
        return {self.name + suffix for suffix in SERIES_SUFFIXES[self.type]}


def exported_families() -> dict[str, Family]:
    """Every family, by name: the engine's and router's, and the operator's."""
    return {**fleet_families(), **operator_families()}


def operator_families() -> dict[str, Family]:
    """The families of the operator's /metrics (the autoscaler's and the reconciler's)."""
    from llm_operator.autoscaler.rule import SCALING_REASONS
    from llm_operator.operator_metrics import OperatorMetrics

    return registry_families(OperatorMetrics(SCALING_REASONS).registry)


def fleet_families() -> dict[str, Family]:
    """The families of a server with LoRA on (its per-adapter counter exists only then) and of a
    router with flow control, by family name."""
    from engine.server.metrics import EngineMetrics
    from router.flow.flow_metrics import FlowMetrics
    from router.metrics import RouterMetrics

    engine = EngineMetrics("model", max_loras=1)
    engine.tenants.set_known_priorities(())  # the server's start registers the tenant metrics
    router = RouterMetrics("prefix-aware")
    FlowMetrics(router.registry, {0})
    return {**registry_families(engine.registry), **registry_families(router.registry)}


def registry_families(registry: CollectorRegistry) -> dict[str, Family]:
    families: dict[str, Family] = {}
    for metric in registry.collect():
        labels = {name for sample in metric.samples for name in sample.labels} - {"le"}
        families[metric.name] = Family(metric.name, metric.type, frozenset(labels))
    # NOTE: a labelled metric without a child yet has no samples, and prometheus_client keeps
    # its label names on the collector only (no public accessor).
    for collector in list(registry._collector_to_names):
        if isinstance(collector, MetricWrapperBase):
            family = families[collector._name]
            declared = family.labels | frozenset(collector._labelnames)
            families[family.name] = Family(family.name, family.type, declared)
    return families


def series_index(families: dict[str, Family]) -> dict[str, Family]:
    """Each series name a scrape shows, to the family it belongs to."""
    return {series: family for family in families.values() for series in family.series_names()}


def parse_scrape(text: str) -> dict[str, list[Sample]]:
    """Each family a /metrics text shows, by name, with its samples."""
    families = {family.name: family for family in text_string_to_metric_families(text)}
    # NOTE: the text format gives each counter's and histogram's NAME_created series a gauge
    # family of its own; they belong to NAME.
    return {
        name: family.samples
        for name, family in families.items()
        if not (name.endswith("_created") and name.removesuffix("_created") in families)
    }
