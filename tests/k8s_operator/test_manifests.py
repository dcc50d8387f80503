"""manifests/ and the Helm chart: valid Kubernetes, helm lint --strict clean, not stale."""

import importlib.util
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.k8s_operator.chart import CHART, MONITORING_VALUES, ROOT, render
from tests.k8s_operator.validation import validate_kubernetes

VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "namespaced": {"watchNamespaces": ["team-a", "team-b"], "replicaCount": 1},
    "monitoring": MONITORING_VALUES,
}


def load_generator() -> Any:
    spec = importlib.util.spec_from_file_location("generate", ROOT / "manifests" / "generate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", sorted((ROOT / "manifests").glob("*.yaml")), ids=lambda p: p.name)
def test_manifests_are_valid_kubernetes(path: Path) -> None:
    documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    assert documents
    for document in documents:
        validate_kubernetes(document)


def test_operator_manifest_is_the_rendered_chart() -> None:
    expected = load_generator().operator_yaml()
    assert (ROOT / "manifests" / "operator.yaml").read_text() == expected, (
        "manifests/operator.yaml is stale: run `python manifests/generate.py`"
    )


def test_chart_lints_clean_in_strict_mode() -> None:
    for values in VALUE_SETS.values():
        report = helm.lint(str(CHART), values, strict=True)
        assert not report["errors"] and not report["messages"], report


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_chart_is_valid_kubernetes(name: str) -> None:
    documents = render(VALUE_SETS[name])
    for document in documents:
        validate_kubernetes(document)
    kinds = {document["kind"] for document in documents}
    assert "Deployment" in kinds
    if name == "namespaced":
        assert "ClusterRole" not in kinds and [d["kind"] for d in documents].count("Role") == 2


def test_rbac_grants_no_wildcards_and_no_secrets() -> None:
    roles = [d for d in render({}) if d["kind"] == "ClusterRole"]
    for rule in roles[0]["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        assert "secrets" not in rule["resources"]


def test_values_schema_rejects_bad_values() -> None:
    with helm.Chart.load(str(CHART)) as chart:
        chart.validate_schema({})
        for bad in ({"replicaCount": 0}, {"logLevel": "LOUD"}, {"unknownKey": 1}):
            with pytest.raises(helm.HelmValuesError):
                chart.validate_schema(bad)


def granted(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(
        group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"]
        for rule in rules
    )


@pytest.mark.parametrize("name", ["defaults", "namespaced"])
def test_rbac_grants_what_the_api_server_checks(name: str) -> None:
    from llm_operator.k8s.resources import KINDS

    roles = [d for d in render(VALUE_SETS[name]) if d["kind"] in {"ClusterRole", "Role"}]
    needed = [
        (kind.api_version.rpartition("/")[0], kind.plural, verb)
        for kind in KINDS.values()
        if kind.kind != "PersistentVolumeClaim"  # read only: the user's model cache claim
        for verb in ("get", "create", "patch", "delete")
    ]
    needed += [
        (g, p, v)
        for g, p in (("apps", "deployments"), ("", "services"), ("batch", "jobs"))
        for v in ("list", "watch")
    ]
    needed += [
        ("pagedock.dev", "llmdeployments", "list"),
        ("pagedock.dev", "llmdeployments", "watch"),
        ("pagedock.dev", "llmdeployments/status", "patch"),
        ("pagedock.dev", "llmdeployments/finalizers", "update"),  # blockOwnerDeletion
        ("", "events", "create"),
        ("", "pods", "list"),
        ("", "pods", "watch"),
        ("", "persistentvolumeclaims", "get"),
    ]
    for role in roles:
        missing = [item for item in needed if not granted(role["rules"], *item)]
        assert not missing, (role["kind"], missing)


def test_the_operators_own_namespace_is_always_a_scraper_namespace() -> None:
    for values, expected in (
        ({}, "pagedock-system,monitoring"),
        ({"metrics": {"scraperNamespaces": ["prom", "pagedock-system"]}}, "pagedock-system,prom"),
    ):
        deployment = next(d for d in render(values) if d["kind"] == "Deployment")
        env = {
            e["name"]: e.get("value")
            for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env["PAGEDOCK_OPERATOR_SCRAPER_NAMESPACES"] == expected
