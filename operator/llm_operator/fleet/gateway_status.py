"""The GatewayReady condition: whether the Inference Extension's children of an LLMDeployment
exist, and when they cannot, which CRD the cluster lacks."""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llm_operator.builders.context import BuildContext
from llm_operator.conditions import Condition, condition

Obj = dict[str, Any]
GATEWAY_CRD_MISSING = "GatewayCRDMissing"
INSTALL_HINT = "install the Gateway API and Inference Extension CRDs (docs/gateway-api.md)"


@dataclass(frozen=True)
class GatewayState:
    """What the reconciler saw of spec.gateway's children."""

    pool: Obj | None
    route: Obj | None
    route_wanted: bool
    missing_crds: tuple[str, ...] = ()


def gateway_state(
    ctx: BuildContext, live: dict[str, Obj], missing_crds: Sequence[str]
) -> GatewayState | None:
    """None when spec.gateway is unset."""
    gateway = ctx.spec.gateway
    if gateway is None:
        return None
    return GatewayState(
        pool=live.get(f"InferencePool/{ctx.name}"),
        route=live.get(f"HTTPRoute/{ctx.name}"),
        route_wanted=gateway.http_route is not None,
        missing_crds=tuple(sorted(set(missing_crds))),
    )


def gateway_condition(state: GatewayState | None, generation: int | None) -> Condition:
    if state is None:
        return condition("GatewayReady", True, "GatewayDisabled", "gateway disabled", generation)
    if state.missing_crds:
        names = " and ".join(state.missing_crds)
        verb = "is" if len(state.missing_crds) == 1 else "are"
        message = f"the CRD {names} {verb} not installed: {INSTALL_HINT}; the router still serves"
        return condition("GatewayReady", False, GATEWAY_CRD_MISSING, message, generation)
    if state.pool is None or (state.route_wanted and state.route is None):
        message = "waiting for the InferencePool" + (" and HTTPRoute" if state.route_wanted else "")
        return condition("GatewayReady", False, "GatewayPending", message, generation)
    created = "InferencePool and HTTPRoute" if state.route_wanted else "InferencePool"
    message = f"{created} created; the router is the endpoint picker"
    return condition("GatewayReady", True, "PoolCreated", message, generation)
