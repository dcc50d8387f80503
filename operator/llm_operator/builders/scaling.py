"""Availability and scale: the PodDisruptionBudgets, and the HorizontalPodAutoscaler (mode hpa)
or KEDA ScaledObject (mode keda); mode builtin needs neither (llm_operator/autoscaler/)."""

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


def _target_ref(ctx: BuildContext) -> Obj:
    """The LLMDeployment itself, through its scale subresource (not the Deployment), so that
    spec.replicas stays the one truth the operator reconciles."""
    return {"apiVersion": API_VERSION, "kind": KIND, "name": ctx.name}


def build_hpa(ctx: BuildContext) -> Obj:
    """autoscaling.mode hpa: a per-pod custom metric (a metrics adapter serves it), and CPU."""
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
            "scaleTargetRef": _target_ref(ctx),
            "minReplicas": autoscaling.min_replicas,
            "maxReplicas": autoscaling.max_replicas,
            "metrics": metrics,
        },
    }


def build_scaled_object(ctx: BuildContext) -> Obj:
    """autoscaling.mode keda: a ScaledObject (keda.sh/v1alpha1) whose prometheus trigger reads
    metricName summed over this deployment's engines; with minReplicas 0, KEDA scales to zero
    once the trigger is inactive for scaleToZeroAfterSeconds (its cooldownPeriod)."""
    autoscaling = ctx.spec.autoscaling
    query = (
        f"sum({autoscaling.metric_name}"
        f'{{namespace="{ctx.namespace}",pod=~"{engine_name(ctx.name)}-.*"}})'
    )
    triggers: list[Obj] = [
        {
            "type": "prometheus",
            "metricType": "AverageValue",
            "metadata": {
                "serverAddress": autoscaling.prometheus_server_address,
                "query": query,
                "threshold": str(autoscaling.target_average_value),
                "activationThreshold": "0",
            },
        }
    ]
    if autoscaling.target_cpu_utilization_percentage:
        cpu = str(autoscaling.target_cpu_utilization_percentage)
        triggers.append({"type": "cpu", "metricType": "Utilization", "metadata": {"value": cpu}})
    scale_down = {"stabilizationWindowSeconds": autoscaling.scale_down_stabilization_seconds}
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": metadata(ctx, ctx.name, "engine"),
        "spec": {
            "scaleTargetRef": _target_ref(ctx),
            "pollingInterval": 15,
            "cooldownPeriod": autoscaling.scale_to_zero_after_seconds,
            "minReplicaCount": autoscaling.min_replicas,
            "maxReplicaCount": autoscaling.max_replicas,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": scale_down}}},
            "triggers": triggers,
        },
    }
