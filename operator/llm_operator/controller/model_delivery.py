"""Download once: an hf:// model goes into model.cacheVolumeClaim by one Job, not by every pod.

Each reconcile pass, before the children are applied (the pods' side is builders/model_cache.py):
  1. read the claim's accessModes: router pods mount it only when it is ReadWriteMany/ReadOnlyMany;
  2. create the Job of the current source@revision when it is missing (create-only: a Job's pod
     template is immutable, and a new revision or claim gets a Job of its own name), and delete
     this LLMDeployment's older download Jobs;
  3. hold back the Deployments whose pods read the claim until that Job has succeeded: one that
     does not exist yet is not created, a running one keeps its pods (the previous revision).
Meanwhile ModelReady is False with reason Downloading, or DownloadFailed with the Job's message.
"""

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Literal
from urllib.parse import quote

import kopf

from llm_operator.builders import BuildContext
from llm_operator.builders.children import drop_empty
from llm_operator.builders.model_cache import (
    COMPONENT,
    build_model_download_job,
    download_job_name,
    downloads_once,
    reads_claim,
)
from llm_operator.conditions import Condition, condition
from llm_operator.fleet.status import ready_condition
from llm_operator.k8s.kube import KubeClient, KubeError
from llm_operator.k8s.resources import KINDS
from llm_operator.names import OWNER_LABEL, engine_name, router_name

Obj = dict[str, Any]
EmitFn = Callable[[str, str, str], None]
"""(reason, message, type) -> an Event on the LLMDeployment."""
JOB = KINDS["Job"]
CLAIM = KINDS["PersistentVolumeClaim"]
SHARED_ACCESS_MODES = frozenset({"ReadWriteMany", "ReadOnlyMany"})


@dataclasses.dataclass(frozen=True)
class ModelDelivery:
    phase: Literal["NotNeeded", "Downloading", "Downloaded", "DownloadFailed"]
    message: str = ""
    claim_shared: bool = False
    """The claim may be mounted on many nodes at once (ReadWriteMany or ReadOnlyMany)."""

    @property
    def done(self) -> bool:
        return self.phase in ("NotNeeded", "Downloaded")


async def deliver_model(
    kube: KubeClient, body: Mapping[str, Any], ctx: BuildContext, emit: EmitFn
) -> ModelDelivery:
    """Steps 1 and 2 above; the result says what to hold back and what ModelReady says."""
    current = download_job_name(ctx) if downloads_once(ctx) else None
    await delete_download_jobs(kube, body, keep=current)
    if current is None:
        return ModelDelivery("NotNeeded")
    modes = await _claim_access_modes(kube, ctx)
    claim_shared = bool(SHARED_ACCESS_MODES.intersection(modes or ()))
    job = await kube.get(JOB.object_path(ctx.namespace, current))
    if job is None:
        job = await _create_job(kube, body, dataclasses.replace(ctx, claim_shared=claim_shared))
        _announce(ctx, modes, current, emit)
    delivery = _delivery_of(job, ctx, claim_shared)
    if modes is None and delivery.phase == "Downloading":
        claim = ctx.spec.model.cache_volume_claim
        message = f"{delivery.message}; it waits for claim {claim}, which was not found"
        return dataclasses.replace(delivery, message=message)
    return delivery


def held_back(ctx: BuildContext, delivery: ModelDelivery) -> frozenset[str]:
    """`Kind/name` of the children that wait for the download (their pods read the claim)."""
    if delivery.done:
        return frozenset()
    held = {f"Deployment/{engine_name(ctx.name)}"}
    if ctx.spec.router.enabled and reads_claim(ctx, "router"):
        held.add(f"Deployment/{router_name(ctx.name)}")
    return frozenset(held)


def with_delivery(
    conditions: list[Condition], delivery: ModelDelivery, generation: int | None
) -> list[Condition]:
    """The conditions, with ModelReady (and so Ready) saying Downloading / DownloadFailed."""
    if delivery.done:
        return conditions
    model = condition("ModelReady", False, delivery.phase, delivery.message, generation)
    parts = [model if c.type == "ModelReady" else c for c in conditions if c.type != "Ready"]
    return [*parts, ready_condition(parts, generation)]


