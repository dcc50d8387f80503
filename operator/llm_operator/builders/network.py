"""Traffic: the Ingress in front of the endpoint, and the NetworkPolicy that fences the engines."""

from llm_operator.builders.common import Obj, metadata
from llm_operator.builders.context import BuildContext
from llm_operator.names import ENGINE_PORT, ROUTER_PORT, engine_name, router_name, selector_labels

# Who may scrape the engines' /metrics: Prometheus (any namespace) and the pagedock operator.
METRICS_SCRAPERS: list[Obj] = [
    {
        "namespaceSelector": {},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    },
    {
        "namespaceSelector": {},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "pagedock-operator"}},
    },
]


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
    """Engines accept traffic from the router and the metrics scrapers only.

    Without the router, the engines are the endpoint themselves: the ingress controller and
    in-cluster clients must reach them, so the policy then admits any pod on the engine port.
    """
    port = [{"port": ENGINE_PORT, "protocol": "TCP"}]
    if ctx.spec.router.enabled:
        router_pods = {"podSelector": {"matchLabels": selector_labels(ctx.name, "router")}}
        rules = [{"from": [router_pods, *METRICS_SCRAPERS], "ports": port}]
    else:
        rules = [{"ports": port}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(ctx, engine_name(ctx.name), "engine"),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(ctx.name, "engine")},
            "policyTypes": ["Ingress"],
            "ingress": rules,
        },
    }
