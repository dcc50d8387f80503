"""Where pods keep the model cache, and the Job that fills a cache claim once per model revision.

hf:// source with model.cacheVolumeClaim: the model is downloaded once per revision
    Job <name>-model-<hash>  `pagedock download`; the claim read-write at /cache/huggingface
    engine pods              the claim read-only at /cache/huggingface, HF_HUB_OFFLINE=1; created
                             only after the Job succeeded (llm_operator/model_delivery.py)
    router pods              the same when the claim is ReadWriteMany/ReadOnlyMany; with a
                             ReadWriteOnce claim, their own emptyDir and the tokenizer from the Hub
hf:// source without a claim: one download per pod
    engine pods              an emptyDir of model.cacheSize at /cache
    router pods              a small emptyDir (tokenizer files)
Every pod has a writable /tmp and /cache (Triton and torch kernels) as emptyDirs, requested as
ephemeral-storage by the engines and the Job: the root filesystem is read-only.
"""

import hashlib
import math

from llm_operator.builders.common import (
    Obj,
    container_security_context,
    image_pull_secrets,
    metadata,
    pod_security_context,
)
from llm_operator.builders.context import BuildContext
from llm_operator.k8s.diff import parse_quantity

COMPONENT = "model"
GPU_RESOURCE = "nvidia.com/gpu"
CACHE_MOUNT = "/cache"
HF_HOME = f"{CACHE_MOUNT}/huggingface"
KERNEL_CACHE_SIZE = "2Gi"
"""The emptyDir at /cache when no hf:// model is downloaded into it (routers: tokenizer only)."""
TMP_SIZE = "1Gi"
DOWNLOAD_BACKOFF_LIMIT = 3
DOWNLOAD_RESOURCES: Obj = {
    "requests": {"cpu": "500m", "memory": "1Gi"},
    "limits": {"memory": "4Gi"},
}
# NOTE: a Job's name is a label value of its pods, so at most 63 characters.
MAX_JOB_NAME_PREFIX = 63 - len("-model-") - 8


def downloads_once(ctx: BuildContext) -> bool:
    """An hf:// model fetched by one Job into model.cacheVolumeClaim, not by every pod."""
    model = ctx.spec.model
    return bool(model.cache_volume_claim) and model.source.startswith("hf://")


def reads_claim(ctx: BuildContext, component: str) -> bool:
    """Pods of `component` (engine, router) mount the cache claim read-only and never download."""
    if component == "router":
        return downloads_once(ctx) and ctx.claim_shared
    return downloads_once(ctx)


def download_job_name(ctx: BuildContext) -> str:
    """`<name>-model-<hash>`: a new model revision or claim gets a new Job (Jobs are immutable)."""
    key = "\n".join([ctx.name, ctx.model_source.model_arg, ctx.spec.model.cache_volume_claim or ""])
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{ctx.name[:MAX_JOB_NAME_PREFIX]}-model-{digest}"


def cache_volumes(ctx: BuildContext, component: str) -> list[Obj]:
    cache = {"name": "cache", "emptyDir": {"sizeLimit": _cache_size(ctx, component)}}
    tmp = {"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}}
    if component != COMPONENT and not reads_claim(ctx, component):
        return [cache, tmp]
    claim: Obj = {"claimName": ctx.spec.model.cache_volume_claim}
    if component != COMPONENT:
        claim["readOnly"] = True
    return [cache, tmp, {"name": "model-cache", "persistentVolumeClaim": claim}]


def cache_mounts(ctx: BuildContext, component: str) -> list[Obj]:
    mounts: list[Obj] = [
        {"name": "cache", "mountPath": CACHE_MOUNT},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    if component == COMPONENT:
        mounts.append({"name": "model-cache", "mountPath": HF_HOME})
    elif reads_claim(ctx, component):
        mounts.append({"name": "model-cache", "mountPath": HF_HOME, "readOnly": True})
    return mounts


def cache_env(ctx: BuildContext, component: str) -> list[Obj]:
    """Every library's cache in the writable cache volume; offline where the claim has the model."""
    values = {
        "HOME": "/tmp",
        "HF_HOME": HF_HOME,
        "XDG_CACHE_HOME": CACHE_MOUNT,
        "TRITON_CACHE_DIR": f"{CACHE_MOUNT}/triton",
        "TORCHINDUCTOR_CACHE_DIR": f"{CACHE_MOUNT}/torchinductor",
    }
    if component != COMPONENT and reads_claim(ctx, component):
        values["HF_HUB_OFFLINE"] = "1"
    return [{"name": key, "value": value} for key, value in values.items()]


def hub_env(ctx: BuildContext) -> list[Obj]:
    """The HF_* variables of spec.env (HF_TOKEN, HF_ENDPOINT, ...): whoever fetches from the Hub
    needs them as the engines would (a gated repo needs the token)."""
    return [var for var in ctx.spec.env if str(var.get("name", "")).startswith("HF_")]


def ephemeral_storage(ctx: BuildContext, component: str) -> str:
    """The pod's emptyDirs (cache and /tmp), to request and limit as ephemeral-storage."""
    total = _bytes(_cache_size(ctx, component)) + _bytes(TMP_SIZE)
    mebibytes = -(-total // 2**20)  # rounded up
    return f"{mebibytes}Mi"


def build_model_download_job(ctx: BuildContext) -> Obj:
    """`pagedock download` into the cache claim, in the engine image, placed like the engines."""
    spec = ctx.spec
    labels = metadata(ctx, "", COMPONENT)["labels"]
    resources = {
        key: {**value, "ephemeral-storage": ephemeral_storage(ctx, COMPONENT)}
        for key, value in DOWNLOAD_RESOURCES.items()
    }
    container = {
        "name": "download",
        "image": ctx.engine_image,
        "imagePullPolicy": spec.image_pull_policy,
        "args": ["download", ctx.model_source.model_arg],
        "env": cache_env(ctx, COMPONENT) + list(spec.env),
        "resources": resources,
        "securityContext": container_security_context(),
        "volumeMounts": cache_mounts(ctx, COMPONENT),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod: Obj = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "containers": [container],
        "volumes": cache_volumes(ctx, COMPONENT),
        "imagePullSecrets": image_pull_secrets(ctx),
        "nodeSelector": dict(spec.scheduling.node_selector),
        "tolerations": gpu_node_tolerations(ctx),
    }
    if spec.scheduling.affinity is not None:
        pod["affinity"] = spec.scheduling.affinity
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": metadata(ctx, download_job_name(ctx), COMPONENT),
        "spec": {
            "backoffLimit": DOWNLOAD_BACKOFF_LIMIT,
            "activeDeadlineSeconds": spec.startup_timeout_seconds,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def gpu_node_tolerations(ctx: BuildContext) -> list[Obj]:
    """spec.scheduling.tolerations, and GPU nodes' taint when the engines use GPUs."""
    tolerations = list(ctx.spec.scheduling.tolerations)
    if ctx.spec.resources.gpus:
        tolerations.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    return tolerations


def _cache_size(ctx: BuildContext, component: str) -> int | str:
    """model.cacheSize where an engine downloads an hf:// model itself; else room for kernels
    (and a built-in model, ~100 MB, when the image lacks it)."""
    downloads_itself = ctx.spec.model.source.startswith("hf://") and not reads_claim(ctx, component)
    return (
        ctx.spec.model.cache_size
        if component == "engine" and downloads_itself
        else KERNEL_CACHE_SIZE
    )


def _bytes(quantity: int | str) -> int:
    value = parse_quantity(quantity)
    assert value is not None, quantity  # the spec model checked the pattern
    return math.ceil(value)
