"""The autoscaler's windows outlive the operator (llm_operator/autoscaler/state_store.py), against
the emulated API: recorded in the ConfigMap `<name>-autoscaler` at a bounded rate, resumed by a
restarted operator and by a peer that becomes the leader, ignored when stale or of another
object, deleted when autoscaling is turned off, and a refused write named in a Warning Event.
Only the routers' answer is scripted: no router pod runs here."""

from __future__ import annotations

import datetime
import json
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import kmock
import kopf
import pytest
import pytest_asyncio
from llm_operator.autoscaler.loop import Autoscaler
from llm_operator.autoscaler.record import Clock, encode
from llm_operator.autoscaler.rule import ScalerState
from llm_operator.autoscaler.signals import RouterDemand
from llm_operator.autoscaler.state_store import STATE_KEY, build_state_config_map
from llm_operator.k8s.kube import KubeClient
from llm_operator.k8s.leadership import Peering
from llm_operator.settings import OperatorSettings

from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.helpers import LLMD, LLMD_COLLECTION, NAMESPACE, live, make_llmd, send
from tests.k8s_operator.validation import validate_kubernetes

pytestmark = pytest.mark.asyncio
CONFIG_MAPS = "v1/configmaps"
STATE_PATH = f"/api/v1/namespaces/{NAMESPACE}/configmaps/chat-autoscaler"
ENGINES = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"
PEERINGS = "kopf.dev/v1/clusterkopfpeerings"
PEERING_PATH = "/apis/kopf.dev/v1/clusterkopfpeerings"
AUTOSCALING = {
    "enabled": True,
    "minReplicas": 1,
    "maxReplicas": 4,
    "targetConcurrency": 2,
    "stableWindowSeconds": 30,
    "scaleDownStabilizationSeconds": 60,
}


class ScriptedAutoscaler(Autoscaler):
    """The operator's autoscaler, its routers' demand set by the test."""

    inflight = 0

    async def _demand(self, namespace: str, name: str) -> RouterDemand | None:
        return RouterDemand(num_routers=1, num_held=0, num_inflight=self.inflight, idle_seconds=0)


Factory = Callable[[], ScriptedAutoscaler]


@pytest_asyncio.fixture()
async def autoscalers(cluster: Emulator) -> AsyncIterator[Factory]:
    """A new operator's autoscaler per call (its own client and memory), as after a restart."""
    clients: list[KubeClient] = []

    def make() -> ScriptedAutoscaler:
        kube = KubeClient(lambda: kopf.ConnectionInfo(server=str(cluster.url)))
        clients.append(kube)
        return ScriptedAutoscaler(kube, OperatorSettings(scrape_metrics=False, peering_name=""))

    yield make
    for kube in clients:
        await kube.close()


async def deployed(api: aiohttp.ClientSession, replicas: int = 1, ready: int = 1) -> None:
    """The LLMDeployment with builtin autoscaling, and its engine Deployment with `ready` ready."""
    await send(api, "POST", LLMD_COLLECTION, make_llmd(replicas=replicas, autoscaling=AUTOSCALING))
    engine = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "chat-engine", "namespace": NAMESPACE},
        "spec": {"replicas": replicas},
    }
    await send(api, "POST", ENGINES, engine)
    status = {"observedGeneration": 1, "readyReplicas": ready, "updatedReplicas": ready}
    await send(api, "PATCH", f"{ENGINES}/chat-engine/status", {"status": status})


def body(cluster: Emulator) -> dict[str, Any]:
    return live(cluster, LLMD, "chat") or {}


def record(cluster: Emulator) -> dict[str, Any]:
    state = live(cluster, CONFIG_MAPS, "chat-autoscaler")
    assert state is not None, "no ConfigMap chat-autoscaler"
    parsed: dict[str, Any] = json.loads(state["data"][STATE_KEY])
    return parsed


def writes_of_the_record(cluster: Emulator) -> int:
    return len(cluster[f"patch {STATE_PATH}"]) + len(
        cluster[f"post /api/v1/namespaces/{NAMESPACE}/configmaps"]
    )


