"""The kubelet stand-in's own promises, without the operator: owned children are garbage
collected down to the processes, and a container that exits crash-loops with back-off."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.cluster import Cluster, eventually
from tests.e2e.runtime import ROUTER_IMAGE

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio, pytest.mark.timeout(300)]


def deployment(owner: dict[str, Any], **container: Any) -> dict[str, Any]:
    labels = {"app": "exits"}
    container = {
        "name": "main",
        "image": ROUTER_IMAGE,
        "args": ["route", "--no-such-flag"],
    } | container
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": "exits",
            "namespace": "default",
            "ownerReferences": [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                }
            ],
        },
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [container],
                    "volumes": [{"name": "tmp", "emptyDir": {}}],
                },
            },
        },
    }


def crash_looping(cluster: Cluster) -> dict[str, Any] | None:
    for pod in cluster.pod_objects("default", "exits-"):
        [status] = pod.get("status", {}).get("containerStatuses") or [{}]
        if (status.get("state", {}).get("waiting") or {}).get("reason") == "CrashLoopBackOff":
            return dict(status)
    return None


async def test_a_read_only_root_filesystem_leaves_only_the_volumes_writable(
    cluster: Cluster,
) -> None:
    owner = await cluster.client.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "owner", "namespace": "default"},
        }
    )
    script = "touch /tmp/volume || exit 3; touch /var/tmp/pagedock-e2e-root || exit 4"
    await cluster.client.create(
        deployment(
            owner,
            command=["sh", "-c", script],
            args=[],
            volumeMounts=[{"name": "tmp", "mountPath": "/tmp"}],
            securityContext={"readOnlyRootFilesystem": True, "runAsUser": 0},
        )
    )
    status = await eventually(lambda: crash_looping(cluster), 60, "CrashLoopBackOff")
    assert status["lastState"]["terminated"]["exitCode"] == 4


async def test_an_owner_deleted_takes_its_deployment_pods_and_processes(cluster: Cluster) -> None:
    owner = await cluster.client.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "owner", "namespace": "default"},
        }
    )
    await cluster.client.create(deployment(owner))

    status = await eventually(lambda: crash_looping(cluster), 60, "CrashLoopBackOff")
    assert status["lastState"]["terminated"]["exitCode"] == 2  # argparse: unknown flag
    assert "back-off" in status["state"]["waiting"]["message"]

    await cluster.client.delete("v1/configmaps", "default", "owner")
    await eventually(
        lambda: (
            not cluster.api.all_live("apps/v1/deployments", "default")
            and not cluster.pod_objects("default", "exits-")
            and not cluster.kubelet.pods("exits-")
        ),
        30,
        "the Deployment, its pods and their processes gone",
    )
