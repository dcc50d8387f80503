"""The cluster controllers kmock lacks, reduced to what the scenarios need; each is one level-based
pass over the stored objects that writes through the API (so watchers see events):

* deployments: a Deployment's pods, ReplicaSet-like (owned by the Deployment directly, named
  `<deployment>-<template hash>-<random>`): create up to `spec.replicas`, delete the extra
  (unready first, then the lowest `controller.kubernetes.io/pod-deletion-cost`, then the newest);
  a new template rolls out as its strategy says (rolling_update.py: surge, then old pods as new
  ones are ready); then `status` (replicas, ready, available, updated, observedGeneration) from
  the pods' readiness.
* endpoint slices: one EndpointSlice per Service with a selector (`kubernetes.io/service-name`),
  an endpoint per selected pod with an IP, `conditions.ready` from the pod's Ready condition.
* garbage collection: the emulator's own collector (background, foreground, orphan: see
  tests/k8s_operator/garbage_collector.py), which runs after every write; the kubelet's loop
  runs a pass too, as the controller manager's collector resyncs.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from typing import TYPE_CHECKING, Any

from tests.e2e.labels import matches_labels
from tests.e2e.podspec import ContainerConfigError, container_port
from tests.e2e.rolling_update import rollout_step

if TYPE_CHECKING:
    from tests.e2e.kubelet import Kubelet

Obj = dict[str, Any]
DEPLOYMENTS, PODS, SERVICES = "apps/v1/deployments", "v1/pods", "v1/services"
SLICES = "discovery.k8s.io/v1/endpointslices"
SERVICE_NAME_LABEL = "kubernetes.io/service-name"


def template_hash(deployment: Obj) -> str:
    template = json.dumps(deployment["spec"]["template"], sort_keys=True)
    return hashlib.sha256(template.encode()).hexdigest()[:10]


def owned_by(obj: Obj, owner: Obj) -> bool:
    refs = obj["metadata"].get("ownerReferences") or []
    return any(ref.get("uid") == owner["metadata"]["uid"] for ref in refs)


def is_ready(pod: Obj) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def owner_reference(owner: Obj) -> Obj:
    meta = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


async def sync_deployments(kubelet: Kubelet) -> None:
    for deployment in kubelet.api.all_live(DEPLOYMENTS):
        await _sync_deployment(kubelet, deployment)


async def _sync_deployment(kubelet: Kubelet, deployment: Obj) -> None:
    namespace = deployment["metadata"]["namespace"]
    current = template_hash(deployment)
    pods = [p for p in kubelet.api.all_live(PODS, namespace) if owned_by(p, deployment)]
    stale = [p for p in pods if p["metadata"]["labels"].get("pod-template-hash") != current]
    fresh = [p for p in pods if p not in stale]
    wanted = int(deployment["spec"].get("replicas", 1))
    # Unready pods go first, then the lowest controller.kubernetes.io/pod-deletion-cost, then the
    # newest (what a ReplicaSet prefers to delete).
    fresh.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""), reverse=True)
    fresh.sort(key=_deletion_order)  # stable: the newest first among equals
    extra = fresh[: max(len(fresh) - wanted, 0)]
    to_delete, num_new = extra, wanted - len(fresh)
    if stale:  # a new template: the strategy paces the rollout (rolling_update.py)
        stale.sort(key=lambda p: p["metadata"].get("creationTimestamp", ""))
        step = rollout_step(deployment, fresh, stale, is_ready)
        to_delete, num_new = step.old_to_delete, step.num_new
    for pod in to_delete:
        await kubelet.client.delete(PODS, namespace, pod["metadata"]["name"])
    for _ in range(num_new):
        if not _service_account_exists(kubelet, deployment):
            break  # the ReplicaSet controller's "error looking up service account"
        await kubelet.client.create(_new_pod(deployment, current))
    kept = [p for p in fresh if p not in to_delete]
    stale = [p for p in stale if p not in to_delete]
    await _write_status(kubelet, deployment, kept, stale)


DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"


def _deletion_order(pod: Obj) -> tuple[bool, int]:
    """Sort key: the first pods are deleted first (ReplicaSet: unready, then lower cost)."""
    cost = (pod["metadata"].get("annotations") or {}).get(DELETION_COST, "0")
    return is_ready(pod), int(cost) if cost.lstrip("-").isdigit() else 0


def _service_account_exists(kubelet: Kubelet, deployment: Obj) -> bool:
    name = deployment["spec"]["template"]["spec"].get("serviceAccountName") or "default"
    if name == "default":
        return True
    return (
        kubelet.api.live("v1/serviceaccounts", deployment["metadata"]["namespace"], name)
        is not None
    )


def _new_pod(deployment: Obj, pod_hash: str) -> Obj:
    template = json.loads(json.dumps(deployment["spec"]["template"]))
    meta = template.get("metadata") or {}
    name = f"{deployment['metadata']['name']}-{pod_hash[:5]}-{secrets.token_hex(3)[:5]}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            **meta,
            "name": name,
            "namespace": deployment["metadata"]["namespace"],
            "labels": {**(meta.get("labels") or {}), "pod-template-hash": pod_hash},
            "ownerReferences": [owner_reference(deployment)],
        },
        "spec": {**template["spec"], "nodeName": "e2e-node"},
        "status": {"phase": "Pending"},
    }


async def _write_status(
    kubelet: Kubelet, deployment: Obj, pods: list[Obj], stale: list[Obj]
) -> None:
    # Old-template pods still running count as ready, as a Deployment's status counts them.
    num_ready = sum(is_ready(p) for p in pods + stale)
    wanted = int(deployment["spec"].get("replicas", 1))
    status = {
        "observedGeneration": deployment["metadata"].get("generation", 1),
        "replicas": len(pods) + len(stale),
        "updatedReplicas": len(pods),
        "readyReplicas": num_ready,
        "availableReplicas": num_ready,
        "unavailableReplicas": max(wanted - num_ready, 0),
        "conditions": [
            {
                "type": "Available",
                "status": "True" if num_ready >= wanted else "False",
                "reason": "MinimumReplicasAvailable"
                if num_ready >= wanted
                else "MinimumReplicasUnavailable",
            }
        ],
    }
    if deployment.get("status") != status:
        meta = deployment["metadata"]
        await kubelet.client.patch(
            DEPLOYMENTS, meta["namespace"], meta["name"], {"status": status}, "status"
        )


async def sync_endpoint_slices(kubelet: Kubelet) -> None:
    for service in kubelet.api.all_live(SERVICES):
        selector = service["spec"].get("selector")
        if selector:
            await _sync_slice(kubelet, service, selector)


async def _sync_slice(kubelet: Kubelet, service: Obj, selector: Obj) -> None:
    namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
    pods = [
        p
        for p in kubelet.api.all_live(PODS, namespace)
        if matches_labels(p["metadata"].get("labels") or {}, selector)
        and (p.get("status") or {}).get("podIP")
    ]
    desired = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{name}-e2e",
            "namespace": namespace,
            "labels": {SERVICE_NAME_LABEL: name, "endpointslice.kubernetes.io/managed-by": "e2e"},
            "ownerReferences": [owner_reference(service)],
        },
        "addressType": "IPv4",
        "endpoints": [_endpoint(p) for p in sorted(pods, key=lambda p: p["metadata"]["name"])],
        "ports": _slice_ports(service, pods),
    }
    live = kubelet.api.live(SLICES, namespace, f"{name}-e2e")
    if live is None:
        await kubelet.client.create(desired)
    elif (live.get("endpoints"), live.get("ports")) != (desired["endpoints"], desired["ports"]):
        body = {"endpoints": desired["endpoints"], "ports": desired["ports"]}
        await kubelet.client.patch(SLICES, namespace, f"{name}-e2e", body)


def _endpoint(pod: Obj) -> Obj:
    ready = is_ready(pod)
    return {
        "addresses": [pod["status"]["podIP"]],
        "conditions": {"ready": ready, "serving": ready, "terminating": False},
        "nodeName": "e2e-node",
        "targetRef": {
            "kind": "Pod",
            "namespace": pod["metadata"]["namespace"],
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"],
        },
    }


def _slice_ports(service: Obj, pods: list[Obj]) -> list[Obj]:
    ports = []
    for port in service["spec"].get("ports", []):
        target = port.get("targetPort", port["port"])
        number = _resolve_target(target, pods)
        if number is not None:
            item = {"port": number, "protocol": port.get("protocol", "TCP")}
            ports.append({"name": port["name"], **item} if port.get("name") else item)
    return ports


def _resolve_target(target: int | str, pods: list[Obj]) -> int | None:
    if isinstance(target, int) or str(target).isdigit():
        return int(target)
    for pod in pods:
        for container in pod["spec"]["containers"]:
            try:
                return container_port(container, target)
            except ContainerConfigError:
                continue
    return None


async def collect_garbage(kubelet: Kubelet) -> None:
    """A pass of the API server's garbage collector (tests/k8s_operator/garbage_collector.py),
    which also runs after every write: propagation policies, `blockOwnerDeletion`, orphaning."""
    await kubelet.api.garbage_collector.collect()