async def test_a_scale_decision_is_recorded_in_a_configmap_owned_by_the_llmdeployment(
    cluster: Emulator, api: aiohttp.ClientSession, autoscalers: Factory
) -> None:
    await deployed(api)
    scaler = autoscalers()
    scaler.inflight = 8
    decision = await scaler.scale_one(body(cluster))
    assert decision is not None and decision.replicas == 2  # 4 wanted, at most twice the ready
    state = live(cluster, CONFIG_MAPS, "chat-autoscaler") or {}
    [owner] = state["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("LLMDeployment", body(cluster)["metadata"]["uid"])
    assert state["metadata"]["labels"]["pagedock.dev/llmdeployment"] == "chat"
    saved = record(cluster)
    assert saved["uid"] == body(cluster)["metadata"]["uid"]
    assert [value for _, value in saved["samples"]] == [8]
    assert abs(saved["savedAt"] - time.time()) < 60


async def test_the_state_configmap_is_valid_kubernetes() -> None:
    owner = make_llmd(autoscaling=AUTOSCALING)
    owner["metadata"]["uid"] = "0b6f4c1e"
    validate_kubernetes(build_state_config_map(owner, "{}"))


async def test_the_record_is_written_at_a_bounded_rate_and_once_more_on_stopping(
    cluster: Emulator, api: aiohttp.ClientSession, autoscalers: Factory
) -> None:
    await deployed(api, replicas=2, ready=2)
    scaler = autoscalers()
    scaler.inflight = 4  # steady: 2 wanted, 2 there
    for _ in range(5):
        decision = await scaler.scale_one(body(cluster))
        assert decision is not None and decision.reason == "steady"
    assert writes_of_the_record(cluster) == 0  # the first write is due SAVE_EVERY_S after loading
    await scaler.flush()
    assert writes_of_the_record(cluster) == 1
    assert [value for _, value in record(cluster)["samples"]] == [4] * 5


async def test_a_restarted_operator_resumes_the_windows(
    cluster: Emulator, api: aiohttp.ClientSession, autoscalers: Factory
) -> None:
    await deployed(api, replicas=2, ready=2)
    before = autoscalers()
    before.inflight = 4
    for _ in range(3):
        await before.scale_one(body(cluster))
    await before.flush()  # the operator stops (kopf's cleanup)
    after = autoscalers()  # a new process: empty memory
    after.inflight = 4
    decision = await after.scale_one(body(cluster))
    key = (NAMESPACE, "chat")
    state = after.states[key]
    assert [value for _, value in state.samples] == [4, 4, 4, 4]
    assert state.started_at == pytest.approx(before.states[key].started_at, abs=0.05)
    assert decision is not None and decision.reason == "steady"


async def test_a_resumed_window_lets_a_due_scale_down_happen_at_once(
    cluster: Emulator, api: aiohttp.ClientSession, autoscalers: Factory
) -> None:
    """What the old behaviour got wrong: a restart delayed a due scale-down by a whole window."""
    await deployed(api, replicas=2, ready=2)
    uid = body(cluster)["metadata"]["uid"]
    # A previous operator watched for 100 s: 2 in flight for the last 30 s (1 replica's worth),
    # and it last recommended 2 replicas 61 s ago (outside the 60 s stabilization window).
    now = time.monotonic()
    previous = ScalerState(
        samples=deque((now - age, 2) for age in range(30, 0, -1)),
        wants=deque([(now - 61, 2), *((now - age, 1) for age in range(60, 0, -1))]),
        started_at=now - 100,
    )
    await store_record(api, encode(previous, uid, Clock(now, time.time())))
    scaler = autoscalers()
    scaler.inflight = 2
    decision = await scaler.scale_one(body(cluster))
    assert decision is not None
    assert (decision.replicas, decision.reason) == (1, "concurrency 2 over the stable window")
    assert body(cluster)["spec"]["replicas"] == 1


async def test_a_peer_that_becomes_the_leader_resumes_the_windows_and_forgets_them_when_outranked(
    cluster: Emulator, api: aiohttp.ClientSession, autoscalers: Factory
) -> None:
    await install_peering(cluster, api)
    await set_peers(api, {"a": 200, "b": 100})
    await deployed(api)
    first, second = autoscalers(), autoscalers()
    first.inflight = second.inflight = 8
    peer_b = Peering("pagedock", "b", 100)
    await first.tick(Peering("pagedock", "a", 200))  # the leader decides: 1 -> 2, recorded
    await second.tick(peer_b)  # outranked: no decision, no windows
    assert (NAMESPACE, "chat") in first.states and not second.states
    await set_peers(api, {"a": 200, "b": 100}, dead={"a"})  # a stopped (kopf: lifetime 0)
    second.inflight = 1
    await second.tick(peer_b)
    resumed = second.states[NAMESPACE, "chat"]
    assert [value for _, value in resumed.samples] == [8, 1]
    assert resumed.started_at == pytest.approx(first.states[NAMESPACE, "chat"].started_at, abs=0.05)
    assert body(cluster)["spec"]["replicas"] == 2  # held, as the windows say
    await set_peers(api, {"b": 100, "c": 300})  # a new leader: b stands by and forgets
    await second.tick(peer_b)
    assert not second.states  # when it leads again, it reads the record afresh


@pytest.mark.parametrize("which", ["stale", "another-object"])
async def test_a_stale_record_or_one_of_another_object_is_ignored(
    which: str, cluster: Emulator, api: aiohttp.ClientSession, autoscalers: Factory
) -> None:
    await deployed(api, replicas=2, ready=2)
    now = time.monotonic()
    previous = ScalerState(
        samples=deque([(now - 1, 8)]), wants=deque([(now - 1, 4)]), started_at=now - 500
    )
    uid = body(cluster)["metadata"]["uid"] if which == "stale" else "another-object"
    saved_at = time.time() - (61 if which == "stale" else 0)  # the longer window is 60 s
    await store_record(api, encode(previous, uid, Clock(now, saved_at)))
    scaler = autoscalers()
    scaler.inflight = 0
    decision = await scaler.scale_one(body(cluster))
    assert decision is not None
    assert decision.reason == "wants 1, no scale-down in the first stabilization window"
    assert [value for _, value in scaler.states[NAMESPACE, "chat"].samples] == [0]


async def test_turning_autoscaling_off_deletes_the_record(
    cluster: Emulator, api: aiohttp.ClientSession, autoscalers: Factory
) -> None:
    await deployed(api)
    scaler = autoscalers()
    scaler.inflight = 8
    await scaler.scale_one(body(cluster))
    assert live(cluster, CONFIG_MAPS, "chat-autoscaler") is not None
    off = {"spec": {"autoscaling": {"enabled": False}}}
    await send(api, "PATCH", f"{LLMD_COLLECTION}/chat", off)
    assert await scaler.scale_one(body(cluster)) is None
    assert live(cluster, CONFIG_MAPS, "chat-autoscaler") is None


async def test_a_refused_write_is_named_in_one_warning_event(
    cluster: Emulator, api: aiohttp.ClientSession, autoscalers: Factory
) -> None:
    forbidden = 'configmaps is forbidden: User "system:serviceaccount:x:y" cannot create'
    cluster.refuse(kmock.action.CREATE, CONFIG_MAPS, 403, forbidden)
    await deployed(api)
    scaler = autoscalers()
    scaler.inflight = 8
    await scaler.scale_one(body(cluster))  # 1 -> 2: a write, refused
    await scaler.flush()  # refused again: no second Event
    events = [
        request.data
        for request in cluster[f"post /api/v1/namespaces/{NAMESPACE}/events"]
        if request.data.get("reason") == "AutoscalerStateNotSaved"
    ]
    assert [(e["type"], e["message"]) for e in events] == [
        ("Warning", f"ConfigMap chat-autoscaler: {forbidden}")
    ]
    assert body(cluster)["spec"]["replicas"] == 2  # the decision stands


async def store_record(api: aiohttp.ClientSession, text: str) -> None:
    """The ConfigMap as an earlier operator left it."""
    state_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "chat-autoscaler", "namespace": NAMESPACE},
        "data": {STATE_KEY: text},
    }
    await send(api, "POST", f"/api/v1/namespaces/{NAMESPACE}/configmaps", state_map)


