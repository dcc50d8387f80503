"""TenantMetrics: per tenant, what the server admitted, refused (by reason: the error code), the
tokens it served and how long requests waited in the engine's queue; registered in the server's
registry beside vLLM's metrics (engine/server/metrics.py).

    pagedock:tenant_requests_admitted_total{model_name,tenant,priority}
    pagedock:tenant_requests_rejected_total{model_name,tenant,reason}
    pagedock:tenant_prompt_tokens_total{model_name,tenant}       counted at admission
    pagedock:tenant_generation_tokens_total{model_name,tenant}   counted as each request ends
    pagedock:tenant_queue_time_seconds{model_name,tenant,priority}   arrival to first scheduled

Labels stay bounded: tenants are the tenants file's names, or at most MAX_HEADER_TENANTS named by
a trusted header (engine/server/tenancy/tenant_resolver.py); a priority label names a priority the
tenants run at by default (and 0), any other a client asks for is `other`.
"""

from __future__ import annotations

from collections.abc import Collection

from prometheus_client import CollectorRegistry, Counter, Histogram

_QUEUE_BUCKETS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
OTHER_PRIORITY = "other"


class TenantMetrics:
    def __init__(self, registry: CollectorRegistry, model_name: str) -> None:
        self.model_name = model_name
        self.known_priorities: frozenset[int] = frozenset({0})
        """Priorities named in labels (set_known_priorities); any other is `other`."""
        self._admitted = self._counter(
            "pagedock:tenant_requests_admitted",
            "Requests admitted (past the tenant's quotas), by tenant and priority.",
            "priority",
            registry,
        )
        self._rejected = self._counter(
            "pagedock:tenant_requests_rejected",
            "Requests refused with a 429, by tenant and reason (the error code).",
            "reason",
            registry,
        )
        self._prompt_tokens = self._counter(
            "pagedock:tenant_prompt_tokens", "Prompt tokens admitted, by tenant.", None, registry
        )
        self._generation_tokens = self._counter(
            "pagedock:tenant_generation_tokens",
            "Tokens generated and sent, by tenant (counted as each request ends).",
            None,
            registry,
        )
        self._queue_time = Histogram(
            "pagedock:tenant_queue_time_seconds",
            "Seconds from arrival to first scheduled in the engine, by tenant and priority.",
            ["model_name", "tenant", "priority"],
            buckets=_QUEUE_BUCKETS,
            registry=registry,
        )

    def set_known_priorities(self, priorities: Collection[int]) -> None:
        self.known_priorities = frozenset({0, *priorities})

    def priority_label(self, priority: int) -> str:
        return str(priority) if priority in self.known_priorities else OTHER_PRIORITY

    def observe_admitted(self, tenant: str, priority: int, prompt_tokens: int) -> None:
        self._admitted.labels(self.model_name, tenant, self.priority_label(priority)).inc()
        self._prompt_tokens.labels(self.model_name, tenant).inc(prompt_tokens)

    def observe_rejected(self, tenant: str, reason: str) -> None:
        self._rejected.labels(self.model_name, tenant, reason).inc()

    def observe_generated(self, tenant: str, completion_tokens: int) -> None:
        self._generation_tokens.labels(self.model_name, tenant).inc(completion_tokens)

    def observe_queue_time(self, tenant: str, priority: int, seconds: float) -> None:
        labels = (self.model_name, tenant, self.priority_label(priority))
        self._queue_time.labels(*labels).observe(seconds)

    @staticmethod
    def _counter(
        name: str, doc: str, extra_label: str | None, registry: CollectorRegistry
    ) -> Counter:
        labels = ["model_name", "tenant", *([extra_label] if extra_label else [])]
        return Counter(name, doc, labels, registry=registry)
