"""A restarted operator changes nothing: its first passes over a fleet that an earlier operator
built write no child (so no engine pod template changes and no pod restarts), whether the pass is
the Reconciler's own or kopf's resume handler and resync in a new operator process."""

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kopf
import pytest
import pytest_asyncio
from kopf.testing import KopfRunner
from llm_operator.controller.handlers import make_registry
from llm_operator.controller.reconcile import Reconciler
from llm_operator.k8s.kube import KubeClient
from llm_operator.settings import OperatorSettings

from tests.eventually import eventually
from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.helpers import LLMD, LLMD_COLLECTION, live, make_llmd, mark_ready, send

pytestmark = pytest.mark.asyncio
DEPLOYMENTS = "apps/v1/deployments"
ENGINE_PATH = "/apis/apps/v1/namespaces/team-a/deployments/chat-engine"
# Every switch that adds to the pod templates or adds children: GPUs, engine settings, two
# routers (anti-affinity, PDB, rolling update), an Ingress, the built-in autoscaler.
RICH_SPEC: dict[str, Any] = {
    "resources": {"gpus": 1},
    "engine": {"dtype": "bfloat16", "maxNumSeqs": 64},
    "router": {"replicas": 2},
    "ingress": {"enabled": True, "host": "llm.example.com", "tlsSecretName": "llm-tls"},
    "autoscaling": {"enabled": True, "mode": "builtin", "maxReplicas": 3},
}


@pytest_asyncio.fixture()
async def kubes(cluster: Emulator) -> AsyncIterator[list[KubeClient]]:
    clients: list[KubeClient] = []
    yield clients
    for kube in clients:
        await kube.close()


def fresh_reconciler(
    cluster: Emulator, kubes: list[KubeClient], settings: OperatorSettings
) -> Reconciler:
    """A Reconciler with nothing in memory, as in a new operator process."""
    kube = KubeClient(lambda: kopf.ConnectionInfo(server=str(cluster.url)))
    kubes.append(kube)
    return Reconciler(kube, settings)


def child_writes(cluster: Emulator) -> list[str]:
    """Every create, patch and delete of anything but the LLMDeployment and Events."""
    return [
        f"{request.method} {request.url.path}"
        for method in ("post", "patch", "put", "delete")
        for request in list(cluster[method])
        if "/llmdeployments" not in request.url.path and "/events" not in request.url.path
    ]


async def settled_fleet(
    cluster: Emulator, api: aiohttp.ClientSession, reconciler: Reconciler
) -> None:
    """The children an earlier operator built, their Deployments ready."""
    await send(api, "POST", LLMD_COLLECTION, make_llmd(**RICH_SPEC))
    await reconciler.reconcile(live(cluster, LLMD, "chat") or {})
    for name in ("chat-engine", "chat-router"):
        await mark_ready(api, live(cluster, DEPLOYMENTS, name) or {})
    await reconciler.reconcile(live(cluster, LLMD, "chat") or {})


async def test_a_fresh_reconciler_writes_nothing_to_a_fleet_it_did_not_build(
    cluster: Emulator,
    api: aiohttp.ClientSession,
    kubes: list[KubeClient],
    operator_settings: OperatorSettings,
) -> None:
    await settled_fleet(cluster, api, fresh_reconciler(cluster, kubes, operator_settings))
    before = child_writes(cluster)
    engine = live(cluster, DEPLOYMENTS, "chat-engine") or {}
    restarted = fresh_reconciler(cluster, kubes, operator_settings)
    await restarted.reconcile(live(cluster, LLMD, "chat") or {})
    assert child_writes(cluster) == before
    after = live(cluster, DEPLOYMENTS, "chat-engine") or {}
    assert after["metadata"]["resourceVersion"] == engine["metadata"]["resourceVersion"]
    assert after["spec"]["template"] == engine["spec"]["template"]


async def test_a_new_operator_process_resumes_without_touching_the_children(
    cluster: Emulator,
    api: aiohttp.ClientSession,
    kubes: list[KubeClient],
    operator_settings: OperatorSettings,
) -> None:
    await settled_fleet(cluster, api, fresh_reconciler(cluster, kubes, operator_settings))
    before = child_writes(cluster)
    engine_version = (live(cluster, DEPLOYMENTS, "chat-engine") or {})["metadata"]
    num_reads = len(cluster[f"get {ENGINE_PATH}"])
    runner = KopfRunner(["run", "-A", "--standalone"], registry=make_registry(operator_settings))
    runner.__enter__()
    try:
        # The resume handler's pass and at least two resync passes (resync_seconds=1) read it.
        await eventually(
            lambda: len(cluster[f"get {ENGINE_PATH}"]) >= num_reads + 3,
            what="three passes of the new operator over the engine Deployment",
        )
    finally:
        await asyncio.to_thread(runner.__exit__, None, None, None)
    assert child_writes(cluster) == before, child_writes(cluster)[len(before) :]
    after = live(cluster, DEPLOYMENTS, "chat-engine") or {}
    assert after["metadata"]["resourceVersion"] == engine_version["resourceVersion"]
