"""The adapters' Jobs: each adapter that needs one (builders/adapter_source.py) gets its download
or copy Job, created when missing (create-only: a new source gets a Job of its own name); Jobs of
adapters no longer declared, or of an older source, are deleted. The result says, per adapter,
whether its files are in place yet (Downloading, DownloadFailed with the Job's message)."""

from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

import kopf

from llm_operator.builders import BuildContext
from llm_operator.builders.adapter_job import COMPONENT, adapter_job_name, build_adapter_job
from llm_operator.builders.adapter_source import AdapterSource
from llm_operator.builders.children import drop_empty
from llm_operator.fleet.adapter_status import Delivery
from llm_operator.k8s.kube import KubeClient
from llm_operator.k8s.resources import KINDS
from llm_operator.names import OWNER_LABEL

Obj = dict[str, Any]
EmitFn = Callable[[str, str, str], None]
"""(reason, message, type) -> an Event on the LLMDeployment."""
JOB = KINDS["Job"]


async def deliver_adapters(
    kube: KubeClient,
    body: Mapping[str, Any],
    ctx: BuildContext,
    sources: list[AdapterSource],
    emit: EmitFn,
) -> dict[str, Delivery]:
    """Adapter name -> where its files stand; creates and deletes Jobs as above."""
    needed = {adapter_job_name(ctx, s): s for s in sources if s.delivery != "none"}
    live = await _owned_jobs(kube, body)
    for name in sorted(set(live) - set(needed)):
        await kube.delete(JOB.object_path(ctx.namespace, name))
    deliveries = {s.name: Delivery("NotNeeded") for s in sources if s.delivery == "none"}
    for job_name, source in needed.items():
        job = live.get(job_name)
        if job is None:
            job = drop_empty(build_adapter_job(ctx, source))
            kopf.adopt(job, owner=dict(body))  # type: ignore[arg-type]
            job = await kube.create(JOB.collection_path(ctx.namespace), job) or job
            what = "downloads" if source.delivery == "download" else "copies"
            emit("Downloading", f"Job {job_name} {what} adapter {source.name}", "Normal")
        deliveries[source.name] = job_delivery(job, source)
    return deliveries


def job_delivery(job: Obj, source: AdapterSource) -> Delivery:
    """Complete, Failed (with the Job's own words) or still running."""
    status, name = job.get("status") or {}, job["metadata"]["name"]
    conditions = {
        c.get("type"): c for c in status.get("conditions", []) if c.get("status") == "True"
    }
    if status.get("succeeded", 0) >= 1 or "Complete" in conditions:
        return Delivery("Downloaded")
    what = "download" if source.delivery == "download" else "copy"
    if failed := conditions.get("Failed"):
        cause = failed.get("message") or failed.get("reason") or "failed"
        message = (
            f"Job {name} could not {what} {source.name}: {cause} (see `kubectl logs job/{name}`; "
            "delete the Job to try again)"
        )
        return Delivery("DownloadFailed", message)
    return Delivery("Downloading", f"Job {name} is running ({what} into the model cache claim)")


async def _owned_jobs(kube: KubeClient, body: Mapping[str, Any]) -> dict[str, Obj]:
    """This LLMDeployment's adapter Jobs, by name."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    selector = f"{OWNER_LABEL}={name},app.kubernetes.io/component={COMPONENT}"
    listing = await kube.get(f"{JOB.collection_path(namespace)}?labelSelector={quote(selector)}")
    uid = body["metadata"].get("uid")
    return {
        job["metadata"]["name"]: job
        for job in (listing or {}).get("items", [])
        if any(ref.get("uid") == uid for ref in job["metadata"].get("ownerReferences", []))
    }
