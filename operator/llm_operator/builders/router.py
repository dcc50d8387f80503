"""The router: Deployment, Service, and an account that may watch the engine EndpointSlices."""

import dataclasses

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
    tracing_env,
)
from llm_operator.builders.context import BuildContext
from llm_operator.builders.gateway import picker_key_env
from llm_operator.builders.model_cache import cache_env, cache_mounts, cache_volumes, hub_env
from llm_operator.builders.model_source import ModelSource
from llm_operator.builders.tenancy.pod import (
    quota_store_env,
    tenants_annotations,
    tenants_args,
    tenants_mounts,
    tenants_volumes,
)
from llm_operator.names import (
    PICKER_PORT,
    ROUTER_PORT,
    engine_name,
    router_name,
    selector_labels,
)

COMPONENT = "router"
DEFAULT_RESOURCES: Obj = {"requests": {"cpu": "250m", "memory": "512Mi"}}


def reads_model_claim(ctx: BuildContext) -> bool:
    """Whether router pods may mount a `pvc://` model's claim (never a ReadWriteOnce one: pods on
    other nodes could not start)."""
    return ctx.model_source.claim_name is not None and ctx.model_claim_shared


def _model_claim(ctx: BuildContext) -> ModelSource:
    """The model source whose volumes the router mounts: none for a claim it may not share."""
    source = ctx.model_source
    return source if reads_model_claim(ctx) else dataclasses.replace(source, claim_name=None)


def router_args(ctx: BuildContext) -> list[str]:
    # Without the model's files (a pvc:// claim it may not mount) the router balances by load.
    tokenizer = ctx.model_source.claim_name is None or reads_model_claim(ctx)
    args = [
        "route",
        "--discovery",
        "k8s",
        "--service",
        engine_name(ctx.name),
        "--namespace",
        ctx.namespace,
        *(["--model", ctx.model_source.model_arg] if tokenizer else []),
        "--policy",
        ctx.spec.router.policy,
        "--block-size",
        str(ctx.spec.engine.block_size),
        "--hold-queue-size",
        str(ctx.spec.router.hold_queue_size),
        "--hold-timeout-s",
        str(ctx.spec.router.hold_timeout_seconds),
        "--warm-prefixes",
        str(ctx.spec.router.warm_prefixes),
        "--warm-timeout-s",
        str(ctx.spec.router.warm_timeout_seconds),
        *_byte_budgets(ctx),
        *_flow_control(ctx),
        *tenants_args(ctx, COMPONENT),
        "--host",
        "0.0.0.0",
        "--port",
        str(ROUTER_PORT),
    ]
    ingress = ctx.spec.ingress
    if ingress.enabled and ingress.path.rstrip("/"):
        # The router serves the Ingress path itself: no controller-specific rewrite annotation.
        args += ["--root-path", ingress.path.rstrip("/")]
    gateway = ctx.spec.gateway
    if gateway is not None:  # the router is the InferencePool's endpoint picker too
        args += ["--picker-port", str(PICKER_PORT)]
        if gateway.shed_ttft_ms:
            args += ["--picker-shed-ttft-ms", f"{gateway.shed_ttft_ms:g}"]
    return args


def build_router_deployment(ctx: BuildContext) -> Obj:
    router = ctx.spec.router
    pod: Obj = {
        "serviceAccountName": router_name(ctx.name),
        "enableServiceLinks": False,
        "securityContext": pod_security_context(),
        "terminationGracePeriodSeconds": ctx.spec.drain_timeout_seconds + 10,
        "containers": [_router_container(ctx)],
        "affinity": _spread_over_nodes(ctx),
        "volumes": cache_volumes(ctx, COMPONENT)
        + _model_claim(ctx).volumes()
        + tenants_volumes(ctx, COMPONENT),
        "imagePullSecrets": image_pull_secrets(ctx),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(ctx, router_name(ctx.name), COMPONENT),
        "spec": {
            "replicas": router.replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(ctx.name, COMPONENT)},
            "strategy": _rolling_update(),
            "template": {
                "metadata": {
                    "labels": metadata(ctx, "", COMPONENT)["labels"],
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": str(ROUTER_PORT),
                        "prometheus.io/path": "/metrics",
                        **tenants_annotations(ctx, COMPONENT),
                    },
                },
                "spec": pod,
            },
        },
    }


