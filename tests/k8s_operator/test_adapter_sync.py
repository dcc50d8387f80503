"""The adapter reconciler end to end, against the emulated API and stand-in engines that speak
vLLM's LoRA endpoints (tests/k8s_operator/engine_stand_in.py): every ready replica comes to serve
exactly the declared adapters, without touching the engine Deployment, and status says where each
adapter stands."""

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import kopf
import pytest
import pytest_asyncio
from llm_operator.controller.reconcile import Reconciler
from llm_operator.k8s.kube import KubeClient
from llm_operator.settings import OperatorSettings

from tests.eventually import eventually
from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.engine_stand_in import EngineStandIn, engine_pod, on_one_port
from tests.k8s_operator.helpers import (
    LLMD,
    LLMD_COLLECTION,
    NAMESPACE,
    condition,
    live,
    make_llmd,
    send,
)

pytestmark = pytest.mark.asyncio

PODS = "/api/v1/namespaces/team-a/pods"
JOBS = "batch/v1/jobs"
SQL = {"name": "sql", "source": "file:///adapters/sql"}
CHAT = {"name": "chat", "source": "file:///adapters/chat"}
POEMS = {"name": "poems", "source": "file:///adapters/poems"}


@pytest_asyncio.fixture()
async def engines() -> AsyncIterator[list[EngineStandIn]]:
    """Three stand-in engines on one port at 127.0.0.2-4 (pod IPs); the first two have pods."""
    async with on_one_port([EngineStandIn(f"127.0.0.{i}") for i in (2, 3, 4)]) as stand_ins:
        yield stand_ins


@pytest_asyncio.fixture()
async def reconciler(cluster: Emulator, engines: list[EngineStandIn]) -> AsyncIterator[Reconciler]:
    kube = KubeClient(lambda: kopf.ConnectionInfo(server=str(cluster.url)))
    settings = OperatorSettings(scrape_metrics=False, peering_name="", liveness_port=0)
    reconciler = Reconciler(kube, settings)
    reconciler.adapters.port = engines[0].port
    try:
        yield reconciler
    finally:
        await kube.close()


async def start(api: aiohttp.ClientSession, engines: list[EngineStandIn], **spec: Any) -> None:
    for i, stand_in in enumerate(engines[:2]):
        await send(api, "POST", PODS, engine_pod(f"chat-engine-{i}", stand_in.ip))
    await send(api, "POST", LLMD_COLLECTION, make_llmd(**spec))


async def edit(api: aiohttp.ClientSession, spec: dict[str, Any]) -> None:
    await send(api, "PATCH", f"{LLMD_COLLECTION}/chat", {"spec": spec})


def llmd(cluster: Emulator) -> dict[str, Any]:
    return live(cluster, LLMD, "chat") or {}


def adapter_states(cluster: Emulator) -> dict[str, str]:
    return {a["name"]: a["state"] for a in llmd(cluster).get("status", {}).get("adapters", [])}


async def reconcile(reconciler: Reconciler, cluster: Emulator) -> None:
    body = llmd(cluster)
    body.setdefault("apiVersion", "pagedock.dev/v1alpha1")
    body.setdefault("kind", "LLMDeployment")
    await reconciler.reconcile(body)


async def until_ready(cluster: Emulator, declared: int) -> dict[str, Any]:
    def ready() -> bool:
        return llmd(cluster).get("status", {}).get("adaptersReady") == f"{declared}/{declared}"

    await eventually(ready, 10, lambda: f"status.adapters: {adapter_states(cluster)}")
    return dict(llmd(cluster)["status"])


async def test_every_ready_replica_loads_every_declared_adapter(
    reconciler: Reconciler,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    engines: list[EngineStandIn],
) -> None:
    await start(api, engines, model={"adapters": [SQL, CHAT]}, replicas=2)
    await reconcile(reconciler, cluster)
    status = await until_ready(cluster, 2)
    for stand_in in engines[:2]:
        assert stand_in.adapters == {"sql": "/adapters/sql", "chat": "/adapters/chat"}
    assert [(a["name"], a["state"], a["readyReplicas"]) for a in status["adapters"]] == [
        ("sql", "Ready", 2),
        ("chat", "Ready", 2),
    ]
    assert (
        "--enable-lora"
        in live(cluster, "apps/v1/deployments", "chat-engine")["spec"]["template"]["spec"][
            "containers"
        ][0]["args"]
    )


async def test_adding_an_adapter_loads_it_everywhere_and_leaves_the_engine_deployment_alone(
    reconciler: Reconciler,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    engines: list[EngineStandIn],
) -> None:
    await start(api, engines, model={"adapters": [SQL, CHAT]}, replicas=2)
    await reconcile(reconciler, cluster)
    await until_ready(cluster, 2)
    before = live(cluster, "apps/v1/deployments", "chat-engine")["metadata"]["resourceVersion"]
    await edit(api, {"model": {"adapters": [SQL, CHAT, POEMS]}})
    await reconcile(reconciler, cluster)
    status = await until_ready(cluster, 3)
    assert status["adapters"][2] == {
        "name": "poems",
        "state": "Ready",
        "reason": "Loaded",
        "message": "served by all 2 ready engine replicas",
        "readyReplicas": 2,
    }
    after = live(cluster, "apps/v1/deployments", "chat-engine")["metadata"]["resourceVersion"]
    assert after == before  # not patched: no rollout, no restart
    assert all(len(e.calls("/v1/load_lora_adapter")) == 3 for e in engines[:2])  # each once


