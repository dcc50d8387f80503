"""The PromQL the chart ships: every dashboard query (panel targets and template variables) and
every alert expression, parsed with promql-parser, and what each one reads: the series names and
label names of its selectors, the labels its `by`/`on` clauses and legends name."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import promql_parser

from tests.k8s_operator.chart import CHART

DASHBOARDS = CHART / "dashboards"
# Grafana's interval variables, as a range PromQL parses; other $variables stand in label values.
GRAFANA_RANGES = {"$__rate_interval": "5m", "$__interval": "1m", "$__range": "1h"}
LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.*),\s*(?P<label>[a-zA-Z_]\w*)\)$", re.S)
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")


@dataclass(frozen=True)
class Query:
    where: str
    """The dashboard and panel, or the alert, it comes from (for failure messages)."""
    expr: str
    labels_named: frozenset[str] = frozenset()
    """Labels named outside the expression: a legend's {{label}}s, label_values' label."""


@dataclass(frozen=True)
class Selector:
    series: str
    matchers: frozenset[tuple[str, str]]
    """(label, value) of each matcher."""


def dashboards() -> dict[str, dict[str, Any]]:
    return {path.stem: json.loads(path.read_text()) for path in sorted(DASHBOARDS.glob("*.json"))}


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows too."""
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def dashboard_queries(name: str, dashboard: dict[str, Any]) -> list[Query]:
    queries = []
    for panel in panels(dashboard):
        for target in panel.get("targets", []):
            legend = frozenset(LEGEND_LABEL.findall(target.get("legendFormat", "")))
            where = f"{name}: {panel['title']} ({target['refId']})"
            queries.append(Query(where, target["expr"], legend))
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            match = LABEL_VALUES.match(variable["definition"])
            assert match, (name, variable["definition"])
            where = f"{name}: variable {variable['name']}"
            queries.append(Query(where, match["selector"], frozenset({match["label"]})))
    return queries


def rule_queries(prometheus_rule: dict[str, Any]) -> list[Query]:
    return [
        Query(f"alert {rule['alert']}", rule["expr"])
        for group in prometheus_rule["spec"]["groups"]
        for rule in group["rules"]
    ]


def parse(expr: str) -> promql_parser.Expr:
    for variable, duration in GRAFANA_RANGES.items():
        expr = expr.replace(variable, duration)
    return promql_parser.parse(expr)


def selectors(expr: promql_parser.Expr) -> list[Selector]:
    found: list[Selector] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, f"a selector without a metric name: {node}"
            matchers = frozenset((m.name, m.value) for m in node.matchers.matchers)
            found.append(Selector(node.name, matchers))

    promql_parser.walk(expr, visit)
    return found


def grouping_labels(expr: promql_parser.Expr) -> list[tuple[set[str], list[Selector]]]:
    """Each `by (...)` and `on (...)` clause's labels, with the selectors beneath it."""
    found: list[tuple[set[str], list[Selector]]] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.AggregateExpr):
            by = node.modifier
            if by is not None and by.type == promql_parser.AggModifierType.By:
                found.append((set(by.labels), selectors(node.expr)))
        if isinstance(node, promql_parser.BinaryExpr) and node.modifier is not None:
            on = node.modifier.matching
            if on is not None and on.type == promql_parser.LabelModifierType.Include:
                found.append((set(on.labels), selectors(node)))

    promql_parser.walk(expr, visit)
    return found


def chart_queries(prometheus_rule: dict[str, Any]) -> list[Query]:
    """The dashboards' queries and the rule's expressions."""
    queries = rule_queries(prometheus_rule)
    for name, dashboard in dashboards().items():
        queries += dashboard_queries(name, dashboard)
    return queries
