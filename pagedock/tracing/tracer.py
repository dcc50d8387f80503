"""start_tracing: an OpenTelemetry tracer exporting over OTLP/HTTP in batches (in a thread of
the SDK's), for one service; and the W3C trace context read from, and written into, headers.

Span times are wall-clock nanoseconds; the engine records monotonic seconds, which `wall_ns`
converts (the same offset for every span of a request, so they nest exactly)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from pagedock.tracing.tracing_config import traces_endpoint


@dataclass
class Tracing:
    """A tracer and the provider that exports its spans."""

    tracer: Any
    provider: Any

    def shutdown(self) -> None:
        """Export what is left and stop the exporter's thread (at the process's end)."""
        self.provider.shutdown()


def start_tracing(service_name: str, endpoint_flag: str | None) -> Tracing | None:
    """Tracing for `service_name` (OTEL_SERVICE_NAME wins), or None when it is off."""
    endpoint = traces_endpoint(endpoint_flag)
    if endpoint is None:
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = os.environ.get("OTEL_SERVICE_NAME") or service_name
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    return Tracing(provider.get_tracer("pagedock"), provider)


def parent_context(traceparent: str | None) -> Any | None:
    """The remote parent a W3C `traceparent` names, as an OpenTelemetry context (None: none)."""
    if not traceparent:
        return None
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract({"traceparent": traceparent})


def traceparent_of(span: Any) -> str:
    """The `traceparent` header that makes `span` the parent of what the next hop traces."""
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier: dict[str, str] = {}
    TraceContextTextMapPropagator().inject(carrier, trace.set_span_in_context(span))
    return carrier["traceparent"]


def wall_ns(monotonic_s: float, now_monotonic: float, now_ns: int) -> int:
    """The wall-clock nanoseconds of a time.monotonic() reading, by the offset of one instant."""
    return now_ns - int((now_monotonic - monotonic_s) * 1e9)


def clock_pair() -> tuple[float, int]:
    """One instant on both clocks (monotonic seconds, wall nanoseconds), for `wall_ns`."""
    return time.monotonic(), time.time_ns()
