"""Traffic: the Ingress in front of the endpoint, the NetworkPolicy that fences the engines, and
the one that fences the router's endpoint-picker port behind a gateway."""

from llm_operator.builders.common import Obj, metadata
from llm_operator.builders.context import BuildContext
from llm_operator.builders.kv_events import kv_events_ingress_rules
from llm_operator.names import (
    ENGINE_PORT,
    PICKER_PORT,
    ROUTER_PORT,
    engine_name,
    router_name,
    selector_labels,
)

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"  # set on every namespace by the API server


def metrics_scrapers(namespaces: tuple[str, ...]) -> list[Obj]:
    """Every pod in these namespaces (Prometheus's, the operator's) may scrape the engines.

    NOTE: by namespace, not by pod label: anyone who can create a pod can give it a label such
    as app.kubernetes.io/name=prometheus, and port 8000 serves the API as well as /metrics.
    """
    if not namespaces:
        return []
    names = {"key": NAMESPACE_NAME_LABEL, "operator": "In", "values": sorted(set(namespaces))}
    return [{"namespaceSelector": {"matchExpressions": [names]}}]


def build_ingress(ctx: BuildContext) -> Obj:
    ingress = ctx.spec.ingress
    if ctx.spec.router.enabled:
        backend_name, backend_port = router_name(ctx.name), ROUTER_PORT
    else:
        backend_name, backend_port = engine_name(ctx.name), ENGINE_PORT
    path = {
        "path": ingress.path,
        "pathType": "Prefix",
        "backend": {"service": {"name": backend_name, "port": {"number": backend_port}}},
    }
    rule: Obj = {"http": {"paths": [path]}}
    if ingress.host:
        rule["host"] = ingress.host
    spec: Obj = {"rules": [rule]}
    if ingress.class_name:
        spec["ingressClassName"] = ingress.class_name
    if ingress.tls_secret_name and ingress.host:
        spec["tls"] = [{"hosts": [ingress.host], "secretName": ingress.tls_secret_name}]
    meta = metadata(ctx, ctx.name, "ingress", **ingress.annotations)
    return {"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta, "spec": spec}


def build_engine_network_policy(ctx: BuildContext) -> Obj:
    """Engines accept traffic from the router and the metrics scrapers' namespaces only; their
    KV event ports (engine.kvEvents) from the router and the named peers only.

    Without the router, the engines are the endpoint themselves: the ingress controller and
    in-cluster clients must reach them, so the policy then admits any pod on the engine port.
    Behind a gateway (spec.gateway) its proxies connect to the engines: the policy admits
    gateway.dataPlanePeers as well, or any pod when none are named.
    """
    port = [{"port": ENGINE_PORT, "protocol": "TCP"}]
    gateway = ctx.spec.gateway
    rules: list[Obj]
    if not ctx.spec.router.enabled or (gateway is not None and not gateway.data_plane_peers):
        rules = [{"ports": port}]
    else:
        router_pods = {"podSelector": {"matchLabels": selector_labels(ctx.name, "router")}}
        scrapers = metrics_scrapers(ctx.settings.scraper_namespaces)
        peers = gateway.data_plane_peers if gateway is not None else []
        rules = [{"from": [router_pods, *scrapers, *peers], "ports": port}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(ctx, engine_name(ctx.name), "engine"),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(ctx.name, "engine")},
            "policyTypes": ["Ingress"],
            "ingress": rules + kv_events_ingress_rules(ctx),
        },
    }


def build_picker_network_policy(ctx: BuildContext) -> Obj:
    """The router pods' endpoint-picker port admits gateway.dataPlanePeers only (the gateway's
    proxies are the picker's ext_proc clients); its HTTP port stays open to every pod, as
    without a policy. Rendered only when peers are named: with none, any pod may reach both.

    NOTE: whoever reaches the picker port takes destinations and adds to the in-flight count the
    autoscaler reads (docs/gateway-api.md, Securing the picker port).
    """
    gateway = ctx.spec.gateway
    peers = gateway.data_plane_peers if gateway is not None else []
    picker_port = [{"port": PICKER_PORT, "protocol": "TCP"}]
    http_port = [{"port": ROUTER_PORT, "protocol": "TCP"}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(ctx, router_name(ctx.name), "router"),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(ctx.name, "router")},
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": http_port}, {"from": list(peers), "ports": picker_port}],
        },
    }
