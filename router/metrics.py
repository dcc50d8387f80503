"""The router's Prometheus metrics: requests per replica and decision (and per LoRA adapter),
predicted cached tokens, retries, replica health, KV event-stream lag, and the router's own added
latency."""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

_TOKEN_BUCKETS = (0, 16, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
_OVERHEAD_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5)


class RouterMetrics:
    def __init__(self, policy: str) -> None:
        self.registry = CollectorRegistry()
        self.policy = policy
        self._add_decision_metrics()
        self._add_failure_metrics()
        self._add_replica_metrics()
        self._add_latency_metrics()

    def _add_decision_metrics(self) -> None:
        """Where requests went and why, and what cache hit was predicted for them."""
        r = self.registry
        self._requests = Counter(
            "pagedock_router_requests",
            "Requests sent to a replica, by policy decision.",
            ["replica", "policy", "reason"],
            registry=r,
        )
        self._lora_requests = Counter(
            "pagedock_router_lora_requests",
            "Requests for a LoRA adapter sent to a replica.",
            ["replica", "lora_name"],
            registry=r,
        )
        self._cached = Histogram(
            "pagedock_router_predicted_cached_tokens",
            "Prompt tokens the chosen replica was predicted to hold cached.",
            ["policy"],
            buckets=_TOKEN_BUCKETS,
            registry=r,
        )

    def _add_failure_metrics(self) -> None:
        """Retries, resumed streams, and requests no replica could serve."""
        r = self.registry
        self._retries = Counter(
            "pagedock_router_retries",
            "Requests retried on another replica, by cause.",
            ["replica", "cause"],
            registry=r,
        )
        self._resumes = Counter(
            "pagedock_router_stream_resumes",
            "Streams whose replica failed after the first byte, "
            "by whether another replica resumed them.",
            ["outcome"],
            registry=r,
        )
        self._failures = Counter(
            "pagedock_router_failed_requests",
            "Requests that no replica could serve, or that broke mid-stream.",
            ["cause"],
            registry=r,
        )

    def _add_replica_metrics(self) -> None:
        """Each replica's health and the router's view of its KV cache."""
        r = self.registry
        self._healthy = Gauge(
            "pagedock_router_replica_healthy",
            "1 when the replica is a routing candidate.",
            ["replica"],
            registry=r,
        )
        self._lag = Gauge(
            "pagedock_router_kv_event_lag_seconds",
            "Seconds since the replica's KV event stream last sent a line.",
            ["replica"],
            registry=r,
        )
        self._cached_blocks = Gauge(
            "pagedock_router_replica_cached_blocks",
            "KV blocks the router believes the replica holds.",
            ["replica"],
            registry=r,
        )
        self._resyncs = Counter(
            "pagedock_router_kv_resyncs",
            "KV snapshots applied (connects, gaps, restarts).",
            ["replica"],
            registry=r,
        )

    def _add_latency_metrics(self) -> None:
        """The router's own added latency."""
        r = self.registry
        self._overhead = Histogram(
            "pagedock_router_overhead_seconds",
            "Arrival to the replica request being sent (parse, tokenize, hash, decide).",
            buckets=_OVERHEAD_BUCKETS,
            registry=r,
        )

    def observe_decision(
        self, replica: str, reason: str, cached_tokens: int, lora_name: str | None = None
    ) -> None:
        self._requests.labels(replica, self.policy, reason).inc()
        self._cached.labels(self.policy).observe(cached_tokens)
        if lora_name is not None:  # a name some replica lists: the label set stays bounded
            self._lora_requests.labels(replica, lora_name).inc()

    def observe_retry(self, replica: str, cause: str) -> None:
        self._retries.labels(replica, cause).inc()

    def observe_resume(self, resumed: bool) -> None:
        self._resumes.labels("resumed" if resumed else "failed").inc()

    def observe_failure(self, cause: str) -> None:
        self._failures.labels(cause).inc()

    def observe_overhead(self, seconds: float) -> None:
        self._overhead.observe(seconds)

    def observe_resync(self, replica: str) -> None:
        self._resyncs.labels(replica).inc()

    def set_replica(
        self, replica: str, healthy: bool, lag_s: float | None, cached_blocks: int
    ) -> None:
        self._healthy.labels(replica).set(1 if healthy else 0)
        self._lag.labels(replica).set(-1 if lag_s is None else lag_s)
        self._cached_blocks.labels(replica).set(cached_blocks)

    def forget_replica(self, replica: str) -> None:
        for gauge in (self._healthy, self._lag, self._cached_blocks):
            with contextlib.suppress(KeyError):
                gauge.remove(replica)

    def render(self) -> bytes:
        return generate_latest(self.registry)
