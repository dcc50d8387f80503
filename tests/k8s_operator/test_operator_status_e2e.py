"""Status that names the real failure, end to end against kmock's emulator: a failing engine pod,
and a child that the API server refuses."""

import asyncio
import dataclasses
from typing import Any

import aiohttp
import kmock
import pytest
from kopf.testing import KopfRunner
from llm_operator.settings import OperatorSettings

from tests.eventually import eventually
from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.helpers import LLMD, LLMD_COLLECTION, condition, live, make_llmd, send
from tests.k8s_operator.pods import BAD_IMAGE, image_pull_backoff

pytestmark = pytest.mark.asyncio

EVENTS = "post /api/v1/namespaces/team-a/events"
PODS = "/api/v1/namespaces/team-a/pods"
FORBIDDEN = (
    'poddisruptionbudgets.policy "chat-engine" is forbidden: User '
    '"system:serviceaccount:pagedock-system:pagedock" cannot create resource '
    '"poddisruptionbudgets" in API group "policy" in the namespace "team-a"'
)
INVALID = 'ConfigMap "chat-engine" is invalid: metadata.labels: Invalid value: "-": must start'


@pytest.fixture()
def operator_settings(
    operator_settings: OperatorSettings, request: pytest.FixtureRequest
) -> OperatorSettings:
    """`resync_seconds` from an indirect parameter (a long one shows that events alone suffice)."""
    seconds = getattr(request, "param", operator_settings.resync_seconds)
    return dataclasses.replace(operator_settings, resync_seconds=seconds)


def warnings(cluster: Emulator, reason: str) -> list[dict[str, Any]]:
    """The Warning events with this reason that the operator posted."""
    posted = [request.data for request in list(cluster[EVENTS])]
    return [event for event in posted if (event["type"], event["reason"]) == ("Warning", reason)]


def reason_of(cluster: Emulator, type_: str) -> str | None:
    return (condition(live(cluster, LLMD, "chat"), type_) or {}).get("reason")


@pytest.mark.parametrize("operator_settings", [60.0], indirect=True)
async def test_an_image_pull_back_off_is_named_by_the_conditions(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await send(api, "POST", LLMD_COLLECTION, make_llmd())
    await eventually(lambda: reason_of(cluster, "EngineReady") == "ReplicasNotReady")
    await asyncio.sleep(0.5)  # the create burst is over: only the pod's event reconciles now
    await send(api, "POST", PODS, image_pull_backoff("chat-engine-abc"))

    await eventually(lambda: reason_of(cluster, "Ready") == "ImagePullBackOff")
    expected = f'pod chat-engine-abc: Back-off pulling image "{BAD_IMAGE}"'
    for type_ in ("EngineReady", "Ready"):
        found = condition(live(cluster, LLMD, "chat"), type_) or {}
        assert (found["status"], found["reason"], found["message"]) == (
            "False",
            "ImagePullBackOff",
            expected,
        )
    await eventually(lambda: warnings(cluster, "ImagePullBackOff"))
    assert warnings(cluster, "ImagePullBackOff")[0]["message"] == expected


async def test_a_pod_failure_warns_on_the_transition_only(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await send(api, "POST", LLMD_COLLECTION, make_llmd())
    await send(api, "POST", PODS, image_pull_backoff())
    await eventually(lambda: warnings(cluster, "ImagePullBackOff"))
    await asyncio.sleep(2.5)  # two more resync passes (resync_seconds=1)
    assert len(warnings(cluster, "ImagePullBackOff")) == 1


@pytest.mark.parametrize(
    ("status", "resource", "kind", "message"),
    [
        (403, "policy/v1/poddisruptionbudgets", "PodDisruptionBudget", FORBIDDEN),
        (422, "v1/configmaps", "ConfigMap", INVALID),
    ],
    ids=["403-forbidden", "422-invalid"],
)
async def test_a_refused_child_is_named_by_ready_and_retried(
    status: int,
    resource: str,
    kind: str,
    message: str,
    operator: KopfRunner,
    cluster: Emulator,
    api: aiohttp.ClientSession,
) -> None:
    cluster.refuse(kmock.action.CREATE, resource, status, message)
    await send(api, "POST", LLMD_COLLECTION, make_llmd())

    await eventually(lambda: reason_of(cluster, "Ready") == "ChildRejected")
    ready = condition(live(cluster, LLMD, "chat"), "Ready") or {}
    assert (ready["status"], ready["message"]) == ("False", f"{kind} chat-engine: {message}")
    assert live(cluster, "apps/v1/deployments", "chat-engine") is not None  # the rest is applied
    await eventually(lambda: warnings(cluster, "ChildRejected"))
    await asyncio.sleep(1.5)  # resyncs retry, and warn no more while the refusal is unchanged
    assert len(warnings(cluster, "ChildRejected")) == 1

    cluster.allow(kmock.action.CREATE, resource)
    await eventually(lambda: live(cluster, resource, "chat-engine"))
    await eventually(lambda: reason_of(cluster, "Ready") not in (None, "ChildRejected"))


async def test_a_refused_patch_is_named_and_the_live_child_still_counts(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await send(api, "POST", LLMD_COLLECTION, make_llmd())
    await eventually(lambda: reason_of(cluster, "EngineReady") == "ReplicasNotReady")
    invalid = 'Deployment.apps "chat-engine" is invalid: spec.selector: field is immutable'
    cluster.refuse(kmock.action.UPDATE, "apps/v1/deployments", 422, invalid)
    await send(api, "PATCH", f"{LLMD_COLLECTION}/chat", {"spec": {"replicas": 2}})

    await eventually(lambda: reason_of(cluster, "Ready") == "ChildRejected")
    ready = condition(live(cluster, LLMD, "chat"), "Ready") or {}
    assert ready["message"].startswith(f"Deployment chat-engine: {invalid}")
    assert reason_of(cluster, "EngineReady") == "ReplicasNotReady"  # not EngineMissing
