"""The engines' drain deadline and termination grace period: from drainTimeoutSeconds and what
the engines report at GET /drain (llm_operator/drain_timing.py), applied to the pod template only
when it changes for another reason (controller/drain_sizing.py), and shown in status.drain.
Against the emulated API and stand-in engines serving GET /drain at their pod IPs."""

import dataclasses
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kopf
import pytest
import pytest_asyncio
from llm_operator.builders import build_children
from llm_operator.controller.reconcile import Reconciler
from llm_operator.drain_timing import DrainObservation, drain_timing
from llm_operator.k8s.kube import KubeClient
from llm_operator.names import DRAIN_OBSERVATION_ANNOTATION
from llm_operator.settings import OperatorSettings

from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.engine_stand_in import EngineStandIn, drain_report, engine_pod, on_one_port
from tests.k8s_operator.helpers import LLMD, LLMD_COLLECTION, NAMESPACE, live, make_llmd, send
from tests.k8s_operator.helpers import mark_ready as mark_deployment_ready
from tests.k8s_operator.test_builders import find, make_context

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
DEPLOYMENTS = "apps/v1/deployments"
# The grace period before this change: drainTimeoutSeconds + the preStop sleep + 15 s.
DEFAULT_GRACE = 30 + 5 + 15


# ---- the arithmetic ---------------------------------------------------------------------------


def test_without_reports_the_grace_is_the_deadline_plus_prestop_and_handoff() -> None:
    timing = drain_timing(30, None, None)

    assert (timing.drain_timeout_seconds, timing.termination_grace_period_seconds) == (30, 50)


def test_longer_requests_do_not_move_the_users_deadline_without_a_maximum() -> None:
    timing = drain_timing(30, None, DrainObservation(request_seconds=95.0, handoff_seconds=7.0))

    assert (timing.drain_timeout_seconds, timing.termination_grace_period_seconds) == (30, 50)


def test_longer_requests_raise_the_deadline_up_to_the_maximum() -> None:
    within = drain_timing(30, 120, DrainObservation(request_seconds=61.2, handoff_seconds=7.0))
    beyond = drain_timing(30, 120, DrainObservation(request_seconds=900.0, handoff_seconds=7.0))

    assert (within.drain_timeout_seconds, within.termination_grace_period_seconds) == (62, 82)
    assert (beyond.drain_timeout_seconds, beyond.termination_grace_period_seconds) == (120, 140)


def test_shorter_requests_never_lower_the_deadline() -> None:
    timing = drain_timing(30, 120, DrainObservation(request_seconds=2.0, handoff_seconds=7.0))

    assert timing.drain_timeout_seconds == 30


def test_the_engines_handoff_time_sizes_the_margin_past_the_deadline() -> None:
    slow = drain_timing(30, None, DrainObservation(handoff_seconds=12.5))
    absurd = drain_timing(30, None, DrainObservation(handoff_seconds=1e9))

    assert slow.termination_grace_period_seconds == 5 + 30 + 13 + 8
    assert absurd.termination_grace_period_seconds == 5 + 30 + 60 + 8  # a report counts up to 60


def test_an_observation_survives_its_annotation_and_junk_reads_as_none() -> None:
    observed = DrainObservation(request_seconds=41.5, handoff_seconds=7.0)

    assert DrainObservation.from_annotation(observed.to_annotation()) == observed
    assert DrainObservation.from_annotation("not json") is None
    assert DrainObservation.from_annotation('["a list"]') is None


# ---- the builders -----------------------------------------------------------------------------


def engine_deployment(spec: dict[str, Any], observed: DrainObservation | None) -> dict[str, Any]:
    ctx = dataclasses.replace(make_context(spec), drain_observation=observed)
    children = build_children(ctx)
    return find(children, "Deployment", "chat-engine")


