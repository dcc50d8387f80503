"""RBAC as the API server evaluates it, for the requests the e2e recorded: a service account's
request is allowed when a rule of a (Cluster)Role bound to it matches the verb (get/list/watch
from GET, create, patch, update, delete), the API group, the resource or `resource/subresource`,
the name (`resourceNames`) and, for a RoleBinding, the namespace. Also the one admission check that
needs RBAC: setting an ownerReference with `blockOwnerDeletion` needs `update` on the owner's
`<resource>/finalizers` (OwnerReferencesPermissionEnforcement)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from tests.e2e.api_request import ApiRequest

if TYPE_CHECKING:
    from tests.e2e.apiserver import ClusterApi

Obj = dict[str, Any]
RBAC = "rbac.authorization.k8s.io/v1"


@dataclasses.dataclass(frozen=True)
class Permission:
    """One thing a request needs: a verb on group/resource[/subresource], maybe by name."""

    verb: str
    group: str
    resource: str
    namespace: str | None
    name: str | None = None

    def __str__(self) -> str:
        where = f"in {self.namespace}" if self.namespace else "cluster-wide"
        return f"{self.verb} {self.group or 'core'}/{self.resource} {self.name or ''} ({where})"


def needed(request: ApiRequest) -> list[Permission]:
    resource = request.resource + (f"/{request.subresource}" if request.subresource else "")
    found = [Permission(request.verb, request.group, resource, request.namespace, request.name)]
    for group, owner_resource in request.blocking_owners:
        found.append(Permission("update", group, f"{owner_resource}/finalizers", request.namespace))
    for rule in request.granted_rules:
        found += [
            Permission(verb, group, resource, request.namespace)
            for verb in rule.get("verbs", [])
            for group in rule.get("apiGroups", [])
            for resource in rule.get("resources", [])
        ]
    return found


def rule_allows(rule: Obj, permission: Permission) -> bool:
    def has(field: str, value: str) -> bool:
        values = rule.get(field) or []
        return "*" in values or value in values

    names = rule.get("resourceNames") or []
    return (
        has("verbs", permission.verb)
        and has("apiGroups", permission.group)
        and has("resources", permission.resource)
        and (not names or permission.name in names)
    )


def rules_of(subject: tuple[str, str], objects: Iterable[Obj]) -> list[tuple[str | None, Obj]]:
    """(namespace the rule applies in, or None for cluster-wide; rule) for a service account."""
    by_kind: dict[str, list[Obj]] = {}
    for obj in objects:
        by_kind.setdefault(obj.get("kind", ""), []).append(obj)
    roles = {
        ("Role", r["metadata"].get("namespace"), r["metadata"]["name"]): r
        for r in by_kind.get("Role", [])
    }
    roles |= {
        ("ClusterRole", None, r["metadata"]["name"]): r for r in by_kind.get("ClusterRole", [])
    }
    found: list[tuple[str | None, Obj]] = []
    for binding in by_kind.get("ClusterRoleBinding", []) + by_kind.get("RoleBinding", []):
        if not _binds(binding, subject):
            continue
        namespace = (
            binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        )
        ref = binding["roleRef"]
        role_namespace = namespace if ref["kind"] == "Role" else None
        role = roles.get((ref["kind"], role_namespace, ref["name"]))
        found += [(namespace, rule) for rule in (role or {}).get("rules", [])]
    return found


def _binds(binding: Obj, subject: tuple[str, str]) -> bool:
    namespace, name = subject
    return any(
        s.get("kind") == "ServiceAccount"
        and s.get("name") == name
        and s.get("namespace", binding["metadata"].get("namespace")) == namespace
        for s in binding.get("subjects") or []
    )


def allowed(permission: Permission, rules: list[tuple[str | None, Obj]]) -> bool:
    return any(
        (scope is None or scope == permission.namespace) and rule_allows(rule, permission)
        for scope, rule in rules
    )


def denied(requests: Iterable[ApiRequest], objects: list[Obj]) -> dict[str, list[str]]:
    """For each service account (`sa:<namespace>:<name>` token): the permissions it used but
    lacked, in the order first used."""
    found: dict[str, list[str]] = {}
    cache: dict[str, list[tuple[str | None, Obj]]] = {}
    for request in requests:
        if not request.token.startswith("sa:"):
            continue
        _, namespace, name = request.token.split(":", 2)
        rules = cache.setdefault(request.token, rules_of((namespace, name), objects))
        for permission in needed(request):
            text = str(permission)
            if not allowed(permission, rules) and text not in found.get(request.token, []):
                found.setdefault(request.token, []).append(text)
    return found


RBAC_RESOURCES = ("roles", "rolebindings", "clusterroles", "clusterrolebindings")


def assert_every_request_allowed(api: ClusterApi) -> None:
    """Every request a service account made (the operator's with the ClusterRole of
    manifests/operator.yaml, the chart rendered; the router's with the Role the operator rendered)
    was allowed by the RBAC objects in the cluster."""
    callers = {request.token for request in api.requests_log if request.token.startswith("sa:")}
    assert callers, "no service account called the API: nothing was checked"
    objects = [obj for plural in RBAC_RESOURCES for obj in api.all_live(f"{RBAC}/{plural}")]
    found = denied(list(api.requests_log), objects)
    report = "\n".join(f"{who}:\n  " + "\n  ".join(lacks) for who, lacks in found.items())
    assert not found, "requests the RBAC rules do not allow:\n" + report
