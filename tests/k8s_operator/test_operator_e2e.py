"""The operator end to end: kopf runs it against kmock's stateful Kubernetes emulator."""

import asyncio

import aiohttp
import pytest
from kopf.testing import KopfRunner
from llm_operator.controller.handlers import make_registry
from llm_operator.settings import OperatorSettings

from tests.eventually import eventually
from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.helpers import (
    LLMD,
    LLMD_COLLECTION,
    condition,
    live,
    make_llmd,
    mark_ready,
    send,
    settled,
    writes_over_resyncs,
)

pytestmark = pytest.mark.asyncio

DEPLOYMENTS = "apps/v1/deployments"
SERVICES = "v1/services"
INGRESSES = "networking.k8s.io/v1/ingresses"
GPU_SPEC = {
    "resources": {"gpus": 1},
    "engine": {"dtype": "bfloat16", "maxNumSeqs": 128},
    "ingress": {"enabled": True, "host": "llm.example.com", "tlsSecretName": "llm-tls"},
    "autoscaling": {"enabled": True, "mode": "hpa", "maxReplicas": 3},
}
CHILDREN = [
    ("v1/configmaps", "chat-engine"),
    (SERVICES, "chat-engine"),
    (DEPLOYMENTS, "chat-engine"),
    ("networking.k8s.io/v1/networkpolicies", "chat-engine"),
    ("policy/v1/poddisruptionbudgets", "chat-engine"),
    ("v1/serviceaccounts", "chat-router"),
    ("rbac.authorization.k8s.io/v1/roles", "chat-router"),
    ("rbac.authorization.k8s.io/v1/rolebindings", "chat-router"),
    (SERVICES, "chat-router"),
    (DEPLOYMENTS, "chat-router"),
    (INGRESSES, "chat"),
    ("autoscaling/v2/horizontalpodautoscalers", "chat"),
]


async def create_and_wait(cluster: Emulator, api: aiohttp.ClientSession, **spec: object) -> dict:
    await send(api, "POST", LLMD_COLLECTION, make_llmd(**spec))
    await eventually(lambda: all(live(cluster, res, name) for res, name in CHILDREN[:5]))
    return live(cluster, LLMD, "chat") or {}


async def make_ready(cluster: Emulator, api: aiohttp.ClientSession) -> None:
    for name in ("chat-engine", "chat-router"):
        deployment = await eventually(lambda name=name: live(cluster, DEPLOYMENTS, name))
        await mark_ready(api, deployment)
    if live(cluster, INGRESSES, "chat"):
        address = {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}
        path = "/apis/networking.k8s.io/v1/namespaces/team-a/ingresses/chat/status"
        await send(api, "PATCH", path, {"status": address})
    await eventually(
        lambda: (condition(live(cluster, LLMD, "chat"), "Ready") or {}).get("status") == "True"
    )


