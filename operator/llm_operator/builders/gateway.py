"""The Gateway API Inference Extension's objects: the engines as an InferencePool whose endpoint
picker is the router, the Service of the picker's gRPC port, and an optional HTTPRoute.

    Gateway --HTTPRoute--> InferencePool <name>   (pods: the engines, port 8000)
                             | endpointPickerRef
                             v
                           Service <name>-picker:9002 --> router pods, port `picker` (ext_proc)
"""

from llm_operator.api.gateway import GatewaySpec, HTTPRouteSpec
from llm_operator.builders.common import Obj, metadata
from llm_operator.builders.context import BuildContext
from llm_operator.names import ENGINE_PORT, PICKER_PORT, picker_name, selector_labels

COMPONENT = "gateway"
INFERENCE_GROUP = "inference.networking.k8s.io"


def build_picker_service(ctx: BuildContext) -> Obj:
    """The router pods' endpoint picker port; the gateway speaks HTTP/2 (gRPC) to it."""
    port = {
        "name": "grpc",
        "port": PICKER_PORT,
        "targetPort": "picker",
        "protocol": "TCP",
        "appProtocol": "kubernetes.io/h2c",
    }
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(ctx, picker_name(ctx.name), "router"),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(ctx.name, "router"),
            "ports": [port],
        },
    }


def build_inference_pool(ctx: BuildContext) -> Obj:
    # unset: built for its kind and name only (pruning)
    gateway = ctx.spec.gateway or GatewaySpec.model_validate({})
    picker = {
        "kind": "Service",
        "name": picker_name(ctx.name),
        "port": {"number": PICKER_PORT},
        "failureMode": gateway.failure_mode,
    }
    return {
        "apiVersion": f"{INFERENCE_GROUP}/v1",
        "kind": "InferencePool",
        "metadata": metadata(ctx, ctx.name, COMPONENT),
        "spec": {
            "selector": {"matchLabels": selector_labels(ctx.name, "engine")},
            "targetPorts": [{"number": ENGINE_PORT}],
            "endpointPickerRef": picker,
        },
    }


def build_http_route(ctx: BuildContext) -> Obj:
    gateway = ctx.spec.gateway or GatewaySpec.model_validate({})
    # unset: built for its kind and name only (pruning)
    route = gateway.http_route or HTTPRouteSpec.model_validate({"parentRefs": [{"name": "none"}]})
    rule: Obj = {
        "matches": [{"path": {"type": "PathPrefix", "value": route.path}}],
        "backendRefs": [{"group": INFERENCE_GROUP, "kind": "InferencePool", "name": ctx.name}],
    }
    if route.path.rstrip("/"):  # the engines serve /v1/... only
        rewrite = {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/"}}
        rule["filters"] = [{"type": "URLRewrite", "urlRewrite": rewrite}]
    if route.request_timeout:
        rule["timeouts"] = {"request": route.request_timeout}
    parents = [ref.model_dump(by_alias=True, exclude_none=True) for ref in route.parent_refs]
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": metadata(ctx, ctx.name, COMPONENT),
        "spec": {"parentRefs": parents, "hostnames": route.hostnames, "rules": [rule]},
    }


def picker_key_env(ctx: BuildContext) -> list[Obj]:
    """The key the picker requires of its ext_proc clients, from its Secret (with a gateway)."""
    secret = ctx.spec.picker_key_secret
    if secret is None or ctx.spec.gateway is None:
        return []
    ref = {"secretKeyRef": {"name": secret.name, "key": secret.key}}
    return [{"name": "PAGEDOCK_PICKER_API_KEY", "valueFrom": ref}]
