"""Only kopf's active peer runs the resync pass: kopf's pause rule, read from the peering object."""

import asyncio
import datetime
from typing import Any

import pytest
from llm_operator.controller.resync import resync_once
from llm_operator.k8s.leadership import Peering, is_active, outranked
from llm_operator.settings import OperatorSettings

NOW = datetime.datetime(2026, 11, 30, 12, 0, tzinfo=datetime.UTC)
ME = Peering("pagedock", "pod-a/1/abc", priority=100)


def peer(priority: int, seconds_ago: int = 5, lifetime: int = 60) -> dict[str, Any]:
    lastseen = (NOW - datetime.timedelta(seconds=seconds_ago)).isoformat()
    return {"priority": priority, "lifetime": lifetime, "lastseen": lastseen}


@pytest.mark.parametrize(
    ("peers", "expected"),
    [
        ({ME.identity: peer(100)}, False),
        ({ME.identity: peer(100), "pod-b": peer(50)}, False),
        ({ME.identity: peer(100), "pod-b": peer(100)}, False),  # kopf: both run, with a warning
        ({ME.identity: peer(100), "pod-b": peer(200)}, True),
        ({ME.identity: peer(100), "pod-b": peer(200, seconds_ago=61)}, False),  # dead
        ({"pod-b": {"priority": 200}}, True),  # no lastseen: kopf counts it alive
    ],
    ids=["alone", "lower", "equal", "higher", "higher-but-dead", "no-lastseen"],
)
def test_outranked_follows_kopfs_pause_rule(peers: dict[str, Any], expected: bool) -> None:
    assert outranked(ME, peers, NOW) is expected


class FakeKube:
    def __init__(self, objects: dict[str, Any]) -> None:
        self.objects = objects
        self.paths: list[str] = []

    async def get(self, path: str) -> Any:
        self.paths.append(path)
        return self.objects.get(path)


class FakeReconciler:
    def __init__(self, kube: FakeKube) -> None:
        self.kube = kube
        self.settings = OperatorSettings(scrape_metrics=False)
        self.reconciled: list[str] = []

    def lock(self, namespace: str, name: str) -> asyncio.Lock:
        return asyncio.Lock()

    async def reconcile(self, body: dict[str, Any], stats: object = None) -> None:
        self.reconciled.append(body["metadata"]["name"])


def cluster_with(peers: dict[str, Any]) -> FakeKube:
    item = {"metadata": {"name": "chat", "namespace": "team-a"}}
    return FakeKube(
        {
            "/apis/kopf.dev/v1/clusterkopfpeerings/pagedock": {"status": peers},
            "/apis/pagedock.dev/v1alpha1/llmdeployments": {"items": [item]},
        }
    )


@pytest.mark.asyncio
async def test_the_resync_pass_runs_on_the_leader_only() -> None:
    leader = FakeReconciler(cluster_with({"pod-b": {"priority": 1}}))
    await resync_once(leader, (), ME)  # type: ignore[arg-type]
    assert leader.reconciled == ["chat"]
    follower = FakeReconciler(cluster_with({"pod-b": {"priority": 1000}}))
    await resync_once(follower, (), ME)  # type: ignore[arg-type]
    assert follower.reconciled == []
    standalone = FakeReconciler(cluster_with({"pod-b": {"priority": 1000}}))
    await resync_once(standalone, (), None)  # type: ignore[arg-type]
    assert standalone.reconciled == ["chat"]


@pytest.mark.asyncio
async def test_a_namespaced_operator_reads_each_namespaces_kopfpeering() -> None:
    kube = FakeKube({})
    assert await is_active(kube, ME, "team-a")  # type: ignore[arg-type]
    assert kube.paths == ["/apis/kopf.dev/v1/namespaces/team-a/kopfpeerings/pagedock"]