def test_the_template_takes_deadline_and_grace_from_the_observation_it_is_built_from() -> None:
    observed = DrainObservation(request_seconds=75.0, handoff_seconds=7.0)

    deployment = engine_deployment({"maxDrainTimeoutSeconds": 300}, observed)

    pod = deployment["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert pod["terminationGracePeriodSeconds"] == 5 + 75 + 7 + 8
    assert args[args.index("--drain-timeout") + 1] == "75"
    # Recorded on the Deployment, outside the template: recording it rolls no pod.
    annotations = deployment["metadata"]["annotations"]
    assert DrainObservation.from_annotation(annotations[DRAIN_OBSERVATION_ANNOTATION]) == observed
    assert DRAIN_OBSERVATION_ANNOTATION not in deployment["spec"]["template"]["metadata"].get(
        "annotations", {}
    )


def test_no_observation_builds_the_grace_of_before() -> None:
    deployment = engine_deployment({}, None)

    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == DEFAULT_GRACE
    assert DRAIN_OBSERVATION_ANNOTATION not in deployment["metadata"].get("annotations", {})


# ---- the reconciler ---------------------------------------------------------------------------


@pytest_asyncio.fixture()
async def engines() -> AsyncIterator[list[EngineStandIn]]:
    """Two stand-in engines on one port at 127.0.0.2-3 (pod IPs)."""
    async with on_one_port([EngineStandIn(f"127.0.0.{i}") for i in (2, 3)]) as stand_ins:
        yield stand_ins


@pytest_asyncio.fixture()
async def reconciler(cluster: Emulator, engines: list[EngineStandIn]) -> AsyncIterator[Reconciler]:
    kube = KubeClient(lambda: kopf.ConnectionInfo(server=str(cluster.url)))
    reconciler = Reconciler(kube, OperatorSettings(peering_name="", liveness_port=0))
    reconciler.drains.reports.port = engines[0].port
    reconciler.startups.port = engines[0].port  # no /startup there: a 404, skipped
    try:
        yield reconciler
    finally:
        await kube.close()


async def reconcile(reconciler: Reconciler, cluster: Emulator) -> dict[str, Any]:
    body = live(cluster, LLMD, "chat") or {}
    body.setdefault("apiVersion", "pagedock.dev/v1alpha1")
    body.setdefault("kind", "LLMDeployment")
    await reconciler.reconcile(body)
    return dict((live(cluster, LLMD, "chat") or {}).get("status", {}))


def engine_template(cluster: Emulator) -> dict[str, Any]:
    return dict((live(cluster, DEPLOYMENTS, "chat-engine") or {})["spec"]["template"])


def grace_and_deadline(cluster: Emulator) -> tuple[int, str]:
    pod = engine_template(cluster)["spec"]
    args = pod["containers"][0]["args"]
    return pod["terminationGracePeriodSeconds"], args[args.index("--drain-timeout") + 1]


async def serving(
    api: aiohttp.ClientSession,
    reconciler: Reconciler,
    cluster: Emulator,
    engines: list[EngineStandIn],
    **spec: Any,
) -> None:
    """The LLMDeployment applied before any engine reported, its two engine pods ready."""
    await send(api, "POST", LLMD_COLLECTION, make_llmd(replicas=2, **spec))
    await reconcile(reconciler, cluster)
    for i, stand_in in enumerate(engines):
        await send(api, "POST", PODS, engine_pod(f"chat-engine-{i}", stand_in.ip))
    await mark_deployment_ready(api, live(cluster, DEPLOYMENTS, "chat-engine") or {})


async def edit(api: aiohttp.ClientSession, spec: dict[str, Any]) -> None:
    await send(api, "PATCH", f"{LLMD_COLLECTION}/chat", {"spec": spec})


@pytest.mark.asyncio
async def test_status_shows_the_engines_figures_and_the_grace_they_ask_for(
    reconciler: Reconciler,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    engines: list[EngineStandIn],
) -> None:
    await serving(api, reconciler, cluster, engines, maxDrainTimeoutSeconds=300)
    engines[0].drain_report = drain_report(longest=41.5, p99=20.0)
    engines[1].drain_report = drain_report(longest=12.0, p99=11.0, oldest=64.25)

    status = await reconcile(reconciler, cluster)

    drain = status["drain"]
    assert drain["longestRequestSeconds"] == 41.5
    assert drain["p99RequestSeconds"] == 20.0
    assert drain["oldestInFlightSeconds"] == 64.25
    assert drain["handoffSeconds"] == 7.0
    assert (drain["numRequests"], drain["pods"]) == (200, 2)
    assert drain["observedAt"].endswith("Z")
    # The template keeps what it was built with; the figures' grace waits for the next change.
    assert (drain["drainTimeoutSeconds"], drain["terminationGracePeriodSeconds"]) == (30, 50)
    assert drain["nextDrainTimeoutSeconds"] == 65  # the request still running counts
    assert drain["nextTerminationGracePeriodSeconds"] == 5 + 65 + 7 + 8


@pytest.mark.asyncio
async def test_new_figures_alone_do_not_change_the_pod_template(
    reconciler: Reconciler,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    engines: list[EngineStandIn],
) -> None:
    await serving(api, reconciler, cluster, engines, maxDrainTimeoutSeconds=300)
    before = json.dumps(engine_template(cluster), sort_keys=True)

    for longest in (41.5, 90.0, 7.0):
        engines[0].drain_report = drain_report(longest=longest, p99=longest)
        status = await reconcile(reconciler, cluster)
        assert status["drain"]["longestRequestSeconds"] == longest

    assert json.dumps(engine_template(cluster), sort_keys=True) == before
    assert grace_and_deadline(cluster) == (DEFAULT_GRACE, "30")


@pytest.mark.asyncio
async def test_a_template_change_for_another_reason_takes_the_new_grace(
    reconciler: Reconciler,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    engines: list[EngineStandIn],
) -> None:
    await serving(api, reconciler, cluster, engines, maxDrainTimeoutSeconds=300)
    engines[0].drain_report = drain_report(longest=80.2, p99=60.0)
    await reconcile(reconciler, cluster)
    assert grace_and_deadline(cluster) == (DEFAULT_GRACE, "30")

    await edit(api, {"env": [{"name": "HF_HUB_OFFLINE", "value": "1"}]})
    status = await reconcile(reconciler, cluster)

    assert grace_and_deadline(cluster) == (5 + 81 + 7 + 8, "81")
    assert status["drain"]["terminationGracePeriodSeconds"] == 5 + 81 + 7 + 8
    # ... and keeps it while only the figures move again.
    engines[0].drain_report = drain_report(longest=200.0, p99=60.0)
    status = await reconcile(reconciler, cluster)
    assert grace_and_deadline(cluster) == (5 + 81 + 7 + 8, "81")
    assert status["drain"]["nextTerminationGracePeriodSeconds"] == 5 + 200 + 7 + 8


@pytest.mark.asyncio
async def test_a_new_drain_timeout_applies_at_once(
    reconciler: Reconciler,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    engines: list[EngineStandIn],
) -> None:
    await serving(api, reconciler, cluster, engines)
    engines[0].drain_report = drain_report(longest=80.0, p99=60.0)
    await reconcile(reconciler, cluster)

    await edit(api, {"drainTimeoutSeconds": 45})
    await reconcile(reconciler, cluster)

    # Without maxDrainTimeoutSeconds the longer requests do not stretch the user's deadline.
    assert grace_and_deadline(cluster) == (5 + 45 + 7 + 8, "45")


@pytest.mark.asyncio
async def test_no_engine_answering_keeps_the_last_figures(
    reconciler: Reconciler,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    engines: list[EngineStandIn],
) -> None:
    await serving(api, reconciler, cluster, engines, maxDrainTimeoutSeconds=300)
    engines[0].drain_report = drain_report(longest=50.0, p99=40.0)
    before = (await reconcile(reconciler, cluster))["drain"]
    for stand_in in engines:
        stand_in.drain_report = drain_report()  # new pods: nothing served yet

    status = await reconcile(reconciler, cluster)

    assert status["drain"]["longestRequestSeconds"] == before["longestRequestSeconds"]
    assert status["drain"]["nextDrainTimeoutSeconds"] == 50
