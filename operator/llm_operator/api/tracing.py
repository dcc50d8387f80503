"""`spec.tracing`: the engines' and the router's OpenTelemetry traces (docs/observability.md),
exported over OTLP/HTTP to a collector. Set as the standard `OTEL_*` variables on their pods:
the endpoint, a parent-based trace-id-ratio sampler, and `<name>-engine` / `<name>-router` as
the service names."""

from pydantic import Field

from llm_operator.api.types import SpecModel


class TracingSpec(SpecModel):
    otlp_endpoint: str | None = Field(
        None, alias="otlpEndpoint", max_length=2048, pattern=r"^https?://[^\s]+$"
    )
    """The OTLP/HTTP traces endpoint, e.g. http://otel-collector.observability:4318/v1/traces.
    Unset: no traces (the default)."""
    sampling_ratio: float = Field(1.0, alias="samplingRatio", ge=0.0, le=1.0)
    """The share of new traces sampled; a request that comes with a sampled W3C traceparent
    is traced whatever this says (parent-based)."""
