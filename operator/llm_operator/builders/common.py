"""Pieces every workload builder shares: metadata, pod hardening, probes, Services."""

from typing import Any

from llm_operator.builders.context import BuildContext
from llm_operator.names import child_labels, selector_labels

Obj = dict[str, Any]
RUN_AS_ID = 10001


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
    """Non-root, RuntimeDefault seccomp; fsGroup so that mounted volumes are writable, changed
    only when the volume's root differs (a large model claim is not walked on every start)."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RUN_AS_ID,
        "runAsGroup": RUN_AS_ID,
        "fsGroup": RUN_AS_ID,
        "fsGroupChangePolicy": "OnRootMismatch",
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


def api_key_env(ctx: BuildContext, variable: str = "PAGEDOCK_API_KEY") -> list[Obj]:
    """The API key from its Secret: what clients must send (and the router sends to engines)."""
    secret = ctx.spec.api_key_secret
    if secret is None:
        return []
    ref = {"secretKeyRef": {"name": secret.name, "key": secret.key}}
    return [{"name": variable, "valueFrom": ref}]


def internal_key_env(ctx: BuildContext) -> list[Obj]:
    """The fleet's internal key from its Secret: what engines require for continuations and the
    KV event stream, and what routers send there (pagedock/http/internal_key.py)."""
    secret = ctx.spec.internal_key_secret
    if secret is None:
        return []
    ref = {"secretKeyRef": {"name": secret.name, "key": secret.key}}
    return [{"name": "PAGEDOCK_INTERNAL_API_KEY", "valueFrom": ref}]


def responses_store_env(ctx: BuildContext) -> list[Obj]:
    """The engines' Responses API store with spec.responses.store redis: the URL from its Secret
    as `PAGEDOCK_RESPONSES_STORE`, which `pagedock serve` reads as `--responses-store`, so a
    password in it reaches neither the pod template nor a command line. memory: the default."""
    responses = ctx.spec.responses
    secret = responses.redis_url_secret
    if responses.store != "redis" or secret is None:
        return []
    ref = {"secretKeyRef": {"name": secret.name, "key": secret.key}}
    return [{"name": "PAGEDOCK_RESPONSES_STORE", "valueFrom": ref}]


def tracing_env(ctx: BuildContext, component: str) -> list[Obj]:
    """spec.tracing as the standard OpenTelemetry variables (pagedock/tracing/): the endpoint,
    a parent-based ratio sampler, the service `<name>-<component>`; nothing when it is unset."""
    tracing = ctx.spec.tracing
    if tracing.otlp_endpoint is None:
        return []
    values = {
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": tracing.otlp_endpoint,
        "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
        "OTEL_TRACES_SAMPLER_ARG": f"{tracing.sampling_ratio:g}",
        "OTEL_SERVICE_NAME": f"{ctx.name}-{component}",
        "OTEL_RESOURCE_ATTRIBUTES": f"k8s.namespace.name={ctx.namespace}",
    }
    return [{"name": name, "value": value} for name, value in values.items()]


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
    """A Service exposing the component's pods' `http` port; `spec` adds fields
    (clusterIP, type)."""
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
