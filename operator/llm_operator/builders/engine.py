"""The engine: its Deployment (pods running `pagedock serve`), headless Service and ConfigMap."""

import hashlib
import json
import math

from llm_operator.builders.common import (
    Obj,
    api_key_env,
    container_security_context,
    http_probe,
    http_service,
    image_pull_secrets,
    internal_key_env,
    metadata,
    pod_security_context,
    responses_store_env,
    tracing_env,
)
from llm_operator.builders.context import BuildContext
from llm_operator.builders.engine_args import engine_args
from llm_operator.builders.kv_events import kv_events_container_ports, kv_events_env
from llm_operator.builders.model_cache import (
    GPU_RESOURCE,
    cache_env,
    cache_mounts,
    cache_volumes,
    ephemeral_storage,
    gpu_node_tolerations,
)
from llm_operator.builders.tenancy.pod import (
    quota_store_env,
    tenants_annotations,
    tenants_mounts,
    tenants_volumes,
)
from llm_operator.builders.tensor_parallel import shm_size_limit, tensor_parallel_env
from llm_operator.drain_timing import PRE_STOP_SLEEP_SECONDS
from llm_operator.names import (
    CONFIG_HASH_ANNOTATION,
    DRAIN_OBSERVATION_ANNOTATION,
    ENGINE_PORT,
    engine_name,
    selector_labels,
)

COMPONENT = "engine"
DEFAULT_REQUESTS = {"cpu": "1", "memory": "2Gi"}


def build_engine_config_map(ctx: BuildContext) -> Obj:
    """Environment of the engine container; its hash rolls the pods when it changes."""
    data = {
        "PAGEDOCK_MODEL_SOURCE": ctx.spec.model.source,
        "PAGEDOCK_SERVED_MODEL_NAME": ctx.served_model_name,
    }
    if ctx.spec.model.revision:
        data["HF_REVISION"] = ctx.spec.model.revision
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(ctx, engine_name(ctx.name), COMPONENT),
        "data": data,
    }


def config_hash(config_map: Obj) -> str:
    text = json.dumps(config_map["data"], sort_keys=True).encode()
    return hashlib.sha256(text).hexdigest()[:16]


def build_engine_service(ctx: BuildContext) -> Obj:
    """Headless: the router discovers each engine pod through this Service's EndpointSlices."""
    return http_service(ctx, engine_name(ctx.name), COMPONENT, ENGINE_PORT, clusterIP="None")


def build_engine_deployment(ctx: BuildContext, config_map: Obj) -> Obj:
    spec = ctx.spec
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _deployment_metadata(ctx),
        "spec": {
            "replicas": spec.replicas,
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": spec.startup_timeout_seconds + 300,
            "selector": {"matchLabels": selector_labels(ctx.name, COMPONENT)},
            "strategy": _rollout_strategy(ctx),
            "template": {
                "metadata": {
                    "labels": metadata(ctx, "", COMPONENT)["labels"],
                    "annotations": _pod_annotations(ctx, config_map),
                },
                "spec": _pod_spec(ctx, config_map),
            },
        },
    }


def _deployment_metadata(ctx: BuildContext) -> Obj:
    """With the drain observation the pod template was built from (on the Deployment, not in the
    template, so recording it rolls no pod): llm_operator/drain_timing.py."""
    observed = ctx.drain_observation
    annotations = (
        {} if observed is None else {DRAIN_OBSERVATION_ANNOTATION: observed.to_annotation()}
    )
    return metadata(ctx, engine_name(ctx.name), COMPONENT, **annotations)


def _rollout_strategy(ctx: BuildContext) -> Obj:
    """GPU pods replace one at a time without a surge pod (no spare GPU is assumed)."""
    if ctx.spec.resources.gpus:
        return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    return {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}


def _pod_annotations(ctx: BuildContext, config_map: Obj) -> dict[str, str]:
    return {
        **ctx.spec.pod_annotations,
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(ENGINE_PORT),
        "prometheus.io/path": "/metrics",
        CONFIG_HASH_ANNOTATION: config_hash(config_map),
        **tenants_annotations(ctx, COMPONENT),
    }