async def test_removing_an_adapter_unloads_it_from_every_replica(
    reconciler: Reconciler,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    engines: list[EngineStandIn],
) -> None:
    await start(api, engines, model={"adapters": [SQL, CHAT]}, replicas=2)
    await reconcile(reconciler, cluster)
    await until_ready(cluster, 2)
    await edit(api, {"model": {"adapters": [CHAT]}})
    await reconcile(reconciler, cluster)
    for stand_in in engines[:2]:
        assert stand_in.adapters == {"chat": "/adapters/chat"}
        assert stand_in.calls("/v1/unload_lora_adapter") == [{"lora_name": "sql"}]
    assert adapter_states(cluster) == {"chat": "Ready"}


async def test_a_new_replica_gets_every_adapter_once_it_is_ready(
    reconciler: Reconciler,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    engines: list[EngineStandIn],
) -> None:
    await start(api, engines, model={"adapters": [SQL, CHAT]}, replicas=2)
    await reconcile(reconciler, cluster)
    await until_ready(cluster, 2)
    await send(api, "POST", PODS, engine_pod("chat-engine-2", engines[2].ip, ready=False))
    await reconcile(reconciler, cluster)
    assert engines[2].requests == []  # not ready: not asked
    await send(api, "PATCH", f"{PODS}/chat-engine-2", engine_pod("chat-engine-2", engines[2].ip))
    await reconcile(reconciler, cluster)
    status = await until_ready(cluster, 2)
    assert engines[2].adapters == {"sql": "/adapters/sql", "chat": "/adapters/chat"}
    assert {a["readyReplicas"] for a in status["adapters"]} == {3}


async def test_an_adapter_the_engine_refuses_is_failed_with_the_engines_reason(
    reconciler: Reconciler,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    engines: list[EngineStandIn],
) -> None:
    reason = "adapter rank 128 is above --max-lora-rank 64"
    for stand_in in engines:
        stand_in.bad_paths["/adapters/chat"] = reason
    await start(api, engines, model={"adapters": [SQL, CHAT]}, replicas=2)
    await reconcile(reconciler, cluster)
    await eventually(lambda: adapter_states(cluster) == {"sql": "Ready", "chat": "Failed"}, 10)
    [chat] = [a for a in llmd(cluster)["status"]["adapters"] if a["name"] == "chat"]
    assert chat["reason"] == "LoadFailed"
    assert chat["message"].endswith(f": {reason}") and chat["message"].startswith(
        "pod chat-engine-"
    )
    assert llmd(cluster)["status"]["adaptersReady"] == "1/2"
    loads = len(engines[0].calls("/v1/load_lora_adapter"))
    await reconcile(reconciler, cluster)
    assert len(engines[0].calls("/v1/load_lora_adapter")) == loads  # not asked again at once


async def test_the_api_key_goes_to_the_engines_and_a_missing_secret_is_named(
    reconciler: Reconciler,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    engines: list[EngineStandIn],
) -> None:
    for stand_in in engines:
        stand_in.api_key = "s3cret"
    await start(api, engines, model={"adapters": [SQL]}, replicas=2, apiKeySecret={"name": "key"})
    await reconcile(reconciler, cluster)
    [sql] = llmd(cluster)["status"]["adapters"]
    assert sql["state"] == "Failed"
    assert sql["message"] == "Secret key (key api-key), the engines' API key, does not exist"
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "key", "namespace": NAMESPACE},
    }
    await send(
        api,
        "POST",
        "/api/v1/namespaces/team-a/secrets",
        {**secret, "data": {"api-key": "czNjcmV0"}},
    )
    await reconcile(reconciler, cluster)
    await until_ready(cluster, 1)
    assert all(e.adapters == {"sql": "/adapters/sql"} for e in engines[:2])


async def test_an_hf_adapter_for_offline_engines_waits_for_its_job_and_leaves_with_it(
    reconciler: Reconciler,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    engines: list[EngineStandIn],
) -> None:
    hf_model = {"source": "hf://org/base", "cacheVolumeClaim": "hf-cache"}
    adapter = {"name": "sql", "source": "hf://org/sql-lora", "revision": "v1"}
    await start(api, engines, model={**hf_model, "adapters": [adapter]}, replicas=2)
    await reconcile(reconciler, cluster)
    [job] = [o.raw for k, o in cluster.objects.items() if k[0] == JOBS and "-adapter-" in k[2]]
    assert adapter_states(cluster) == {"sql": "Downloading"}
    assert engines[0].calls("/v1/load_lora_adapter") == []  # files not in place yet
    name = job["metadata"]["name"]
    path = f"/apis/batch/v1/namespaces/team-a/jobs/{name}/status"
    await send(api, "PATCH", path, {"status": {"succeeded": 1}})
    await reconcile(reconciler, cluster)
    await until_ready(cluster, 1)
    assert engines[0].adapters == {"sql": "hf://org/sql-lora@v1"}
    await edit(api, {"model": {"adapters": None}})
    await reconcile(reconciler, cluster)
    assert live(cluster, JOBS, name) is None
    assert "adapters" not in llmd(cluster)["status"]
    assert "adaptersReady" not in llmd(cluster)["status"]


async def test_an_adapter_named_like_the_base_model_is_an_invalid_spec(
    reconciler: Reconciler,
    cluster: Emulator,
    api: aiohttp.ClientSession,
    engines: list[EngineStandIn],
) -> None:
    bad = {"name": "smollm2-135m-instruct", "source": "file:///adapters/x"}
    await start(api, engines, model={"adapters": [bad]})
    await reconcile(reconciler, cluster)
    ready = condition(llmd(cluster), "Ready") or {}
    assert ready["reason"] == "InvalidSpec"
    assert "smollm2-135m-instruct is the base model's served name" in ready["message"]
    assert reconciler.adapters._loads == {}  # nothing started in the background
    assert all(e.requests == [] for e in engines)
