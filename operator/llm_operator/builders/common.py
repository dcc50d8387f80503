"""Pieces every workload builder shares: metadata, pod hardening, cache volumes, probes."""

from typing import Any

from llm_operator.builders.context import BuildContext
from llm_operator.names import child_labels, selector_labels

Obj = dict[str, Any]
RUN_AS_ID = 10001
CACHE_MOUNT = "/cache"


def metadata(ctx: BuildContext, name: str, component: str, **annotations: str) -> Obj:
    meta: Obj = {
        "name": name,
        "namespace": ctx.namespace,
        "labels": child_labels(ctx.name, component),
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def pod_security_context() -> Obj:
    """Non-root, RuntimeDefault seccomp; fsGroup so that mounted volumes are writable."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_ID,
        "runAsGroup": RUN_AS_ID,
        "fsGroup": RUN_AS_ID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context() -> Obj:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def writable_volumes(ctx: BuildContext) -> list[Obj]:
    """/tmp and the cache (downloads, Triton/torch kernels): the root filesystem is read-only."""
    model = ctx.spec.model
    cache: Obj
    if model.cache_volume_claim:
        cache = {"name": "cache", "persistentVolumeClaim": {"claimName": model.cache_volume_claim}}
    else:
        cache = {"name": "cache", "emptyDir": {"sizeLimit": model.cache_size}}
    return [cache, {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}]


def writable_mounts() -> list[Obj]:
    return [{"name": "cache", "mountPath": CACHE_MOUNT}, {"name": "tmp", "mountPath": "/tmp"}]


def cache_env() -> list[Obj]:
    """Point every library's cache into the writable cache volume."""
    values = {
        "HOME": "/tmp",
        "HF_HOME": f"{CACHE_MOUNT}/huggingface",
        "XDG_CACHE_HOME": CACHE_MOUNT,
        "TRITON_CACHE_DIR": f"{CACHE_MOUNT}/triton",
        "TORCHINDUCTOR_CACHE_DIR": f"{CACHE_MOUNT}/torchinductor",
    }
    return [{"name": key, "value": value} for key, value in values.items()]


def api_key_env(ctx: BuildContext, variable: str = "PAGEDOCK_API_KEY") -> list[Obj]:
    """The API key from its Secret: what clients must send (and the router sends to engines)."""
    secret = ctx.spec.api_key_secret
    if secret is None:
        return []
    ref = {"secretKeyRef": {"name": secret.name, "key": secret.key}}
    return [{"name": variable, "valueFrom": ref}]


def http_probe(port: str, period_seconds: int, failure_threshold: int, timeout_seconds: int) -> Obj:
    return {
        "httpGet": {"path": "/health", "port": port},
        "periodSeconds": period_seconds,
        "failureThreshold": failure_threshold,
        "timeoutSeconds": timeout_seconds,
    }


def image_pull_secrets(ctx: BuildContext) -> list[Obj]:
    return [{"name": name} for name in ctx.spec.image_pull_secrets]


def http_service(ctx: BuildContext, name: str, component: str, port: int, **spec: Any) -> Obj:
    """A Service exposing the component's pods' `http` port; `spec` adds fields (clusterIP, type)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(ctx, name, component),
        "spec": {
            **spec,
            "selector": selector_labels(ctx.name, component),
            "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
        },
    }
