"""Small helpers for the operator tests: objects in the emulator, requests to it."""

from typing import Any

import aiohttp

from tests.eventually import eventually
from tests.k8s_operator.emulator import Emulator

NAMESPACE = "team-a"
LLMD = "pagedock.dev/v1alpha1/llmdeployments"
LLMD_COLLECTION = f"/apis/pagedock.dev/v1alpha1/namespaces/{NAMESPACE}/llmdeployments"


def make_llmd(name: str = "chat", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "pagedock.dev/v1alpha1",
        "kind": "LLMDeployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"model": {"source": "smollm2-135m-instruct"}, "replicas": 1, **spec},
    }


def live(cluster: Emulator, resource: str, name: str) -> dict[str, Any] | None:
    """The stored object, or None when absent or deleted."""
    key = (resource, NAMESPACE, name)
    try:
        obj = cluster.objects[key]
    except KeyError:
        return None
    return None if obj.deleted else obj.raw


def llmd_body(cluster: Emulator, name: str = "chat") -> dict[str, Any]:
    """The stored LLMDeployment as a handler receives it (apiVersion and kind included)."""
    body = live(cluster, LLMD, name)
    assert body is not None, f"no LLMDeployment {name}"
    return {"apiVersion": "pagedock.dev/v1alpha1", "kind": "LLMDeployment", **body}


def condition(llmd: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for item in (llmd or {}).get("status", {}).get("conditions", []):
        if item["type"] == type_:
            return item
    return None


def num_reconcile_reads(cluster: Emulator, name: str) -> int:
    """GETs of the LLMDeployment `name`: the reconciler reads it at the start of every pass."""
    path = f"{LLMD_COLLECTION}/{name}"
    return sum(1 for request in list(cluster["get"]) if request.url.path == path)


async def writes_over_resyncs(cluster: Emulator, name: str, passes: int) -> list[str]:
    """The writes made while the reconciler read `name` `passes` more times (each a pass seen
    to happen, not time that may have held none): none once the object is settled."""
    before, start = num_writes(cluster), num_reconcile_reads(cluster, name)
    await eventually(
        lambda: num_reconcile_reads(cluster, name) >= start + passes + 1,
        60,
        lambda: (
            f"{passes} reconcile passes of {name}: saw {num_reconcile_reads(cluster, name) - start}"
        ),
    )
    requests = [r for m in ("post", "patch", "put", "delete") for r in list(cluster[m])]
    return [f"{r.method} {r.url.path}" for r in sorted(requests, key=lambda r: r.id)][before:]


async def settled(cluster: Emulator, name: str, max_passes: int = 10) -> None:
    """Wait until a whole reconcile pass of `name` writes nothing (the create's burst is over)."""
    for _ in range(max_passes):
        if not await writes_over_resyncs(cluster, name, 1):
            return
    raise AssertionError(f"{name} still written after {max_passes} reconcile passes")


def num_writes(cluster: Emulator) -> int:
    return sum(len(cluster[method]) for method in ("post", "patch", "put", "delete"))


async def send(
    api: aiohttp.ClientSession, method: str, path: str, body: dict[str, Any] | None = None
) -> dict[str, Any]:
    headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
    async with api.request(method, path, json=body, headers=headers) as response:
        assert response.status < 400, await response.text()
        return await response.json(content_type=None)


async def mark_ready(api: aiohttp.ClientSession, deployment: dict[str, Any]) -> None:
    """What the Deployment controller would write once every replica is ready (kmock has none)."""
    name = deployment["metadata"]["name"]
    replicas = deployment["spec"]["replicas"]
    status = {
        "observedGeneration": deployment["metadata"].get("generation", 1),
        "replicas": replicas,
        "updatedReplicas": replicas,
        "readyReplicas": replicas,
        "availableReplicas": replicas,
    }
    path = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/{name}/status"
    await send(api, "PATCH", path, {"status": status})
