"""`spec.router`: the prefix-aware router in front of the engines (`pagedock route`); its fields
carry the router's flag names (`hold_queue_size` -> `--hold-queue-size`)."""

from pydantic import Field

from llm_operator.api.flow_control import FlowControlSpec
from llm_operator.api.types import RawObject, SpecModel
from pagedock.limits import MIN_BODY_BUDGET_BYTES, RoutingPolicy


class RouterSpec(SpecModel):
    enabled: bool = True
    """Run the prefix-aware router in front of the engines."""
    replicas: int = Field(1, ge=1)
    """Router pods."""
    policy: RoutingPolicy = "prefix-aware"
    """How the router picks an engine replica."""
    image: str | None = None
    """Router image; the operator's default when unset."""
    resources: RawObject | None = None
    """Resource requirements of the router container (a core/v1 ResourceRequirements)."""
    hold_queue_size: int = Field(256, ge=0)
    """Requests each router pod holds while no engine is ready (scaled to zero, starting);
    beyond it, 503 with Retry-After. 0 = none held."""
    hold_timeout_seconds: int = Field(300, ge=1, le=3600)
    """Seconds a held request waits for an engine before its 503 (cover a cold start)."""
    warm_prefixes: int = Field(8, ge=0, le=256)
    """Hottest prompt prefixes a new engine is sent before it takes its share; 0 = none."""
    warm_timeout_seconds: int = Field(30, ge=1, le=600)
    """Longest time warming may hold a new engine back."""
    hold_queue_bytes: int | None = Field(None, ge=0)
    """Bytes of request bodies each router pod holds at most while no engine is ready; a body
    past it gets a 503 at once. Unset: the router's default (128 MiB)."""
    max_buffered_body_bytes: int | None = Field(None, ge=MIN_BODY_BUDGET_BYTES)
    """Bytes of request bodies each router pod keeps at once (held, parsed, forwarded); a body
    past it gets a 503 at once, before it is parsed. Unset: the router's default (256 MiB, for a
    512Mi pod); raise it with the router's memory."""
    flow_control: FlowControlSpec | None = None
    """The router's flow queues (priority bands, fair sharing between tenants; docs/tenants.md);
    each field unset keeps the router's default."""
