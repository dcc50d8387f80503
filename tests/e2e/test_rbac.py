"""The RBAC evaluator of the e2e (runs in `make test`): what it allows and what it denies."""

from __future__ import annotations

from typing import Any

from tests.e2e.api_request import ApiRequest
from tests.e2e.rbac import denied

OPERATOR = "sa:ops:op"


def request(method: str, resource: str, **fields: Any) -> ApiRequest:
    group, _, plural = resource.rpartition("/")
    defaults: dict[str, Any] = {
        "token": OPERATOR,
        "method": method,
        "group": group,
        "resource": plural,
        "subresource": None,
        "namespace": "team-a",
        "name": None,
        "watch": False,
    }
    return ApiRequest(**{**defaults, **fields})


def cluster_role(*rules: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"kind": "ClusterRole", "metadata": {"name": "op"}, "rules": list(rules)},
        {
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "op"},
            "roleRef": {"kind": "ClusterRole", "name": "op"},
            "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "ops"}],
        },
    ]


def rule(group: str, resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": [group], "resources": resources, "verbs": verbs}


def test_get_list_and_watch_are_three_verbs() -> None:
    objects = cluster_role(rule("apps", ["deployments"], ["get", "list"]))
    requests = [
        request("GET", "apps/deployments", name="x"),
        request("GET", "apps/deployments"),
        request("GET", "apps/deployments", watch=True),
    ]
    assert denied(requests, objects) == {OPERATOR: ["watch apps/deployments  (in team-a)"]}


def test_a_subresource_needs_its_own_rule() -> None:
    objects = cluster_role(rule("pagedock.dev", ["llmdeployments"], ["patch"]))
    requests = [request("PATCH", "pagedock.dev/llmdeployments", name="x", subresource="status")]
    assert denied(requests, objects) == {
        OPERATOR: ["patch pagedock.dev/llmdeployments/status x (in team-a)"]
    }


def test_a_role_binding_grants_only_in_its_namespace() -> None:
    objects = [
        {
            "kind": "Role",
            "metadata": {"name": "r", "namespace": "team-a"},
            "rules": [rule("", ["pods"], ["list"])],
        },
        {
            "kind": "RoleBinding",
            "metadata": {"name": "r", "namespace": "team-a"},
            "roleRef": {"kind": "Role", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "op", "namespace": "ops"}],
        },
    ]
    requests = [request("GET", "pods"), request("GET", "pods", namespace="team-b")]
    assert denied(requests, objects) == {OPERATOR: ["list core/pods  (in team-b)"]}


def test_block_owner_deletion_needs_update_on_the_owners_finalizers() -> None:
    objects = cluster_role(rule("apps", ["deployments"], ["create"]))
    owner = ("pagedock.dev", "llmdeployments")
    requests = [request("POST", "apps/deployments", blocking_owners=(owner,))]
    assert denied(requests, objects) == {
        OPERATOR: ["update pagedock.dev/llmdeployments/finalizers  (in team-a)"]
    }


def test_creating_a_role_needs_holding_its_permissions() -> None:
    objects = cluster_role(rule("rbac.authorization.k8s.io", ["roles"], ["create"]))
    grants = (rule("discovery.k8s.io", ["endpointslices"], ["watch"]),)
    requests = [request("POST", "rbac.authorization.k8s.io/roles", granted_rules=grants)]
    assert denied(requests, objects) == {
        OPERATOR: ["watch discovery.k8s.io/endpointslices  (in team-a)"]
    }


def test_callers_without_a_service_account_are_not_checked() -> None:
    assert denied([request("DELETE", "pods", name="x", token="e2e:admin")], []) == {}
