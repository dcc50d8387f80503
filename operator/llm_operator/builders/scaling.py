"""Availability and scale: the PodDisruptionBudgets and the HorizontalPodAutoscaler."""

from llm_operator import API_VERSION, KIND
from llm_operator.builders.common import Obj, metadata
from llm_operator.builders.context import BuildContext
from llm_operator.names import engine_name, router_name, selector_labels


def build_engine_pdb(ctx: BuildContext) -> Obj:
    """Voluntary evictions (node drains) take at most one engine at a time."""
    return _one_at_a_time(ctx, engine_name(ctx.name), "engine")


def build_router_pdb(ctx: BuildContext) -> Obj:
    """With 2+ router replicas, a node drain keeps one serving (built only then: with one
    replica, `maxUnavailable: 1` would allow it anyway, and `0` would block drains)."""
    return _one_at_a_time(ctx, router_name(ctx.name), "router")


def _one_at_a_time(ctx: BuildContext, name: str, component: str) -> Obj:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(ctx, name, component),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(ctx.name, component)},
        },
    }


def build_hpa(ctx: BuildContext) -> Obj:
    """Scales the LLMDeployment itself through its scale subresource (not the Deployment),
    so that spec.replicas stays the one truth the operator reconciles."""
    autoscaling = ctx.spec.autoscaling
    metrics: list[Obj] = [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": autoscaling.metric_name},
                "target": {
                    "type": "AverageValue",
                    "averageValue": autoscaling.target_average_value,
                },
            },
        }
    ]
    if autoscaling.target_cpu_utilization_percentage:
        target = {
            "type": "Utilization",
            "averageUtilization": autoscaling.target_cpu_utilization_percentage,
        }
        metrics.append({"type": "Resource", "resource": {"name": "cpu", "target": target}})
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(ctx, ctx.name, "engine"),
        "spec": {
            "scaleTargetRef": {"apiVersion": API_VERSION, "kind": KIND, "name": ctx.name},
            "minReplicas": autoscaling.min_replicas,
            "maxReplicas": autoscaling.max_replicas,
            "metrics": metrics,
        },
    }
