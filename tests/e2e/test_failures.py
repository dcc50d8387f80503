"""Scenarios 4 and 5: a pod that cannot start (an image no runtime has, an engine that exits on
a bad setting) is named by the LLMDeployment's conditions, with the kubelet's reasons on the Pod;
deleting an LLMDeployment while the operator is stopped does not hang, and the garbage collector
removes its children and their pods.

NOTE: the conditions come from the operator reading pods, and the deletion from the operator not
holding a finalizer: both are other branches' work (docs/e2e.md), so these fail until merged."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.cluster import LLMD, Cluster, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(900)]
ENGINE_STATE_REASONS = ("ErrImagePull", "ImagePullBackOff")


def engine_waiting(cluster: Cluster, reason: str) -> dict[str, Any] | None:
    for pod in cluster.pod_objects("default", "smollm2-engine-"):
        for status in pod.get("status", {}).get("containerStatuses", []):
            waiting = status["state"].get("waiting") or {}
            if waiting.get("reason") == reason:
                return dict(status)
    return None


def engine_ready(cluster: Cluster) -> dict[str, Any]:
    return cluster.condition("default", "smollm2", "EngineReady")


def with_spec(**spec: Any) -> Any:
    def edit(obj: dict[str, Any]) -> dict[str, Any]:
        if obj["kind"] == "LLMDeployment":
            obj["spec"].update(spec)
        return obj

    return edit


async def test_an_image_that_cannot_be_pulled_is_named_by_the_engine_condition(
    cluster: Cluster,
) -> None:
    await cluster.apply_example(with_spec(image="localhost/pagedock/engine-cpu:no-such-tag"))
    await eventually(lambda: engine_waiting(cluster, "ErrImagePull"), 60, "ErrImagePull")
    status = await eventually(lambda: engine_waiting(cluster, "ImagePullBackOff"), 60, "back-off")
    assert "no-such-tag" in status["image"]

    def named() -> bool:
        condition = cluster.condition("default", "smollm2", "EngineReady")
        return (
            condition.get("status") == "False" and condition.get("reason") in ENGINE_STATE_REASONS
        )

    await eventually(
        named, 60, lambda: f"EngineReady naming the image pull; seen {engine_ready(cluster)}"
    )
    assert cluster.condition("default", "smollm2", "Ready")["status"] == "False"


async def test_an_engine_that_exits_is_crash_looping_with_its_exit_code(
    cluster: Cluster,
) -> None:
    bad = with_spec(env=[{"name": "PAGEDOCK_MAX_NUM_SEQS", "value": "many"}])
    await cluster.apply_example(bad)
    status = await eventually(
        lambda: engine_waiting(cluster, "CrashLoopBackOff"), 120, "CrashLoopBackOff"
    )
    terminated = status["lastState"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("Error", 2)
    assert status["restartCount"] >= 1

    def named() -> dict[str, Any] | None:
        condition = cluster.condition("default", "smollm2", "EngineReady")
        return condition if condition.get("reason") == "CrashLoopBackOff" else None

    condition = await eventually(
        named, 60, lambda: f"EngineReady=False, CrashLoopBackOff; seen {engine_ready(cluster)}"
    )
    assert condition["status"] == "False"
    assert "2" in condition["message"]


async def test_deleting_with_the_operator_stopped_does_not_hang_and_collects_the_children(
    cluster: Cluster,
) -> None:
    await cluster.apply_example()
    await cluster.wait_ready("default", "smollm2", timeout=420)
    await cluster.scale("apps/v1/deployments", "pagedock-system", "pagedock", 0)
    await eventually(lambda: not cluster.kubelet.pods("pagedock-"), 60, "the operator stopped")

    await cluster.client.delete(LLMD, "default", "smollm2")

    await eventually(
        lambda: not cluster.llmd("default", "smollm2"),
        30,
        lambda: f"the LLMDeployment gone; seen {cluster.llmd('default', 'smollm2')['metadata']}",
    )
    await eventually(
        lambda: (
            not cluster.api.all_live("apps/v1/deployments", "default")
            and not cluster.api.all_live("v1/services", "default")
            and not cluster.kubelet.pods(namespace="default")
        ),
        60,
        "children, pods and processes gone",
    )