def _rolling_update() -> Obj:
    """A new router is ready before an old one stops taking requests (a surge, none unavailable);
    the old one then finishes its streams in its grace period (preStop, then its drain on
    SIGTERM: uvicorn stops accepting and waits for the responses in flight)."""
    return {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}


def _spread_over_nodes(ctx: BuildContext) -> Obj | None:
    """2+ replicas prefer different nodes, so one node going down leaves a router serving."""
    if ctx.spec.router.replicas < 2:
        return None
    term = {
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": selector_labels(ctx.name, COMPONENT)},
    }
    preferred = [{"weight": 100, "podAffinityTerm": term}]
    return {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}}


def _router_container(ctx: BuildContext) -> Obj:
    return {
        "name": "router",
        "image": ctx.router_image,
        "imagePullPolicy": ctx.spec.image_pull_policy,
        "args": router_args(ctx),
        "ports": _router_ports(ctx),
        "env": cache_env(ctx, COMPONENT)
        + api_key_env(ctx)
        + api_key_env(ctx, "PAGEDOCK_REPLICA_API_KEY")
        + internal_key_env(ctx)
        + picker_key_env(ctx)
        + hub_env(ctx)
        + quota_store_env(ctx, COMPONENT)
        + tracing_env(ctx, COMPONENT),
        "resources": ctx.spec.router.resources or DEFAULT_RESOURCES,
        "securityContext": container_security_context(),
        "volumeMounts": cache_mounts(ctx, COMPONENT)
        + _model_claim(ctx).volume_mounts()
        + tenants_mounts(ctx, COMPONENT),
        "startupProbe": http_probe("http", 5, 120, 3),
        "readinessProbe": http_probe("http", 5, 3, 3),
        "livenessProbe": http_probe("http", 20, 3, 5),
        "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},
    }


def _router_ports(ctx: BuildContext) -> list[Obj]:
    ports = [{"name": "http", "containerPort": ROUTER_PORT, "protocol": "TCP"}]
    if ctx.spec.gateway is not None:
        ports.append({"name": "picker", "containerPort": PICKER_PORT, "protocol": "TCP"})
    return ports


def build_router_service(ctx: BuildContext) -> Obj:
    return http_service(ctx, router_name(ctx.name), COMPONENT, ROUTER_PORT, type="ClusterIP")


def build_router_service_account(ctx: BuildContext) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(ctx, router_name(ctx.name), COMPONENT),
    }


def build_router_role(ctx: BuildContext) -> Obj:
    """Read-only discovery of the engine endpoints, in this namespace only."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": metadata(ctx, router_name(ctx.name), COMPONENT),
        "rules": [
            {
                "apiGroups": ["discovery.k8s.io"],
                "resources": ["endpointslices"],
                "verbs": ["get", "list", "watch"],
            }
        ],
    }


def build_router_role_binding(ctx: BuildContext) -> Obj:
    name = router_name(ctx.name)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": metadata(ctx, name, COMPONENT),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ctx.namespace}],
    }


def _byte_budgets(ctx: BuildContext) -> list[str]:
    """The router's byte budgets the spec sets (unset: the router's defaults)."""
    router = ctx.spec.router
    flags = [
        ("--hold-queue-bytes", router.hold_queue_bytes),
        ("--max-buffered-body-bytes", router.max_buffered_body_bytes),
    ]
    return [arg for flag, value in flags if value is not None for arg in (flag, str(value))]


def _flow_control(ctx: BuildContext) -> list[str]:
    """The router's flow-queue flags the spec sets (unset: the router's defaults)."""
    flow = ctx.spec.router.flow_control
    if flow is None:
        return []
    flags = [
        ("--max-inflight-per-replica", flow.max_inflight_per_replica),
        ("--flow-queue-size", flow.queue_size),
        ("--flow-queue-ttl-s", flow.queue_ttl_seconds),
        ("--flow-starvation-s", flow.starvation_seconds),
    ]
    return [arg for flag, value in flags if value is not None for arg in (flag, f"{value:g}")]
