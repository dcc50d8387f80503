"""Replica: what the router knows of one engine replica — health, reported load, the requests it
routed there, and the identity of its KV cache (instance id, root hash, block size)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from router.config import RouterConfig


@dataclass
class ReplicaLoad:
    """The replica's own report, scraped from its /metrics (vLLM's metric names)."""

    num_requests_running: float = 0.0
    num_requests_waiting: float = 0.0
    kv_cache_usage: float = 0.0
    prefix_cache_hits: float = 0.0
    prefix_cache_queries: float = 0.0


@dataclass
class InflightRequest:
    """A request the router sent to this replica and has not seen finish."""

    uncached_tokens: int
    """Prompt tokens the replica must prefill (its cached prefix excluded)."""
    started: bool = False
    """True once the first byte came back: the prefill is done, it is decoding."""


@dataclass
class Replica:
    url: str
    healthy: bool = True
    """False from a failed health check or request until a health check passes again."""
    warming: bool = False
    """True while it is sent the hot prefixes (router/replicas/warmer.py): not yet a routing
    candidate."""
    unhealthy_since: float | None = None
    """time.monotonic() when it last left the healthy set; None while healthy."""
    load: ReplicaLoad = field(default_factory=ReplicaLoad)
    inflight: dict[str, InflightRequest] = field(default_factory=dict)
    instance_id: str | None = None
    root_hash: bytes | None = None
    """h_0 of the replica's hash chains, from its KV snapshot; None until one arrived."""
    block_size: int | None = None
    kv_synced: bool = False
    """True once a snapshot of the current event stream was applied."""
    kv_seq: int = -1
    """Sequence number of the last KV event batch applied (the snapshot's, at first)."""
    kv_error: str | None = None
    """Why the KV event subscription is refused (401/403: a key problem); None once it succeeds."""
    last_event_at: float | None = None
    """time.monotonic() of the last line from the KV event stream."""
    failures: int = 0
    kind: str = "pagedock"
    """pagedock (NDJSON events with snapshots) or vllm (vLLM's ZMQ events, no snapshot)."""
    kv_missed_batches: int = 0
    """vllm: event batches known lost (not received, not replayable) since the view was exact."""
    kv_unchained_blocks: int = 0
    """vllm: stored blocks left out of the index (their parent was announced before the router
    could see it)."""

    def begin(self, request_id: str, uncached_tokens: int) -> None:
        self.inflight[request_id] = InflightRequest(uncached_tokens)

    def first_byte(self, request_id: str) -> None:
        request = self.inflight.get(request_id)
        if request is not None:
            request.started = True

    def end(self, request_id: str) -> None:
        self.inflight.pop(request_id, None)

    def queued_tokens(self, config: RouterConfig) -> int:
        """Work ahead of a new request, in prefill-token equivalents: the larger of the router's
        own view (exact for what it routed, updated at each decision) and the replica's report
        (which also counts what other routers sent)."""
        own = sum(
            config.running_request_tokens if r.started else r.uncached_tokens
            for r in self.inflight.values()
        )
        reported = (
            self.load.num_requests_running * config.running_request_tokens
            + self.load.num_requests_waiting * config.waiting_request_tokens
        )
        return int(max(own, reported))

    def kv_view(self) -> dict[str, object]:
        """How complete the router's view of this replica's cache is."""
        if self.kind == "pagedock":  # a snapshot then every delta: exact while synced
            return {"source": "snapshot", "complete": self.kv_synced}
        return {
            "source": "vllm-events",
            "complete": self.kv_synced
            and not self.kv_missed_batches
            and not self.kv_unchained_blocks,
            "missed_batches": self.kv_missed_batches,
            "unchained_blocks": self.kv_unchained_blocks,
        }

    def kv_event_lag_s(self, now: float | None = None) -> float | None:
        if self.last_event_at is None:
            return None
        return (time.monotonic() if now is None else now) - self.last_event_at
