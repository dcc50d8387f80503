"""FlowMetrics: per tenant and priority band, what flow control admitted, refused (by reason),
made wait, and the tokens it counted; registered in the router's registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_WAIT_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
OTHER_BAND = "other"


class FlowMetrics:
    def __init__(self, registry: CollectorRegistry, known_priorities: set[int]) -> None:
        self.known_priorities = known_priorities
        """Bands named in labels; any other priority a client asks for is `other` (bounded)."""
        self._admitted = Counter(
            "pagedock_router_tenant_requests_admitted",
            "Requests admitted, by tenant and priority band.",
            ["tenant", "priority"],
            registry=registry,
        )
        self._rejected = Counter(
            "pagedock_router_tenant_requests_rejected",
            "Requests refused by quota or flow control, by tenant and reason (the error code).",
            ["tenant", "reason"],
            registry=registry,
        )
        self._tokens = Counter(
            "pagedock_router_tenant_tokens",
            "Tokens counted against tenants (prompt at admission, completion at the end).",
            ["tenant", "kind"],
            registry=registry,
        )
        self._wait = Histogram(
            "pagedock_router_flow_queue_wait_seconds",
            "Seconds an admitted request waited in the router's flow queues.",
            ["tenant", "priority"],
            buckets=_WAIT_BUCKETS,
            registry=registry,
        )
        self._queued = Gauge(
            "pagedock_router_flow_queued_requests",
            "Requests waiting in the router's flow queues now.",
            registry=registry,
        )

    def band(self, priority: int) -> str:
        return str(priority) if priority in self.known_priorities else OTHER_BAND

    def observe_admitted(self, tenant: str, priority: int, waited_s: float) -> None:
        self._admitted.labels(tenant, self.band(priority)).inc()
        self._wait.labels(tenant, self.band(priority)).observe(waited_s)

    def observe_rejected(self, tenant: str, reason: str) -> None:
        self._rejected.labels(tenant, reason).inc()

    def observe_tokens(self, tenant: str, kind: str, tokens: int) -> None:
        if tokens > 0:
            self._tokens.labels(tenant, kind).inc(tokens)

    def set_queued(self, num_waiting: int) -> None:
        self._queued.set(num_waiting)
