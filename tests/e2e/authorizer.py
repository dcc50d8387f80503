"""RBAC enforced when a request arrives, as kube-apiserver's authorizer and admission do: a
service account's request that its Roles and ClusterRoles do not allow is refused with the API
server's 403 `Forbidden` Status and message, before anything is stored, so the caller's handling
of a refusal runs (the operator puts it in status). Three checks, in the API server's order:

1. the request itself: its verb on its resource (or `resource/subresource`), by name and
   namespace (the authorizer);
2. an ownerReference with `blockOwnerDeletion` needs `update` on the owner's
   `<resource>/finalizers` (OwnerReferencesPermissionEnforcement);
3. a Role or ClusterRole written may grant only what its writer holds, unless the writer may
   `escalate` (RBAC's escalation prevention).

Callers with any other token (the tests' admin, the kubelet) are not checked. The rules are read
from the cluster's RBAC objects, cached until one of them is written."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import kmock

from tests.e2e.api_request import ApiRequest
from tests.e2e.rbac import Permission, allowed, rules_of

Obj = dict[str, Any]
Rules = list[tuple[str | None, Obj]]
RBAC_GROUP = "rbac.authorization.k8s.io"


class Authorizer:
    def __init__(self, rbac_objects: Callable[[], list[Obj]]) -> None:
        self.rbac_objects = rbac_objects
        """The cluster's Roles, ClusterRoles and their bindings, as stored now."""
        self._rules: dict[str, Rules] = {}

    def forget(self) -> None:
        """An RBAC object was written: read the rules again."""
        self._rules.clear()

    def check(self, request: ApiRequest) -> None:
        """Raise the API server's 403 when a service account may not make `request`."""
        if not request.token.startswith("sa:"):
            return
        rules = self._rules_of(request.token)
        user = _user(request.token)
        own = _own_permission(request)
        if not allowed(own, rules):
            raise _forbidden(request, f"User {user} cannot {_action(own)}")
        for group, resource in request.blocking_owners:
            needed = Permission("update", group, f"{resource}/finalizers", request.namespace)
            if not allowed(needed, rules):
                raise _forbidden(
                    request,
                    "cannot set blockOwnerDeletion if an ownerReference refers to a resource you "
                    f"can't set finalizers on: User {user} cannot {_action(needed)}",
                )
        self._check_escalation(request, rules, user)

    def _check_escalation(self, request: ApiRequest, rules: Rules, user: str) -> None:
        if not request.granted_rules:
            return
        escalate = Permission("escalate", RBAC_GROUP, request.resource, request.namespace)
        if allowed(escalate, rules):
            return
        lacking = [
            rule
            for rule in request.granted_rules
            if not all(allowed(p, rules) for p in _granted(rule, request.namespace))
        ]
        if lacking:
            raise _forbidden(
                request,
                f"user {user} is attempting to grant RBAC permissions not currently held:\n"
                + "\n".join(_describe_rule(rule) for rule in lacking),
            )

    def _rules_of(self, token: str) -> Rules:
        if token not in self._rules:
            _, namespace, name = token.split(":", 2)
            self._rules[token] = rules_of((namespace, name), self.rbac_objects())
        return self._rules[token]


def _own_permission(request: ApiRequest) -> Permission:
    resource = request.resource + (f"/{request.subresource}" if request.subresource else "")
    return Permission(request.verb, request.group, resource, request.namespace, request.name)


def _granted(rule: Obj, namespace: str | None) -> list[Permission]:
    return [
        Permission(verb, group, resource, namespace, name)
        for verb in rule.get("verbs", [])
        for group in rule.get("apiGroups", [])
        for resource in rule.get("resources", [])
        for name in rule.get("resourceNames") or [None]
    ]


def _user(token: str) -> str:
    """The service account's user name, quoted as in the messages."""
    _, namespace, name = token.split(":", 2)
    return f'"system:serviceaccount:{namespace}:{name}"'


def _action(permission: Permission) -> str:
    """kube-apiserver's wording: `patch resource "deployments" in API group "apps" in the
    namespace "team-a"` (or `at the cluster scope`)."""
    where = (
        f'in the namespace "{permission.namespace}"'
        if permission.namespace
        else "at the cluster scope"
    )
    return (
        f'{permission.verb} resource "{permission.resource}" in API group "{permission.group}" '
        + where
    )


def _describe_rule(rule: Obj) -> str:
    fields = [("APIGroups", "apiGroups"), ("Resources", "resources"), ("Verbs", "verbs")]
    if rule.get("resourceNames"):
        fields.insert(2, ("ResourceNames", "resourceNames"))
    return (
        "{"
        + ", ".join(
            f"{label}:[{' '.join(repr(v).replace(chr(39), chr(34)) for v in rule.get(key, []))}]"
            for label, key in fields
        )
        + "}"
    )


def _forbidden(request: ApiRequest, reason: str) -> kmock.KubernetesError:
    qualified = request.resource + (f".{request.group}" if request.group else "")
    subject = f'{qualified} "{request.name}"' if request.name else qualified
    details = {"name": request.name or "", "group": request.group, "kind": request.resource}
    return kmock.KubernetesError(403, "Forbidden", f"{subject} is forbidden: {reason}", details)
