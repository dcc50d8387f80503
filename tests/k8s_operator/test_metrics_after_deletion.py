"""An LLMDeployment deleted while a reconcile pass or an autoscaler tick of it is in flight, against
the emulated API: the deletion's handler forgets its metrics, and the pass, ending after that, must
not bring its series back (operator_metrics.py: the pass's epoch is stale, its writes are dropped).
Before, a pass that had read the object just before the deletion counted itself, or its 404 on the
status write, once the handler had run, and the series stayed on /metrics for good.

Each test holds the pass at a point it reaches only after reading the object (a status write, the
routers' poll), runs the deletion's handler, then lets the pass go on: no sleeps, only events."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kopf
import pytest
import pytest_asyncio
from llm_operator.autoscaler.loop import Autoscaler
from llm_operator.autoscaler.rule import SCALING_REASONS
from llm_operator.autoscaler.signals import RouterDemand
from llm_operator.controller.reconcile import Reconciler
from llm_operator.k8s.kube import KubeClient, KubeError
from llm_operator.operator_metrics import OperatorMetrics
from llm_operator.settings import OperatorSettings

from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.helpers import (
    LLMD_COLLECTION,
    NAMESPACE,
    llmd_body,
    make_llmd,
    send,
)
from tests.k8s_operator.test_operator_metrics import series_of

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(60)]
CHAT = (NAMESPACE, "chat")
SETTINGS = OperatorSettings(peering_name="", liveness_port=0, scrape_metrics=False)
AUTOSCALING = {"enabled": True, "minReplicas": 1, "maxReplicas": 2, "targetConcurrency": 1}


class HeldStatusWrites(KubeClient):
    """A client whose status writes wait until the test lets them go; says when one is held."""

    def __init__(self, cluster: Emulator) -> None:
        super().__init__(lambda: kopf.ConnectionInfo(server=str(cluster.url)))
        self.held = asyncio.Event()
        self.go_on = asyncio.Event()

    async def patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if path.endswith("/status"):
            self.held.set()
            await self.go_on.wait()
        return await super().patch(path, body)


@pytest_asyncio.fixture()
async def kube(cluster: Emulator) -> AsyncIterator[HeldStatusWrites]:
    client = HeldStatusWrites(cluster)
    try:
        yield client
    finally:
        await client.close()


async def test_a_reconcile_failing_on_the_deleted_object_leaves_no_series(
    cluster: Emulator, api: aiohttp.ClientSession, kube: HeldStatusWrites
) -> None:
    """The pass read `chat`, applied its children, and writes its status as `chat` is deleted:
    the write fails (404), a failure the pass would count under the deleted name."""
    await send(api, "POST", LLMD_COLLECTION, make_llmd(replicas=1))
    metrics = OperatorMetrics()
    reconciler = Reconciler(kube, SETTINGS, metrics=metrics)
    reconciling = asyncio.create_task(reconciler.reconcile(llmd_body(cluster)))
    await kube.held.wait()
    await send(api, "DELETE", f"{LLMD_COLLECTION}/chat")
    reconciler.forget(*CHAT)  # the handler of the DELETED event (controller/handlers.py)
    kube.go_on.set()
    with pytest.raises(KubeError) as failed:
        await reconciling
    assert failed.value.status == 404
    assert series_of(metrics, CHAT) == []


async def test_an_autoscaler_tick_ending_after_the_deletions_handler_leaves_no_series(
    cluster: Emulator, api: aiohttp.ClientSession, kube: HeldStatusWrites
) -> None:
    """The tick polls the routers of `chat` as the deletion's handler runs. The object stays in
    the emulator, so the tick goes on to its end: its decision, its gauges, its status write."""
    await send(api, "POST", LLMD_COLLECTION, make_llmd(replicas=1, autoscaling=AUTOSCALING))
    kube.go_on.set()  # this tick's status write goes through
    metrics = OperatorMetrics(SCALING_REASONS)
    scaler = Autoscaler(kube, SETTINGS, metrics=metrics)
    polled, answer = asyncio.Event(), asyncio.Event()

    async def demand(namespace: str, name: str) -> RouterDemand:
        polled.set()
        await answer.wait()
        return RouterDemand(num_routers=1, num_held=0, num_inflight=1, idle_seconds=0)

    scaler._demand = demand  # type: ignore[method-assign]
    ticking = asyncio.create_task(scaler.scale_one(llmd_body(cluster)))
    await polled.wait()
    metrics.forget(CHAT)  # what the handler's Reconciler.forget does to the metrics
    answer.set()
    decision = await ticking
    assert decision is not None and decision.replicas == 1  # it decided
    assert series_of(metrics, CHAT) == []


async def test_a_pass_ending_after_the_deletions_handler_leaves_no_conditions_behind(
    cluster: Emulator, api: aiohttp.ClientSession, kube: HeldStatusWrites
) -> None:
    """The pass's status write goes through after the handler forgot `chat` (the object is
    still in the emulator): the conditions it wrote are not kept for a name that is gone."""
    await send(api, "POST", LLMD_COLLECTION, make_llmd(replicas=1))
    reconciler = Reconciler(kube, SETTINGS, metrics=OperatorMetrics())
    reconciling = asyncio.create_task(reconciler.reconcile(llmd_body(cluster)))
    await kube.held.wait()
    reconciler.forget(*CHAT)
    kube.go_on.set()
    await reconciling
    assert CHAT not in reconciler._written
