"""The Helm chart rendered as `helm template` would (helm-python-sdk), for the manifest and
monitoring tests."""

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "pagedock"
MONITORING_VALUES: dict[str, Any] = {
    "metrics": {
        "serviceMonitor": {"enabled": True},
        "grafanaDashboard": {"enabled": True},
        "prometheusRule": {"enabled": True},
    }
}


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    """Every document the chart renders with `values`, in template order."""
    with helm.Chart.load(str(CHART)) as chart:
        manifests = chart.render(
            values, name="pagedock", namespace="pagedock-system", is_install=True
        )
    return [
        document
        for path, text in sorted(manifests.items())
        if path.endswith(".yaml")
        for document in yaml.safe_load_all(text)
        if document
    ]


def rendered(kind: str, values: dict[str, Any] = MONITORING_VALUES) -> list[dict[str, Any]]:
    """The documents of one kind."""
    return [document for document in render(values) if document["kind"] == kind]


def prometheus_rule(values: dict[str, Any] = MONITORING_VALUES) -> dict[str, Any]:
    (rule,) = rendered("PrometheusRule", values)
    return rule
