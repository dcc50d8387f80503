"""The e2e cluster: the API server on the pod bridge, the kubelet stand-in, and what a user does
with kubectl (apply, scale, delete) and sees (conditions, pods), plus a chat through a pod's IP."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import kmock
import yaml

from tests import eventually as polling
from tests.e2e.apiserver import ClusterApi
from tests.e2e.client import KubeClient
from tests.e2e.kubelet import CLOSE_S, Kubelet
from tests.e2e.netns import PodNetwork
from tests.e2e.runtime import Runtime
from tests.e2e.teardown import bounded

Obj = dict[str, Any]
REPO = Path(__file__).resolve().parents[2]
LLMD = "pagedock.dev/v1alpha1/llmdeployments"
EXAMPLE = REPO / "manifests" / "examples" / "llmdeployment.yaml"
ADMIN_TOKEN = "e2e:admin"
OPERATOR_ACCOUNT = ("pagedock-system", "pagedock")
# What a Helm user would set for an e2e install (`--set image.repository=localhost/pagedock
# --set image.tag=dev`): every `ghcr.io/pagedock/<name>:<tag>` becomes the local build
# `localhost/pagedock/<name>:dev`; one operator replica (it still elects itself through the
# peering object); a short resync.
OPERATOR_ENV = {
    "PAGEDOCK_OPERATOR_RESYNC_SECONDS": "5",
    "PAGEDOCK_IMAGE_REPOSITORY": "localhost/pagedock",
    "PAGEDOCK_IMAGE_TAG": "dev",
}


def local_image(image: str) -> str:
    if not image.startswith("ghcr.io/pagedock/"):
        return image
    name = image.removeprefix("ghcr.io/pagedock/").split(":")[0]
    return f"localhost/pagedock/{name}:dev"


def load_documents(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def for_e2e(obj: Obj) -> Obj:
    """manifests/operator.yaml with the e2e's images and one replica."""
    if obj["kind"] != "Deployment":
        return obj
    obj["spec"]["replicas"] = 1
    container = obj["spec"]["template"]["spec"]["containers"][0]
    container["image"] = local_image(container["image"])
    for var in container.get("env", []):
        var["value"] = OPERATOR_ENV.get(var["name"], var.get("value"))
    return obj


class Cluster:
    def __init__(self, api: ClusterApi, url: str, kubelet: Kubelet) -> None:
        self.api = api
        self.url = url
        self.kubelet = kubelet
        self.client = KubeClient(url, ADMIN_TOKEN)

    async def apply_file(self, path: Path, edit: Callable[[Obj], Obj] = lambda o: o) -> None:
        for obj in load_documents(path):
            if obj["kind"] == "Namespace":
                self.api.add_namespace(obj["metadata"]["name"])
            else:
                await self.client.apply(edit(obj))

    async def install_operator(self) -> None:
        """kubectl apply -f manifests/crd.yaml -f manifests/operator.yaml (images set)."""
        await self.apply_file(REPO / "manifests" / "crd.yaml")
        await self.apply_file(REPO / "manifests" / "operator.yaml", for_e2e)

    async def apply_example(self, edit: Callable[[Obj], Obj] = lambda o: o) -> None:
        """The operator, then manifests/examples/llmdeployment.yaml (edited)."""
        await self.install_operator()
        await self.apply_file(EXAMPLE, edit)

    async def scale(self, resource: str, namespace: str, name: str, replicas: int) -> None:
        """kubectl scale: a patch of the scale subresource."""
        body = {"spec": {"replicas": replicas}}
        assert await self.client.patch(resource, namespace, name, body, "scale") < 400

    def llmd(self, namespace: str, name: str) -> Obj:
        return self.api.live(LLMD, namespace, name) or {}

    def condition(self, namespace: str, name: str, type_: str) -> Obj:
        for item in self.llmd(namespace, name).get("status", {}).get("conditions", []):
            if item["type"] == type_:
                return dict(item)
        return {}

    def pod_objects(self, namespace: str, prefix: str) -> list[Obj]:
        pods = self.api.all_live("v1/pods", namespace)
        return [p for p in pods if p["metadata"]["name"].startswith(prefix)]

    def crash_looping(self, max_restarts: int = 3) -> list[str]:
        """Pods restarted more than `max_restarts` times (a scenario that waits gives up early)."""
        return [
            f"{r.namespace}/{r.name}"
            for r in self.kubelet.runners.values()
            if any(c.restart_count > max_restarts for c in r.containers)
        ]

    async def wait_ready(self, namespace: str, name: str, timeout: float) -> None:
        def ready() -> bool:
            assert not self.crash_looping(), f"crash-looping: {self.crash_looping()}"
            return self.condition(namespace, name, "Ready").get("status") == "True"

        await eventually(ready, timeout, f"{namespace}/{name} Ready=True")

    def logs(self) -> str:
        """The tail of every container's log (printed when a scenario fails)."""
        parts = []
        for log in sorted((self.kubelet.workdir / "pods").glob("*/*.log")):
            lines = log.read_text(errors="replace").splitlines()[-25:]
            parts.append(f"---- {log.parent.name}/{log.name}\n" + "\n".join(lines))
        return "\n".join(parts)

    async def close(self) -> None:
        await self.client.close()


async def eventually(
    check: Callable[[], Any], timeout: float, what: str | Callable[[], str] = ""
) -> Any:
    return await polling.eventually(check, timeout, what, interval=0.2)


async def chat(ip: str, port: int, content: str = "Say hello.", max_tokens: int = 8) -> Obj:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}
    async with aiohttp.ClientSession() as http:
        url = f"http://{ip}:{port}/v1/chat/completions"
        async with http.post(url, json=body, timeout=aiohttp.ClientTimeout(total=120)) as response:
            assert response.status == 200, await response.text()
            return dict(await response.json())


async def get_json(ip: str, port: int, path: str) -> Any:
    timeout = aiohttp.ClientTimeout(total=10)
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://{ip}:{port}{path}", timeout=timeout) as response,
    ):
        assert response.status == 200, await response.text()
        return await response.json()


@contextlib.asynccontextmanager
async def running_cluster(
    network: PodNetwork, runtime: Runtime, workdir: Path, node_cache: Path, time_scale: float
) -> AsyncIterator[Cluster]:
    """The API server on the bridge's host address, with the kubelet stand-in running. Its
    teardown is bounded (teardown.py): a step that hangs is named in a warning and abandoned."""
    async with ClusterApi() as api:
        server = kmock.Server(api, host=network.host_ip)
        await server.__aenter__()
        try:
            url = str(server.url).rstrip("/")
            kubelet = Kubelet(api, url, network, runtime, workdir, node_cache, time_scale)
            cluster = Cluster(api, url, kubelet)
            api.add_namespace("default")
            kubelet.start()
            try:
                yield cluster
            finally:
                await kubelet.close()
                await bounded(cluster.close(), CLOSE_S, "the scenario's API client")
        finally:
            await stop_server(api, server)


async def stop_server(api: ClusterApi, server: kmock.Server) -> None:
    """Every pod stopped: a request still being served has lost its client, and is ended."""
    aborted = api.abort_serving()
    if aborted:
        warnings.warn(f"API requests served after their clients were gone: {aborted}", stacklevel=1)
    await bounded(server.__aexit__(None, None, None), CLOSE_S, "the API server's shutdown")
