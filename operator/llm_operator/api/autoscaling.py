"""`spec.autoscaling`: how the engine replicas scale (builtin, hpa or keda), down to zero."""

from typing import Literal

from pydantic import Field, model_validator

from llm_operator.api.types import Quantity, SpecModel, cel_rules


class AutoscalingSpec(SpecModel):
    model_config = cel_rules(
        ("self.maxReplicas >= self.minReplicas", "maxReplicas must be >= minReplicas"),
        (
            "self.mode != 'hpa' || self.minReplicas >= 1",
            "minReplicas 0 needs mode builtin or keda (an HPA cannot scale to zero)",
        ),
    )

    enabled: bool = False
    """Scale the engine replicas automatically (`mode` says how); while on, the autoscaler owns
    spec.replicas."""
    mode: Literal["builtin", "hpa", "keda"] = "builtin"
    """builtin: the operator scales on the routers' demand (no metrics adapter); hpa: a
    HorizontalPodAutoscaler on metricName; keda: a KEDA ScaledObject on metricName."""
    min_replicas: int = Field(1, ge=0)
    """The fewest engine replicas; 0 scales to zero after scaleToZeroAfterSeconds without
    requests (the router holds the next requests while one starts)."""
    max_replicas: int = Field(4, ge=1)
    """The most engine replicas."""
    target_concurrency: float = Field(4.0, ge=0.1)
    """builtin: requests in flight or held per engine replica to aim for."""
    stable_window_seconds: int = Field(60, ge=6, le=3600)
    """builtin: the window whose mean concurrency sets the replicas (Knative's stable window)."""
    panic_window_percentage: int = Field(10, ge=1, le=100)
    """builtin: the panic window, as a percentage of the stable window."""
    panic_threshold_percentage: int = Field(200, ge=110, le=1000)
    """builtin: panic (scale up on the panic window, never down) when the panic window asks for
    this percentage of the ready replicas."""
    max_scale_up_rate: float = Field(2.0, ge=1.0)
    """builtin: one decision asks for at most this many times the ready replicas (at least 1),
    never more while replicas are still starting."""
    scale_down_stabilization_seconds: int = Field(120, ge=0, le=3600)
    """builtin: scale down only to the highest recommendation of this many past seconds."""
    target_queue_wait_seconds: float | None = Field(None, gt=0, le=3600)
    """builtin: also scale up, a replica at a time, while a request has waited longer than this
    in a router's flow queue (docs/tenants.md); unset: the queue counts by its depth alone."""
    scale_to_zero_after_seconds: int = Field(300, ge=0, le=86400)
    """builtin and keda, with minReplicas 0: seconds without a request before the last engine
    goes."""
    metric_name: str = "vllm:num_requests_waiting"
    """hpa and keda: a per-pod metric to scale on (hpa: served by a custom-metrics adapter; keda:
    queried from prometheusServerAddress)."""
    target_average_value: Quantity = 4
    """hpa and keda: the per-pod average of metricName to hold."""
    target_cpu_utilization_percentage: int | None = Field(
        None, ge=1, le=100, alias="targetCPUUtilizationPercentage"
    )
    """hpa and keda: also scale on CPU utilisation (useful for CPU-only deployments)."""
    prometheus_server_address: str = "http://prometheus-operated.monitoring.svc:9090"
    """keda: the Prometheus that scrapes the engines (the ScaledObject's prometheus trigger)."""

    @model_validator(mode="after")
    def _range(self) -> "AutoscalingSpec":
        if self.max_replicas < self.min_replicas:
            raise ValueError("autoscaling.maxReplicas must be >= autoscaling.minReplicas")
        if self.mode == "hpa" and self.min_replicas < 1:
            raise ValueError(
                "autoscaling.minReplicas 0 needs mode builtin or keda (an HPA cannot scale to zero)"
            )
        return self

    @property
    def builtin(self) -> bool:
        """Whether the operator's own autoscaler drives spec.replicas."""
        return self.enabled and self.mode == "builtin"
