"""The `LLMDeployment` spec as pydantic models: the one source of the CRD schema and of validation,
and `parse_spec`, which validates an object's spec with them.

Field names mirror the engine's config (`max_num_seqs` -> `maxNumSeqs`); each attribute docstring
becomes the field's description in the CRD. Cross-field rules live twice, on purpose: as CEL
(`x-kubernetes-validations`, enforced by the API server) and as model validators (enforced by the
operator, which also sees objects from servers that skip schema validation).
"""

from collections.abc import Mapping
from typing import Any, Literal

import pydantic
from pydantic import Field, model_validator

from llm_operator.api.autoscaling import AutoscalingSpec
from llm_operator.api.engine import EngineSpec
from llm_operator.api.gateway import GatewaySpec
from llm_operator.api.model import ModelSpec
from llm_operator.api.responses import ResponsesSpec
from llm_operator.api.router import RouterSpec
from llm_operator.api.tenancy import TenancySpec
from llm_operator.api.tracing import TracingSpec
from llm_operator.api.types import (
    Quantity,
    RawObject,
    SpecModel,
    cel_rules,
    section,
)
from llm_operator.names import MAX_NAME_LENGTH


class ResourcesSpec(SpecModel):
    gpus: int = Field(0, ge=0)
    """NVIDIA GPUs per engine pod (`nvidia.com/gpu`); 0 runs on CPU."""
    requests: dict[str, Quantity] = Field(default_factory=dict)
    """Extra resource requests of the engine container (cpu, memory, ...)."""
    limits: dict[str, Quantity] = Field(default_factory=dict)
    """Extra resource limits of the engine container."""
    shm_size: Quantity = "1Gi"
    """In-memory /dev/shm per engine rank (NCCL's buffers between the ranks' GPUs live there);
    the volume holds engine.tensorParallelSize times this."""


class IngressSpec(SpecModel):
    model_config = cel_rules(
        ("!has(self.tlsSecretName) || has(self.host)", "tlsSecretName needs host"),
    )

    enabled: bool = False
    """Expose the endpoint through an Ingress."""
    class_name: str | None = None
    """The IngressClass; the cluster default when unset."""
    host: str | None = None
    """The public host name."""
    path: str = Field("/", pattern=r"^/")
    """The URL path prefix; the router serves it (no rewrite needed), so other than / needs the
    router."""
    tls_secret_name: str | None = None
    """A TLS Secret for the host; the endpoint is https when set."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Annotations of the Ingress (controller settings such as timeouts)."""

    @model_validator(mode="after")
    def _tls_needs_host(self) -> "IngressSpec":
        if self.tls_secret_name and not self.host:
            raise ValueError("ingress.tlsSecretName needs ingress.host")
        return self


class SecretKeyRef(SpecModel):
    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    """The Secret's name (same namespace)."""
    key: str = "api-key"
    """The key inside the Secret."""


class SchedulingSpec(SpecModel):
    node_selector: dict[str, str] = Field(default_factory=dict)
    """Node labels the engine pods require."""
    tolerations: list[RawObject] = Field(default_factory=list)
    """Tolerations of the engine pods (core/v1 Toleration)."""
    affinity: RawObject | None = None
    """Affinity of the engine pods (core/v1 Affinity)."""
    priority_class_name: str | None = None
    """PriorityClass of the engine pods."""
    runtime_class_name: str | None = None
    """RuntimeClass of the engine pods (e.g. nvidia)."""


