"""The `LLMDeployment` status as pydantic models: the schema of `.status` in the CRD.

The operator writes status as plain dicts (camelCase keys); these models only describe it. How the
children's state maps onto it is llm_operator.fleet.status.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from llm_operator.conditions import Condition


class AutoscalerStatus(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True
    )

    desired_replicas: int | None = None
    """The replicas the built-in autoscaler last asked for."""
    reason: str | None = None
    """Why, in words."""
    stable_concurrency: float | None = None
    """Mean requests held or in flight over the stable window."""
    panic_concurrency: float | None = None
    """Mean requests held or in flight over the panic window."""
    panicking: bool | None = None
    """True while in panic mode (scales up on the panic window, never down)."""
    num_held: int | None = None
    """Requests the routers hold for want of a ready engine."""
    num_inflight: int | None = None
    """Requests in flight through the routers."""
    num_queued: int | None = None
    """Requests waiting in the routers' flow queues for a slot (docs/tenants.md)."""
    oldest_queued_seconds: float | None = None
    """How long the oldest of those has waited."""
    num_routers: int | None = None
    """Router pods that answered the last poll."""
    last_scale_time: str | None = Field(None, json_schema_extra={"format": "date-time"})
    """When the autoscaler last changed spec.replicas."""


class AdapterStatus(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True
    )

    name: str
    """The adapter's name (spec.model.adapters[].name)."""
    state: Literal["Downloading", "Loading", "Ready", "Failed"]
    """Downloading: its Job fetches or copies it into the model cache; Loading: not yet served by
    every ready engine replica; Ready: served by all of them; Failed: `message` says why."""
    reason: str
    """A CamelCase word for machines (Downloaded, DownloadFailed, LoadFailed, ...)."""
    message: str = ""
    """What a person can do about it."""
    ready_replicas: int = 0
    """Ready engine replicas that serve it (list it in GET /v1/models)."""


class StartupStages(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True
    )

    imports_done: float | None = None
    """The server's modules (torch, the engine, the HTTP stack) were imported."""
    weights_located: float | None = None
    """The model's files were on the node and its config read."""
    kernels_ready: float | None = None
    """The C++ CPU kernels were loaded (or known to be off); absent on GPUs."""
    weights_loaded: float | None = None
    """The weights were in the model (packed for oneDNN on the CPU)."""
    warmup_done: float | None = None
    """The engine was built: KV cache allocated, CUDA graphs captured on GPUs."""
    ready: float | None = None
    """The HTTP server listened (the readiness probe could pass)."""
    first_request_served: float | None = None
    """The first request finished."""


class StartupStatus(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True
    )

    pod: str
    """The engine pod the figures come from: the newest ready pod of the newest revision."""
    revision: str | None = None
    """Its pod-template-hash."""
    process_start_time: str | None = Field(None, json_schema_extra={"format": "date-time"})
    """When its engine process started."""
    stages: StartupStages
    """Seconds from the process's start to each start-up stage it reached."""


class DrainStatus(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True
    )

    longest_request_seconds: float | None = None
    """The longest recent request of any ready engine, arrival to finish (GET /drain)."""
    p99_request_seconds: float | None = None
    """The highest of the engines' 99th percentiles of the same."""
    oldest_in_flight_seconds: float | None = None
    """How long the longest-running open request had run."""
    handoff_seconds: float | None = None
    """Past the drain deadline, the longest an engine needs to hand off or abort and close."""
    num_requests: int | None = None
    """Finished requests the figures cover (each engine keeps its last 1,000)."""
    pods: int | None = None
    """Ready engine pods that reported."""
    observed_at: str | None = Field(None, json_schema_extra={"format": "date-time"})
    """When the figures were read."""
    drain_timeout_seconds: int | None = None
    """The engine pods' drain deadline (--drain-timeout) in the pod template now."""
    termination_grace_period_seconds: int | None = None
    """The engine pods' terminationGracePeriodSeconds in the pod template now."""
    next_drain_timeout_seconds: int | None = None
    """The deadline the figures ask for: applied when the pod template next changes."""
    next_termination_grace_period_seconds: int | None = None
    """The grace period the figures ask for: applied when the pod template next changes."""


class LLMDeploymentStatus(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, use_attribute_docstrings=True
    )

    observed_generation: int | None = None
    """The spec generation the operator last reconciled."""
    replicas: int | None = None
    """Engine pods that exist (scale subresource)."""
    ready_replicas: int | None = None
    """Engine pods that pass their readiness probe."""
    selector: str | None = None
    """Label selector of the engine pods (scale subresource, HPA)."""
    endpoint: str | None = None
    """The OpenAI-compatible base URL."""
    model: str | None = None
    """The served model name."""
    kv_cache_usage: float | None = None
    """Mean KV-cache usage of the engines, 0..1 (vllm:kv_cache_usage_perc)."""
    prefix_cache_hit_rate: float | None = None
    """Prefix-cache hits / queries over the engines' lifetime, 0..1."""
    num_requests_waiting: int | None = None
    """Requests queued in all engines."""
    num_requests_running: int | None = None
    """Requests running in all engines."""
    adapters: list[AdapterStatus] | None = Field(
        None,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """Each declared LoRA adapter's state on the engine replicas."""
    adapters_ready: str | None = None
    """`<Ready adapters>/<declared adapters>` (the Adapters printer column)."""
    autoscaler: AutoscalerStatus | None = None
    """The built-in autoscaler's last decision and its inputs (autoscaling.mode builtin)."""
    startup: StartupStatus | None = None
    """The cold start of the latest revision's newest ready engine pod, stage by stage."""
    drain: DrainStatus | None = None
    """How long the engines' requests run, and the drain deadline and grace period they size."""
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """ModelReady, EngineReady, RouterReady, IngressReady, GatewayReady and Ready."""
