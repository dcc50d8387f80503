"""The operator's /metrics, live: the operator (kopf's KopfRunner) against kmock's emulator,
serving on a port of its own, one LLMDeployment under the built-in autoscaler whose router is a
stand-in answering GET /router/demand on this test's loop. A scale-up shows in the metrics once it
happened (spec.replicas written); a child the API server refuses counts as a reconcile error; a
deleted LLMDeployment leaves no series; and every operator series the chart's dashboards and
alerts read is on the live scrape, with the labels the queries were checked against
(test_dashboards.py). The engine's and router's series: test_monitoring_live.py."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kmock
import pytest
import pytest_asyncio
from aiohttp import web
from kopf.testing import KopfRunner
from llm_operator.autoscaler import signals
from llm_operator.names import child_labels
from llm_operator.settings import OperatorSettings
from prometheus_client.samples import Sample

from tests.eventually import eventually
from tests.k8s_operator.chart import prometheus_rule
from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.exported_metrics import operator_families, parse_scrape, series_index
from tests.k8s_operator.helpers import (
    LLMD,
    LLMD_COLLECTION,
    NAMESPACE,
    live,
    make_llmd,
    mark_ready,
    send,
)
from tests.k8s_operator.monitoring_queries import chart_queries, parse, selectors
from tests.k8s_operator.test_operator_metrics import free_port

pytestmark = [pytest.mark.asyncio, pytest.mark.timeout(120)]
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
CHAT = {"namespace": NAMESPACE, "llmdeployment": "chat"}
# Panic needs 10x the ready replicas, so a scale-up's reason is the stable window's.
AUTOSCALING = {
    "enabled": True,
    "minReplicas": 1,
    "maxReplicas": 2,
    "targetConcurrency": 1,
    "stableWindowSeconds": 6,
    "panicThresholdPercentage": 1000,
}
Scrape = dict[str, list[Sample]]


class RouterStandIn:
    """A router's GET /router/demand, its in-flight count set by the test; counts its polls."""

    def __init__(self) -> None:
        self.num_inflight = 0
        self.num_polls = 0
        app = web.Application()
        app.router.add_get("/router/demand", self._demand)
        self._runner = web.AppRunner(app)

    async def start(self) -> int:
        await self._runner.setup()
        port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        return port

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def _demand(self, _: web.Request) -> web.Response:
        self.num_polls += 1
        view = {"num_held": 0, "num_inflight": self.num_inflight, "idle_seconds": 0.0}
        return web.json_response({**view, "replicas": []})


@pytest.fixture()
def metrics_port() -> int:
    return free_port()


@pytest.fixture()
def operator_settings(operator_settings: OperatorSettings, metrics_port: int) -> OperatorSettings:
    return dataclasses.replace(
        operator_settings, metrics_port=metrics_port, autoscale_interval_seconds=0.1
    )


@pytest_asyncio.fixture()
async def router(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[RouterStandIn]:
    """The stand-in, where the operator's autoscaler polls a router pod at 127.0.0.1."""
    stand_in = RouterStandIn()
    monkeypatch.setattr(signals, "ROUTER_PORT", await stand_in.start())
    try:
        yield stand_in
    finally:
        await stand_in.stop()


def router_pod() -> dict[str, Any]:
    """The LLMDeployment `chat`'s router pod, ready at 127.0.0.1 (kmock runs no pods)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "chat-router-7c9d4-q8x2m",
            "namespace": NAMESPACE,
            "labels": child_labels("chat", "router"),
        },
        "spec": {"containers": [{"name": "router", "image": "registry.test/router:1"}]},
        "status": {
            "phase": "Running",
            "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


async def scrape(port: int) -> Scrape | None:
    """The operator's /metrics, parsed; None while it does not answer yet."""
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/metrics") as response,
        ):
            return parse_scrape(await response.text()) if response.status == 200 else None
    except aiohttp.ClientError:
        return None


def value(scraped: Scrape | None, series: str, **labels: str) -> float | None:
    """The sample of `series` for `chat` (and labels), or None."""
    for samples in (scraped or {}).values():
        for sample in samples:
            if sample.name == series and sample.labels == {**CHAT, **labels}:
                return sample.value
    return None


def autoscaler(name: str) -> str:
    return f"pagedock_operator_autoscaler_{name}"


def num_scaled_up(scraped: Scrape | None, reason: str = "concurrency") -> float | None:
    return value(scraped, autoscaler("scaling_decisions_total"), direction="up", reason=reason)


async def deployed_and_watched(cluster: Emulator, api: aiohttp.ClientSession, port: int) -> Scrape:
    """`chat` with its router and one ready engine, and the scrape that shows the autoscaler's
    tick with that engine ready, before any demand."""
    await send(api, "POST", PODS, router_pod())
    await send(api, "POST", LLMD_COLLECTION, make_llmd(replicas=1, autoscaling=AUTOSCALING))
    engine = await eventually(lambda: live(cluster, "apps/v1/deployments", "chat-engine"))
    await mark_ready(api, engine)

    async def ticked_with_a_ready_engine() -> Scrape | None:
        scraped = await scrape(port)
        return scraped if value(scraped, autoscaler("ready_replicas")) == 1 else None

    scraped: Scrape = await eventually(ticked_with_a_ready_engine, 30, "a tick with 1 ready")
    return scraped


