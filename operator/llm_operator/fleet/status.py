"""How the children's state maps onto the `LLMDeployment` status: its conditions, and the Warning
events due when one turns to a failure. The status schema is llm_operator.api.status."""

from dataclasses import dataclass
from typing import Any

from llm_operator.conditions import Condition, condition
from llm_operator.fleet.gateway_status import GATEWAY_CRD_MISSING, GatewayState, gateway_condition
from llm_operator.fleet.pod_failures import SAME_CAUSE, SEVERITY, PodFailure

Obj = dict[str, Any]
CHILD_REJECTED = "ChildRejected"
INVALID_SPEC = "InvalidSpec"
FAILURE_REASONS = frozenset({*SEVERITY, CHILD_REJECTED, GATEWAY_CRD_MISSING})


@dataclass(frozen=True)
class ChildrenState:
    """What the reconciler saw of the children (live objects, None when absent or disabled)."""

    engine: Obj | None
    router: Obj | None
    ingress: Obj | None
    router_enabled: bool
    ingress_enabled: bool
    gateway: GatewayState | None = None
    """spec.gateway's children; None when it is unset."""
    engine_failure: PodFailure | None = None
    """Why the engine pods do not come up (read only while the engine is not ready)."""
    rejection: str | None = None
    """`<kind> <name>: <server message>` when the API server refused to create or patch a child."""
    zero_by_policy: bool = False
    """autoscaling may scale to zero (minReplicas 0): zero engines is a state, not a failure."""


def deployment_counts(deployment: Obj | None) -> tuple[int, int, int]:
    """(desired, existing, ready) replicas; a rollout in progress is not ready."""
    if deployment is None:
        return 0, 0, 0
    desired = deployment.get("spec", {}).get("replicas", 1)
    status = deployment.get("status", {})
    generation = deployment.get("metadata", {}).get("generation")
    stale = generation is not None and status.get("observedGeneration", generation) < generation
    ready = 0 if stale else min(status.get("readyReplicas", 0), status.get("updatedReplicas", 0))
    return desired, status.get("replicas", 0), ready


SCALED_TO_ZERO = "ScaledToZero"
ZERO_MESSAGE = "no engine runs; the router holds the next request while the autoscaler starts one"


def engine_condition(
    engine: Obj | None,
    generation: int | None,
    failure: PodFailure | None = None,
    zero_by_policy: bool = False,
) -> Condition:
    desired, _, ready = deployment_counts(engine)
    if engine is None:
        return condition(
            "EngineReady", False, "EngineMissing", "engine Deployment not found", generation
        )
    if desired == 0 and zero_by_policy:
        return condition("EngineReady", True, SCALED_TO_ZERO, ZERO_MESSAGE, generation)
    if desired == 0:
        return condition("EngineReady", False, "ScaledToZero", "spec.replicas is 0", generation)
    if failure is not None and ready < desired:
        return condition("EngineReady", False, failure.reason, failure.message, generation)
    message = f"{ready}/{desired} engine replicas ready"
    reason = "ReplicasReady" if ready >= desired else "ReplicasNotReady"
    return condition("EngineReady", ready >= desired, reason, message, generation)


def router_condition(state: ChildrenState, generation: int | None) -> Condition:
    if not state.router_enabled:
        return condition("RouterReady", True, "RouterDisabled", "router disabled", generation)
    desired, _, ready = deployment_counts(state.router)
    ok = state.router is not None and ready >= desired
    message = f"{ready}/{desired} router replicas ready"
    return condition(
        "RouterReady", ok, "ReplicasReady" if ok else "ReplicasNotReady", message, generation
    )


def ingress_condition(state: ChildrenState, generation: int | None) -> Condition:
    if not state.ingress_enabled:
        return condition("IngressReady", True, "IngressDisabled", "ingress disabled", generation)
    balancer = (state.ingress or {}).get("status", {}).get("loadBalancer", {}).get("ingress", [])
    if balancer:
        return condition(
            "IngressReady", True, "AddressAssigned", "ingress has an address", generation
        )
    message = "waiting for the ingress controller to assign an address"
    return condition("IngressReady", False, "AddressPending", message, generation)


