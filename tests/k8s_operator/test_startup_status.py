"""status.startup: the reconciler copies the start-up stages of the latest revision's newest
ready engine pod into status, against the emulated API and stand-in engines serving GET /startup
at their pod IPs."""

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kopf
import pytest
import pytest_asyncio
from aiohttp import web
from llm_operator.controller.reconcile import Reconciler
from llm_operator.fleet.startup import latest_ready_pod, startup_status
from llm_operator.k8s.kube import KubeClient
from llm_operator.settings import OperatorSettings

from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.engine_stand_in import StandInServer, on_one_port
from tests.k8s_operator.engine_stand_in import engine_pod as stand_in_pod
from tests.k8s_operator.helpers import (
    LLMD,
    LLMD_COLLECTION,
    NAMESPACE,
    live,
    make_llmd,
    mark_ready,
    send,
)

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
STARTED = 1_764_676_800.0  # 2025-12-02T12:00:00Z
UP_TO_READY = {"process_start": 0.0, "imports_done": 2.0, "weights_loaded": 4.5, "ready": 5.25}


class StartupStandIn(StandInServer):
    """One engine's GET /startup, its report settable, its requests counted."""

    def __init__(self, ip: str) -> None:
        super().__init__(ip)
        self.stages: dict[str, float] = dict(UP_TO_READY)
        self.num_requests = 0

    def add_routes(self, app: web.Application) -> None:
        app.router.add_get("/startup", self._startup)

    async def _startup(self, request: web.Request) -> web.Response:
        self.num_requests += 1
        return web.json_response({"process_start_time": STARTED, "stages": self.stages})


@pytest_asyncio.fixture()
async def engines() -> AsyncIterator[list[StartupStandIn]]:
    """Three stand-in engines on one port at 127.0.0.2-4 (pod IPs)."""
    async with on_one_port([StartupStandIn(f"127.0.0.{i}") for i in (2, 3, 4)]) as stand_ins:
        yield stand_ins


@pytest_asyncio.fixture()
async def reconciler(cluster: Emulator, engines: list[StartupStandIn]) -> AsyncIterator[Reconciler]:
    kube = KubeClient(lambda: kopf.ConnectionInfo(server=str(cluster.url)))
    settings = OperatorSettings(peering_name="", liveness_port=0)
    reconciler = Reconciler(kube, settings)
    reconciler.startups.port = engines[0].port
    try:
        yield reconciler
    finally:
        await kube.close()


def engine_pod(
    name: str, ip: str, revision: str, created: str, ready: bool = True
) -> dict[str, Any]:
    return stand_in_pod(name, ip, ready=ready, revision=revision, created=created)


async def reconcile(reconciler: Reconciler, cluster: Emulator) -> dict[str, Any]:
    body = live(cluster, LLMD, "chat") or {}
    body.setdefault("apiVersion", "pagedock.dev/v1alpha1")
    body.setdefault("kind", "LLMDeployment")
    await reconciler.reconcile(body)
    return dict((live(cluster, LLMD, "chat") or {}).get("status", {}))


async def ready_deployment(
    api: aiohttp.ClientSession, reconciler: Reconciler, cluster: Emulator
) -> None:
    """The LLMDeployment applied, its engine Deployment ready (no figures read before that)."""
    await send(api, "POST", LLMD_COLLECTION, make_llmd())
    status = await reconcile(reconciler, cluster)
    assert "startup" not in status
    await mark_ready(api, live(cluster, "apps/v1/deployments", "chat-engine") or {})


@pytest.mark.asyncio
async def test_status_startup_is_the_newest_ready_pod_of_the_newest_revision(
    reconciler: Reconciler,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    engines: list[StartupStandIn],
) -> None:
    old, new, loading = engines
    new.stages = {**UP_TO_READY, "ready": 7.5}
    await send(
        api, "POST", PODS, engine_pod("chat-engine-a", old.ip, "aaa", "2025-12-02T11:00:00Z")
    )
    await send(
        api, "POST", PODS, engine_pod("chat-engine-b", new.ip, "bbb", "2025-12-02T12:00:00Z")
    )
    unready = engine_pod("chat-engine-c", loading.ip, "bbb", "2025-12-02T12:01:00Z", ready=False)
    await send(api, "POST", PODS, unready)
    await ready_deployment(api, reconciler, cluster)

    status = await reconcile(reconciler, cluster)

    # Stages not reached are null in the patch, so absent from the stored status.
    assert status["startup"] == {
        "pod": "chat-engine-b",
        "revision": "bbb",
        "processStartTime": "2025-12-02T12:00:00Z",
        "stages": {"importsDone": 2.0, "weightsLoaded": 4.5, "ready": 7.5},
    }
    assert (old.num_requests, loading.num_requests) == (0, 0)


@pytest.mark.asyncio
async def test_figures_follow_the_pod_until_its_first_request_then_stay(
    reconciler: Reconciler,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    engines: list[StartupStandIn],
) -> None:
    engine = engines[0]
    await send(
        api, "POST", PODS, engine_pod("chat-engine-a", engine.ip, "aaa", "2025-12-02T12:00:00Z")
    )
    await ready_deployment(api, reconciler, cluster)
    assert "firstRequestServed" not in (await reconcile(reconciler, cluster))["startup"]["stages"]

    engine.stages = {**UP_TO_READY, "first_request_served": 9.125}
    status = await reconcile(reconciler, cluster)
    assert status["startup"]["stages"]["firstRequestServed"] == 9.125

    asked = engine.num_requests
    engine.stages = {}  # whatever it says now, the figures of a served pod are final
    status = await reconcile(reconciler, cluster)
    assert engine.num_requests == asked
    assert status["startup"]["stages"]["firstRequestServed"] == 9.125


@pytest.mark.asyncio
async def test_no_ready_engine_keeps_the_last_figures(
    reconciler: Reconciler,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    engines: list[StartupStandIn],
) -> None:
    await send(
        api, "POST", PODS, engine_pod("chat-engine-a", engines[0].ip, "aaa", "2025-12-02T12:00:00Z")
    )
    await ready_deployment(api, reconciler, cluster)
    before = (await reconcile(reconciler, cluster))["startup"]
    await send(api, "DELETE", f"{PODS}/chat-engine-a")

    status = await reconcile(reconciler, cluster)

    assert status["startup"] == before


def test_a_revision_none_of_whose_pods_is_ready_has_no_figures_yet() -> None:
    pods = [
        engine_pod("a", "10.0.0.1", "old", "2025-12-02T11:00:00Z"),
        engine_pod("b", "10.0.0.2", "new", "2025-12-02T12:00:00Z", ready=False),
    ]
    assert latest_ready_pod(pods) is None
    assert latest_ready_pod(pods[:1]) is pods[0]


def test_a_body_that_is_no_report_gives_no_status() -> None:
    pod = engine_pod("a", "10.0.0.1", "r", "2025-12-02T12:00:00Z")
    assert startup_status(pod, {"stages": "soon"}) is None
    assert startup_status(pod, {"stages": {}, "process_start_time": "x"}) is None
    odd = startup_status(pod, {"stages": {"ready": float("nan"), "x": 1}, "process_start_time": 0})
    assert odd is not None and odd["stages"]["ready"] is None and "x" not in odd["stages"]
