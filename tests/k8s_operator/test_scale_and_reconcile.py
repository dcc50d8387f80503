"""The autoscaler's spec.replicas and a reconcile in progress, against the emulated API: a reconcile
applies the object as it is once it holds the lock, not the (older) body it was handed, and the
autoscaler's write waits for a reconcile of the same LLMDeployment in progress. Before, a resync
that had listed the object before a scale-up wrote the old count to the engine Deployment after
it, and the Deployment deleted the new engine (with its streams) only to create another."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import kopf
import pytest
import pytest_asyncio
from llm_operator.autoscaler.loop import Autoscaler
from llm_operator.autoscaler.rule import Decision
from llm_operator.autoscaler.signals import RouterDemand
from llm_operator.controller.reconcile import Reconciler
from llm_operator.k8s.kube import KubeClient
from llm_operator.settings import OperatorSettings

from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.helpers import LLMD_COLLECTION, live, llmd_body, make_llmd, send

pytestmark = pytest.mark.asyncio
LLMD_PATH = f"{LLMD_COLLECTION}/chat"
SETTINGS = OperatorSettings(peering_name="", liveness_port=0, scrape_metrics=False)


@pytest_asyncio.fixture()
async def kube(cluster: Emulator) -> AsyncIterator[KubeClient]:
    client = KubeClient(lambda: kopf.ConnectionInfo(server=str(cluster.url)))
    try:
        yield client
    finally:
        await client.close()


def engine_replicas(cluster: Emulator) -> int:
    engine = live(cluster, "apps/v1/deployments", "chat-engine")
    assert engine is not None, "no engine Deployment"
    return int(engine["spec"]["replicas"])


async def test_a_reconcile_handed_an_old_body_applies_the_object_as_it_is_now(
    cluster: Emulator, api: aiohttp.ClientSession, kube: KubeClient
) -> None:
    await send(api, "POST", LLMD_COLLECTION, make_llmd(replicas=1))
    reconciler = Reconciler(kube, SETTINGS)
    listed = llmd_body(cluster)  # as a resync's list, read before the scale-up
    await reconciler.reconcile(listed)
    assert engine_replicas(cluster) == 1
    await send(api, "PATCH", LLMD_PATH, {"spec": {"replicas": 2}})  # the autoscaler
    await reconciler.reconcile(listed)
    assert engine_replicas(cluster) == 2


async def test_a_reconcile_of_an_object_gone_since_writes_nothing(
    cluster: Emulator, api: aiohttp.ClientSession, kube: KubeClient
) -> None:
    await send(api, "POST", LLMD_COLLECTION, make_llmd(replicas=1))
    listed = llmd_body(cluster)
    await send(api, "DELETE", LLMD_PATH)
    await Reconciler(kube, SETTINGS).reconcile(listed)
    assert live(cluster, "apps/v1/deployments", "chat-engine") is None


class AskedLock(asyncio.Lock):
    """A lock that says when someone asks for it."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = asyncio.Event()

    async def acquire(self) -> bool:
        self.asked.set()
        return await super().acquire()


async def test_the_autoscalers_write_waits_for_the_reconcile_in_progress(
    cluster: Emulator, api: aiohttp.ClientSession, kube: KubeClient
) -> None:
    await send(api, "POST", LLMD_COLLECTION, make_llmd(replicas=1))
    lock = AskedLock()
    scaler = Autoscaler(kube, SETTINGS, lambda namespace, name: lock)
    decision = Decision(2, "concurrency 2 (0 held)", 2.0, 2.0, False)
    demand = RouterDemand(num_routers=1, num_held=0, num_inflight=2, idle_seconds=0)
    async with lock:  # a reconcile of the same LLMDeployment is running
        lock.asked.clear()
        scaling = asyncio.create_task(scaler._scale(llmd_body(cluster), 1, decision, demand))
        await lock.asked.wait()
        assert llmd_body(cluster)["spec"]["replicas"] == 1  # not written while the reconcile runs
    await scaling
    assert llmd_body(cluster)["spec"]["replicas"] == 2