async def delete_download_jobs(kube: KubeClient, body: Mapping[str, Any], keep: str | None) -> None:
    """This LLMDeployment's download Jobs other than `keep` (their pods go with them)."""
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    selector = f"{OWNER_LABEL}={name},app.kubernetes.io/component={COMPONENT}"
    listing = await kube.get(f"{JOB.collection_path(namespace)}?labelSelector={quote(selector)}")
    uid = body["metadata"].get("uid")
    for job in (listing or {}).get("items", []):
        meta = job.get("metadata", {})
        owned = any(ref.get("uid") == uid for ref in meta.get("ownerReferences", []))
        if owned and meta.get("name") != keep and meta.get("labels", {}).get(OWNER_LABEL) == name:
            await kube.delete(JOB.object_path(namespace, meta["name"]))


async def model_claim_shared(kube: KubeClient, ctx: BuildContext) -> bool:
    """Whether a `pvc://` model source's claim may be mounted on many nodes (the router's too)."""
    claim = ctx.model_source.claim_name
    if claim is None:
        return False
    modes = await _claim_access_modes(kube, ctx, claim)
    return bool(SHARED_ACCESS_MODES.intersection(modes or ()))


async def _claim_access_modes(
    kube: KubeClient, ctx: BuildContext, claim: str | None = None
) -> list[str] | None:
    """The claim's spec.accessModes (model.cacheVolumeClaim unless `claim` names another); None
    when it is missing or may not be read (no RBAC)."""
    path = CLAIM.object_path(ctx.namespace, claim or ctx.spec.model.cache_volume_claim or "")
    try:
        live = await kube.get(path)
    except KubeError as error:
        if error.status != 403:
            raise
        return None
    return None if live is None else list(live.get("spec", {}).get("accessModes", []))


async def _create_job(kube: KubeClient, body: Mapping[str, Any], ctx: BuildContext) -> Obj:
    job = drop_empty(build_model_download_job(ctx))
    kopf.adopt(job, owner=dict(body))  # type: ignore[arg-type]
    return await kube.create(JOB.collection_path(ctx.namespace), job) or job


def _announce(ctx: BuildContext, modes: list[str] | None, job_name: str, emit: EmitFn) -> None:
    claim = ctx.spec.model.cache_volume_claim
    source = ctx.model_source.model_arg
    emit("Downloading", f"Job {job_name} downloads {source} into claim {claim}", "Normal")
    if modes is None:
        emit("ClaimNotFound", f"claim {claim} was not found (or may not be read)", "Warning")
    elif not SHARED_ACCESS_MODES.intersection(modes):
        emit(
            "ClaimNotShared",
            f"claim {claim} is {', '.join(modes) or 'without accessModes'}, not ReadWriteMany: "
            "engine pods on other nodes than the first cannot mount it, and the router fetches "
            "the tokenizer itself",
            "Warning",
        )


def _delivery_of(job: Obj, ctx: BuildContext, claim_shared: bool) -> ModelDelivery:
    status, name = job.get("status") or {}, job["metadata"]["name"]
    conditions = {
        c.get("type"): c for c in status.get("conditions", []) if c.get("status") == "True"
    }
    if status.get("succeeded", 0) >= 1 or "Complete" in conditions:
        return ModelDelivery("Downloaded", claim_shared=claim_shared)
    if failed := conditions.get("Failed"):
        cause = failed.get("message") or failed.get("reason") or "failed"
        message = (
            f"Job {name} could not download {ctx.model_source.model_arg}: {cause} (see "
            f"`kubectl logs job/{name}`; delete the Job to try again)"
        )
        return ModelDelivery("DownloadFailed", message, claim_shared)
    message = f"Job {name} is downloading {ctx.model_source.model_arg}"
    return ModelDelivery("Downloading", message, claim_shared)