async def test_create_builds_every_child_owned_by_the_llmdeployment(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    owner = await create_and_wait(cluster, api, **GPU_SPEC)
    await eventually(lambda: all(live(cluster, res, name) for res, name in CHILDREN))
    for resource, name in CHILDREN:
        child = live(cluster, resource, name) or {}
        references = child["metadata"]["ownerReferences"]
        assert [(ref["kind"], ref["uid"], ref["controller"]) for ref in references] == [
            ("LLMDeployment", owner["metadata"]["uid"], True)
        ], resource


async def test_engine_pods_get_image_probes_gpus_and_hardening(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await create_and_wait(cluster, api, **GPU_SPEC)
    pod = (live(cluster, DEPLOYMENTS, "chat-engine") or {})["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "registry.test/engine-cuda:1"
    assert container["args"][:3] == ["serve", "--model", "smollm2-135m-instruct"]
    assert container["args"][container["args"].index("--dtype") + 1] == "bfloat16"
    assert "--tensor-parallel-size" not in container["args"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert (
        container["startupProbe"]["failureThreshold"] * container["startupProbe"]["periodSeconds"]
        >= 1800
    )
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["terminationGracePeriodSeconds"] > 30
    router = await eventually(lambda: live(cluster, DEPLOYMENTS, "chat-router"))
    assert router["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.test/router:1"


async def test_status_turns_ready_when_the_deployments_are_ready(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await create_and_wait(cluster, api)
    engine_ready = await eventually(lambda: condition(live(cluster, LLMD, "chat"), "EngineReady"))
    assert engine_ready["status"] == "False"
    await make_ready(cluster, api)
    status = (live(cluster, LLMD, "chat") or {})["status"]
    assert status["readyReplicas"] == 1
    assert status["observedGeneration"] == 1
    assert status["endpoint"] == "http://chat-router.team-a.svc:8080"
    assert "app.kubernetes.io/component=engine" in status["selector"]
    assert {c["type"] for c in status["conditions"]} == {
        "ModelReady",
        "EngineReady",
        "RouterReady",
        "IngressReady",
        "GatewayReady",
        "Ready",
    }
    assert all(c["status"] == "True" and c["lastTransitionTime"] for c in status["conditions"])


async def test_spec_change_patches_the_children(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await create_and_wait(cluster, api)
    patch = {
        "spec": {"replicas": 3, "image": "registry.test/engine:2", "engine": {"maxNumSeqs": 64}}
    }
    await send(api, "PATCH", f"{LLMD_COLLECTION}/chat", patch)

    def rolled() -> bool:
        spec = (live(cluster, DEPLOYMENTS, "chat-engine") or {})["spec"]
        container = spec["template"]["spec"]["containers"][0]
        return (
            spec["replicas"] == 3
            and container["image"].endswith(":2")
            and "64" in container["args"]
        )

    await eventually(rolled)


async def test_deleted_or_edited_child_is_restored(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await create_and_wait(cluster, api)
    await send(api, "DELETE", "/api/v1/namespaces/team-a/services/chat-engine")
    await eventually(lambda: live(cluster, SERVICES, "chat-engine"))
    edit = {"spec": {"template": {"spec": {"automountServiceAccountToken": True}}}}
    await send(api, "PATCH", "/apis/apps/v1/namespaces/team-a/deployments/chat-engine", edit)
    await eventually(
        lambda: (
            (live(cluster, DEPLOYMENTS, "chat-engine") or {})["spec"]["template"]["spec"][
                "automountServiceAccountToken"
            ]
            is False
        )
    )


async def test_reconciling_an_unchanged_deployment_writes_nothing(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await create_and_wait(cluster, api, **GPU_SPEC)
    await make_ready(cluster, api)
    await settled(cluster, "chat")
    assert await writes_over_resyncs(cluster, "chat", 3) == []


@pytest.mark.parametrize(
    ("tp_size", "message"),
    [
        (3, "resources.gpus (2) must equal engine.tensorParallelSize (3)"),
        (1, "resources.gpus (2) must equal engine.tensorParallelSize (1)"),
    ],
    ids=["more-ranks-than-gpus", "more-gpus-than-ranks"],
)
async def test_invalid_spec_sets_ready_false_with_a_reason_and_an_event(
    tp_size: int,
    message: str,
    operator: KopfRunner,
    cluster: Emulator,
    api: aiohttp.ClientSession,
) -> None:
    bad = {"resources": {"gpus": 2}, "engine": {"tensorParallelSize": tp_size}}
    # NOTE: the CRD's CEL rule refuses this spec (test_admission.py); an API server that evaluates
    # no CEL (before Kubernetes 1.25) stores it, and the operator's twin of the rule catches it.
    del cluster.admissions[LLMD]
    await send(api, "POST", LLMD_COLLECTION, make_llmd(**bad))
    ready = await eventually(lambda: condition(live(cluster, LLMD, "chat"), "Ready"))
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert message in ready["message"]
    await eventually(lambda: len(cluster["post /api/v1/namespaces/team-a/events"]) > 0)
    assert live(cluster, DEPLOYMENTS, "chat-engine") is None


async def test_scale_subresource_drives_the_engine_replicas(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await create_and_wait(cluster, api)
    await send(api, "PATCH", f"{LLMD_COLLECTION}/chat/scale", {"spec": {"replicas": 4}})
    await eventually(
        lambda: (live(cluster, DEPLOYMENTS, "chat-engine") or {})["spec"]["replicas"] == 4
    )


async def test_no_finalizer_is_added_so_deletion_needs_no_operator(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await create_and_wait(cluster, api)
    await writes_over_resyncs(cluster, "chat", 1)  # a resync pass and the child events
    assert not (live(cluster, LLMD, "chat") or {})["metadata"].get("finalizers")
    await send(api, "DELETE", f"{LLMD_COLLECTION}/chat")
    assert live(cluster, LLMD, "chat") is None  # at once: owner references collect the children


async def test_a_finalizer_left_by_an_older_version_is_removed(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    old = make_llmd()
    old["metadata"]["finalizers"] = ["pagedock.dev/finalizer"]
    await send(api, "POST", LLMD_COLLECTION, old)
    await eventually(lambda: not (live(cluster, LLMD, "chat") or {})["metadata"].get("finalizers"))
    await send(api, "DELETE", f"{LLMD_COLLECTION}/chat")
    assert live(cluster, LLMD, "chat") is None


async def test_a_deletion_stuck_on_the_old_finalizer_finishes_when_the_operator_starts(
    cluster: Emulator, api: aiohttp.ClientSession, operator_settings: OperatorSettings
) -> None:
    old = make_llmd()
    old["metadata"]["finalizers"] = ["pagedock.dev/finalizer"]
    await send(api, "POST", LLMD_COLLECTION, old)
    await send(api, "DELETE", f"{LLMD_COLLECTION}/chat")
    assert (live(cluster, LLMD, "chat") or {})["metadata"]["deletionTimestamp"]
    runner = KopfRunner(["run", "-A", "--standalone"], registry=make_registry(operator_settings))
    runner.__enter__()
    try:
        await eventually(lambda: live(cluster, LLMD, "chat") is None)
    finally:
        await asyncio.to_thread(runner.__exit__, None, None, None)


async def test_resync_restores_a_child_that_no_watch_sees(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await create_and_wait(cluster, api)
    await send(api, "DELETE", "/api/v1/namespaces/team-a/configmaps/chat-engine")
    assert live(cluster, "v1/configmaps", "chat-engine") is None
    await eventually(lambda: live(cluster, "v1/configmaps", "chat-engine"), timeout=5)


async def test_child_watches_are_filtered_by_label_on_the_server(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await create_and_wait(cluster, api)
    for path in ("/apis/apps/v1/deployments", "/api/v1/services"):
        requests = list(cluster[f"get {path}"])
        assert requests, path
        selectors = {request.params.get("labelSelector") for request in requests}
        assert selectors == {"app.kubernetes.io/managed-by=pagedock-operator"}, path
