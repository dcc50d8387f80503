"""RBAC enforced by the e2e's API server when a request arrives (authorizer.py; runs in
`make test`): a service account's request its rules do not allow is a 403 in the API server's
words, before anything is stored; the rules are read again once an RBAC object is written."""

from __future__ import annotations

from typing import Any

import aiohttp
import kmock
import pytest

from tests.e2e.apiserver import ClusterApi
from tests.e2e.authorizer import Authorizer
from tests.e2e.test_rbac import OPERATOR, cluster_role, request, rule

pytestmark = pytest.mark.asyncio


def refusal(objects: list[dict[str, Any]], **fields: Any) -> str | None:
    """The 403's message for the request `fields` describe, or None when it is allowed."""
    method, resource = fields.pop("method"), fields.pop("resource")
    try:
        Authorizer(lambda: objects).check(request(method, resource, **fields))
    except kmock.KubernetesError as error:
        assert error.status == 403 and error.reason == "Forbidden"
        return str(error.message)
    return None


async def test_a_request_outside_the_rules_is_refused_in_the_api_servers_words() -> None:
    objects = cluster_role(rule("apps", ["deployments"], ["get"]))
    assert refusal(objects, method="GET", resource="apps/deployments", name="x") is None
    assert refusal(objects, method="PATCH", resource="apps/deployments", name="x") == (
        'deployments.apps "x" is forbidden: User "system:serviceaccount:ops:op" cannot patch '
        'resource "deployments" in API group "apps" in the namespace "team-a"'
    )
    assert refusal(objects, method="GET", resource="/namespaces", namespace=None) == (
        'namespaces is forbidden: User "system:serviceaccount:ops:op" cannot list resource '
        '"namespaces" in API group "" at the cluster scope'
    )


async def test_other_callers_are_not_checked() -> None:
    assert refusal([], method="DELETE", resource="/pods", name="x", token="admin") is None


async def test_a_blocking_owner_reference_needs_the_owners_finalizers() -> None:
    objects = cluster_role(rule("apps", ["deployments"], ["create"]))
    owners = (("pagedock.dev", "llmdeployments"),)
    message = refusal(objects, method="POST", resource="apps/deployments", blocking_owners=owners)
    assert message is not None and "cannot set blockOwnerDeletion" in message
    assert 'cannot update resource "llmdeployments/finalizers" in API group "pagedock.dev"' in (
        message
    )
    objects = cluster_role(
        rule("apps", ["deployments"], ["create"]),
        rule("pagedock.dev", ["llmdeployments/finalizers"], ["update"]),
    )
    assert refusal(objects, method="POST", resource="apps/deployments", blocking_owners=owners) is (
        None
    )


async def test_a_role_may_grant_only_what_its_writer_holds() -> None:
    objects = cluster_role(
        rule("rbac.authorization.k8s.io", ["roles"], ["create"]), rule("", ["pods"], ["get"])
    )
    fields = {"method": "POST", "resource": "rbac.authorization.k8s.io/roles"}
    held = (rule("", ["pods"], ["get"]),)
    assert refusal(objects, **fields, granted_rules=held) is None
    more = (rule("", ["pods"], ["get", "delete"]),)
    message = refusal(objects, **fields, granted_rules=more)
    assert message is not None and "attempting to grant RBAC permissions not currently held" in (
        message
    )
    assert '{APIGroups:[""], Resources:["pods"], Verbs:["get" "delete"]}' in message
    objects[0]["rules"].append(rule("rbac.authorization.k8s.io", ["roles"], ["escalate"]))
    assert refusal(objects, **fields, granted_rules=more) is None


async def test_the_api_server_refuses_then_allows_once_a_binding_is_written() -> None:
    async with ClusterApi() as api:
        api.add_namespace("team-a")
        async with kmock.Server(api, host="127.0.0.1") as server:
            base = str(server.url).rstrip("/")
            pods = f"{base}/api/v1/namespaces/team-a/pods"
            as_operator = {"Authorization": f"Bearer {OPERATOR}"}
            pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}
            async with aiohttp.ClientSession() as http:
                async with http.post(pods, json=pod, headers=as_operator) as response:
                    status = await response.json()
                    assert response.status == 403, status
                    assert status["reason"] == "Forbidden" and "cannot create" in status["message"]
                assert api.live("v1/pods", "team-a", "p") is None  # nothing stored
                rbac = f"{base}/apis/rbac.authorization.k8s.io/v1"
                role, binding = cluster_role(rule("", ["pods"], ["create"]))
                for plural, obj in (("clusterroles", role), ("clusterrolebindings", binding)):
                    body = {"apiVersion": "rbac.authorization.k8s.io/v1", **obj}
                    async with http.post(f"{rbac}/{plural}", json=body) as response:
                        assert response.status < 400, await response.text()
                async with http.post(pods, json=pod, headers=as_operator) as response:
                    assert response.status < 400, await response.text()
