"""A small client of the e2e API server: object paths from `group/version/plural` and the writes
the kubelet stand-in, the controllers and the test make (with their own bearer token)."""

from __future__ import annotations

from typing import Any

import aiohttp

Obj = dict[str, Any]


def object_path(
    resource: str, namespace: str | None, name: str | None = None, sub: str | None = None
) -> str:
    """`apps/v1/deployments` + namespace + name (+ subresource) -> the REST path."""
    parts = resource.split("/")
    base = "/api/v1" if len(parts) == 2 else f"/apis/{parts[0]}/{parts[1]}"
    path = base + (f"/namespaces/{namespace}" if namespace else "") + f"/{parts[-1]}"
    return path + (f"/{name}" if name else "") + (f"/{sub}" if sub else "")


def resource_of(obj: Obj) -> str:
    """`apiVersion` + `kind` -> `group/version/plural` (regular English plurals suffice here)."""
    kind = obj["kind"].lower()
    if kind.endswith("y"):
        plural = kind[:-1] + "ies"
    else:
        plural = kind + ("es" if kind.endswith("s") else "s")
    return f"{obj['apiVersion']}/{plural}"


class KubeClient:
    def __init__(self, base_url: str, token: str) -> None:
        self.session = aiohttp.ClientSession(
            base_url=base_url, headers={"Authorization": f"Bearer {token}"}
        )

    async def close(self) -> None:
        await self.session.close()

    async def request(self, method: str, path: str, body: Obj | None = None) -> tuple[int, Obj]:
        headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else {}
        async with self.session.request(method, path, json=body, headers=headers) as response:
            data = await response.json(content_type=None) if response.status != 204 else {}
            return response.status, data or {}

    async def create(self, obj: Obj) -> Obj:
        namespace = obj["metadata"].get("namespace")
        status, data = await self.request("POST", object_path(resource_of(obj), namespace), obj)
        if status >= 400:
            raise RuntimeError(f"create {obj['kind']} {obj['metadata'].get('name')}: {data}")
        return data

    async def patch(
        self, resource: str, namespace: str | None, name: str, body: Obj, sub: str | None = None
    ) -> int:
        status, _ = await self.request("PATCH", object_path(resource, namespace, name, sub), body)
        return status

    async def delete(self, resource: str, namespace: str | None, name: str) -> int:
        status, _ = await self.request("DELETE", object_path(resource, namespace, name))
        return status

    async def apply(self, obj: Obj) -> None:
        """kubectl apply, simplified: create, or merge-patch what exists."""
        resource = resource_of(obj)
        namespace = obj["metadata"].get("namespace")
        path = object_path(resource, namespace, obj["metadata"]["name"])
        status, _ = await self.request("GET", path)
        if status == 404:
            await self.create(obj)
        else:
            await self.request("PATCH", path, obj)
