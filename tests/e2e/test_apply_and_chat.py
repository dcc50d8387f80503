"""Scenario 1: `kubectl apply` the operator and the example LLMDeployment (SmolLM2-135M on CPU)
-> Ready=True, and a chat through the router pod's IP answers; every API request the operator
and the router made is allowed by their RBAC."""

from __future__ import annotations

import pytest

from tests.e2e.cluster import Cluster, chat, eventually
from tests.e2e.rbac import assert_every_request_allowed

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(900)]


async def test_the_example_becomes_ready_and_answers_a_chat_through_the_router(
    cluster: Cluster,
) -> None:
    await cluster.apply_example()
    await cluster.wait_ready("default", "smollm2", timeout=420)
    [router] = cluster.kubelet.pods("smollm2-router-")
    reply = await chat(router.ip, 8080)
    assert reply["choices"][0]["message"]["content"]
    assert reply["model"] == "smollm2-135m-instruct"
    assert cluster.llmd("default", "smollm2")["status"]["readyReplicas"] == 1
    # The operator scrapes the engines through the headless Service's DNS name.
    await eventually(
        lambda: "kvCacheUsage" in cluster.llmd("default", "smollm2")["status"],
        timeout=30,
        what="engine metrics in the status",
    )


async def test_every_request_of_the_operator_and_the_router_is_allowed_by_their_rbac(
    cluster: Cluster,
) -> None:
    await cluster.apply_example()
    await cluster.wait_ready("default", "smollm2", timeout=420)
    [router] = cluster.kubelet.pods("smollm2-router-")
    await chat(router.ip, 8080)
    callers = {request.token for request in cluster.api.requests_log}
    assert {"sa:pagedock-system:pagedock", "sa:default:smollm2-router"} <= callers
    assert_every_request_allowed(cluster.api)