async def install_peering(cluster: Emulator, api: aiohttp.ClientSession) -> None:
    """The peering CRD and its ClusterKopfPeering object (`pagedock operator crd --peering`)."""
    cluster.resources[PEERINGS] = kmock.ResourceInfo(
        kind="ClusterKopfPeering",
        namespaced=False,
        verbs={"list", "watch", "get", "patch", "create"},
    )
    peering = {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering"}
    await send(api, "POST", PEERING_PATH, {**peering, "metadata": {"name": "pagedock"}})


async def set_peers(
    api: aiohttp.ClientSession, priorities: dict[str, int], dead: set[str] | None = None
) -> None:
    """Peers with these priorities, in kopf's status format; the `dead` ones left (lifetime 0)."""
    now = datetime.datetime.now(datetime.UTC).isoformat()
    status = {
        peer: {"priority": p, "lifetime": 0 if peer in (dead or set()) else 600, "lastseen": now}
        for peer, p in priorities.items()
    }
    await send(api, "PATCH", f"{PEERING_PATH}/pagedock", {"status": status})


async def test_a_deleted_llmdeployment_leaves_nothing_in_the_autoscalers_memory(
    cluster: Emulator, api: aiohttp.ClientSession, autoscalers: Factory
) -> None:
    """Deleted between two ticks (no tick saw its deletionTimestamp): the next tick, which does
    not list it, forgets its windows and when its status was last written."""
    await deployed(api)
    scaler = autoscalers()
    scaler.inflight = 8
    await scaler.tick()
    assert list(scaler.states) == list(scaler._status_at) == [(NAMESPACE, "chat")]
    await send(api, "DELETE", f"{LLMD_COLLECTION}/chat")
    await scaler.tick()
    assert scaler.states == {} and scaler._status_at == {}
