"""Deletion with propagation policies and the garbage collector in the emulator
(garbage_collector.py): background, foreground (held by `blockOwnerDeletion`), orphan, the kinds'
defaults; and `kubectl delete --cascade` of an LLMDeployment whose children the operator made."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kopf.testing import KopfRunner

from tests.eventually import eventually
from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.helpers import LLMD, LLMD_COLLECTION, live, make_llmd, send
from tests.k8s_operator.kubectl import kubectl_ok, needs_kubectl

pytestmark = pytest.mark.asyncio
ROOT = Path(__file__).resolve().parents[2]
DEPLOYMENTS = "apps/v1/deployments"
DEPLOYMENT_COLLECTION = "/apis/apps/v1/namespaces/team-a/deployments"
HOLD = "test.pagedock.dev/hold"


def child(name: str, *owners: dict[str, Any], block: bool = True, **meta: Any) -> dict[str, Any]:
    refs = [
        {
            "apiVersion": owner["apiVersion"],
            "kind": owner["kind"],
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
            "blockOwnerDeletion": block,
        }
        for owner in owners
    ]
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": "team-a", "ownerReferences": refs, **meta},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": []}},
        },
    }


async def delete(
    api: aiohttp.ClientSession, path: str, policy: str | None = None, query: bool = False
) -> dict[str, Any]:
    options = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy}
    body = None if policy is None or query else options
    params = {"propagationPolicy": policy} if query and policy else {}
    async with api.delete(path, json=body, params=params) as response:
        assert response.status < 400, await response.text()
        result: dict[str, Any] = await response.json()
        return result


def gone(cluster: Emulator, resource: str, *names: str) -> bool:
    return all(live(cluster, resource, name) is None for name in names)


async def test_background_deletes_the_owner_at_once_and_the_dependents_after(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    owner = await send(api, "POST", LLMD_COLLECTION, make_llmd())
    for name in ("a", "b"):
        await send(api, "POST", DEPLOYMENT_COLLECTION, child(name, owner))
    await delete(api, f"{LLMD_COLLECTION}/chat")  # a custom resource's default: Background
    assert live(cluster, LLMD, "chat") is None
    await eventually(lambda: gone(cluster, DEPLOYMENTS, "a", "b"), 10, "dependents collected")


async def test_foreground_keeps_the_owner_until_its_blocking_dependents_are_gone(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    owner = await send(api, "POST", LLMD_COLLECTION, make_llmd())
    await send(api, "POST", DEPLOYMENT_COLLECTION, child("held", owner, finalizers=[HOLD]))
    await send(api, "POST", DEPLOYMENT_COLLECTION, child("free", owner, block=False))
    deleting = await delete(api, f"{LLMD_COLLECTION}/chat", "Foreground")
    assert deleting["metadata"]["deletionTimestamp"]
    assert "foregroundDeletion" in deleting["metadata"]["finalizers"]
    held = await eventually(
        lambda: (
            (live(cluster, DEPLOYMENTS, "held") or {}).get("metadata", {}).get("deletionTimestamp")
        ),
        10,
        "the collector deleting the held dependent",
    )
    assert held
    await eventually(lambda: gone(cluster, DEPLOYMENTS, "free"), 10, "the free dependent gone")
    assert live(cluster, LLMD, "chat") is not None  # still waiting for the held one
    path = f"{DEPLOYMENT_COLLECTION}/held"
    await send(api, "PATCH", path, {"metadata": {"finalizers": None}})
    await eventually(lambda: gone(cluster, LLMD, "chat"), 10, "the owner gone last")


async def test_orphan_keeps_the_dependents_without_the_owner_reference(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    owner = await send(api, "POST", LLMD_COLLECTION, make_llmd())
    other = await send(api, "POST", LLMD_COLLECTION, make_llmd("other"))
    await send(api, "POST", DEPLOYMENT_COLLECTION, child("kept", owner, other))
    deleting = await delete(api, f"{LLMD_COLLECTION}/chat", "Orphan", query=True)
    assert "orphan" in deleting["metadata"]["finalizers"]
    await eventually(lambda: gone(cluster, LLMD, "chat"), 10, "the owner gone")
    kept = live(cluster, DEPLOYMENTS, "kept")
    assert kept is not None
    assert [ref["name"] for ref in kept["metadata"]["ownerReferences"]] == ["other"]


async def test_a_dependent_with_another_owner_left_loses_only_the_gone_reference(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    owner = await send(api, "POST", LLMD_COLLECTION, make_llmd())
    other = await send(api, "POST", LLMD_COLLECTION, make_llmd("other"))
    await send(api, "POST", DEPLOYMENT_COLLECTION, child("shared", owner, other))
    await delete(api, f"{LLMD_COLLECTION}/chat", "Background")

    def references() -> list[str]:
        shared = live(cluster, DEPLOYMENTS, "shared") or {"metadata": {}}
        return [ref["name"] for ref in shared["metadata"].get("ownerReferences") or []]

    await eventually(lambda: references() == ["other"], 10, lambda: f"refs {references()}")


async def test_a_job_orphans_its_pods_by_default(
    cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "fetch", "namespace": "team-a"},
        "spec": {"template": {"spec": {"containers": []}}},
    }
    job = await send(api, "POST", "/apis/batch/v1/namespaces/team-a/jobs", job)
    pod = {**child("fetch-pod", job), "apiVersion": "v1", "kind": "Pod", "spec": {}}
    await send(api, "POST", "/api/v1/namespaces/team-a/pods", pod)
    await delete(api, "/apis/batch/v1/namespaces/team-a/jobs/fetch")  # batch/v1: Orphan
    await eventually(lambda: gone(cluster, "batch/v1/jobs", "fetch"), 10, "the job gone")
    kept = live(cluster, "v1/pods", "fetch-pod")
    assert kept is not None and not kept["metadata"].get("ownerReferences")


def children(cluster: Emulator, uid: str) -> list[str]:
    return sorted(
        f"{resource.plural}/{name}"
        for (resource, _, name), obj in list(cluster.objects.items())
        if not obj.deleted
        and any(r.get("uid") == uid for r in obj.raw["metadata"].get("ownerReferences") or [])
    )


async def applied_with_children(cluster: Emulator) -> tuple[str, list[str]]:
    example = ROOT / "manifests" / "examples" / "llmdeployment.yaml"
    await kubectl_ok("apply", "--server-side", "--validate=false", "-f", str(example))
    key = ("pagedock.dev/v1alpha1/llmdeployments", "default", "smollm2")
    uid = cluster.objects[key].raw["metadata"]["uid"]
    made = await eventually(
        lambda: len(children(cluster, uid)) >= 3 and children(cluster, uid),
        60,
        lambda: f"the operator's children: {children(cluster, uid)}",
    )
    return uid, made


@needs_kubectl
async def test_kubectl_delete_cascade_foreground_deletes_the_operators_children_first(
    cluster: Emulator, operator: KopfRunner
) -> None:
    uid, made = await applied_with_children(cluster)
    assert "deployments/smollm2-engine" in made
    await kubectl_ok("delete", "llmdeployment", "smollm2", "--cascade=foreground", "--wait=false")
    await eventually(
        lambda: live_llmd(cluster) is None and not children(cluster, uid),
        60,
        lambda: f"left: {live_llmd(cluster) is not None} {children(cluster, uid)}",
    )
    key = ("pagedock.dev/v1alpha1/llmdeployments", "default", "smollm2")
    versions = [v.raw for v in cluster.objects[key].history if v is not None]
    waited = [v for v in versions if "foregroundDeletion" in v["metadata"].get("finalizers", [])]
    assert waited, "the LLMDeployment never waited for its children"


@needs_kubectl
async def test_kubectl_delete_cascade_orphan_keeps_the_operators_children(
    cluster: Emulator, operator: KopfRunner
) -> None:
    _, made = await applied_with_children(cluster)
    await kubectl_ok("delete", "llmdeployment", "smollm2", "--cascade=orphan", "--wait=false")
    await eventually(lambda: live_llmd(cluster) is None, 30, "the LLMDeployment gone")
    resources = {"deployments": DEPLOYMENTS, "services": "v1/services"}
    for name in made:
        plural, _, child_name = name.partition("/")
        if plural in resources:
            key = (resources[plural], "default", child_name)
            assert not cluster.objects[key].deleted, f"{name} was deleted"
            assert not cluster.objects[key].raw["metadata"].get("ownerReferences")


def live_llmd(cluster: Emulator) -> dict[str, Any] | None:
    key = ("pagedock.dev/v1alpha1/llmdeployments", "default", "smollm2")
    return (
        None
        if key not in cluster.objects or cluster.objects[key].deleted
        else (cluster.objects[key].raw)
    )
