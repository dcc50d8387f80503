"""Scenarios 2 and 3: `kubectl scale` 1 -> 2 and the new engine joins the router; a killed engine
process is restarted like a kubelet does (restartCount, lastState), the pod goes unready and
ready again, and the status and the router follow."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.cluster import LLMD, Cluster, chat, eventually, get_json

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(900)]


async def healthy_replicas(cluster: Cluster) -> set[str]:
    [router] = cluster.kubelet.pods("smollm2-router-")
    view: dict[str, Any] = await get_json(router.ip, 8080, "/router/replicas")
    return {r["url"] for r in view["replicas"] if r["healthy"]}


def engine_urls(cluster: Cluster) -> set[str]:
    return {f"http://{pod.ip}:8000" for pod in cluster.kubelet.pods("smollm2-engine-")}


async def test_scaling_to_two_replicas_adds_an_engine_that_joins_the_router(
    cluster: Cluster,
) -> None:
    await cluster.apply_example()
    await cluster.wait_ready("default", "smollm2", timeout=420)
    await cluster.scale(LLMD, "default", "smollm2", 2)

    async def both_in_the_router() -> bool:
        urls = engine_urls(cluster)
        return len(urls) == 2 and await healthy_replicas(cluster) == urls

    await eventually(both_in_the_router, timeout=240, what="two engines healthy in the router")
    await eventually(
        lambda: cluster.llmd("default", "smollm2").get("status", {}).get("readyReplicas") == 2,
        timeout=60,
        what="status.readyReplicas == 2",
    )
    await eventually(
        lambda: cluster.condition("default", "smollm2", "Ready").get("status") == "True",
        timeout=60,
        what=lambda: f"Ready=True, saw {cluster.condition('default', 'smollm2', 'Ready')}",
    )
    [router] = cluster.kubelet.pods("smollm2-router-")
    for prompt in ("One.", "Two, and a longer question to spread the load.", "Three?"):
        assert (await chat(router.ip, 8080, prompt))["choices"]


async def test_a_killed_engine_is_restarted_and_the_status_and_router_follow(
    cluster: Cluster,
) -> None:
    await cluster.apply_example()
    await cluster.wait_ready("default", "smollm2", timeout=420)
    [engine] = cluster.kubelet.pods("smollm2-engine-")
    url = f"http://{engine.ip}:8000"
    await eventually(lambda: healthy_replicas_is(cluster, {url}), 60, "the engine in the router")

    engine.containers[0].kill()

    def restarted() -> dict[str, Any] | None:
        [pod] = cluster.pod_objects("default", "smollm2-engine-")
        status = pod["status"]["containerStatuses"][0]
        return status if status["restartCount"] == 1 else None

    status = await eventually(restarted, 30, "restartCount 1")
    assert status["lastState"]["terminated"]["exitCode"] == 137
    assert status["lastState"]["terminated"]["reason"] == "Error"
    assert status["ready"] is False
    await eventually(
        lambda: cluster.condition("default", "smollm2", "Ready").get("status") == "False",
        30,
        "Ready=False while the engine restarts",
    )
    await cluster.wait_ready("default", "smollm2", timeout=240)
    await eventually(lambda: healthy_replicas_is(cluster, {url}), 60, "the engine back")
    [router] = cluster.kubelet.pods("smollm2-router-")
    assert (await chat(router.ip, 8080))["choices"]


async def healthy_replicas_is(cluster: Cluster, urls: set[str]) -> bool:
    return await healthy_replicas(cluster) == urls
