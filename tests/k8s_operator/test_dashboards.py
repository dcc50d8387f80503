"""The chart's Grafana dashboards and PrometheusRule: they render, have the shapes Grafana and
prometheus-operator read, every query parses (promql-parser) and reads only series and labels
the engine, router and operator export, with the labels a ServiceMonitor scrape adds."""

import json
import re
from typing import Any

import helm_python as helm
import pytest
from llm_operator.api.spec import LLMDeploymentSpec
from llm_operator.builders import BuildContext, build_children
from llm_operator.names import engine_name
from llm_operator.settings import OperatorSettings

from tests.k8s_operator.chart import CHART, prometheus_rule, render, rendered
from tests.k8s_operator.exported_metrics import exported_families, series_index
from tests.k8s_operator.monitoring_queries import (
    Query,
    chart_queries,
    dashboards,
    grouping_labels,
    panels,
    parse,
    selectors,
)

# What a ServiceMonitor's scrape adds to every series (prometheus-operator's relabelling).
SCRAPE_LABELS = {"namespace", "service", "pod", "container", "endpoint", "job", "instance"}
DASHBOARD_VARIABLES = re.compile(r"\$\{?(\w+)")
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range"}


def queries() -> list[Query]:
    return chart_queries(prometheus_rule())


def alerts(rule: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}


def test_nothing_monitoring_renders_by_default() -> None:
    kinds = {d["kind"] for d in render({})}
    assert not kinds & {"ConfigMap", "PrometheusRule", "ServiceMonitor"}


def test_each_dashboard_renders_as_a_configmap_for_the_grafana_sidecar() -> None:
    values = {"metrics": {"grafanaDashboard": {"enabled": True, "annotations": {"f": "LLM"}}}}
    maps = {m["metadata"]["name"]: m for m in rendered("ConfigMap", values)}
    assert set(maps) == {f"pagedock-dashboard-{name}" for name in dashboards()}
    for name, dashboard in dashboards().items():
        configmap = maps[f"pagedock-dashboard-{name}"]
        assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert configmap["metadata"]["annotations"] == {"f": "LLM"}
        (text,) = configmap["data"].values()
        assert json.loads(text) == dashboard
        assert len(text) < 1_000_000  # a ConfigMap holds at most 1 MiB


