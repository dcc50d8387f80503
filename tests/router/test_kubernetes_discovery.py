"""KubernetesDiscovery against a Kubernetes API served locally (kmock's emulator): adding,
changing and deleting the engines' EndpointSlices changes the replica set."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import kmock
import pytest
import pytest_asyncio

from router.replicas.discovery.kubernetes import KubernetesDiscovery
from tests.kubeconfig import write_kubeconfig

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]
SLICES = "/apis/discovery.k8s.io/v1/namespaces/team-a/endpointslices"
_versions = iter(range(1000, 10**6))


def _parse_bool_queries(monkeypatch: pytest.MonkeyPatch) -> None:
    """kmock takes only `watch=true`; the official clients send `watch=True`, which the real API
    server reads as true too (Go's strconv.ParseBool). Read it as the API server does."""
    from kmock._internal import parsing

    guess = parsing.guess_k8s

    def guess_k8s(k8s: Any, method: Any, query: dict[str, str]) -> Any:
        if query.get("watch") in ("True", "TRUE", "1", "t", "T"):
            query = {**query, "watch": "true"}
        return guess(k8s, method, query)

    monkeypatch.setattr(parsing, "guess_k8s", guess_k8s)


@pytest.fixture()
def cluster(
    kmock: kmock.KubernetesEmulator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> kmock.KubernetesEmulator:
    _parse_bool_queries(monkeypatch)
    kmock.resources["discovery.k8s.io/v1/endpointslices"] = kmock.ResourceInfo(
        kind="EndpointSlice",
        namespaced=True,
        verbs={"list", "watch", "get", "create", "patch", "delete"},
    )
    kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", str(kmock.url))
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return kmock


@pytest_asyncio.fixture()
async def api(cluster: kmock.KubernetesEmulator) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=str(cluster.url)) as client:
        yield client


def endpoint_slice(
    name: str, service: str, addresses: dict[str, bool], port: int = 8000
) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": str(uuid.uuid4()),
            "resourceVersion": str(next(_versions)),
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": [ip], "conditions": {"ready": ready}} for ip, ready in addresses.items()
        ],
    }


class Seen:
    """The replica sets discovery reported, latest last."""

    def __init__(self) -> None:
        self.sets: list[set[str]] = []

    def __call__(self, urls: set[str]) -> None:
        self.sets.append(urls)

    async def becomes(self, expected: set[str], timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not (self.sets and self.sets[-1] == expected):
            assert time.monotonic() < deadline, f"last seen {self.sets[-1:]} != {expected}"
            await asyncio.sleep(0.05)


@pytest_asyncio.fixture()
async def seen(cluster: kmock.KubernetesEmulator) -> AsyncIterator[Seen]:
    seen = Seen()
    task = asyncio.create_task(KubernetesDiscovery("chat-engine", "team-a").run(seen))
    yield seen
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_ready_endpoints_of_the_services_slices_become_replicas(
    api: httpx.AsyncClient, seen: Seen
) -> None:
    await api.post(
        SLICES,
        json=endpoint_slice(
            "chat-engine-a", "chat-engine", {"10.0.0.1": True, "10.0.0.2": True, "10.0.0.3": False}
        ),
    )
    await api.post(SLICES, json=endpoint_slice("other-a", "other", {"10.9.9.9": True}))
    await seen.becomes({"http://10.0.0.1:8000", "http://10.0.0.2:8000"})


async def test_adding_and_removing_a_slice_changes_the_replica_set(
    api: httpx.AsyncClient, seen: Seen
) -> None:
    await api.post(SLICES, json=endpoint_slice("chat-engine-a", "chat-engine", {"10.0.0.1": True}))
    await seen.becomes({"http://10.0.0.1:8000"})
    await api.post(SLICES, json=endpoint_slice("chat-engine-b", "chat-engine", {"10.0.1.1": True}))
    await seen.becomes({"http://10.0.0.1:8000", "http://10.0.1.1:8000"})
    await api.delete(f"{SLICES}/chat-engine-a")
    await seen.becomes({"http://10.0.1.1:8000"})


async def test_an_endpoint_that_turns_unready_leaves(api: httpx.AsyncClient, seen: Seen) -> None:
    await api.post(
        SLICES,
        json=endpoint_slice("chat-engine-a", "chat-engine", {"10.0.0.1": True, "10.0.0.2": True}),
    )
    await seen.becomes({"http://10.0.0.1:8000", "http://10.0.0.2:8000"})
    patch = {
        "endpoints": [
            {"addresses": ["10.0.0.1"], "conditions": {"ready": True}},
            {"addresses": ["10.0.0.2"], "conditions": {"ready": False}},
        ],
        "metadata": {"resourceVersion": str(next(_versions))},
    }
    await api.patch(
        f"{SLICES}/chat-engine-a",
        json=patch,
        headers={"content-type": "application/merge-patch+json"},
    )
    await seen.becomes({"http://10.0.0.1:8000"})
