"""The API server of the e2e cluster: the operator tests' kmock emulator (uid, resourceVersion,
generation, admission of LLMDeployments) plus what the e2e needs from a real one: every resource
the operator, the router and the kubelet stand-in touch, label selectors on list and watch, and a
log of who asked for what (the bearer token names the caller) for the RBAC check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp.web
import kmock

from tests.e2e.api_request import ApiRequest, describe
from tests.e2e.authorizer import RBAC_GROUP, Authorizer
from tests.e2e.labels import matches_selector
from tests.k8s_operator.emulator import RESOURCES as OPERATOR_RESOURCES
from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.write_results import stamp_new

ALL_VERBS = {"list", "watch", "get", "patch", "create", "delete", "update"}
WRITES = ("create", "update", "patch", "delete", "deletecollection")


def _resource(kind: str, namespaced: bool = True, *subresources: str) -> kmock.ResourceInfo:
    return kmock.ResourceInfo(
        kind=kind, namespaced=namespaced, verbs=ALL_VERBS, subresources=set(subresources)
    )


RESOURCES: dict[str, kmock.ResourceInfo] = {
    **OPERATOR_RESOURCES,
    "v1/namespaces": _resource("Namespace", False),
    "v1/events": _resource("Event"),
    "v1/pods": _resource("Pod", True, "status", "log"),
    "v1/configmaps": _resource("ConfigMap"),
    "v1/secrets": _resource("Secret"),
    "v1/serviceaccounts": _resource("ServiceAccount"),
    "discovery.k8s.io/v1/endpointslices": _resource("EndpointSlice"),
    "networking.k8s.io/v1/networkpolicies": _resource("NetworkPolicy"),
    "networking.k8s.io/v1/ingresses": _resource("Ingress", True, "status"),
    "policy/v1/poddisruptionbudgets": _resource("PodDisruptionBudget", True, "status"),
    "autoscaling/v2/horizontalpodautoscalers": _resource("HorizontalPodAutoscaler"),
    "batch/v1/jobs": _resource("Job", True, "status"),
    "rbac.authorization.k8s.io/v1/roles": _resource("Role"),
    "rbac.authorization.k8s.io/v1/rolebindings": _resource("RoleBinding"),
    "rbac.authorization.k8s.io/v1/clusterroles": _resource("ClusterRole", False),
    "rbac.authorization.k8s.io/v1/clusterrolebindings": _resource("ClusterRoleBinding", False),
    "apiextensions.k8s.io/v1/customresourcedefinitions": _resource(
        "CustomResourceDefinition", False
    ),
    "kopf.dev/v1/kopfpeerings": _resource("KopfPeering"),
    "kopf.dev/v1/clusterkopfpeerings": _resource("ClusterKopfPeering", False),
}


class ClusterApi(Emulator):
    """kmock's emulator as the e2e's API server; `requests_log` holds every resource request."""

    requests_log: list[ApiRequest]
    serving: dict[int, aiohttp.web.BaseRequest]
    """The requests being served now, by id (a watch, for as long as it streams)."""
    enforce_rbac: bool
    authorizer: Authorizer

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self.requests_log = []
        self.serving = {}
        self.enforce_rbac = True
        """Refuse a service account's request that its RBAC rules do not allow (authorizer.py)."""
        self.authorizer = Authorizer(self._rbac_objects)
        for resource, info in RESOURCES.items():
            self.resources[resource] = info

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        self.serving[id(raw_request)] = raw_request
        try:
            # NOTE: the API server takes `watch=1` and `watch=True` (kubernetes_asyncio sends the
            # latter); kmock knows only `watch=true`.
            if raw_request.query.get("watch", "").lower() in ("1", "true"):
                query = raw_request.rel_url.update_query(watch="true")
                return await super().__call__(raw_request.clone(rel_url=query))
            return await super().__call__(raw_request)
        finally:
            del self.serving[id(raw_request)]

    def _rbac_objects(self) -> list[dict[str, Any]]:
        return [
            obj
            for plural in ("roles", "rolebindings", "clusterroles", "clusterrolebindings")
            for obj in self.all_live(f"{RBAC_GROUP}/v1/{plural}")
        ]

    def abort_serving(self) -> list[str]:
        """Reset the connection of every request still being served, which ends it at once;
        what each was (`GET <path> from <address> as <token>`).

        NOTE: once every pod has stopped, such a request has no client left: its FIN was lost on
        the way (as a bridge that changed its MAC once lost them: netns.py), and aiohttp's
        shutdown would wait for it (60 s, then 60 s more once cancelled)."""
        aborted = []
        for request in list(self.serving.values()):
            token = request.headers.get("Authorization", "").removeprefix("Bearer ")
            aborted.append(f"{request.method} {request.path_qs} from {request.remote} as {token}")
            if request.transport is not None:
                request.transport.abort()
        return aborted

    async def _handle(self, request: Any) -> aiohttp.web.StreamResponse:
        # NOTE: discovery (`/apis/apps/v1`) parses as a resource without a plural; RBAC lets every
        # authenticated client read it (system:discovery), so it is not logged.
        described = None
        if request.resource is not None and request.resource.plural:
            described = describe(request)
            self.requests_log.append(described)
        try:
            if described is not None and self.enforce_rbac:
                self.authorizer.check(described)
            return await super()._handle(request)
        finally:
            self._forget(request)
            if (
                described is not None
                and described.group == RBAC_GROUP
                and described.verb in (WRITES)
            ):
                self.authorizer.forget()

    def _forget(self, request: Any) -> None:
        """Drop a served request from kmock's own history (ours is `requests_log`).

        NOTE: kmock keeps every request it ever got, and matches each new one to a reaction by
        scanning that whole history once per reaction (`request in reaction._source`): the cost
        of a request grew with the scenario's age, quadratically in all. In the rollout scenario
        (10 minutes, about 6,000 requests) this process spent its CPU there and its event loop
        stalled for seconds, which the clients it also runs read as time to first token and the
        probes it runs as pods turning unready. In flight, a request stays (a watch, for as long
        as it streams), so the scan covers what is in flight only."""
        history = self._requests
        for index in range(len(history) - 1, -1, -1):
            if history[index] is request:
                del history[index]
                return

    def selected(self, item: dict[str, Any], selector: str) -> bool:
        """Set-based terms too (labels.py), not only equality."""
        return _selected(item, selector)

    async def _serve_watch(self, request: Any) -> AsyncIterator[Any]:
        selector = request.params.get("labelSelector", "")
        async for event in super()._serve_watch(request):
            if not isinstance(event, dict) or _selected(event.get("object", {}), selector):
                yield event

    def add_namespace(self, name: str) -> None:
        """NOTE: kmock's path parser cannot route `/api/v1/namespaces` writes: stored directly."""
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        stamp_new(namespace)
        self.objects["v1/namespaces", None, name] = namespace

    def live(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The stored object, or None when absent or deleted."""
        try:
            obj = self.objects[resource, namespace, name]
        except KeyError:
            return None
        return None if obj.deleted else obj.raw

    def all_live(self, resource: str, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            obj.raw
            for (res, ns, _), obj in list(self.objects.items())
            if res == resource and not obj.deleted and (namespace is None or ns == namespace)
        ]


def _selected(obj: dict[str, Any], selector: str) -> bool:
    return matches_selector(obj.get("metadata", {}).get("labels") or {}, selector)
