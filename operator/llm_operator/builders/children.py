"""All children of one LLMDeployment, in creation order, and the ones its spec switches off."""

from collections.abc import Callable

from llm_operator.builders.common import Obj
from llm_operator.builders.context import BuildContext
from llm_operator.builders.engine import (
    build_engine_config_map,
    build_engine_deployment,
    build_engine_service,
)
from llm_operator.builders.gateway import (
    build_http_route,
    build_inference_pool,
    build_picker_service,
)
from llm_operator.builders.network import (
    build_engine_network_policy,
    build_ingress,
    build_picker_network_policy,
)
from llm_operator.builders.router import (
    build_router_deployment,
    build_router_role,
    build_router_role_binding,
    build_router_service,
    build_router_service_account,
)
from llm_operator.builders.scaling import (
    build_engine_pdb,
    build_hpa,
    build_router_pdb,
    build_scaled_object,
)
from llm_operator.builders.tenancy.config_map import build_tenants_config_map

Builder = Callable[[BuildContext], Obj]
ROUTER_BUILDERS: tuple[Builder, ...] = (
    build_router_service_account,
    build_router_role,
    build_router_role_binding,
    build_router_service,
    build_router_deployment,
)


def build_children(ctx: BuildContext) -> list[Obj]:
    """The desired children, without empty fields (the API server omits those, so keeping them
    would make every comparison with the live object differ)."""
    config_map = build_engine_config_map(ctx)
    children = [
        config_map,
        build_engine_service(ctx),
        build_engine_deployment(ctx, config_map),
        build_engine_network_policy(ctx),
        build_engine_pdb(ctx),
    ]
    for builder, wanted in _optional_builders(ctx):
        if wanted:
            children.append(builder(ctx))
    return [drop_empty(child) for child in children]


def child_refs(ctx: BuildContext) -> list[tuple[str, str, bool]]:
    """(kind, name, wanted) of every optional child, to delete the ones no longer wanted."""
    return [
        (obj["kind"], obj["metadata"]["name"], wanted)
        for builder, wanted in _optional_builders(ctx)
        for obj in [builder(ctx)]
    ]


def _optional_builders(ctx: BuildContext) -> list[tuple[Builder, bool]]:
    spec = ctx.spec
    optional: list[tuple[Builder, bool]] = [(b, spec.router.enabled) for b in ROUTER_BUILDERS]
    optional.append((build_router_pdb, spec.router.enabled and spec.router.replicas >= 2))
    optional.append((build_ingress, spec.ingress.enabled))
    optional.append((build_tenants_config_map, spec.tenancy is not None))
    scaling = spec.autoscaling
    optional.append((build_hpa, scaling.enabled and scaling.mode == "hpa"))
    optional.append((build_scaled_object, scaling.enabled and scaling.mode == "keda"))
    gateway = spec.gateway
    optional.append((build_picker_service, gateway is not None))
    optional.append((build_inference_pool, gateway is not None))
    optional.append((build_http_route, gateway is not None and gateway.http_route is not None))
    fenced = gateway is not None and bool(gateway.data_plane_peers)
    optional.append((build_picker_network_policy, fenced))
    return optional


def drop_empty(value: Obj) -> Obj:
    """A copy without empty dicts/lists/None at any depth (except `{}` in a selector-like leaf,
    which means "everything" and is kept: namespaceSelector, podSelector, emptyDir, status)."""
    out: Obj = {}
    for key, item in value.items():
        if isinstance(item, dict):
            item = drop_empty(item) if item else item
            if not item and key not in KEEP_EMPTY:
                continue
        elif isinstance(item, list):
            item = [drop_empty(x) if isinstance(x, dict) else x for x in item]
            if not item:
                continue
        elif item is None:
            continue
        out[key] = item
    return out


KEEP_EMPTY = frozenset({"namespaceSelector", "podSelector", "emptyDir"})