class LLMDeploymentSpec(SpecModel):
    model_config = cel_rules(
        (
            "self.resources.gpus == 0 || self.resources.gpus == self.engine.tensorParallelSize",
            "resources.gpus must equal engine.tensorParallelSize (one GPU per rank)",
        ),
        (
            "self.engine.tensorParallelSize == 1 || !has(self.engine.maxLoras) && "
            "(!has(self.model.adapters) || size(self.model.adapters) == 0)",
            "LoRA (model.adapters, engine.maxLoras) needs engine.tensorParallelSize 1",
        ),
        (
            "!self.ingress.enabled || self.ingress.path == '/' || self.router.enabled",
            "an ingress.path other than / needs the router (it serves the prefix)",
        ),
        (
            "!has(self.gateway) || self.router.enabled",
            "gateway needs the router (it is the endpoint picker)",
        ),
        (
            "!self.autoscaling.enabled || self.autoscaling.mode != 'builtin' || "
            "self.router.enabled",
            "autoscaling.mode builtin needs the router (it reads the routers' demand)",
        ),
        (
            "!self.autoscaling.enabled || self.autoscaling.minReplicas >= 1 || self.router.enabled",
            "autoscaling.minReplicas 0 needs the router (it holds requests while an engine starts)",
        ),
    )

    model: ModelSpec = section(ModelSpec)
    """The model to serve."""
    replicas: int = Field(1, ge=0)
    """Engine pods (the scale subresource drives this field; while autoscaling is enabled the
    autoscaler owns it, and a `kubectl scale` is overridden)."""
    image: str | None = None
    """Engine image; the operator's default when unset."""
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    """Pull policy of every container."""
    image_pull_secrets: list[str] = Field(default_factory=list)
    """Names of Secrets to pull the images with."""
    engine: EngineSpec = section(EngineSpec)
    """Engine settings (`pagedock serve` flags)."""
    resources: ResourcesSpec = section(ResourcesSpec)
    """Engine pod resources."""
    router: RouterSpec = section(RouterSpec)
    """The router in front of the engines."""
    ingress: IngressSpec = section(IngressSpec)
    """External HTTP access."""
    gateway: GatewaySpec | None = None
    """Serve through a Gateway API Inference Extension gateway: an InferencePool of the engines
    with the router as its endpoint picker, optionally an HTTPRoute (docs/gateway-api.md)."""
    autoscaling: AutoscalingSpec = section(AutoscalingSpec)
    """Horizontal autoscaling of the engine replicas."""
    api_key_secret: SecretKeyRef | None = None
    """A Secret holding the API key that router and engines then require."""
    internal_key_secret: SecretKeyRef | None = None
    """A Secret holding the fleet's internal key (routers to engines: continuations, KV events)."""
    picker_key_secret: SecretKeyRef | None = None
    """With gateway: a Secret holding the key the router's endpoint picker requires of it."""
    tenancy: TenancySpec | None = None
    """Tenants (their API keys in Secrets), priorities, quotas, fair sharing (docs/tenants.md)."""
    responses: ResponsesSpec = section(ResponsesSpec)
    """Where the engines keep the Responses API's stored responses (docs/responses.md)."""
    tracing: TracingSpec = section(TracingSpec)
    """OpenTelemetry traces of the engines and the router (docs/observability.md#traces)."""
    scheduling: SchedulingSpec = section(SchedulingSpec)
    """Where engine pods may run."""
    drain_timeout_seconds: int = Field(30, ge=0, le=3600)
    """How long an engine finishes in-flight streams after SIGTERM."""
    max_drain_timeout_seconds: int | None = Field(None, ge=0, le=3600)
    """Lets the drain stretch toward the engines' longest recent requests, to this; unset: never."""
    startup_timeout_seconds: int = Field(1800, ge=30, le=86400)
    """How long model loading may take before the pod is restarted."""
    env: list[RawObject] = Field(default_factory=list)
    """Extra environment variables of the engine container (core/v1 EnvVar)."""
    pod_annotations: dict[str, str] = Field(default_factory=dict)
    """Extra annotations of the engine pods."""

    @model_validator(mode="after")
    def _one_gpu_per_rank(self) -> "LLMDeploymentSpec":
        gpus, tp_size = self.resources.gpus, self.engine.tensor_parallel_size
        if gpus and gpus != tp_size:
            raise ValueError(
                f"resources.gpus ({gpus}) must equal engine.tensorParallelSize ({tp_size}): "
                "one GPU per rank"
            )
        return self

    @model_validator(mode="after")
    def _lora_without_tensor_parallelism(self) -> "LLMDeploymentSpec":
        lora = bool(self.model.adapters) or self.engine.max_loras is not None
        if lora and self.engine.tensor_parallel_size > 1:
            raise ValueError(
                "LoRA (model.adapters, engine.maxLoras) needs engine.tensorParallelSize 1"
            )
        return self

    @model_validator(mode="after")
    def _path_prefix_needs_the_router(self) -> "LLMDeploymentSpec":
        # NOTE: the router strips the prefix (--root-path); the engines serve / only.
        if self.ingress.enabled and self.ingress.path != "/" and not self.router.enabled:
            raise ValueError("an ingress.path other than / needs the router (it serves the prefix)")
        return self

    @model_validator(mode="after")
    def _gateway_needs_the_router(self) -> "LLMDeploymentSpec":
        if self.gateway is not None and not self.router.enabled:
            raise ValueError("gateway needs the router (it is the endpoint picker)")
        return self

    @model_validator(mode="after")
    def _autoscaling_needs_the_router(self) -> "LLMDeploymentSpec":
        scaling = self.autoscaling
        if scaling.builtin and not self.router.enabled:
            raise ValueError(
                "autoscaling.mode builtin needs the router (it reads the routers' demand)"
            )
        if scaling.enabled and scaling.min_replicas == 0 and not self.router.enabled:
            raise ValueError(
                "autoscaling.minReplicas 0 needs the router "
                "(it holds requests while an engine starts)"
            )
        return self


class InvalidSpecError(ValueError):
    """The spec cannot be reconciled; the message says what to change."""


def parse_spec(body: Mapping[str, Any]) -> LLMDeploymentSpec:
    """The validated spec of an LLMDeployment object. InvalidSpecError, its message saying what to
    change, when the name is too long for the children's names or the spec breaks the models'
    rules (up to three problems named)."""
    name = body["metadata"]["name"]
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidSpecError(f"metadata.name is longer than {MAX_NAME_LENGTH} characters")
    try:
        return LLMDeploymentSpec.model_validate(body.get("spec") or {})
    except pydantic.ValidationError as error:
        raise InvalidSpecError(_describe(error)) from None


def _describe(error: pydantic.ValidationError) -> str:
    problems = []
    for item in error.errors()[:3]:
        where = ".".join(str(part) for part in item["loc"]) or "spec"
        problems.append(f"spec.{where}: {item['msg']}")
    return "; ".join(problems)