def replicas(cluster: Emulator) -> int | None:
    return (live(cluster, LLMD, "chat") or {}).get("spec", {}).get("replicas")


async def scaled_up(cluster: Emulator, router: RouterStandIn, port: int) -> Scrape:
    """Demand for 4 engines: spec.replicas goes to 2 (maxReplicas); the scrape that counts it."""
    router.num_inflight = 4
    await eventually(
        lambda: replicas(cluster) == 2, 30, lambda: f"spec.replicas {replicas(cluster)}"
    )

    async def counted() -> Scrape | None:
        scraped = await scrape(port)
        return scraped if num_scaled_up(scraped) == 1 else None

    scraped: Scrape = await eventually(counted, 10, "the scale-up counted")
    return scraped


async def test_a_scale_up_shows_in_the_desired_replicas_and_the_decision_counter(
    operator: KopfRunner,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    router: RouterStandIn,
    metrics_port: int,
) -> None:
    before = await deployed_and_watched(cluster, api, metrics_port)
    assert value(before, autoscaler("desired_replicas")) == 1
    assert value(before, autoscaler("at_max_replicas")) == 0
    assert num_scaled_up(before) == 0  # counted from 0, so `increase()` sees the first one

    after = await scaled_up(cluster, router, metrics_port)
    assert value(after, autoscaler("desired_replicas")) == 2
    assert value(after, autoscaler("max_replicas")) == 2
    assert (value(after, autoscaler("wanted_replicas")) or 0) >= 2
    assert value(after, autoscaler("at_max_replicas")) == 1  # the demand asks for more
    assert value(after, autoscaler("concurrency")) == 4
    assert value(after, autoscaler("num_routers")) == 1
    for reason in ("panic", "scale_up_limit"):
        assert num_scaled_up(after, reason) == 0, reason
    assert (value(after, "pagedock_operator_reconciles_total") or 0) >= 1


async def test_a_refused_child_counts_as_a_reconcile_error_by_its_reason(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession, metrics_port: int
) -> None:
    forbidden = 'poddisruptionbudgets.policy "chat-engine" is forbidden'
    cluster.refuse(kmock.action.CREATE, "policy/v1/poddisruptionbudgets", 403, forbidden)
    await send(api, "POST", LLMD_COLLECTION, make_llmd())
    errors = "pagedock_operator_reconcile_errors_total"

    async def counted() -> Scrape | None:
        scraped = await scrape(metrics_port)
        return scraped if (value(scraped, errors, reason="ChildRejected") or 0) >= 1 else None

    scraped = await eventually(counted, 30, "a ChildRejected reconcile error")
    assert (value(scraped, "pagedock_operator_reconciles_total") or 0) >= 1
    assert value(scraped, autoscaler("desired_replicas")) is None  # not autoscaled


async def test_a_deleted_llmdeployment_leaves_no_series(
    operator: KopfRunner,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    router: RouterStandIn,
    metrics_port: int,
) -> None:
    await deployed_and_watched(cluster, api, metrics_port)
    await send(api, "DELETE", f"{LLMD_COLLECTION}/chat")

    left: list[str] = []

    async def no_series_of_chat() -> Scrape | None:
        scraped = await scrape(metrics_port)
        left[:] = [
            sample.name
            for samples in (scraped or {}).values()
            for sample in samples
            if sample.labels.get("llmdeployment") == "chat"
        ]
        return scraped if scraped is not None and not left else None

    await eventually(no_series_of_chat, 30, lambda: f"the series of the deleted chat ended: {left}")


async def test_every_operator_series_the_chart_reads_is_on_the_live_operator(
    operator: KopfRunner,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    router: RouterStandIn,
    metrics_port: int,
) -> None:
    """After a scale-up and a refused child, each series a dashboard or alert reads of the
    operator's families has a sample, and every sample carries the registered labels."""
    cluster.refuse(kmock.action.CREATE, "policy/v1/poddisruptionbudgets", 403, "forbidden")
    await deployed_and_watched(cluster, api, metrics_port)
    await scaled_up(cluster, router, metrics_port)
    errors = "pagedock_operator_reconcile_errors_total"

    async def with_an_error() -> Scrape | None:
        scraped = await scrape(metrics_port)
        return scraped if value(scraped, errors, reason="ChildRejected") else None

    scraped: Scrape = await eventually(with_an_error, 30, "a reconcile error")
    families = operator_families()
    index = series_index(families)
    read = {
        selector.series
        for query in chart_queries(prometheus_rule())
        for selector in selectors(parse(query.expr))
        if selector.series in index
    }
    assert {index[series].name for series in read} == set(families)  # the chart reads them all
    samples = {sample.name for family in scraped.values() for sample in family}
    assert not read - samples, sorted(read - samples)
    assert set(scraped) == set(families), set(scraped) ^ set(families)
    for name, family_samples in scraped.items():
        for sample in family_samples:
            assert set(sample.labels) - {"le"} == families[name].labels, (name, sample)