def _pod_spec(ctx: BuildContext, config_map: Obj) -> Obj:
    spec = ctx.spec
    pod: Obj = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        # NOTE: preStop + the engine's drain + its handoff and exit (llm_operator/drain_timing.py).
        "terminationGracePeriodSeconds": ctx.drain_timing.termination_grace_period_seconds,
        "containers": [_engine_container(ctx, config_map)],
        "volumes": _volumes(ctx),
        "imagePullSecrets": image_pull_secrets(ctx),
        "nodeSelector": dict(spec.scheduling.node_selector),
        "tolerations": gpu_node_tolerations(ctx),
    }
    optional = {
        "affinity": spec.scheduling.affinity,
        "priorityClassName": spec.scheduling.priority_class_name,
        "runtimeClassName": spec.scheduling.runtime_class_name,
    }
    pod.update({key: value for key, value in optional.items() if value is not None})
    return pod


def _engine_container(ctx: BuildContext, config_map: Obj) -> Obj:
    startup_period_seconds = 10
    return {
        "name": "engine",
        "image": ctx.engine_image,
        "imagePullPolicy": ctx.spec.image_pull_policy,
        "args": engine_args(ctx),
        "ports": [
            {"name": "http", "containerPort": ENGINE_PORT, "protocol": "TCP"},
            *kv_events_container_ports(ctx),
        ],
        "envFrom": [{"configMapRef": {"name": config_map["metadata"]["name"]}}],
        "env": cache_env(ctx, COMPONENT)
        + api_key_env(ctx)
        + internal_key_env(ctx)
        + tensor_parallel_env(ctx)
        + kv_events_env(ctx)
        + responses_store_env(ctx)
        + quota_store_env(ctx, COMPONENT)
        + tracing_env(ctx, COMPONENT)
        + list(ctx.spec.env),
        "resources": _resources(ctx),
        "securityContext": container_security_context(),
        "volumeMounts": _volume_mounts(ctx),
        # Model loading may take long: liveness and readiness start only after startup succeeds.
        "startupProbe": http_probe(
            "http",
            startup_period_seconds,
            math.ceil(ctx.spec.startup_timeout_seconds / startup_period_seconds),
            5,
        ),
        "readinessProbe": http_probe("http", 5, 3, 3),
        "livenessProbe": http_probe("http", 20, 6, 10),
        "lifecycle": {"preStop": {"sleep": {"seconds": PRE_STOP_SLEEP_SECONDS}}},
    }


def _resources(ctx: BuildContext) -> Obj:
    resources = ctx.spec.resources
    # NOTE: the emptyDirs count against the node's ephemeral storage; requested, the scheduler
    # places the pod where the download fits instead of the kubelet evicting it half-way.
    storage = {"ephemeral-storage": ephemeral_storage(ctx, COMPONENT)}
    requests: Obj = {**DEFAULT_REQUESTS, **storage, **resources.requests}
    limits: Obj = {**storage, **resources.limits}
    if resources.gpus:
        requests[GPU_RESOURCE] = resources.gpus
        limits[GPU_RESOURCE] = resources.gpus
    return {"requests": requests, "limits": limits}


def _volumes(ctx: BuildContext) -> list[Obj]:
    shm = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm_size_limit(ctx)}}
    return [
        *cache_volumes(ctx, COMPONENT),
        shm,
        *ctx.model_source.volumes(),
        *tenants_volumes(ctx, COMPONENT),
    ]


def _volume_mounts(ctx: BuildContext) -> list[Obj]:
    shm = {"name": "dshm", "mountPath": "/dev/shm"}
    return [
        *cache_mounts(ctx, COMPONENT),
        shm,
        *ctx.model_source.volume_mounts(),
        *tenants_mounts(ctx, COMPONENT),
    ]
