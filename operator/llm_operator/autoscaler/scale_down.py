"""Cache-aware scale-down: the engine pod whose cache the routers used least goes first.

Before the operator lowers the replicas it writes `controller.kubernetes.io/pod-deletion-cost` on
every engine pod: the recent cached prompt tokens the routers sent it (their prefix hit score),
so the ReplicaSet controller deletes the coldest pod. A deleted pod leaves its EndpointSlice at
once, so the routers stop sending it new requests, and the engine finishes its in-flight streams
in its termination grace period (preStop, then its SIGTERM drain) before it exits.
"""

from __future__ import annotations

from typing import Any

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"
MAX_COST = 2**31 - 1  # the annotation is an int32

Obj = dict[str, Any]


def deletion_costs(pods: list[Obj], scores: dict[str, float]) -> dict[str, str]:
    """Pod name -> the deletion cost it should carry (its routers' prefix hit score)."""
    costs = {}
    for pod in pods:
        ip = (pod.get("status") or {}).get("podIP")
        score = scores.get(ip, 0.0) if ip else 0.0
        costs[pod["metadata"]["name"]] = str(min(MAX_COST, round(score)))
    return costs


def coldest(pods: list[Obj], scores: dict[str, float]) -> str | None:
    """The name of the pod that goes first (for the Event); None without pods."""
    costs = deletion_costs(pods, scores)
    return min(costs, key=lambda name: int(costs[name])) if costs else None


def annotation_patches(pods: list[Obj], scores: dict[str, float]) -> dict[str, Obj]:
    """Pod name -> merge patch, for the pods whose annotation differs."""
    patches = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        cost = deletion_costs([pod], scores)[name]
        if (pod["metadata"].get("annotations") or {}).get(DELETION_COST) != cost:
            patches[name] = {"metadata": {"annotations": {DELETION_COST: cost}}}
    return patches