def ready_condition(parts: list[Condition], generation: int | None) -> Condition:
    """Not ready for the first failing part's sake; a named cause (a refused child, a pod
    failure) wins over the generic `<Part>NotReady`, so Ready says what actually went wrong."""
    failing = [part for part in parts if part.status != "True"]
    if not failing and any(part.reason == SCALED_TO_ZERO for part in parts):
        return condition("Ready", True, SCALED_TO_ZERO, ZERO_MESSAGE, generation)
    if not failing:
        return condition("Ready", True, "AllReady", "serving", generation)
    causes = [part for part in failing if part.reason in FAILURE_REASONS]
    if causes:
        return condition("Ready", False, causes[0].reason, causes[0].message, generation)
    first = failing[0]
    return condition(
        "Ready", False, first.type.replace("Ready", "NotReady"), first.message, generation
    )


def model_condition(
    engine: Obj | None,
    source: str,
    generation: int | None,
    failure: PodFailure | None = None,
    zero_by_policy: bool = False,
) -> Condition:
    """The model counts as loaded once one engine passed its startup and readiness probes."""
    desired, _, ready = deployment_counts(engine)
    if engine is not None and desired == 0 and zero_by_policy:
        return condition(
            "ModelReady", True, SCALED_TO_ZERO, f"{source} loads on demand", generation
        )
    if ready:
        return condition("ModelReady", True, "ModelLoaded", f"{source} is served", generation)
    if failure is not None:  # nothing is loading it: say why rather than "loading" for ever
        return condition("ModelReady", False, failure.reason, failure.message, generation)
    message = f"waiting for an engine to load {source}"
    return condition("ModelReady", False, "ModelLoading", message, generation)


def build_conditions(state: ChildrenState, source: str, generation: int | None) -> list[Condition]:
    parts = [
        model_condition(
            state.engine, source, generation, state.engine_failure, state.zero_by_policy
        ),
        engine_condition(state.engine, generation, state.engine_failure, state.zero_by_policy),
        router_condition(state, generation),
        ingress_condition(state, generation),
        gateway_condition(state.gateway, generation),
    ]
    if state.rejection is not None:
        rejected = condition("Ready", False, CHILD_REJECTED, state.rejection, generation)
        return [*parts, rejected]
    return [*parts, ready_condition(parts, generation)]


def transition_warnings(old: list[dict], new: list[Condition]) -> list[tuple[str, str]]:
    """(reason, message) of each Warning event due: a condition that has just turned to a named
    failure. A pod failure counts once per cause, on EngineReady (its message changes with every
    back-off, the kubelet alternates ErrImagePull and ImagePullBackOff; ModelReady and Ready repeat
    it); a refused child once per message, on Ready (another child, or refusal, is news)."""
    previous = {item.get("type"): item for item in old}
    warnings = []
    for item in new:
        before = previous.get(item.type) or {}
        if item.type == "EngineReady" and item.reason in SEVERITY:
            due = _cause(before.get("reason")) != _cause(item.reason)
        elif item.type == "GatewayReady" and item.reason == GATEWAY_CRD_MISSING:
            due = before.get("reason") != item.reason
        elif item.type == "Ready" and item.reason == CHILD_REJECTED:
            due = (before.get("reason"), before.get("message")) != (item.reason, item.message)
        else:
            due = False
        if due:
            warnings.append((item.reason, item.message))
    return warnings


def invalid_spec_conditions(message: str, generation: int | None) -> list[Condition]:
    """An invalid spec: nothing is reconciled until it is fixed."""
    return [
        condition("ModelReady", False, INVALID_SPEC, message, generation),
        condition("Ready", False, INVALID_SPEC, message, generation),
    ]


def _cause(reason: str | None) -> str | None:
    return SAME_CAUSE.get(reason or "", reason)
