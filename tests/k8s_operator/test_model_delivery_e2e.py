"""Download once, end to end: the operator's model Job, the engines it holds back, its outcome on
ModelReady (kmock's emulator runs no Jobs: the tests write the Job's status as its controller
would)."""

import aiohttp
import pytest
from kopf.testing import KopfRunner

from tests.eventually import eventually
from tests.k8s_operator.emulator import Emulator
from tests.k8s_operator.helpers import (
    LLMD,
    LLMD_COLLECTION,
    condition,
    live,
    make_llmd,
    send,
    settled,
    writes_over_resyncs,
)

pytestmark = pytest.mark.asyncio

DEPLOYMENTS = "apps/v1/deployments"
SERVICES = "v1/services"

JOBS = "batch/v1/jobs"
HF_MODEL = {"source": "hf://org/model@v1", "cacheVolumeClaim": "hf-cache"}


def download_jobs(cluster: Emulator) -> list[str]:
    return sorted(
        obj.raw["metadata"]["name"]
        for key, obj in cluster.objects.items()
        if key[0] == JOBS and not obj.deleted
    )


async def create_claim(api: aiohttp.ClientSession, access_mode: str) -> None:
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "hf-cache", "namespace": "team-a"},
        "spec": {"accessModes": [access_mode], "resources": {"requests": {"storage": "50Gi"}}},
    }
    await send(api, "POST", "/api/v1/namespaces/team-a/persistentvolumeclaims", claim)


async def finish_job(api: aiohttp.ClientSession, name: str, status: dict) -> None:
    await send(
        api, "PATCH", f"/apis/batch/v1/namespaces/team-a/jobs/{name}/status", {"status": status}
    )


def model_reason(cluster: Emulator) -> str | None:
    return (condition(live(cluster, LLMD, "chat"), "ModelReady") or {}).get("reason")


async def test_engines_start_only_after_the_download_job_succeeded(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await create_claim(api, "ReadWriteMany")
    await send(api, "POST", LLMD_COLLECTION, make_llmd(model=HF_MODEL, replicas=2))
    [job_name] = await eventually(lambda: download_jobs(cluster))
    await eventually(lambda: model_reason(cluster) == "Downloading")
    job = live(cluster, JOBS, job_name) or {}
    assert job["spec"]["template"]["spec"]["containers"][0]["args"] == [
        "download",
        "hf://org/model@v1",
    ]
    assert job["metadata"]["ownerReferences"][0]["kind"] == "LLMDeployment"
    assert live(cluster, SERVICES, "chat-engine")  # the rest is there already
    assert live(cluster, DEPLOYMENTS, "chat-engine") is None
    assert live(cluster, DEPLOYMENTS, "chat-router") is None  # a shared claim: it reads it too

    await finish_job(api, job_name, {"succeeded": 1})
    engine = await eventually(lambda: live(cluster, DEPLOYMENTS, "chat-engine"))
    router = await eventually(lambda: live(cluster, DEPLOYMENTS, "chat-router"))
    for deployment in (engine, router):
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        assert {"name": "HF_HUB_OFFLINE", "value": "1"} in container["env"]
        assert {
            "name": "model-cache",
            "mountPath": "/cache/huggingface",
            "readOnly": True,
        } in container["volumeMounts"]
    await eventually(lambda: model_reason(cluster) == "ModelLoading")
    await settled(cluster, "chat")  # then resync passes write nothing (the Job is not re-made)
    assert await writes_over_resyncs(cluster, "chat", 3) == []
    assert download_jobs(cluster) == [job_name]


async def test_a_new_revision_downloads_again_while_the_old_engines_keep_serving(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await create_claim(api, "ReadWriteOnce")
    await send(api, "POST", LLMD_COLLECTION, make_llmd(model=HF_MODEL))
    [first] = await eventually(lambda: download_jobs(cluster))
    await finish_job(api, first, {"succeeded": 1})
    await eventually(lambda: live(cluster, DEPLOYMENTS, "chat-engine"))
    router = await eventually(lambda: live(cluster, DEPLOYMENTS, "chat-router"))
    assert "model-cache" not in str(router["spec"]["template"]["spec"])  # ReadWriteOnce: never

    patch = {"spec": {"model": {"source": "hf://org/model@v2"}}}
    await send(api, "PATCH", f"{LLMD_COLLECTION}/chat", patch)
    [second] = await eventually(lambda: [n for n in download_jobs(cluster) if n != first])
    await eventually(lambda: download_jobs(cluster) == [second])  # the old Job is deleted
    await writes_over_resyncs(cluster, "chat", 1)  # a pass seen: the engines still run v1
    args = (live(cluster, DEPLOYMENTS, "chat-engine") or {})["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert "hf://org/model@v1" in args

    await finish_job(api, second, {"succeeded": 1})
    await eventually(
        lambda: (
            "hf://org/model@v2"
            in (live(cluster, DEPLOYMENTS, "chat-engine") or {})["spec"]["template"]["spec"][
                "containers"
            ][0]["args"]
        )
    )


async def test_a_missing_claim_and_a_failed_job_are_reported_on_model_ready(
    operator: KopfRunner, cluster: Emulator, api: aiohttp.ClientSession
) -> None:
    await send(api, "POST", LLMD_COLLECTION, make_llmd(model=HF_MODEL))  # and no claim
    [job_name] = await eventually(lambda: download_jobs(cluster))
    model_ready = await eventually(lambda: condition(live(cluster, LLMD, "chat"), "ModelReady"))
    assert "claim hf-cache, which was not found" in model_ready["message"]
    failed = {
        "type": "Failed",
        "status": "True",
        "reason": "BackoffLimitExceeded",
        "message": "Job has reached the specified backoff limit",
    }
    await finish_job(api, job_name, {"failed": 4, "conditions": [failed]})
    await eventually(lambda: model_reason(cluster) == "DownloadFailed")
    ready = condition(live(cluster, LLMD, "chat"), "Ready") or {}
    assert ready["status"] == "False" and "backoff limit" in ready["message"]
    assert live(cluster, DEPLOYMENTS, "chat-engine") is None
