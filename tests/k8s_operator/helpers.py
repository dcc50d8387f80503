"""Small helpers for the operator tests: objects in the emulator, requests to it."""

from typing import Any

import aiohttp

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


def condition(llmd: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    for item in (llmd or {}).get("status", {}).get("conditions", []):
        if item["type"] == type_:
            return item
    return None


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