def test_dashboards_have_the_shape_grafana_reads() -> None:
    uids = [d["uid"] for d in dashboards().values()]
    assert len(set(uids)) == len(uids)
    for name, dashboard in dashboards().items():
        assert dashboard["schemaVersion"] >= 39 and dashboard["title"], name
        variables = {v["name"]: v for v in dashboard["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource"
        assert variables["datasource"]["query"] == "prometheus"
        ids = [panel["id"] for panel in panels(dashboard)]
        assert len(set(ids)) == len(ids), name
        assert_no_overlap(name, [p["gridPos"] for p in panels(dashboard)])
        for panel in panels(dashboard):
            if panel["type"] == "row":
                continue
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            refs = [t["refId"] for t in panel["targets"]]
            assert panel["targets"] and len(set(refs)) == len(refs), (name, panel["title"])
        used = set(DASHBOARD_VARIABLES.findall(json.dumps(dashboard["panels"])))
        used |= {
            var
            for v in variables.values()
            for var in DASHBOARD_VARIABLES.findall(v.get("definition", ""))
        }
        assert used - GRAFANA_BUILTINS <= set(variables), (name, used - set(variables))


def assert_no_overlap(name: str, boxes: list[dict[str, int]]) -> None:
    cells: set[tuple[int, int]] = set()
    for box in boxes:
        assert box["x"] >= 0 and box["x"] + box["w"] <= 24, (name, box)
        covered = {
            (x, y)
            for x in range(box["x"], box["x"] + box["w"])
            for y in range(box["y"], box["y"] + box["h"])
        }
        assert not covered & cells, (name, box)
        cells |= covered


def test_dashboards_follow_the_operators_service_names() -> None:
    """The deployment variable is the engine Service's name without its suffix."""
    for name in ("deployment", "replica"):
        variables = {v["name"]: v for v in dashboards()[name]["templating"]["list"]}
        pattern = variables["deployment"]["regex"].strip("/")
        match = re.match(pattern, engine_name("chat"))
        assert match and match.group(1) == "chat"


def test_every_alert_has_a_severity_a_summary_a_description_and_a_duration() -> None:
    rule = prometheus_rule()
    assert set(alerts(rule)) == {
        "PagedockTTFTBudgetBurnFast",
        "PagedockTTFTBudgetBurnSlow",
        "PagedockErrorBudgetBurnFast",
        "PagedockErrorBudgetBurnSlow",
        "PagedockEngineStalled",
        "PagedockKVCacheExhausted",
        "PagedockSaturated",
        "PagedockAutoscalerAtMaxReplicas",
        "PagedockReconcileErrors",
    }
    for name, alert in alerts(rule).items():
        assert alert["labels"]["severity"] in {"critical", "warning"}, name
        assert alert["annotations"]["summary"] and alert["for"], name
        # Prometheus's own template, left intact by Helm's.
        assert "{{ $labels.namespace }}" in alert["annotations"]["description"], name


def test_every_query_parses_as_promql() -> None:
    failures = []
    for query in queries():
        try:
            parse(query.expr)
        except Exception as error:  # promql-parser raises ValueError with the position
            failures.append(f"{query.where}: {error}")
    assert not failures, "\n".join(failures)


def test_every_query_reads_series_the_code_exports() -> None:
    exported = series_index(exported_families())
    missing = [
        f"{query.where}: {selector.series}"
        for query in queries()
        for selector in selectors(parse(query.expr))
        if selector.series not in exported
    ]
    assert not missing, "\n".join(missing)


def labels_of(selector_series: str) -> set[str]:
    family = series_index(exported_families())[selector_series]
    bucket = {"le"} if selector_series.endswith("_bucket") else set()
    return set(family.labels) | SCRAPE_LABELS | bucket


def test_every_label_a_query_names_is_one_its_series_carry() -> None:
    wrong = []
    for query in queries():
        expr = parse(query.expr)
        found = selectors(expr)
        for selector in found:
            unknown = {label for label, _ in selector.matchers} - labels_of(selector.series)
            wrong += [f"{query.where}: {selector.series}{{{u}}}" for u in unknown]
        for labels, beneath in grouping_labels(expr):
            carried = set().union(*(labels_of(s.series) for s in beneath))
            wrong += [f"{query.where}: by/on ({label})" for label in labels - carried]
        carried = set().union(*(labels_of(s.series) for s in found))
        wrong += [f"{query.where}: {{{{{label}}}}}" for label in query.labels_named - carried]
    assert not wrong, "\n".join(wrong)


def ttft_bucket_bounds() -> list[str]:
    """The `le` labels of the engine's TTFT histogram, as it writes them."""
    from engine.runtime.outputs import IterationStats
    from engine.server.metrics import EngineMetrics

    metrics = EngineMetrics("model")
    metrics.observe_outputs(IterationStats(time_to_first_tokens_s=[0.1]))
    (family,) = [m for m in metrics.registry.collect() if m.name.endswith("first_token_seconds")]
    return [s.labels["le"] for s in family.samples if s.name.endswith("_bucket")][:-1]  # no +Inf


def test_a_ttft_objective_can_name_every_bucket_bound_of_the_engine_and_nothing_else() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    ttft = schema["properties"]["metrics"]["properties"]["prometheusRule"]["properties"]["ttft"]
    assert ttft["properties"]["seconds"]["enum"] == ttft_bucket_bounds()
    bad = {"metrics": {"prometheusRule": {"ttft": {"seconds": "2"}}}}
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmValuesError):
        chart.validate_schema(bad)


def test_the_alerts_thresholds_come_from_the_values() -> None:
    rule_values = {
        "enabled": True,
        "labels": {"release": "prom"},
        "alertLabels": {"team": "llm"},
        "ttft": {"seconds": "1.0", "objective": 0.99},
        "errors": {"objective": 0.9995},
        "stalledEngine": {"for": "3m"},
        "kvCacheExhausted": {"usage": 0.9, "for": "20m"},
        "saturation": {"queuedRequests": 8, "for": "30m"},
        "autoscalerAtMax": {"for": "45m"},
        "reconcileErrors": {"for": "20m"},
    }
    rule = prometheus_rule({"metrics": {"prometheusRule": rule_values}})
    assert rule["metadata"]["labels"]["release"] == "prom"
    by_name = alerts(rule)
    assert all(a["labels"]["team"] == "llm" for a in by_name.values())
    assert 'le="1.0"' in by_name["PagedockTTFTBudgetBurnFast"]["expr"]
    assert "(1 - 0.99) > 14.4" in by_name["PagedockTTFTBudgetBurnFast"]["expr"]
    assert "(1 - 0.9995) > 6" in by_name["PagedockErrorBudgetBurnSlow"]["expr"]
    assert "[3m]" in by_name["PagedockEngineStalled"]["expr"]
    assert by_name["PagedockEngineStalled"]["for"] == "3m"
    assert "> 0.9\n" in by_name["PagedockKVCacheExhausted"]["expr"]
    assert by_name["PagedockKVCacheExhausted"]["for"] == "20m"
    assert "> 8" in by_name["PagedockSaturated"]["expr"]
    assert by_name["PagedockSaturated"]["for"] == "30m"
    assert by_name["PagedockAutoscalerAtMaxReplicas"]["for"] == "45m"
    assert "for 45m" in by_name["PagedockAutoscalerAtMaxReplicas"]["annotations"]["description"]
    assert by_name["PagedockReconcileErrors"]["for"] == "20m"


def test_the_operators_alerts_read_the_autoscalers_gauge_and_the_reconcile_errors() -> None:
    """Not a guess from queues: the gauge the autoscaler sets when it is at maxReplicas with a
    demand for as many or more, and the errors the reconciler counts."""
    by_name = alerts(prometheus_rule())
    at_max = {
        s.series for s in selectors(parse(by_name["PagedockAutoscalerAtMaxReplicas"]["expr"]))
    }
    assert at_max == {"pagedock_operator_autoscaler_at_max_replicas"}
    errors = {s.series for s in selectors(parse(by_name["PagedockReconcileErrors"]["expr"]))}
    assert errors == {"pagedock_operator_reconcile_errors_total"}
    for name in ("PagedockAutoscalerAtMaxReplicas", "PagedockReconcileErrors"):
        assert "{{ $labels.llmdeployment }}" in by_name[name]["annotations"]["description"]


@pytest.mark.parametrize("spec", [{}, {"gateway": {}}], ids=["plain", "gateway"])
def test_the_service_monitors_select_each_deployments_engine_and_router_service(
    spec: dict[str, Any],
) -> None:
    """Not the router's endpoint-picker Service (gateway), which has no port named http."""
    spec_model = LLMDeploymentSpec.model_validate(spec)
    ctx = BuildContext("chat", "team-a", spec_model, OperatorSettings())
    services = [c for c in build_children(ctx) if c["kind"] == "Service"]
    scraped = {}
    for monitor in rendered("ServiceMonitor"):
        if monitor["metadata"]["name"] == "pagedock-operator":
            continue  # the operator's own: the next test
        selector = monitor["spec"]["selector"]["matchLabels"].items()
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint["path"] == "/metrics"
        scraped[monitor["metadata"]["name"]] = [
            s["metadata"]["name"]
            for s in services
            if selector <= s["metadata"]["labels"].items()
            and endpoint["port"] in [p.get("name") for p in s["spec"]["ports"]]
        ]
    assert scraped == {"pagedock-engines": ["chat-engine"], "pagedock-routers": ["chat-router"]}


def test_the_operators_service_monitor_scrapes_its_metrics_port_keeping_the_series_namespace() -> (
    None
):
    (monitor,) = [
        m for m in rendered("ServiceMonitor") if m["metadata"]["name"].endswith("operator")
    ]
    (service,) = [s for s in rendered("Service") if s["metadata"]["name"] == "pagedock-metrics"]
    (deployment,) = rendered("Deployment")
    selector = monitor["spec"]["selector"]["matchLabels"].items()
    assert selector <= service["metadata"]["labels"].items()
    assert "namespaceSelector" not in monitor["spec"]  # its own: the operator's namespace
    (endpoint,) = monitor["spec"]["endpoints"]
    # The series carry the LLMDeployment's namespace, which the scrape's must not replace.
    assert (endpoint["port"], endpoint["path"], endpoint["honorLabels"]) == (
        "metrics",
        "/metrics",
        True,
    )
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == "metrics"]
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (container,) = pod["spec"]["containers"]
    (container_port,) = [p for p in container["ports"] if p["name"] == port["targetPort"]]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PAGEDOCK_OPERATOR_METRICS_PORT"] == str(container_port["containerPort"]) == "8080"


def test_the_metrics_port_comes_from_the_values() -> None:
    (deployment,) = rendered("Deployment", {"metricsPort": 9090})
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["PAGEDOCK_OPERATOR_METRICS_PORT"] == "9090"
    assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in container["ports"]
    with helm.Chart.load(str(CHART)) as chart, pytest.raises(helm.HelmValuesError):
        chart.validate_schema({"metricsPort": 8081})  # the liveness endpoint's
