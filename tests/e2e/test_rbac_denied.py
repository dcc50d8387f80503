"""Issue 41 on the emulated cluster: RBAC denied when the request is made, not audited after.
The operator's ClusterRole is installed without `create` on Services; the API server refuses the
operator's creates with its 403, the LLMDeployment's Ready condition says so in the API server's
words (reason ChildRejected), and once the full ClusterRole is applied the next resync creates
them and the deployment becomes Ready."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.cluster import EXAMPLE, REPO, Cluster, for_e2e
from tests.eventually import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(900)]

OPERATOR_USER = "system:serviceaccount:pagedock-system:pagedock"


def without_creating_services(obj: dict[str, Any]) -> dict[str, Any]:
    obj = for_e2e(obj)
    if obj["kind"] == "ClusterRole" and obj["metadata"]["name"] == "pagedock":
        for rule in obj["rules"]:
            if rule.get("apiGroups") == [""] and "services" in rule.get("resources", []):
                rule["verbs"] = [verb for verb in rule["verbs"] if verb != "create"]
    return obj


async def test_a_refused_create_is_named_in_status_until_the_role_allows_it(
    cluster: Cluster,
) -> None:
    await cluster.apply_file(REPO / "manifests" / "crd.yaml")
    await cluster.apply_file(REPO / "manifests" / "operator.yaml", without_creating_services)
    await cluster.apply_file(EXAMPLE)
    expected = (
        f'services is forbidden: User "{OPERATOR_USER}" cannot create resource "services" '
        'in API group "" in the namespace "default"'
    )

    def refused() -> bool:
        ready = cluster.condition("default", "smollm2", "Ready")
        return ready.get("reason") == "ChildRejected" and expected in ready.get("message", "")

    await eventually(
        refused, 300, lambda: f"Ready: {cluster.condition('default', 'smollm2', 'Ready')}"
    )
    assert not cluster.api.all_live("v1/services", "default")
    posted = [
        r for r in cluster.api.requests_log if r.token.startswith("sa:") and r.method == "POST"
    ]
    assert any(r.resource == "services" for r in posted)  # asked, refused, nothing stored

    await cluster.install_operator()  # the full ClusterRole
    await cluster.wait_ready("default", "smollm2", timeout=420)
    assert cluster.api.all_live("v1/services", "default")
